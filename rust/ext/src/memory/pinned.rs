//! Pinned host memory for `pinned_array` (numba-cuda's `memhostalloc`), owned by the Python
//! object that frees it.

use fastlaunch_driver::PinnedBuffer;
use pyo3::prelude::*;

use super::{byte_count, current};
use crate::errors::Result;

/// `nbytes` of portable pinned host memory; its address.
#[pyfunction]
pub(crate) fn pinned_alloc(nbytes: i64) -> Result<usize> {
    let nbytes = byte_count(nbytes)?;
    let (driver, _) = current()?;
    Ok(PinnedBuffer::alloc(driver, nbytes)?.into_raw() as usize)
}

/// Frees memory from `pinned_alloc`, once, when nothing uses it any more.
#[pyfunction]
pub(crate) fn pinned_free(pointer: usize) -> Result<()> {
    let (driver, _) = current()?;
    // SAFETY: the caller (the object owning the memory) frees it once, when unused.
    Ok(unsafe { driver.free_pinned(pointer as *mut u8) }?)
}
