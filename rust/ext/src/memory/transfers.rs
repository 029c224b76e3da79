//! Copies between host buffers and device memory, in a stream's order, through the
//! context's staging ring (`fastlaunch_driver::StagingRing`), and device-to-device copies and
//! sets. The GIL is let go where a call can wait: copies back (until their bytes are in) and
//! copies larger than a staging slot. On a stream being captured into a graph the copies go
//! straight from and to the host memory, as numba-cuda's do (a graph would replay a staging
//! slot's later contents), and the driver accepts or refuses them as it does numba-cuda's.

use fastlaunch_driver::StagingRing;
use pyo3::prelude::*;

use super::buffer::HostBuffer;
use super::ordering::{after_stream_work, before_copy};
use super::{byte_count, current, with_context_memory};
use crate::errors::{Error, Result};

/// Copies `host`'s bytes (a contiguous buffer; its first `nbytes`, all when None) to
/// `pointer` on `stream`; returns once the host bytes are taken, the copy ordered before
/// later work on `stream`.
#[pyfunction]
#[pyo3(signature = (pointer, host, stream = 0, nbytes = None))]
pub(crate) fn copy_to_device(
    py: Python<'_>,
    pointer: u64,
    host: &Bound<'_, PyAny>,
    stream: usize,
    nbytes: Option<i64>,
) -> Result<()> {
    let buffer = HostBuffer::take(host, false, "host")?;
    let (address, len) = (buffer.address(), copied_len(&buffer, nbytes)?);
    let (driver, context) = current()?;
    let work = before_copy(driver, &context, stream)?;
    let copy = move || {
        // SAFETY: the buffer stays exported (and so in place) until `buffer` drops after this;
        // the caller gives a device range of at least `len` bytes.
        let host = unsafe { std::slice::from_raw_parts(address as *const u8, len) };
        if work.capturing {
            // a graph would replay a staging slot's later contents: copy as numba-cuda does
            // SAFETY: as above.
            return unsafe { driver.copy_host_to_device_async(pointer, host, stream) };
        }
        with_context_memory(driver, &context, |memory| {
            // SAFETY: as above.
            unsafe { memory.ring.copy_to_device(pointer, host, stream) }
        })?;
        after_stream_work(driver, &context, work, true)
    };
    let copied = if StagingRing::stages(len) {
        copy()
    } else {
        py.detach(copy)
    };
    drop(buffer);
    Ok(copied?)
}

/// Copies `nbytes` (all of `host` when None) from `pointer` into `host` (a writable
/// contiguous buffer) after the work enqueued on `stream`; returns when they are there.
#[pyfunction]
#[pyo3(signature = (host, pointer, stream = 0, nbytes = None))]
pub(crate) fn copy_to_host(
    py: Python<'_>,
    host: &Bound<'_, PyAny>,
    pointer: u64,
    stream: usize,
    nbytes: Option<i64>,
) -> Result<()> {
    let buffer = HostBuffer::take(host, true, "host")?;
    let (address, len) = (buffer.address(), copied_len(&buffer, nbytes)?);
    let (driver, context) = current()?;
    let capturing = before_copy(driver, &context, stream)?.capturing;
    let copied = py.detach(move || {
        // SAFETY: the writable export stays (and the memory in place) until `buffer` drops
        // after this; nothing else writes it meanwhile under the GIL's absence but other
        // threads, as with any NumPy array handed to C.
        let host = unsafe { std::slice::from_raw_parts_mut(address as *mut u8, len) };
        if capturing {
            // a graph cannot wait for a staging slot's event: copy as numba-cuda does
            // SAFETY: the caller gives a device range of at least `len` bytes.
            return unsafe { driver.copy_device_to_host_async(host, pointer, stream) };
        }
        with_context_memory(driver, &context, |memory| {
            // SAFETY: as above.
            unsafe { memory.ring.copy_to_host(host, pointer, stream) }
        })
    });
    drop(buffer);
    Ok(copied?)
}

/// The bytes a copy moves: `nbytes`, which must fit the buffer, or the whole buffer.
fn copied_len(buffer: &HostBuffer, nbytes: Option<i64>) -> Result<usize> {
    let Some(nbytes) = nbytes else {
        return Ok(buffer.len());
    };
    let nbytes = byte_count(nbytes)?;
    if nbytes > buffer.len() {
        return Err(Error::Value(format!(
            "nbytes ({nbytes}) is more than host holds ({} bytes)",
            buffer.len()
        )));
    }
    Ok(nbytes)
}

/// Copies `nbytes` from device `src` to device `dst` in `stream`'s order.
#[pyfunction]
#[pyo3(signature = (dst, src, nbytes, stream = 0))]
pub(crate) fn copy_device(dst: u64, src: u64, nbytes: i64, stream: usize) -> Result<()> {
    let nbytes = byte_count(nbytes)?;
    if nbytes == 0 {
        return Ok(());
    }
    let (driver, context) = current()?;
    let work = before_copy(driver, &context, stream)?;
    // SAFETY: the caller gives device ranges of `nbytes` bytes (the Python layer passes its
    // arrays' own allocations); the driver refuses pointers it does not know.
    unsafe { driver.copy_device_async(dst, src, nbytes, stream) }?;
    Ok(after_stream_work(driver, &context, work, true)?)
}

/// Sets `nbytes` at device `pointer` to the byte `value` in `stream`'s order.
#[pyfunction]
#[pyo3(signature = (pointer, value, nbytes, stream = 0))]
pub(crate) fn memset(pointer: u64, value: u8, nbytes: i64, stream: usize) -> Result<()> {
    let nbytes = byte_count(nbytes)?;
    if nbytes == 0 {
        return Ok(());
    }
    let (driver, context) = current()?;
    let work = before_copy(driver, &context, stream)?;
    // SAFETY: as for `copy_device`.
    unsafe { driver.memset_async(pointer, value, nbytes, stream) }?;
    Ok(after_stream_work(driver, &context, work, true)?)
}
