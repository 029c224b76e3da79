//! Ordering the memory API's work with non-blocking streams, which the legacy default stream
//! does not order with (everything else, blocking and per-thread default streams, orders with
//! it), on the GPU, never by blocking the host:
//!
//! - *legacy work* must be seen by a launch or a copy on a non-blocking stream: copies to the
//!   device on the legacy stream (`to_device` with no stream, which numba-cuda makes
//!   synchronously and fastlaunch only enqueues), and every allocation from the pool on any
//!   stream (the pool may hand back memory freed on the legacy stream whose earlier users
//!   still run, and orders the new allocation after them only on its own stream). The stream
//!   waits, once per new piece of legacy work, for the context's `copied` event, recorded on
//!   the legacy stream then (so after everything enqueued there so far), not after each piece;
//! - other libraries reading an array through `__cuda_array_interface__` (which numba-cuda
//!   exports with no stream for arrays bound to none) are ordered by a wait on the host, made
//!   only while legacy work is pending ([`settle_legacy_work`]);
//! - a free (on the legacy stream) must not let the pool hand the memory out again while work
//!   on a non-blocking stream may still use it: after each launch, allocation and copy on a
//!   non-blocking stream an event of the context's, one per stream, is recorded there, and the
//!   next free waits for each event recorded since the last free. Stream handles are never
//!   kept past that: a stream may be destroyed (and its handle reused) at any time, an event
//!   recorded on it stays valid. So a free makes the legacy stream, and every blocking stream
//!   after it, wait for that work: the cost other libraries' default streams pay.
//!
//! A launch pays one relaxed atomic load until the memory API is used; after that, a launch
//! on a stream other than the default ones also asks whether it is being captured and its
//! flags (known without asking for the streams fastlaunch made: `made_streams.rs`), and one
//! on a non-blocking stream records its event.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use fastlaunch_driver::{
    self as driver, is_default_stream, is_legacy_stream, Capture, Event, LaunchContext,
    LEGACY_STREAM,
};
use pyo3::prelude::*;

use super::context_memory::{all_context_memory, context_memory, ContextMemory};
use super::stream_ordering::{FollowedStream, FreePoint, FOLLOWED_STREAMS};
use crate::errors::Result;
use crate::made_streams;

/// Set once the memory API allocated or copied: before that, no launch has its memory.
static IN_USE: AtomicBool = AtomicBool::new(false);
/// How many pieces of legacy work were counted, in every context.
static LEGACY_WORK: AtomicU64 = AtomicU64::new(0);
/// `LEGACY_WORK` as it was when [`settle_legacy_work`] last saw all of it done.
static SETTLED_WORK: AtomicU64 = AtomicU64::new(0);

/// Streams this thread made wait for the legacy work, the most recent first. A stream not
/// here waits (again): never wrong.
const WAITERS: usize = 8;

/// A stream that waited for the legacy work counted up to `work`.
#[derive(Clone, Copy, Default)]
struct Waited {
    context: u64,
    stream: usize,
    /// The stream's id: a stream destroyed after its wait may leave its handle to a new
    /// stream, which has waited for nothing (without ids, never taken as seen).
    id: Option<u64>,
    work: u64,
}

thread_local! {
    static SEEN: Cell<[Waited; WAITERS]> = const {
        Cell::new([Waited { context: 0, stream: 0, id: None, work: 0 }; WAITERS])
    };
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
    /// Work on `stream` in `context`, being captured or not: its flags are asked only when it
    /// is not captured and not a default stream. A stream of another context (another
    /// device's: numba-cuda allocates and copies in the current context whatever the stream)
    /// is not ordered with this context's legacy stream either: it is followed as a
    /// non-blocking one.
    fn on(
        driver: &driver::Driver,
        context: &LaunchContext,
        stream: usize,
        capturing: bool,
    ) -> Result<StreamWork> {
        let unordered = !capturing
            && match made_streams::non_blocking_in(stream, context.id) {
                Some(non_blocking) => non_blocking, // made here, in this context
                None => {
                    non_blocking(driver, stream)?
                        || driver
                            .stream_context(stream)?
                            .is_some_and(|owner| owner != context.context)
                }
            };
        Ok(StreamWork {
            stream,
            capturing,
            non_blocking: unordered,
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
/// legacy work it has not waited for, and returns true: call [`after_launch`] once the
/// launch is submitted.
#[inline]
pub(crate) fn before_launch(
    driver: &'static driver::Driver,
    context: &LaunchContext,
    stream: usize,
) -> Result<bool> {
    if !in_use() || is_default_stream(stream) {
        return Ok(false);
    }
    if driver.stream_is_capturing(stream)? {
        return Ok(false); // a capture records its own dependencies, and cannot wait on ours
    }
    let on_non_blocking = match made_streams::non_blocking_in(stream, context.id) {
        Some(non_blocking) => non_blocking, // made here: its flags known without asking
        None => non_blocking(driver, stream)?,
    };
    if !on_non_blocking {
        return Ok(false);
    }
    wait_for_legacy_work(driver, context, stream)?;
    Ok(true)
}

/// After a launch on the non-blocking stream `stream` ([`before_launch`] said true): records
/// the stream's event, for the next free to wait for.
pub(crate) fn after_launch(
    driver: &'static driver::Driver,
    context: &LaunchContext,
    stream: usize,
) -> Result<()> {
    let memory = context_memory(driver, context)?;
    follow(driver, &memory, stream)?;
    Ok(())
}

/// Records `stream`'s event (made on first use) after the work enqueued there so far.
fn follow(
    driver: &'static driver::Driver,
    memory: &ContextMemory,
    stream: usize,
) -> driver::Result<()> {
    let mut ordering = memory.ordering();
    let followed = &mut ordering.followed;
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
/// work needs no second wait: later frees there come after this one. Returns where the free
/// stands on the legacy stream, for a block kept in the freed-block cache ([`before_reuse`]).
pub(crate) fn order_free(
    driver: &driver::Driver,
    memory: &ContextMemory,
    stream: usize,
) -> driver::Result<FreePoint> {
    let mut ordering = memory.ordering();
    for followed in ordering.followed.iter_mut().filter(|f| f.pending) {
        driver.stream_wait_event(stream, followed.event.handle())?;
        followed.pending = !is_legacy_stream(stream);
    }
    Ok(FreePoint(ordering.records))
}

/// Before a block freed at `freed` on the legacy stream (kept in the freed-block cache, not
/// given to the pool) is handed out again on `stream`, not being captured: orders every later
/// use of it after its earlier users, as the pool's free and allocation would have. A command
/// on the legacy stream after the free (a record of `copied`, made now if none was since)
/// orders it after the earlier users on blocking streams, and any later work on a blocking
/// stream after it (the legacy stream synchronises with both); a stream other than the
/// legacy one also waits for that record on the GPU (a non-blocking stream, or one of
/// another context, is ordered with nothing else). `None`: it cannot be ordered now (a
/// blocking stream is being captured, which refuses the legacy stream): use the pool.
/// Call [`after_alloc`] once it is handed out: the reuse is legacy work.
pub(crate) fn before_reuse(
    driver: &'static driver::Driver,
    context: &LaunchContext,
    memory: &ContextMemory,
    stream: usize,
    freed: FreePoint,
) -> Result<Option<StreamWork>> {
    let work = StreamWork::on(driver, context, stream, false)?;
    let legacy = is_legacy_stream(stream);
    let mut ordering = memory.ordering();
    if ordering.records == freed.0 {
        if !legacy && driver.capture_state(LEGACY_STREAM)? != Capture::None {
            return Ok(None);
        }
        ordering.record_copied(LEGACY_WORK.load(Ordering::Acquire))?;
    }
    if !legacy {
        driver.stream_wait_event(stream, ordering.copied.handle())?;
    }
    Ok(Some(work))
}

/// Before a copy on `stream`: whether it is being captured (asked of every stream: the
/// per-thread default stream can be captured), and whether it is a non-blocking stream,
/// which then waits for the legacy work it has not waited for. Call [`after_copy`] once the
/// copy is enqueued.
pub(crate) fn before_copy(
    driver: &'static driver::Driver,
    context: &LaunchContext,
    stream: usize,
) -> Result<StreamWork> {
    let work = StreamWork::on(driver, context, stream, driver.stream_is_capturing(stream)?)?;
    if work.non_blocking {
        wait_for_legacy_work(driver, context, stream)?;
    }
    Ok(work)
}

/// Before an allocation from the pool on `stream`, whose capture state the caller asked
/// (`Capture::None`: the pool allocates).
pub(crate) fn before_alloc(
    driver: &'static driver::Driver,
    context: &LaunchContext,
    stream: usize,
) -> Result<StreamWork> {
    StreamWork::on(driver, context, stream, false)
}

/// After a copy ([`before_copy`]) is enqueued: a write to the device on the legacy stream is
/// counted as legacy work, work on a non-blocking stream is followed (for frees to wait for).
pub(crate) fn after_copy(
    driver: &'static driver::Driver,
    memory: &ContextMemory,
    work: StreamWork,
) -> driver::Result<()> {
    if work.non_blocking {
        follow(driver, memory, work.stream)?;
    } else if !work.capturing && is_legacy_stream(work.stream) {
        count_legacy_work(memory);
    }
    Ok(())
}

/// After an allocation from the pool ([`before_alloc`]): counted as legacy work whatever its
/// stream (its memory's earlier users ran up to the free, on the legacy stream), and
/// followed on a non-blocking stream.
pub(crate) fn after_alloc(
    driver: &'static driver::Driver,
    memory: &ContextMemory,
    work: StreamWork,
) -> driver::Result<()> {
    if work.non_blocking {
        follow(driver, memory, work.stream)?;
    }
    count_legacy_work(memory);
    Ok(())
}

fn count_legacy_work(memory: &ContextMemory) {
    memory.legacy_work.fetch_add(1, Ordering::Release);
    LEGACY_WORK.fetch_add(1, Ordering::Release);
}

fn wait_for_legacy_work(
    driver: &'static driver::Driver,
    context: &LaunchContext,
    stream: usize,
) -> Result<()> {
    let work = LEGACY_WORK.load(Ordering::Acquire);
    if work == 0 {
        return Ok(());
    }
    let key = context.key();
    let seen = SEEN.with(Cell::get);
    let this = |entry: &Waited| entry.context == key && entry.stream == stream;
    if let Some(entry) = seen.iter().find(|entry| this(entry) && entry.work == work) {
        if entry.id.is_some() && driver.stream_id(stream)? == entry.id {
            return Ok(());
        }
    }
    let memory = context_memory(driver, context)?;
    {
        let mut ordering = memory.ordering();
        if ordering.recorded_at != work && driver.capture_state(LEGACY_STREAM)? == Capture::Implicit
        {
            // a blocking stream is being captured: the legacy stream cannot be recorded on
            // (the capture would fail); numba-cuda's own copies there fail the same way
            return Err(implicit_capture_error(driver));
        }
        let copied = ordering.copied_after(work)?;
        driver.stream_wait_event(stream, copied)?;
    }
    let mut updated = [Waited::default(); WAITERS];
    updated[0] = Waited {
        context: key,
        stream,
        id: driver.stream_id(stream)?,
        work,
    };
    for (slot, entry) in updated[1..]
        .iter_mut()
        .zip(seen.iter().filter(|entry| !this(entry)))
    {
        *slot = *entry;
    }
    SEEN.with(|cell| cell.set(updated));
    Ok(())
}

fn implicit_capture_error(driver: &driver::Driver) -> crate::errors::Error {
    driver
        .error(
            driver::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
            "ordering after the legacy stream's pending copies and allocations while a blocking \
             stream is being captured (cuEventRecord)",
        )
        .into()
}

/// Waits on the host, without the GIL, until the legacy work counted so far in every
/// context has run: what `__cuda_array_interface__` of an array bound to no stream needs
/// before it says "no stream" (numba-cuda's copies and allocations there are synchronous).
/// Returns at once when none is pending.
#[pyfunction]
pub(crate) fn settle_legacy_work(py: Python<'_>) -> Result<()> {
    let work = LEGACY_WORK.load(Ordering::Acquire);
    if work == SETTLED_WORK.load(Ordering::Acquire) {
        return Ok(());
    }
    let driver = crate::devices::driver()?;
    let current = driver.current_context()?;
    for memory in all_context_memory() {
        let counted = memory.legacy_work.load(Ordering::Acquire);
        if counted == memory.settled_work.load(Ordering::Acquire) || !memory.is_alive(driver) {
            continue;
        }
        let other = current != Some(memory.context);
        if other {
            driver.push_context(memory.context)?;
        }
        let recorded = (|| {
            if driver.capture_state(LEGACY_STREAM)? == Capture::Implicit {
                return Err(implicit_capture_error(driver));
            }
            Ok(memory.ordering().copied_after(work)?)
        })();
        if other {
            driver.pop_context()?;
        }
        let copied = recorded?;
        py.detach(|| driver.event_synchronize(copied))?;
        memory.settled_work.fetch_max(counted, Ordering::AcqRel);
    }
    SETTLED_WORK.fetch_max(work, Ordering::AcqRel);
    Ok(())
}
