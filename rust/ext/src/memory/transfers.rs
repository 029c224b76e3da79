//! Copies between host buffers and device memory, in a stream's order, through the
//! context's staging ring (`fastlaunch_driver::StagingRing`), and device-to-device copies and
//! sets.
//!
//! A copy returns when numba-cuda's would have its bytes where they belong: a staged copy to
//! the device once the host bytes are in a slot (the copy itself runs on, ordered before
//! everything that may read it: `ordering.rs`); a copy back once the bytes are in the host
//! buffer; a copy too large for a slot (or made while every slot is busy) as numba-cuda makes
//! it, synchronously on stream 0, in the stream's order on any other (page-locked memory
//! included). The GIL is let go wherever a copy may wait for the GPU: a slot whose previous
//! copy still runs, a copy back, an unstaged copy. On a stream being captured into a graph
//! the copies go straight from and to the host memory, as numba-cuda's do (a graph would
//! replay a staging slot's later contents), and the driver accepts or refuses them as it
//! does numba-cuda's.

use fastlaunch_driver::{
    self as driver, is_legacy_stream, Claim, LaunchContext, Previous, StagingRing,
};
use pyo3::prelude::*;

use super::buffer::HostBuffer;
use super::context_memory::{context_memory, ContextMemory};
use super::ordering::{
    after_copy, before_copy, before_copy_captured_as, covering_marks, mark_is_done, mark_write,
    wait_for_mark_without_gil,
};
use super::{byte_count, current};
use crate::errors::{Error, Result};

/// Copies `host` to `device` on `stream` (not being captured) through a staging slot, or
/// unstaged (see the module's text); returns once the host bytes are taken. `marked`:
/// `stream` is the legacy stream and the write is marked (`ordering::mark_write`); a staged
/// copy's slot is then followed by that mark, not by an event of its own (one record instead
/// of two, and a slot known free once a later mark is seen done).
///
/// # Safety
/// `device` must be writable for `host.len()` bytes until the copy has run.
pub(crate) unsafe fn stage_to_device(
    py: Python<'_>,
    driver: &'static driver::Driver,
    memory: &ContextMemory,
    device: u64,
    host: &[u8],
    stream: usize,
    marked: bool,
) -> Result<()> {
    if host.is_empty() {
        return Ok(());
    }
    let written = || mark_write(py, driver, memory, device, host.len());
    let Some(mut slot) = claim_free_slot(py, driver, memory, host.len())? else {
        // SAFETY: per the caller.
        py.detach(|| unsafe { driver.copy_host_to_device_unstaged(device, host, stream) })?;
        return if marked {
            written().map(|_| ())
        } else {
            Ok(())
        };
    };
    if marked {
        // SAFETY: per the caller; the slot is free and `host` fits it.
        return unsafe { slot.to_device_followed_by(device, host, stream, written) };
    }
    // SAFETY: as above.
    Ok(unsafe { slot.to_device(device, host, stream) }?)
}

/// A staging slot for a copy of `len` bytes, its previous copy done (waited for without the
/// GIL if it must be); `None` when the copy is too large to stage or no slot can be claimed.
fn claim_free_slot<'m>(
    py: Python<'_>,
    driver: &'static driver::Driver,
    memory: &'m ContextMemory,
    len: usize,
) -> Result<Option<Claim<'m>>> {
    if !StagingRing::stages(len) {
        return Ok(None);
    }
    let Some(mut slot) = memory.ring.claim() else {
        return Ok(None);
    };
    if !slot_is_free(driver, memory, &mut slot)? {
        py.detach(|| wait_slot_free(driver, memory, &mut slot))?;
    }
    Ok(Some(slot))
}

/// Whether `slot`'s previous copy is done, never waiting: its own event asked, or the mark
/// that follows it known or asked done (`ordering::mark_is_done`).
fn slot_is_free(
    driver: &'static driver::Driver,
    memory: &ContextMemory,
    slot: &mut Claim<'_>,
) -> driver::Result<bool> {
    match slot.previous() {
        Previous::Done => Ok(true),
        Previous::Event(_) => slot.is_free(),
        Previous::Ticket(mark) => {
            let done = mark_is_done(driver, memory, mark)?;
            if done {
                slot.note_previous_done();
            }
            Ok(done)
        }
    }
}

/// Waits until `slot`'s previous copy is done: call without the GIL.
fn wait_slot_free(
    driver: &'static driver::Driver,
    memory: &ContextMemory,
    slot: &mut Claim<'_>,
) -> driver::Result<()> {
    if let Previous::Ticket(mark) = slot.previous() {
        wait_for_mark_without_gil(driver, memory, mark)?;
        slot.note_previous_done();
    }
    slot.wait_free()
}

/// Copies `device` into `host` after the work enqueued on `stream` (not being captured),
/// through a staging slot or unstaged (see the module's text). Waits for the GPU: call
/// without the GIL.
///
/// # Safety
/// `device` must be readable for `host.len()` bytes.
pub(crate) unsafe fn fetch_to_host(
    driver: &'static driver::Driver,
    memory: &ContextMemory,
    host: &mut [u8],
    device: u64,
    stream: usize,
) -> driver::Result<()> {
    if host.is_empty() {
        return Ok(());
    }
    if StagingRing::stages(host.len()) {
        if let Some(mut slot) = memory.ring.claim() {
            if is_legacy_stream(stream) {
                // One synchronous copy (no event), after which every mark recorded before it
                // is done. It runs after the slot's last copy where a mark follows that (a
                // copy on the legacy stream too): no wait for it first.
                if let Previous::Ticket(_) = slot.previous() {
                    slot.note_previous_done();
                }
                wait_slot_free(driver, memory, &mut slot)?;
                // SAFETY: per the caller; the slot is free and `host` fits it.
                return covering_marks(memory, || unsafe { slot.to_host_now(device, host) });
            }
            wait_slot_free(driver, memory, &mut slot)?;
            // SAFETY: per the caller; the slot is free and `host` fits it.
            return unsafe { slot.to_host_on(device, host, stream) };
        }
    }
    // SAFETY: per the caller.
    unsafe { driver.copy_device_to_host_unstaged(host, device, stream) }
}

/// Copies `host`'s bytes (a contiguous buffer; its first `nbytes`, all when None) to
/// `pointer` on `stream`; returns once the host bytes are taken, the copy ordered before
/// later work on `stream` (and, on stream 0, synchronous where numba-cuda's is: see the
/// module's text).
#[pyfunction]
#[pyo3(signature = (pointer, host, stream = 0, nbytes = None))]
pub(crate) fn copy_to_device(
    py: Python<'_>,
    pointer: u64,
    host: &Bound<'_, PyAny>,
    stream: usize,
    nbytes: Option<i64>,
) -> Result<()> {
    let (driver, context) = current()?;
    copy_into(py, driver, &context, pointer, host, stream, nbytes, None)
}

/// [`copy_to_device`] in `context`, the thread's current context; `capturing`: whether
/// `stream` is being captured, where the caller just asked (else it is asked here).
#[allow(clippy::too_many_arguments)] // copy_to_device's arguments, and what the caller knows
pub(crate) fn copy_into(
    py: Python<'_>,
    driver: &'static driver::Driver,
    context: &LaunchContext,
    pointer: u64,
    host: &Bound<'_, PyAny>,
    stream: usize,
    nbytes: Option<i64>,
    capturing: Option<bool>,
) -> Result<()> {
    let buffer = HostBuffer::take(host, false, "host")?;
    let (address, len) = (buffer.address(), copied_len(&buffer, nbytes)?);
    let work = match capturing {
        Some(capturing) => before_copy_captured_as(driver, context, stream, capturing)?,
        None => before_copy(driver, context, stream)?,
    };
    // SAFETY: the buffer stays exported (and so in place) until `buffer` drops after this.
    let host = unsafe { std::slice::from_raw_parts(address as *const u8, len) };
    if work.capturing {
        // a graph would replay a staging slot's later contents: copy as numba-cuda does
        // SAFETY: the caller gives a device range of at least `len` bytes.
        return Ok(unsafe { driver.copy_host_to_device_async(pointer, host, stream) }?);
    }
    let memory = context_memory(driver, context)?;
    let marked = work.marks_writes();
    // SAFETY: as above.
    unsafe { stage_to_device(py, driver, &memory, pointer, host, stream, marked) }?;
    if !marked {
        after_copy(py, driver, &memory, work, Some((pointer, len)))?;
    }
    drop(buffer);
    Ok(())
}

/// Copies `nbytes` (all of `host` when None) from `pointer` into `host` (a writable
/// contiguous buffer) after the work enqueued on `stream`; returns when they are there
/// (on a stream other than 0, into page-locked memory larger than a staging slot, it may
/// return before, as numba-cuda's copy does).
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
    let work = before_copy(driver, &context, stream)?;
    let capturing = work.capturing;
    let memory = context_memory(driver, &context)?;
    let copied = py.detach(|| {
        // SAFETY: the writable export stays (and the memory in place) until `buffer` drops
        // after this; nothing else writes it meanwhile under the GIL's absence but other
        // threads, as with any NumPy array handed to C.
        let host = unsafe { std::slice::from_raw_parts_mut(address as *mut u8, len) };
        if capturing {
            // a graph cannot wait for a staging slot's event: copy as numba-cuda does
            // SAFETY: the caller gives a device range of at least `len` bytes.
            return unsafe { driver.copy_device_to_host_async(host, pointer, stream) };
        }
        // SAFETY: as above.
        unsafe { fetch_to_host(driver, &memory, host, pointer, stream) }
    });
    drop(buffer);
    copied?;
    // an unstaged copy on a non-blocking stream may still read the memory: a free waits
    after_copy(py, driver, &memory, work, None)
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
pub(crate) fn copy_device(
    py: Python<'_>,
    dst: u64,
    src: u64,
    nbytes: i64,
    stream: usize,
) -> Result<()> {
    let nbytes = byte_count(nbytes)?;
    if nbytes == 0 {
        return Ok(());
    }
    let (driver, context) = current()?;
    let work = before_copy(driver, &context, stream)?;
    // SAFETY: the caller gives device ranges of `nbytes` bytes (the Python layer passes its
    // arrays' own allocations); the driver refuses pointers it does not know.
    unsafe { driver.copy_device_async(dst, src, nbytes, stream) }?;
    let memory = context_memory(driver, &context)?;
    after_copy(py, driver, &memory, work, Some((dst, nbytes)))
}

/// Sets `nbytes` at device `pointer` to the byte `value` in `stream`'s order.
#[pyfunction]
#[pyo3(signature = (pointer, value, nbytes, stream = 0))]
pub(crate) fn memset(
    py: Python<'_>,
    pointer: u64,
    value: u8,
    nbytes: i64,
    stream: usize,
) -> Result<()> {
    let nbytes = byte_count(nbytes)?;
    if nbytes == 0 {
        return Ok(());
    }
    let (driver, context) = current()?;
    let work = before_copy(driver, &context, stream)?;
    // SAFETY: as for `copy_device`.
    unsafe { driver.memset_async(pointer, value, nbytes, stream) }?;
    let memory = context_memory(driver, &context)?;
    after_copy(py, driver, &memory, work, Some((pointer, nbytes)))
}
