//! numba-cuda's memory API on the Rust core, the Python face of `fastlaunch_driver`'s memory
//! layer: allocations from the driver's stream-ordered pool and their stream-ordered frees
//! (`pool.rs`), copies between host buffers and the device through pinned staging
//! (`transfers.rs`), pinned host memory (`pinned.rs`), streams and events by raw handle
//! (`handles.rs`). `python/fastlaunch/memory/` builds numba-cuda's objects over these.
//!
//! Every call works in the thread's current context (device 0's primary context when none
//! is current, as launches do). What a context needs for it, its staging ring and the events
//! that order its work with non-blocking streams, is made on first use and kept per context
//! ([`with_context_memory`]), by the context's unique id; the lock around it is held for a copy's enqueueing (and, for a
//! staged copy back, until its bytes are in), never while Python code runs.

mod buffer;
mod handles;
mod ordering;
mod pinned;
mod pool;
mod transfers;

use std::sync::Mutex;

use fastlaunch_driver::{self as driver, Context, LaunchContext, StagingRing};

use crate::devices::driver;
use crate::errors::{Error, Result};

pub(crate) use handles::{
    context_synchronize, event_create, event_destroy, event_elapsed_ms, event_query, event_record,
    event_synchronize, stream_create, stream_destroy, stream_query, stream_synchronize,
    stream_wait_event,
};
pub(crate) use ordering::{after_launch, before_launch, in_use};
pub(crate) use pinned::{pinned_alloc, pinned_free};
pub(crate) use pool::{
    context_key, mem_alloc, mem_free, pool_release_threshold, pool_trim, pool_usage,
    set_pool_release_threshold,
};
pub(crate) use transfers::{copy_device, copy_to_device, copy_to_host, memset};

/// What the memory API keeps for one context.
pub(crate) struct ContextMemory {
    /// `LaunchContext::key`: the context's unique id.
    key: u64,
    /// Its handle, to make it current for a free from another context's thread.
    context: Context,
    pub(crate) ring: StagingRing,
    /// What launches on non-blocking streams wait for (`ordering.rs`).
    pub(crate) legacy_copies: ordering::LegacyCopies,
    /// The non-blocking streams worked on, each with its event (`ordering.rs`).
    pub(crate) followed: Vec<ordering::FollowedStream>,
}

static CONTEXTS: Mutex<Vec<ContextMemory>> = Mutex::new(Vec::new());

/// The live context whose key is `key`, if this process used it here and it was not
/// destroyed since (a reset context may come back under the same handle, never the same id).
fn live_context(driver: &driver::Driver, key: u64) -> Option<Context> {
    let contexts = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
    let memory = contexts.iter().find(|c| c.key == key)?;
    let alive = match driver.context_id(memory.context) {
        Some(id) => id == key,
        None => memory.context.address() as u64 == key,
    };
    alive.then_some(memory.context)
}

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

/// Runs `work` with the memory state of `context` (made on first use).
pub(crate) fn with_context_memory<T>(
    driver: &'static driver::Driver,
    context: &LaunchContext,
    work: impl FnOnce(&mut ContextMemory) -> driver::Result<T>,
) -> driver::Result<T> {
    let mut contexts = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
    let key = context.key();
    let index = match contexts.iter().position(|c| c.key == key) {
        Some(index) => index,
        None => {
            contexts.push(ContextMemory {
                key,
                context: context.context,
                ring: StagingRing::new(driver),
                legacy_copies: ordering::LegacyCopies::new(driver)?,
                followed: Vec::new(),
            });
            contexts.len() - 1
        }
    };
    work(&mut contexts[index])
}
