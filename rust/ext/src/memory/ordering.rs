//! Ordering the memory API's work with launches on non-blocking streams, which the legacy
//! default stream does not order with (everything else, blocking and per-thread default
//! streams, orders with it):
//!
//! - a copy to the device on the legacy stream (`to_device` with no stream, which numba-cuda
//!   makes synchronously and fastlaunch only enqueues) must be seen by a launch on a
//!   non-blocking stream: the launch's stream waits for the last such copy (an event recorded
//!   after each), once per copy it has not waited for;
//! - a free (on the legacy stream) must not let the pool hand the memory out again while a
//!   kernel launched on a non-blocking stream may still read it: after any such launch, the
//!   next free waits for the contexts' work first, as numba-cuda's `cuMemFree` always does.
//!
//! Programs that never used the memory API pay one relaxed atomic load per launch.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use fastlaunch_driver::{self as driver, LaunchContext, LEGACY_STREAM, PER_THREAD_STREAM};

use super::{live_context, with_context_memory, ContextMemory, CONTEXTS};
use crate::errors::Result;

/// Set once the memory API allocated or copied: before that, no launch has its memory.
static IN_USE: AtomicBool = AtomicBool::new(false);
/// How many copies to the device were enqueued on the legacy stream, each followed by
/// its context's `copied` event.
static LEGACY_COPIES: AtomicU64 = AtomicU64::new(0);
/// A launch ran on a non-blocking stream since frees last waited for the contexts' work.
static UNORDERED_LAUNCHES: AtomicBool = AtomicBool::new(false);

/// Streams this thread's launches made wait for the legacy copies: `(context key, stream,
/// LEGACY_COPIES seen)`, the most recent first. A stream not here waits (again): never wrong.
const WAITERS: usize = 8;
thread_local! {
    static SEEN: Cell<[(u64, usize, u64); WAITERS]> = const { Cell::new([(0, 0, 0); WAITERS]) };
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

/// After a copy to the device enqueued on `stream`: when that is the legacy stream, records
/// the context's `copied` event after it, for launches on non-blocking streams to wait on.
pub(crate) fn after_copy_to_device(memory: &ContextMemory, stream: usize) -> driver::Result<()> {
    if !(stream == 0 || stream == LEGACY_STREAM) {
        return Ok(());
    }
    memory.copied.record(stream)?;
    LEGACY_COPIES.fetch_add(1, Ordering::Release);
    Ok(())
}

/// Before a launch (or a graph's replay) on `stream`, which may use the memory API's
/// arrays: when it is a non-blocking stream, notes it for the next free, and makes it wait
/// for the copies to the device on the legacy stream it has not waited for.
#[inline]
pub(crate) fn before_launch(
    driver: &'static driver::Driver,
    context: &LaunchContext,
    stream: usize,
) -> Result<()> {
    if !in_use() || !non_blocking(driver, stream)? {
        return Ok(());
    }
    if !UNORDERED_LAUNCHES.load(Ordering::Relaxed) {
        UNORDERED_LAUNCHES.store(true, Ordering::Release);
    }
    wait_for_legacy_copies(driver, context, stream)
}

/// Before a copy on `stream`: when it is a non-blocking stream, it waits for the copies to
/// the device on the legacy stream it has not waited for. (Frees already follow the
/// streams their memory was copied on: `Driver::free_after`.)
pub(crate) fn before_copy(
    driver: &'static driver::Driver,
    context: &LaunchContext,
    stream: usize,
) -> Result<()> {
    if !non_blocking(driver, stream)? {
        return Ok(());
    }
    wait_for_legacy_copies(driver, context, stream)
}

fn non_blocking(driver: &driver::Driver, stream: usize) -> Result<bool> {
    let special = stream == 0 || stream == LEGACY_STREAM || stream == PER_THREAD_STREAM;
    Ok(!special && driver.stream_flags(stream)? & driver::STREAM_NON_BLOCKING != 0)
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
    if driver.stream_is_capturing(stream)? {
        return Ok(()); // a capture cannot wait on an event recorded outside it
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

/// Before a free: when a launch ran on a non-blocking stream since the last time, waits for
/// the work of every live context this process's memory API used (that kernel may still read
/// the memory, and nothing else orders the free after it).
pub(crate) fn before_free(driver: &'static driver::Driver) -> Result<()> {
    if !UNORDERED_LAUNCHES.swap(false, Ordering::AcqRel) {
        return Ok(());
    }
    let keys: Vec<u64> = {
        let contexts = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
        contexts.iter().map(|c| c.key).collect()
    };
    let current = driver.launch_context()?.key();
    for key in keys {
        if key == current {
            driver.synchronize()?;
        } else if let Some(context) = live_context(driver, key) {
            driver.push_context(context)?;
            let synchronized = driver.synchronize();
            driver.pop_context()?;
            synchronized?;
        }
    }
    Ok(())
}
