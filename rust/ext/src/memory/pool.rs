//! Allocations from the driver's stream-ordered pool and their frees, and the pool's
//! settings (see `fastlaunch_driver::MemoryPool`).

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use smallvec::SmallVec;

use super::{current, with_context_memory};
use crate::devices::driver;
use crate::errors::{Error, Result};

/// `nbytes` from the current device's pool, ordered on `stream` (0: the legacy default
/// stream); 0 bytes give a null pointer.
#[pyfunction]
#[pyo3(signature = (nbytes, stream = 0))]
pub(crate) fn mem_alloc(nbytes: i64, stream: usize) -> Result<u64> {
    let nbytes = usize::try_from(nbytes)
        .map_err(|_| Error::Value(format!("nbytes must not be negative, got {nbytes}")))?;
    let (driver, _) = current()?;
    Ok(driver.alloc_async(nbytes, stream)?)
}

/// Frees `pointer` (from `mem_alloc`) on `stream`, ordered after all work already enqueued
/// on `stream` and on each stream of `after`.
#[pyfunction]
#[pyo3(signature = (pointer, stream = 0, after = None))]
pub(crate) fn mem_free(
    pointer: u64,
    stream: usize,
    after: Option<&Bound<'_, PyTuple>>,
) -> Result<()> {
    let after: SmallVec<[usize; 4]> = match after {
        Some(streams) => streams
            .iter()
            .map(|s| s.extract::<usize>())
            .collect::<PyResult<_>>()
            .map_err(|_| Error::Type("after must be a tuple of stream handles (ints)".into()))?,
        None => SmallVec::new(),
    };
    let (driver, context) = current()?;
    Ok(with_context_memory(driver, &context, |memory| {
        driver.free_after(pointer, stream, &after, &memory.fence)
    })?)
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
