//! Ordering the memory API's work with the streams that read it, on the GPU where a stream
//! can wait, and never by waiting on the host for more than the memory's own work:
//!
//! - *legacy work* (copies to the device on the legacy stream, which numba-cuda makes
//!   synchronously and fastlaunch only enqueues, and allocations that may get a block freed
//!   on the legacy stream whose earlier users still run) is followed by a *mark*, an event
//!   recorded on the legacy stream right after it is enqueued (`stream_ordering.rs`). The
//!   device range it concerns is noted with its mark. A launch or copy on a non-blocking
//!   stream waits, on the GPU, for the newest mark it has not waited for: no command on the
//!   legacy stream is needed then, so a capture that refuses the legacy stream (a blocking
//!   stream's) cannot make it fail;
//! - another library reading an array (`__cuda_array_interface__`, DLPack) is ordered by
//!   [`settle_export`]: the host waits, without the GIL and in the relaxed capture mode (so
//!   no capture, of any thread, refuses it or is invalidated by it), for the newest mark of
//!   the array's own memory only, and only while it is not known done; an array whose work
//!   is known done exports with no driver call. What is known done: marks a query or a wait
//!   saw done, and all marks before a synchronization of the context or the legacy stream;
//! - a free (on the legacy stream) must not let the pool hand the memory out again while work
//!   on a non-blocking stream may still use it: after each launch, allocation and copy on a
//!   non-blocking stream (copies back included) an event of the context's, one per stream, is
//!   recorded there, and the next free waits for each event recorded since the last free.
//!   Stream handles are never kept past that: a stream may be destroyed (and its handle
//!   reused) at any time, an event recorded on it stays valid.
//!
//! A launch pays one relaxed atomic load until the memory API is used; after that, a launch
//! on a stream other than the default ones also asks whether it is being captured and its
//! flags (known without asking for the streams fastlaunch made: `made_streams.rs`), and one
//! on a non-blocking stream records its event.
//!
//! On a driver that cannot put a thread in the relaxed capture mode, a mark is waited for
//! (without the GIL) as soon as it is recorded, so that no later read has to ask: a read
//! during another thread's global capture would invalidate it.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use fastlaunch_driver::{
    self as driver, is_default_stream, is_legacy_stream, Capture, Event, LaunchContext,
    LEGACY_STREAM,
};
use pyo3::prelude::*;

use super::context_memory::{all_context_memory, context_memory, memory_of, ContextMemory};
use super::stream_ordering::{FollowedStream, FreePoint, StreamOrdering, FOLLOWED_STREAMS};
use crate::errors::Result;
use crate::made_streams;

/// Set once the memory API allocated or copied: before that, no launch has its memory.
static IN_USE: AtomicBool = AtomicBool::new(false);
/// Marks recorded, in every context: what a stream's wait is keyed by.
static MARKS_RECORDED: AtomicU64 = AtomicU64::new(0);
/// Device ranges waiting for a mark, in every context: none, and an export asks nothing.
static WAITING_RANGES: AtomicUsize = AtomicUsize::new(0);

/// Streams this thread made wait for the newest mark, the most recent first. A stream not
/// here waits (again): never wrong.
const WAITERS: usize = 8;

/// A stream that waited for the marks recorded up to `marks`.
#[derive(Clone, Copy, Default)]
struct Waited {
    context: u64,
    stream: usize,
    /// The stream's id: a stream destroyed after its wait may leave its handle to a new
    /// stream, which has waited for nothing (without ids, never taken as seen).
    id: Option<u64>,
    marks: u64,
}

thread_local! {
    static SEEN: Cell<[Waited; WAITERS]> = const {
        Cell::new([Waited { context: 0, stream: 0, id: None, marks: 0 }; WAITERS])
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

/// Device memory written by a piece of work: `(address, bytes)`.
pub(crate) type Written = Option<(u64, usize)>;

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
    ordering.freed_since_mark = true;
    Ok(FreePoint(ordering.newest))
}

/// Before a block freed at `freed` on the legacy stream (kept in the freed-block cache, not
/// given to the pool) is handed out again on `stream`, not being captured: orders every later
/// use of it after its earlier users, as the pool's free and allocation would have. A mark
/// after the free (recorded now if none was since) orders it after the earlier users on
/// blocking streams, and any later work on a blocking stream of the context after it (the
/// legacy stream synchronises with both): a non-blocking stream, or one of another context,
/// which is ordered with nothing else, also waits for that mark on the GPU, unless it is
/// known done.
/// `None`: it cannot be ordered now (a blocking stream is being captured, which refuses the
/// legacy stream): use the pool. Then call [`after_reuse`]. `filled`: the block is written
/// next on the legacy stream by a marked copy (`pool::alloc_in`), itself a command there
/// after the free, whose mark follows the reuse: none is recorded for it.
pub(crate) fn before_reuse(
    driver: &'static driver::Driver,
    context: &LaunchContext,
    memory: &ContextMemory,
    stream: usize,
    freed: FreePoint,
    filled: bool,
) -> Result<Option<(StreamWork, u64)>> {
    let work = StreamWork::on(driver, context, stream, false)?;
    let legacy = is_legacy_stream(stream);
    let mut ordering = memory.ordering();
    if legacy && filled {
        ordering.freed_since_mark = true; // until the copy's mark
        return Ok(Some((work, 0)));
    }
    if ordering.newest == freed.0 {
        if !legacy && driver.capture_state(LEGACY_STREAM)? != Capture::None {
            return Ok(None);
        }
        record_mark(driver, &mut ordering)?;
    }
    let mark = ordering.newest;
    let known_done = mark <= memory.done_mark.load(Ordering::Acquire);
    if let Some((event, _)) = ordering
        .mark_event(mark)
        .filter(|_| work.non_blocking && !known_done)
    {
        driver.stream_wait_event(stream, event)?; // (the newest mark is always recorded)
    }
    Ok(Some((work, mark)))
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
    before_copy_captured_as(driver, context, stream, driver.stream_is_capturing(stream)?)
}

/// [`before_copy`] where the caller just asked whether `stream` is being captured.
pub(crate) fn before_copy_captured_as(
    driver: &'static driver::Driver,
    context: &LaunchContext,
    stream: usize,
    capturing: bool,
) -> Result<StreamWork> {
    let work = StreamWork::on(driver, context, stream, capturing)?;
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

/// After a copy ([`before_copy`]) is enqueued, in either direction: work on a non-blocking
/// stream is followed (for frees to wait for); a write to the device (`written`) on the
/// legacy stream is legacy work, marked ([`mark_write`]).
pub(crate) fn after_copy(
    py: Python<'_>,
    driver: &'static driver::Driver,
    memory: &ContextMemory,
    work: StreamWork,
    written: Written,
) -> Result<()> {
    if work.non_blocking {
        follow(driver, memory, work.stream)?;
    } else if let Some((address, len)) = written.filter(|_| work.marks_writes()) {
        mark_write(py, driver, memory, address, len)?;
    }
    Ok(())
}

impl StreamWork {
    /// Whether a write to the device by this work is legacy work, marked ([`mark_write`]):
    /// on the legacy stream, not being captured.
    pub(crate) fn marks_writes(&self) -> bool {
        is_legacy_stream(self.stream) && !self.capturing
    }
}

/// Marks a write of `[address, address + len)` just enqueued on the legacy stream: records
/// the next mark after it, which the range waits for; the mark's number.
pub(crate) fn mark_write(
    py: Python<'_>,
    driver: &'static driver::Driver,
    memory: &ContextMemory,
    address: u64,
    len: usize,
) -> Result<u64> {
    let mark = {
        let mut ordering = memory.ordering();
        let mark = record_mark(driver, &mut ordering)?;
        note_pending(&mut ordering, memory, address, len, mark);
        mark
    };
    settle_if_unrelaxable(py, driver, memory, mark)?;
    Ok(mark)
}

/// After an allocation of `len` bytes at `address` from the pool ([`before_alloc`]): a
/// block freed since the newest mark may be the one handed out, whose earlier users only a
/// new mark follows (recorded now, on the legacy stream; where that stream is refused, the
/// allocation is ordered on its own stream alone, by the pool); the range waits for that
/// mark. Followed on a non-blocking stream.
pub(crate) fn after_alloc(
    py: Python<'_>,
    driver: &'static driver::Driver,
    memory: &ContextMemory,
    work: StreamWork,
    address: u64,
    len: usize,
) -> Result<()> {
    if work.non_blocking {
        follow(driver, memory, work.stream)?;
    }
    let recorded = {
        let mut ordering = memory.ordering();
        let recorded = if ordering.freed_since_mark
            && (is_legacy_stream(work.stream)
                || driver.capture_state(LEGACY_STREAM)? == Capture::None)
        {
            Some(record_mark(driver, &mut ordering)?)
        } else {
            None
        };
        let mark = ordering.newest;
        note_pending(&mut ordering, memory, address, len, mark);
        recorded
    };
    if let Some(mark) = recorded {
        settle_if_unrelaxable(py, driver, memory, mark)?;
    }
    Ok(())
}

/// After a freed-block cache's block of `len` bytes at `address` is handed out, ordered by
/// [`before_reuse`] after `mark`.
pub(crate) fn after_reuse(
    py: Python<'_>,
    driver: &'static driver::Driver,
    memory: &ContextMemory,
    (work, mark): (StreamWork, u64),
    address: u64,
    len: usize,
) -> Result<()> {
    if work.non_blocking {
        follow(driver, memory, work.stream)?;
    }
    note_pending(&mut memory.ordering(), memory, address, len, mark);
    settle_if_unrelaxable(py, driver, memory, mark)
}

/// Records the next mark of `ordering`'s context, counted for the streams' waits
/// ([`wait_for_legacy_work`]); its number.
fn record_mark(
    driver: &'static driver::Driver,
    ordering: &mut StreamOrdering,
) -> driver::Result<u64> {
    let mark = ordering.record_mark(driver)?;
    MARKS_RECORDED.fetch_add(1, Ordering::Release);
    Ok(mark)
}

/// Notes that `[address, address + len)` is ready once `mark` is done, unless it is known
/// done already.
fn note_pending(
    ordering: &mut StreamOrdering,
    memory: &ContextMemory,
    address: u64,
    len: usize,
    mark: u64,
) {
    if mark == 0 || mark <= memory.done_mark.load(Ordering::Acquire) {
        return;
    }
    let before = ordering.waiting();
    ordering.note_pending(address, len, mark);
    count_waiting(before, ordering.waiting());
}

fn count_waiting(before: usize, after: usize) {
    if after > before {
        WAITING_RANGES.fetch_add(after - before, Ordering::AcqRel);
    } else if before > after {
        WAITING_RANGES.fetch_sub(before - after, Ordering::AcqRel);
    }
}

/// Notes that `mark` and every mark before it are done in `memory`'s context (a wait saw
/// it done, or a synchronization covering the legacy stream ran after it was recorded).
fn note_done(memory: &ContextMemory, mark: u64) {
    if memory.done_mark.fetch_max(mark, Ordering::AcqRel) >= mark {
        return;
    }
    let mut ordering = memory.ordering();
    let before = ordering.waiting();
    ordering.prune(memory.done_mark.load(Ordering::Acquire));
    count_waiting(before, ordering.waiting());
}

/// Where the driver cannot relax a thread's capture mode, waits for `mark` now (see the
/// module's text).
fn settle_if_unrelaxable(
    py: Python<'_>,
    driver: &'static driver::Driver,
    memory: &ContextMemory,
    mark: u64,
) -> Result<()> {
    if driver.can_relax_capture() {
        return Ok(());
    }
    wait_for_mark(py, driver, memory, mark)
}

/// Waits on the host, without the GIL and in the relaxed capture mode, until `mark` is done
/// in `memory`'s context: at once, with no driver call, when it is known done.
fn wait_for_mark(
    py: Python<'_>,
    driver: &'static driver::Driver,
    memory: &ContextMemory,
    mark: u64,
) -> Result<()> {
    if !mark_is_done(driver, memory, mark)? {
        py.detach(|| wait_for_mark_without_gil(driver, memory, mark))?;
    }
    Ok(())
}

/// Whether `mark` is done in `memory`'s context, never waiting: known done, or asked of the
/// driver (in the relaxed capture mode). The newest mark is asked first: seen done, every
/// mark before it is known done too (they are all on the legacy stream), and later asks find
/// them so with no driver call (a staging slot claimed after a run of copies, say). Seen
/// busy (the GPU behind), the next few asks go to their own mark alone.
pub(crate) fn mark_is_done(
    driver: &'static driver::Driver,
    memory: &ContextMemory,
    mark: u64,
) -> driver::Result<bool> {
    if mark <= memory.done_mark.load(Ordering::Acquire) {
        return Ok(true);
    }
    let (newest, own) = {
        let mut ordering = memory.ordering();
        let newest = ordering.mark_event(ordering.newest);
        let first = newest.filter(|_| ordering.ask_newest_first());
        (first, ordering.mark_event(mark))
    };
    let Some((own_event, own_held)) = own else {
        return Ok(true); // never recorded: nothing was enqueued to wait for
    };
    if let Some((event, held)) = newest {
        if driver.relaxed(|| driver.event_query(event))? {
            note_done(memory, held);
            return Ok(true);
        }
        memory.ordering().note_newest_busy();
        if event == own_event {
            return Ok(false);
        }
    }
    let done = driver.relaxed(|| driver.event_query(own_event))?;
    if done {
        note_done(memory, own_held);
    }
    Ok(done)
}

/// Waits (in the relaxed capture mode) until `mark` is done in `memory`'s context: call
/// without the GIL.
pub(crate) fn wait_for_mark_without_gil(
    driver: &'static driver::Driver,
    memory: &ContextMemory,
    mark: u64,
) -> driver::Result<()> {
    if mark <= memory.done_mark.load(Ordering::Acquire) {
        return Ok(());
    }
    let Some((event, held)) = memory.ordering().mark_event(mark) else {
        return Ok(()); // never recorded: nothing was enqueued to wait for
    };
    driver.relaxed(|| driver.event_synchronize(event))?;
    note_done(memory, held);
    Ok(())
}

/// Makes the non-blocking `stream` wait, on the GPU, for the newest mark of `context` (all
/// the legacy work so far), unless it did since that mark or the mark is known done. No
/// command goes to the legacy stream.
fn wait_for_legacy_work(
    driver: &'static driver::Driver,
    context: &LaunchContext,
    stream: usize,
) -> Result<()> {
    let marks = MARKS_RECORDED.load(Ordering::Acquire);
    if marks == 0 {
        return Ok(());
    }
    let key = context.key();
    let seen = SEEN.with(Cell::get);
    let this = |entry: &Waited| entry.context == key && entry.stream == stream;
    if let Some(entry) = seen
        .iter()
        .find(|entry| this(entry) && entry.marks == marks)
    {
        if entry.id.is_some() && driver.stream_id(stream)? == entry.id {
            return Ok(());
        }
    }
    let memory = context_memory(driver, context)?;
    {
        let ordering = memory.ordering();
        let newest = ordering.newest;
        if newest > memory.done_mark.load(Ordering::Acquire) {
            if let Some((event, _)) = ordering.mark_event(newest) {
                driver.stream_wait_event(stream, event)?;
            }
        }
    }
    let mut updated = [Waited::default(); WAITERS];
    updated[0] = Waited {
        context: key,
        stream,
        id: driver.stream_id(stream)?,
        marks,
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

/// Runs `wait`, a wait covering the legacy stream of `memory`'s context (a synchronization of
/// it or of the context, a synchronous copy on it: call without the GIL), then notes every
/// mark recorded before it began as done, so that later reads ask nothing more of them.
pub(crate) fn covering_marks<T>(
    memory: &ContextMemory,
    wait: impl FnOnce() -> driver::Result<T>,
) -> driver::Result<T> {
    let newest = memory.ordering().newest;
    let waited = wait()?;
    note_done(memory, newest);
    Ok(waited)
}

/// What `__cuda_array_interface__` (and DLPack) of a device array needs before another
/// library reads `[start, end)` on a stream fastlaunch cannot see: waits on the host (see
/// the module's text) for the newest mark of that range's own work, in the context whose
/// memory it is (`context`: its key, where known; else every context is asked); at once,
/// with no driver call, when none is pending.
pub(crate) fn settle_range(
    py: Python<'_>,
    start: u64,
    end: u64,
    context: Option<u64>,
) -> Result<()> {
    if WAITING_RANGES.load(Ordering::Acquire) == 0 {
        return Ok(());
    }
    let driver = crate::devices::driver()?;
    let settle = |memory: &ContextMemory| -> Result<()> {
        let mark = memory.ordering().pending_mark(start, end);
        if mark > memory.done_mark.load(Ordering::Acquire) && memory.is_alive(driver) {
            wait_for_mark(py, driver, memory, mark)?;
        }
        Ok(())
    };
    match context {
        Some(key) => memory_of(key).map_or(Ok(()), |memory| settle(&memory)),
        None => all_context_memory()
            .iter()
            .try_for_each(|memory| settle(memory)),
    }
}
