//! Streams and events by their raw handles, for `python/fastlaunch/memory/`, whose numba-cuda
//! `Stream` and `Event` objects keep the handle as an int and own it (they destroy it once,
//! when collected). `fastlaunch.Stream` / `fastlaunch.Event` (`streams.rs`) are the owning
//! Python classes; these are the same driver calls without an object around the handle.
//!
//! A call that names a stream makes a context current first (device 0's primary context when
//! the thread has none, as launches do): the default streams 0, 1 and 2 mean the current
//! context's, and creating needs one. The GIL is let go only around the calls that block
//! (synchronizing); the rest return at once, and letting the GIL go would cost more than they do.

use fastlaunch_driver::is_legacy_stream;
use pyo3::prelude::*;

use super::context_memory::known_context_memory;
use super::current;
use super::ordering::covering_marks;
use super::pool::free_exported_after_synchronize;
use crate::devices::driver;
use crate::errors::Result;

/// A new stream in the current context; `non_blocking`: it does not wait for, and is not
/// waited for by, the legacy default stream. Its handle, for `stream_destroy`.
#[pyfunction]
#[pyo3(signature = (non_blocking = false))]
pub(crate) fn stream_create(non_blocking: bool) -> Result<usize> {
    let (driver, _) = current()?;
    Ok(driver.create_stream(non_blocking)?)
}

/// Destroys a stream from `stream_create` (work already on it still runs).
#[pyfunction]
pub(crate) fn stream_destroy(handle: usize) -> Result<()> {
    let driver = driver()?;
    // SAFETY: the caller (the object owning the handle) destroys it once and then drops it.
    Ok(unsafe { driver.destroy_stream(handle) }?)
}

/// Waits until all work submitted to the stream has finished; for the legacy stream, notes
/// the memory API's marks recorded before as done; for another, the staging slots whose
/// copies were enqueued on it before as free.
#[pyfunction]
pub(crate) fn stream_synchronize(py: Python<'_>, handle: usize) -> Result<()> {
    let (driver, context) = current()?;
    let synchronize = || driver.stream_synchronize(handle);
    let Some(memory) = known_context_memory(context.key()) else {
        return Ok(py.detach(synchronize)?);
    };
    if is_legacy_stream(handle) {
        return Ok(py.detach(|| covering_marks(&memory, synchronize))?);
    }
    Ok(py.detach(|| memory.ring.synchronizing_stream(handle, synchronize))?)
}

/// Whether all work submitted to the stream has finished.
#[pyfunction]
pub(crate) fn stream_query(handle: usize) -> Result<bool> {
    let (driver, _) = current()?;
    Ok(driver.stream_query(handle)?)
}

/// Makes work submitted to `stream` from now on wait, on the GPU, for `event`'s recorded work.
#[pyfunction]
pub(crate) fn stream_wait_event(stream: usize, event: usize) -> Result<()> {
    let (driver, _) = current()?;
    Ok(driver.stream_wait_event(stream, event)?)
}

/// A new event in the current context (`timing=False`: cheaper to record and wait on, and
/// not usable with `event_elapsed_ms`). Its handle, for `event_destroy`.
#[pyfunction]
#[pyo3(signature = (timing = true))]
pub(crate) fn event_create(timing: bool) -> Result<usize> {
    let (driver, _) = current()?;
    Ok(driver.create_event(timing)?)
}

#[pyfunction]
pub(crate) fn event_destroy(event: usize) -> Result<()> {
    let driver = driver()?;
    // SAFETY: the caller (the object owning the handle) destroys it once and then drops it.
    Ok(unsafe { driver.destroy_event(event) }?)
}

/// Records `event` after the work submitted to `stream` so far.
#[pyfunction]
#[pyo3(signature = (event, stream = 0))]
pub(crate) fn event_record(event: usize, stream: usize) -> Result<()> {
    let (driver, _) = current()?;
    Ok(driver.record_event(event, stream)?)
}

/// Waits until the work `event` was last recorded after has finished.
#[pyfunction]
pub(crate) fn event_synchronize(py: Python<'_>, event: usize) -> Result<()> {
    let driver = driver()?;
    Ok(py.detach(|| driver.event_synchronize(event))?)
}

/// Whether the work `event` was last recorded after has finished.
#[pyfunction]
pub(crate) fn event_query(event: usize) -> Result<bool> {
    Ok(driver()?.event_query(event)?)
}

/// Milliseconds from `start` to `end`, both timing events, recorded and complete.
#[pyfunction]
pub(crate) fn event_elapsed_ms(start: usize, end: usize) -> Result<f32> {
    Ok(driver()?.event_elapsed_ms(start, end)?)
}

/// Waits for all work in the current context (device 0's primary context when none is
/// current): `synchronize()` under the name the memory API uses.
#[pyfunction]
pub(crate) fn context_synchronize(py: Python<'_>) -> Result<()> {
    let (driver, context) = current()?;
    let Some(memory) = known_context_memory(context.key()) else {
        return Ok(py.detach(|| driver.synchronize())?);
    };
    // (every stream of the context ran dry: the legacy stream's marks and the staging slots'
    // copies too)
    let synchronize = || memory.ring.synchronizing_context(|| driver.synchronize());
    py.detach(|| covering_marks(&memory, synchronize))?;
    // the work queued ahead of the exported frees held has run: they may go to the pool
    free_exported_after_synchronize(driver, &memory)
}
