//! Allocations from the driver's stream-ordered pool and their frees, and the pool's
//! settings (see `fastlaunch_driver::MemoryPool`).

use fastlaunch_driver::LaunchContext;
use pyo3::prelude::*;

use super::ordering::{after_stream_work, before_alloc, order_free};
use super::{byte_count, current, live_context, with_context_memory};
use crate::devices::driver;
use crate::errors::Result;

/// The current context's unique id (device 0's primary context made current if none is):
/// what `mem_free(context=...)` takes.
#[pyfunction]
pub(crate) fn context_key() -> Result<u64> {
    Ok(current()?.1.key())
}

/// `nbytes` from the current device's pool, ordered on `stream` (0: the legacy default
/// stream); 0 bytes give a null pointer.
#[pyfunction]
#[pyo3(signature = (nbytes, stream = 0))]
pub(crate) fn mem_alloc(nbytes: i64, stream: usize) -> Result<u64> {
    let nbytes = byte_count(nbytes)?;
    let (driver, context) = current()?;
    let work = before_alloc(driver, stream)?;
    // the context's memory state, so that a free from another thread can find its handle
    with_context_memory(driver, &context, |_| Ok(()))?;
    let pointer = driver.alloc_async(nbytes, stream)?;
    after_stream_work(driver, &context, work, false)?;
    Ok(pointer)
}

/// Frees `pointer` (from `mem_alloc`) on `stream`, ordered after all work already enqueued
/// on `stream` and after the work on non-blocking streams that may use it
/// (`ordering::order_free`). `context`: the key (`context_key`) of the context it was
/// allocated in, made current for the free when it is not; when that context was destroyed
/// since (`cuda.close()`), its memory went with it and nothing is done.
#[pyfunction]
#[pyo3(signature = (pointer, stream = 0, context = None))]
pub(crate) fn mem_free(pointer: u64, stream: usize, context: Option<u64>) -> Result<()> {
    let (driver, current_context) = current()?;
    let free = |on: &LaunchContext| {
        with_context_memory(driver, on, |memory| {
            order_free(driver, memory, stream)?;
            driver.free_async(pointer, stream)
        })
    };
    match context {
        Some(key) if key != current_context.key() => {
            let Some(owner) = live_context(driver, key) else {
                return Ok(()); // destroyed with its context
            };
            driver.push_context(owner)?;
            let freed = driver.launch_context().and_then(|on| free(&on));
            driver.pop_context()?;
            Ok(freed?)
        }
        _ => Ok(free(&current_context)?),
    }
}

fn pool(
    device: usize,
) -> Result<(
    &'static fastlaunch_driver::Driver,
    fastlaunch_driver::MemoryPool,
)> {
    let driver = driver()?;
    let ordinal = driver.checked_ordinal(device as i64)?;
    Ok((driver, driver.memory_pool(ordinal)?))
}

/// Bytes device `device`'s pool keeps at a synchronization instead of releasing them.
#[pyfunction]
pub(crate) fn pool_release_threshold(device: usize) -> Result<u64> {
    let (driver, pool) = pool(device)?;
    Ok(pool.release_threshold(driver)?)
}

#[pyfunction]
pub(crate) fn set_pool_release_threshold(device: usize, nbytes: u64) -> Result<()> {
    let (driver, pool) = pool(device)?;
    Ok(pool.set_release_threshold(driver, nbytes)?)
}

/// `(used, reserved)` bytes of device `device`'s pool.
#[pyfunction]
pub(crate) fn pool_usage(device: usize) -> Result<(u64, u64)> {
    let (driver, pool) = pool(device)?;
    let usage = pool.usage(driver)?;
    Ok((usage.used, usage.reserved))
}

/// Releases what device `device`'s pool keeps unused, down to `keep_bytes`.
#[pyfunction]
#[pyo3(signature = (device, keep_bytes = 0))]
pub(crate) fn pool_trim(device: usize, keep_bytes: usize) -> Result<()> {
    let (driver, pool) = pool(device)?;
    Ok(pool.trim_to(driver, keep_bytes)?)
}
