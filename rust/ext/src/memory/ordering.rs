//! Ordering the memory API's work with non-blocking streams, which the legacy default stream
//! does not order with (everything else, blocking and per-thread default streams, orders with
//! it), on the GPU, never by blocking the host:
//!
//! - a copy to the device on the legacy stream (`to_device` with no stream, which numba-cuda
//!   makes synchronously and fastlaunch only enqueues) must be seen by a launch or a copy on a
//!   non-blocking stream: that stream waits, once per new copy, for the context's `copied`
//!   event, recorded on the legacy stream then (so after every copy enqueued there so far),
//!   not after each copy;
//! - a free (on the legacy stream) must not let the pool hand the memory out again while work
//!   on a non-blocking stream may still use it: after each launch, allocation and copy on a
//!   non-blocking stream an event of the context's, one per stream, is recorded there, and the
//!   next free waits for each event recorded since the last free. Stream handles are never
//!   kept past that: a stream may be destroyed (and its handle reused) at any time, an event
//!   recorded on it stays valid.
//!
//! A launch pays one relaxed atomic load until the memory API is used; after that, a launch
//! on a stream other than the default ones also asks whether it is being captured and its
//! flags, and one on a non-blocking stream records its event.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use fastlaunch_driver::{
    self as driver, is_default_stream, is_legacy_stream, Event, LaunchContext, LEGACY_STREAM,
};

use super::{with_context_memory, ContextMemory};
use crate::errors::Result;

/// Set once the memory API allocated or copied: before that, no launch has its memory.
static IN_USE: AtomicBool = AtomicBool::new(false);
/// How many copies to the device were enqueued on the legacy stream.
static LEGACY_COPIES: AtomicU64 = AtomicU64::new(0);

/// Streams this thread made wait for the legacy copies: `(context key, stream,
/// LEGACY_COPIES seen)`, the most recent first. A stream not here waits (again): never wrong.
const WAITERS: usize = 8;
thread_local! {
    static SEEN: Cell<[(u64, usize, u64); WAITERS]> = const { Cell::new([(0, 0, 0); WAITERS]) };
}

/// How many non-blocking streams a context follows at once; beyond, the oldest one's event
/// is waited for on the legacy stream at once (what a free would do) and its place reused.
const FOLLOWED_STREAMS: usize = 16;

/// A non-blocking stream worked on: `event` recorded after its last piece of work,
/// `pending` while no free has waited for that record yet.
pub(crate) struct FollowedStream {
    stream: usize,
    event: Event,
    pending: bool,
}

/// The context's `copied` event, and how many legacy copies had been counted when it was
/// last recorded.
pub(crate) struct LegacyCopies {
    event: Event,
    recorded_at: u64,
}

impl LegacyCopies {
    pub(crate) fn new(driver: &'static driver::Driver) -> driver::Result<LegacyCopies> {
        Ok(LegacyCopies {
            event: Event::create(driver, false)?,
            recorded_at: 0,
        })
    }
}

/// How a copy or an allocation on a stream orders with the rest ([`before_copy`],
/// [`before_alloc`]).
#[derive(Clone, Copy)]
pub(crate) struct StreamWork {
    stream: usize,
    /// The stream is being captured into a graph: nothing is waited for or recorded.
    pub(crate) capturing: bool,
    /// A non-blocking stream, not being captured: frees are to follow this work.
    non_blocking: bool,
}

impl StreamWork {
    /// Work on `stream`, being captured or not: its flags are asked only when it is not
    /// captured and not a default stream.
    fn on(driver: &driver::Driver, stream: usize, capturing: bool) -> Result<StreamWork> {
        Ok(StreamWork {
            stream,
            capturing,
            non_blocking: !capturing && non_blocking(driver, stream)?,
        })
    }
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
    with_context_memory(driver, context, |memory| follow(driver, memory, stream))?;
    Ok(())
}

/// Records `stream`'s event (made on first use) after the work enqueued there so far.
fn follow(
    driver: &'static driver::Driver,
    memory: &mut ContextMemory,
    stream: usize,
) -> driver::Result<()> {
    let followed = &mut memory.followed;
    let index = match followed.iter().position(|f| f.stream == stream) {
        Some(index) => index,
        None => {
            if followed.len() == FOLLOWED_STREAMS {
                let oldest = followed.remove(0);
                if oldest.pending {
                    driver.stream_wait_event(LEGACY_STREAM, oldest.event.handle())?;
                }
            }
            followed.push(FollowedStream {
                stream,
                event: Event::create(driver, false)?,
                pending: false,
            });
            followed.len() - 1
        }
    };
    let entry = &mut followed[index];
    entry.event.record(stream)?;
    entry.pending = true;
    Ok(())
}

/// Before a free on `stream`: makes it wait for every piece of work on a non-blocking stream
/// since the last free (it may still use the memory). Waited for on the legacy stream, that
/// work needs no second wait: later frees there come after this one.
pub(crate) fn order_free(
    driver: &driver::Driver,
    memory: &mut ContextMemory,
    stream: usize,
) -> driver::Result<()> {
    for followed in memory.followed.iter_mut().filter(|f| f.pending) {
        driver.stream_wait_event(stream, followed.event.handle())?;
        followed.pending = !is_legacy_stream(stream);
    }
    Ok(())
}

/// Before a copy on `stream`: whether it is being captured (asked of every stream: the
/// per-thread default stream can be captured), and whether it is a non-blocking stream,
/// which then waits for the copies to the device on the legacy stream it has not waited for.
/// Call [`after_stream_work`] once the copy is enqueued.
pub(crate) fn before_copy(
    driver: &'static driver::Driver,
    context: &LaunchContext,
    stream: usize,
) -> Result<StreamWork> {
    let work = StreamWork::on(driver, stream, driver.stream_is_capturing(stream)?)?;
    if work.non_blocking {
        wait_for_legacy_copies(driver, context, stream)?;
    }
    Ok(work)
}

/// Before an allocation on `stream`: on a non-blocking stream not being captured, the
/// allocation is to be followed ([`after_stream_work`]), for the free on the legacy stream
/// to come after it. The default streams are not asked anything.
pub(crate) fn before_alloc(driver: &'static driver::Driver, stream: usize) -> Result<StreamWork> {
    let capturing = !is_default_stream(stream) && driver.stream_is_capturing(stream)?;
    StreamWork::on(driver, stream, capturing)
}

/// After a copy ([`before_copy`]) or an allocation ([`before_alloc`]) is enqueued: a write
/// to the device on the legacy stream is counted (for non-blocking streams to wait for),
/// work on a non-blocking stream is followed (for frees to wait for).
pub(crate) fn after_stream_work(
    driver: &'static driver::Driver,
    context: &LaunchContext,
    work: StreamWork,
    writes_device: bool,
) -> driver::Result<()> {
    if work.non_blocking {
        with_context_memory(driver, context, |memory| {
            follow(driver, memory, work.stream)
        })?;
    } else if writes_device && !work.capturing && is_legacy_stream(work.stream) {
        LEGACY_COPIES.fetch_add(1, Ordering::Release);
    }
    Ok(())
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
        let copied = &mut memory.legacy_copies;
        if copied.recorded_at != copies {
            // after every copy counted so far: each was enqueued before it was counted
            copied.event.record(LEGACY_STREAM)?;
            copied.recorded_at = copies;
        }
        driver.stream_wait_event(stream, copied.event.handle())
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
