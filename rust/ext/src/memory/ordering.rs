//! Ordering the memory API's work with launches on non-blocking streams, which the legacy
//! default stream does not order with (everything else, blocking and per-thread default
//! streams, orders with it), on the GPU, never by blocking the host:
//!
//! - a copy to the device on the legacy stream (`to_device` with no stream, which numba-cuda
//!   makes synchronously and fastlaunch only enqueues) must be seen by a launch on a
//!   non-blocking stream: the launch's stream waits for the last such copy (the context's
//!   `copied` event, recorded after each), once per copy it has not waited for;
//! - a free (on the legacy stream) must not let the pool hand the memory out again while a
//!   kernel launched on a non-blocking stream may still read it: after each such launch an
//!   event of the context's, one per stream, is recorded there, and the next free waits for
//!   each event recorded since the last free. Stream handles are never kept past that: a
//!   stream may be destroyed (and its handle reused) at any time, an event recorded on it
//!   stays valid.
//!
//! A launch pays one relaxed atomic load until the memory API is used; after that, a launch
//! on a stream other than the default ones also asks whether it is being captured and its
//! flags, and one on a non-blocking stream records its event.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use fastlaunch_driver::{
    self as driver, is_default_stream, is_legacy_stream, Event, LaunchContext,
};

use super::{with_context_memory, ContextMemory};
use crate::errors::Result;

/// Set once the memory API allocated or copied: before that, no launch has its memory.
static IN_USE: AtomicBool = AtomicBool::new(false);
/// How many copies to the device were enqueued on the legacy stream, each followed by
/// its context's `copied` event.
static LEGACY_COPIES: AtomicU64 = AtomicU64::new(0);

/// Streams this thread's launches made wait for the legacy copies: `(context key, stream,
/// LEGACY_COPIES seen)`, the most recent first. A stream not here waits (again): never wrong.
const WAITERS: usize = 8;
thread_local! {
    static SEEN: Cell<[(u64, usize, u64); WAITERS]> = const { Cell::new([(0, 0, 0); WAITERS]) };
}

/// How many non-blocking streams a context follows at once; beyond, the oldest one's event
/// is waited for on the legacy stream at once (what a free would do) and its place reused.
const FOLLOWED_STREAMS: usize = 16;

/// A non-blocking stream launched on: `event` recorded after its last launch, `pending`
/// while no free has waited for that record yet.
pub(crate) struct LaunchedOn {
    stream: usize,
    event: Event,
    pending: bool,
}

/// Whether the memory API allocated or copied yet.
pub(crate) fn in_use() -> bool {
    IN_USE.load(Ordering::Relaxed)
}

pub(crate) fn note_in_use() {
    if !IN_USE.load(Ordering::Relaxed) {
        IN_USE.store(true, Ordering::Relaxed);
    }
}

/// Whether `stream` is a non-blocking stream; never asked of a stream being captured
/// (`cuStreamGetFlags` would invalidate the capture).
fn non_blocking(driver: &driver::Driver, stream: usize) -> Result<bool> {
    Ok(!is_default_stream(stream)
        && driver.stream_flags(stream)? & driver::STREAM_NON_BLOCKING != 0)
}

/// After a copy to the device enqueued on `stream`: when that is the legacy stream, records
/// the context's `copied` event after it, for launches on non-blocking streams to wait on.
pub(crate) fn after_copy_to_device(memory: &ContextMemory, stream: usize) -> driver::Result<()> {
    if !is_legacy_stream(stream) {
        return Ok(());
    }
    memory.copied.record(stream)?;
    LEGACY_COPIES.fetch_add(1, Ordering::Release);
    Ok(())
}

/// Before a launch (or a graph's replay) on `stream`, which may use the memory API's
/// arrays: when it is a non-blocking stream not being captured, makes it wait for the
/// copies to the device on the legacy stream it has not waited for, and returns true: call
/// [`after_launch`] once the launch is submitted.
#[inline]
pub(crate) fn before_launch(
    driver: &'static driver::Driver,
    context: &LaunchContext,
    stream: usize,
) -> Result<bool> {
    if !in_use() || is_default_stream(stream) {
        return Ok(false);
    }
    if driver.stream_is_capturing(stream)? || !non_blocking(driver, stream)? {
        return Ok(false); // a capture records its own dependencies, and cannot wait on ours
    }
    wait_for_legacy_copies(driver, context, stream)?;
    Ok(true)
}

/// After a launch on the non-blocking stream `stream` ([`before_launch`] said true): records
/// the stream's event, for the next free to wait for.
pub(crate) fn after_launch(
    driver: &'static driver::Driver,
    context: &LaunchContext,
    stream: usize,
) -> Result<()> {
    with_context_memory(driver, context, |memory| {
        let launched = &mut memory.launched;
        let index = match launched.iter().position(|l| l.stream == stream) {
            Some(index) => index,
            None => {
                if launched.len() == FOLLOWED_STREAMS {
                    let oldest = launched.remove(0);
                    if oldest.pending {
                        driver.stream_wait_event(0, oldest.event.handle())?;
                    }
                }
                launched.push(LaunchedOn {
                    stream,
                    event: Event::create(driver, false)?,
                    pending: false,
                });
                launched.len() - 1
            }
        };
        let entry = &mut launched[index];
        entry.event.record(stream)?;
        entry.pending = true;
        Ok(())
    })?;
    Ok(())
}

/// Before a free on `stream`: makes it wait for every launch on a non-blocking stream since
/// the last free (a kernel there may still read the memory). Waited for on the legacy
/// stream, a launch needs no second wait: later frees there come after this one.
pub(crate) fn order_free_after_launches(
    driver: &driver::Driver,
    memory: &mut ContextMemory,
    stream: usize,
) -> driver::Result<()> {
    for launched in memory.launched.iter_mut().filter(|l| l.pending) {
        driver.stream_wait_event(stream, launched.event.handle())?;
        launched.pending = !is_legacy_stream(stream);
    }
    Ok(())
}

/// Before a copy on `stream`: when it is a non-blocking stream not being captured, it waits
/// for the copies to the device on the legacy stream it has not waited for. (Frees already
/// follow the streams their memory was copied on: `Driver::free_after`.) Returns whether
/// `stream` is being captured.
pub(crate) fn before_copy(
    driver: &'static driver::Driver,
    context: &LaunchContext,
    stream: usize,
) -> Result<bool> {
    let capturing = driver.stream_is_capturing(stream)?;
    if !capturing && non_blocking(driver, stream)? {
        wait_for_legacy_copies(driver, context, stream)?;
    }
    Ok(capturing)
}

fn wait_for_legacy_copies(
    driver: &'static driver::Driver,
    context: &LaunchContext,
    stream: usize,
) -> Result<()> {
    let copies = LEGACY_COPIES.load(Ordering::Acquire);
    if copies == 0 {
        return Ok(());
    }
    let key = context.key();
    let seen = SEEN.with(Cell::get);
    let this = |&(k, s, _): &(u64, usize, u64)| k == key && s == stream;
    if seen.iter().any(|entry| this(entry) && entry.2 == copies) {
        return Ok(());
    }
    with_context_memory(driver, context, |memory| {
        driver.stream_wait_event(stream, memory.copied.handle())
    })?;
    let mut updated = [(0, 0, 0); WAITERS];
    updated[0] = (key, stream, copies);
    for (slot, entry) in updated[1..]
        .iter_mut()
        .zip(seen.iter().filter(|entry| !this(entry)))
    {
        *slot = *entry;
    }
    SEEN.with(|cell| cell.set(updated));
    Ok(())
}
