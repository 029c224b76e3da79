//! Pinned host memory for `pinned_array` (numba-cuda's `memhostalloc`), owned by the Python
//! object that frees it.
//!
//! Both calls let the GIL go, as numba-cuda's (cuda.bindings') do: `cuMemFreeHost`
//! synchronizes with the device, as `cudaFreeHost` does, so with a Python host function
//! queued on a stream it would wait for a callback that waits for the GIL; page-locking
//! memory (`cuMemHostAlloc`) takes long enough that other threads should run meanwhile.

use fastlaunch_driver::PinnedBuffer;
use pyo3::prelude::*;

use super::{byte_count, current};
use crate::errors::Result;

/// `nbytes` of portable pinned host memory; its address.
#[pyfunction]
pub(crate) fn pinned_alloc(py: Python<'_>, nbytes: i64) -> Result<usize> {
    let nbytes = byte_count(nbytes)?;
    let (driver, _) = current()?;
    let buffer = py.detach(|| PinnedBuffer::alloc(driver, nbytes))?;
    Ok(buffer.into_raw() as usize)
}

/// Frees memory from `pinned_alloc`, once, when nothing uses it any more (without the GIL:
/// the free waits for the device).
#[pyfunction]
pub(crate) fn pinned_free(py: Python<'_>, pointer: usize) -> Result<()> {
    let (driver, _) = current()?;
    // SAFETY: the caller (the object owning the memory) frees it once, when unused.
    Ok(py.detach(|| unsafe { driver.free_pinned(pointer as *mut u8) })?)
}
