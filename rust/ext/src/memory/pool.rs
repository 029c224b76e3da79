//! Allocations from fastlaunch's stream-ordered pool and their frees, and the pool's
//! settings (see `fastlaunch_driver::MemoryPool`).
//!
//! While a stream capture refuses the pool's stream-ordered calls (the stream allocated on is
//! being captured: `cuMemAllocAsync` there would make a graph allocation node, whose memory
//! exists only while the graph runs; or a blocking stream is being captured, which refuses
//! work on the legacy stream), an allocation is ordinary device memory (`cuMemAlloc`, what
//! numba-cuda allocates: the driver accepts or refuses it as it does numba-cuda's), freed with
//! `cuMemFree`, and a free of pool memory waits for the next call that may make it.

use fastlaunch_driver::{self as driver, is_legacy_stream, Capture, LaunchContext, LEGACY_STREAM};
use pyo3::prelude::*;

use std::sync::Arc;

use super::context_memory::{
    all_context_memory, context_memory, known_context_memory, ContextMemory,
};
use super::freed_blocks::SizeClass;
use super::ordering::{after_alloc, after_reuse, before_alloc, before_reuse, order_free};
use super::{byte_count, current, current_if_any};
use crate::devices::driver;
use crate::errors::Result;

/// The current context's unique id (device 0's primary context made current if none is):
/// what `mem_free(context=...)` takes.
#[pyfunction]
pub(crate) fn context_key() -> Result<u64> {
    Ok(current()?.1.key())
}

/// The current context's key (`context_key`), or `None` when no context is current (none is
/// made current): one call where the allocation path would make two.
#[pyfunction]
pub(crate) fn current_context_key() -> Result<Option<u64>> {
    Ok(current_if_any()?.map(|(_, context)| context.key()))
}

/// `nbytes` from the current context's pool (a block of the freed-block cache, when it
/// keeps one of its size class), ordered on `stream` (0: the legacy default stream); 0 bytes
/// give a null pointer. Out of memory, the cache is emptied, what the pool keeps unused is
/// given back to the driver and the allocation tried once more.
#[pyfunction]
#[pyo3(signature = (nbytes, stream = 0))]
pub(crate) fn mem_alloc(py: Python<'_>, nbytes: i64, stream: usize) -> Result<u64> {
    let nbytes = byte_count(nbytes)?;
    let (driver, context) = current()?;
    let capture = driver.capture_state(stream)?;
    alloc_in(py, driver, &context, nbytes, stream, false, capture)
}

/// [`mem_alloc`] in `context`, the thread's current context, `capture` being `stream`'s
/// capture state, asked just before. `filled`: the caller writes all of it next, on the
/// legacy stream, through a copy that is marked (`to_device`): the allocation needs no mark
/// of its own, the copy's follows it.
pub(super) fn alloc_in(
    py: Python<'_>,
    driver: &'static driver::Driver,
    context: &LaunchContext,
    nbytes: usize,
    stream: usize,
    filled: bool,
    capture: Capture,
) -> Result<u64> {
    let memory = context_memory(driver, context)?;
    make_deferred_frees(driver, &memory)?;
    if capture != Capture::None {
        // (cuMemAlloc may wait for the device: numba-cuda's call lets the GIL go too)
        let pointer = py.detach(|| driver.alloc_now(nbytes))?;
        if pointer != 0 {
            memory.note_plain_allocation(pointer);
        }
        return Ok(pointer);
    }
    let class = memory.freed_blocks.class_of(nbytes);
    if let Some(pointer) = class.map_or(Ok(None), |class| {
        reuse_freed_block(py, driver, context, &memory, class, stream, filled)
    })? {
        return Ok(pointer);
    }
    let size = class.map_or(nbytes, SizeClass::bytes);
    let work = before_alloc(driver, context, stream)?;
    let pointer = match driver.alloc_from_pool_async(memory.pool, size, stream) {
        Err(error) if is_out_of_memory(&error) => {
            make_exported_frees(py, driver, &memory)?;
            memory.freed_blocks.release_all(driver, memory.context)?;
            trim_pool(py, driver, &memory)?;
            driver.alloc_from_pool_async(memory.pool, size, stream)?
        }
        allocated => allocated?,
    };
    if let Some(class) = class {
        memory.freed_blocks.note_handed_out(pointer, class);
    }
    // (filled on the legacy stream: the copy's mark orders it, and work on the legacy stream
    // has no stream of its own to follow)
    if !(filled && is_legacy_stream(stream)) {
        after_alloc(py, driver, &memory, work, pointer, size)?;
    }
    Ok(pointer)
}

/// A block of `class` from the freed-block cache, ordered on `stream` (not being captured)
/// after its earlier users; none when the cache keeps none, or when it cannot be ordered now.
fn reuse_freed_block(
    py: Python<'_>,
    driver: &'static driver::Driver,
    context: &LaunchContext,
    memory: &ContextMemory,
    class: SizeClass,
    stream: usize,
    filled: bool,
) -> Result<Option<u64>> {
    let Some(block) = memory.freed_blocks.take(class) else {
        return Ok(None);
    };
    match before_reuse(driver, context, memory, stream, block.freed, filled) {
        Ok(Some(ordered)) => {
            after_reuse(py, driver, memory, ordered, block.pointer, class.bytes())?;
            Ok(Some(block.pointer))
        }
        unordered => {
            memory.freed_blocks.put_back(class, block);
            unordered.map(|_| None)
        }
    }
}

fn is_out_of_memory(error: &driver::Error) -> bool {
    matches!(error, driver::Error::Driver { code, .. } if *code == driver::CUDA_ERROR_OUT_OF_MEMORY)
}

/// Gives back to the driver what the pool keeps unused, once the frees enqueued so far ran.
fn trim_pool(
    py: Python<'_>,
    driver: &'static driver::Driver,
    memory: &ContextMemory,
) -> driver::Result<()> {
    py.detach(|| driver.stream_synchronize(LEGACY_STREAM))?;
    match memory.pool {
        Some(pool) => pool.trim_to(driver, 0),
        None => driver.memory_pool(memory.ordinal)?.trim_to(driver, 0),
    }
}

/// Frees `pointer` (from `mem_alloc`) on `stream`, ordered after all work already enqueued
/// on `stream` and after the work on non-blocking streams that may use it
/// (`ordering::order_free`); on the legacy stream, a block of the freed-block cache's is kept
/// there instead, when it has room. `context`: the key (`context_key`) of the context it was
/// allocated in, made current for the free when it is not; when that context was reset
/// since (`cuda.close()`), its memory went with it and nothing is done.
#[pyfunction]
#[pyo3(signature = (pointer, stream = 0, context = None))]
pub(crate) fn mem_free(
    py: Python<'_>,
    pointer: u64,
    stream: usize,
    context: Option<u64>,
) -> Result<()> {
    free_block(py, pointer, stream, context, false)
}

/// [`mem_free`]; an `exported` block (another library read it: `exports.rs`) is held, and
/// goes to the pool only after a synchronization of its context, as numba-cuda's `cuMemFree`
/// waits for the device: the streams that used it are not ours to see. That synchronization
/// is never made implicitly on a free: during any stream capture, in any mode and from any
/// thread, `cuCtxSynchronize` is refused and invalidates the capture (the GPU's answer), and
/// another library's capture cannot be seen. The held blocks go at `cuda.synchronize()`
/// ([`free_exported_after_synchronize`]), `pool_trim`, and before an allocation out of memory
/// is retried ([`make_exported_frees`]).
pub(crate) fn free_block(
    py: Python<'_>,
    pointer: u64,
    stream: usize,
    context: Option<u64>,
    exported: bool,
) -> Result<()> {
    let (driver, current_context) = current()?;
    let free = |on: &LaunchContext| -> Result<()> {
        let memory = context_memory(driver, on)?;
        if memory.take_plain_allocation(pointer) {
            return Ok(py.detach(|| driver.free_now(pointer))?);
        }
        if exported {
            memory.freed_blocks.forget(pointer);
            memory.hold_exported_free(pointer);
            return Ok(());
        }
        if driver.capture_state(stream)? != Capture::None {
            memory.freed_blocks.forget(pointer);
            memory.defer_free(pointer);
            return Ok(());
        }
        make_deferred_frees(driver, &memory)?;
        let freed = order_free(driver, &memory, stream)?;
        if is_legacy_stream(stream) {
            if memory.freed_blocks.keep(pointer, freed) {
                return Ok(());
            }
        } else {
            memory.freed_blocks.forget(pointer);
        }
        Ok(driver.free_async(pointer, stream)?)
    };
    match context {
        Some(key) if key != current_context.key() => {
            let Some(owner) = known_context_memory(key).filter(|m| m.is_alive(driver)) else {
                return Ok(()); // freed with its context
            };
            driver.push_context(owner.context)?;
            let freed = driver
                .launch_context()
                .map_err(Into::into)
                .and_then(|on| free(&on));
            driver.pop_context()?;
            freed
        }
        _ => free(&current_context),
    }
}

/// Gives the exported blocks held in `memory`'s context (current) to the pool, once all the
/// context's work queued so far has run: a synchronization of the context, without the GIL,
/// made only where memory is short or asked for (`pool_trim`). While a capture refuses it, or
/// the legacy stream, they stay held for a later call. (No capture mode makes it legal: the
/// GPU refuses `cuCtxSynchronize` during any capture, relaxed mode included.)
fn make_exported_frees(
    py: Python<'_>,
    driver: &'static driver::Driver,
    memory: &ContextMemory,
) -> Result<()> {
    if memory.exported_frees_held() == 0 || driver.capture_state(LEGACY_STREAM)? != Capture::None {
        return Ok(());
    }
    if py.detach(|| driver.synchronize()).is_err() {
        return Ok(()); // refused (a capture is open): held until a later call
    }
    free_exported_after_synchronize(driver, memory)
}

/// Gives the exported blocks held in `memory`'s context (current) to the pool: the context was
/// synchronized after their frees were held.
pub(crate) fn free_exported_after_synchronize(
    driver: &'static driver::Driver,
    memory: &ContextMemory,
) -> Result<()> {
    free_on_legacy_stream(driver, memory, memory.take_exported_frees(), |pointer| {
        memory.hold_exported_free(pointer)
    })
}

/// Makes the pool frees a capture deferred, when no capture refuses them any more.
fn make_deferred_frees(driver: &'static driver::Driver, memory: &ContextMemory) -> Result<()> {
    free_on_legacy_stream(driver, memory, memory.take_deferred_frees(), |pointer| {
        memory.defer_free(pointer)
    })
}

/// Frees `pointers` (pool memory of `memory`'s context, current) on the legacy stream, after
/// the work followed on non-blocking streams; while a capture refuses the legacy stream, each
/// goes back to where it was kept (`keep_again`).
fn free_on_legacy_stream(
    driver: &'static driver::Driver,
    memory: &ContextMemory,
    pointers: Vec<u64>,
    keep_again: impl Fn(u64),
) -> Result<()> {
    if pointers.is_empty() {
        return Ok(());
    }
    if driver.capture_state(LEGACY_STREAM)? != Capture::None {
        pointers.into_iter().for_each(keep_again);
        return Ok(());
    }
    order_free(driver, memory, LEGACY_STREAM)?;
    for pointer in pointers {
        driver.free_async(pointer, LEGACY_STREAM)?;
    }
    Ok(())
}

/// The memory state of device `device`'s context: the current one when it is on that
/// device, else the device's primary context (made current for the call).
fn with_device_memory<T>(
    device: usize,
    work: impl FnOnce(&'static driver::Driver, &ContextMemory) -> driver::Result<T>,
) -> Result<T> {
    let driver = driver()?;
    let ordinal = driver.checked_ordinal(device as i64)?;
    let context = driver.launch_context()?;
    if context.ordinal == ordinal {
        let memory = context_memory(driver, &context)?;
        return Ok(work(driver, &memory)?);
    }
    driver.push_context(driver.primary_context(ordinal)?)?;
    let done = driver
        .launch_context()
        .and_then(|on| context_memory(driver, &on))
        .and_then(|memory| work(driver, &memory));
    driver.pop_context()?;
    Ok(done?)
}

/// The pool fastlaunch allocates from on the device of `memory`.
fn pool_of(
    driver: &'static driver::Driver,
    memory: &ContextMemory,
) -> driver::Result<fastlaunch_driver::MemoryPool> {
    match memory.pool {
        Some(pool) => Ok(pool),
        None => driver.memory_pool(memory.ordinal),
    }
}

/// Bytes the pool of device `device` keeps at a synchronization instead of releasing them.
#[pyfunction]
pub(crate) fn pool_release_threshold(device: usize) -> Result<u64> {
    with_device_memory(device, |driver, memory| {
        pool_of(driver, memory)?.release_threshold(driver)
    })
}

/// Sets it, and the freed-block cache's bound with it (emptied: it holds no more than that
/// from now on).
#[pyfunction]
pub(crate) fn set_pool_release_threshold(device: usize, nbytes: u64) -> Result<()> {
    with_device_memory(device, |driver, memory| {
        pool_of(driver, memory)?.set_release_threshold(driver, nbytes)?;
        memory.freed_blocks.set_limit(nbytes);
        memory
            .freed_blocks
            .release_all(driver, memory.context)
            .map(drop)
    })
}

/// The memory state of a live context of device `device` that fastlaunch allocated in, if
/// any (none is made: asking what a pool holds makes no pool).
fn live_device_memory(
    driver: &driver::Driver,
    device: usize,
) -> Result<Option<Arc<ContextMemory>>> {
    let ordinal = driver.checked_ordinal(device as i64)?;
    Ok(all_context_memory()
        .into_iter()
        .find(|memory| memory.ordinal == ordinal && memory.is_alive(driver)))
}

/// `(used, reserved, cached)` bytes of the pool of device `device`: handed out (the
/// freed-block cache's blocks aside), reserved from the driver, and kept by the freed-block
/// cache (nothing, before fastlaunch allocated there, or after its context was reset).
#[pyfunction]
pub(crate) fn pool_usage(device: usize) -> Result<(u64, u64, u64)> {
    let driver = driver()?;
    let Some(memory) = live_device_memory(driver, device)? else {
        return Ok((0, 0, 0));
    };
    let cached = memory.freed_blocks.held_bytes();
    let usage = pool_of(driver, &memory)?.usage(driver)?;
    Ok((usage.used.saturating_sub(cached), usage.reserved, cached))
}

/// Releases what the pool of device `device` keeps unused, down to `keep_bytes`, the
/// freed-block cache's blocks first (their frees waited for, without the GIL, so that the
/// pool has them to release).
#[pyfunction]
#[pyo3(signature = (device, keep_bytes = 0))]
pub(crate) fn pool_trim(py: Python<'_>, device: usize, keep_bytes: usize) -> Result<()> {
    let driver = driver()?;
    let Some(memory) = live_device_memory(driver, device)? else {
        return Ok(());
    };
    driver.push_context(memory.context)?;
    let exported = make_exported_frees(py, driver, &memory);
    driver.pop_context()?;
    exported?;
    if memory.freed_blocks.release_all(driver, memory.context)? {
        py.detach(|| driver.stream_synchronize(LEGACY_STREAM))?;
    }
    Ok(pool_of(driver, &memory)?.trim_to(driver, keep_bytes)?)
}
