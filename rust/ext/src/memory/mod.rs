//! numba-cuda's memory API on the Rust core, the Python face of `fastlaunch_driver`'s memory
//! layer: allocations from a stream-ordered pool of fastlaunch's own and their stream-ordered
//! frees (`pool.rs`), copies between host buffers and the device through pinned staging
//! (`transfers.rs`), pinned host memory (`pinned.rs`), streams and events by raw handle
//! (`handles.rs`), the releases of numba-cuda's pointers over pool memory (`releases.rs`),
//! numba-cuda's `Stream` objects over pooled streams (`numba_streams.rs`), its arrays over pool
//! memory (`numba_arrays.rs`, their pointers `numba_pointers.rs`) and their views `d[a:b]`
//! (`numba_views.rs`), from its classes (`numba_classes.rs`). `python/fastlaunch/memory/`
//! builds numba-cuda's other objects; `cuda.device_array`'s common call comes straight here
//! (`device_array_call.rs`).
//!
//! Every call works in the thread's current context (device 0's primary context when none
//! is current, as launches do). What a context needs for it ([`ContextMemory`]) is made on
//! first use and kept per context, by the context's unique id, until the context is reset
//! ([`forget_context`]). A thread finds its context's state through a thread-local weak
//! reference, so the process-wide registry is locked only on a thread's first call in a
//! context. No lock here is ever held across a wait for the GPU, and no wait for the GPU is
//! made with the GIL held.

mod buffer;
mod context_memory;
mod device_array_call;
mod exports;
mod freed_blocks;
mod handles;
mod instances;
mod numba_arrays;
mod numba_classes;
mod numba_pointers;
mod numba_streams;
mod numba_views;
mod ordering;
mod pinned;
mod pool;
mod releases;
mod stream_ordering;
mod transfers;
mod watch;

use fastlaunch_driver::{self as driver, LaunchContext};

use crate::devices::driver;
use crate::errors::{Error, Result};

pub(crate) use context_memory::{at_exit, context_memory, forget_context};
pub(crate) use device_array_call::{device_array, give_device_array};
pub(crate) use exports::{settle_export, InterfaceProperty};
pub(crate) use handles::{
    context_synchronize, event_create, event_destroy, event_elapsed_ms, event_query, event_record,
    event_synchronize, stream_create, stream_destroy, stream_query, stream_synchronize,
    stream_wait_event,
};
pub(crate) use numba_arrays::{numba_device_array, numba_pool_memory, pool_array, pool_array_from};
pub(crate) use numba_classes::{read_numba_contexts, read_numba_memory_classes};
pub(crate) use numba_streams::{numba_stream, pool_numba_streams, StreamReturn};
pub(crate) use numba_views::first_axis_view;
pub(crate) use ordering::{after_launch, before_launch, in_use};
pub(crate) use pinned::{pinned_alloc, pinned_free};
pub(crate) use pool::{
    context_key, current_context_key, mem_alloc, mem_free, pool_release_threshold, pool_trim,
    pool_usage, set_pool_release_threshold,
};
pub(crate) use releases::{deref_when_collected, pool_release, OwnerDeref, PoolRelease};
pub(crate) use transfers::{
    copy_device, copy_to_device, copy_to_host, fetch_to_host, memset, stage_to_device,
};

/// `nbytes` as a byte count: a negative one is refused, naming the argument.
fn byte_count(nbytes: i64) -> Result<usize> {
    usize::try_from(nbytes)
        .map_err(|_| Error::Value(format!("nbytes must not be negative, got {nbytes}")))
}

/// The thread's current context (made current if none is), and its driver.
fn current() -> Result<(&'static driver::Driver, LaunchContext)> {
    let driver = driver()?;
    ordering::note_in_use();
    let context = driver.launch_context()?;
    Ok((driver, context))
}

/// The thread's current context, and its driver; `None` when no context is current (none is
/// made current).
fn current_if_any() -> Result<Option<(&'static driver::Driver, LaunchContext)>> {
    let driver = driver()?;
    ordering::note_in_use();
    Ok(driver
        .current_launch_context()?
        .map(|context| (driver, context)))
}
