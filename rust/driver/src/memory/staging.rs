//! Copies between pageable host memory and the device through a ring of pinned staging
//! slots. A copy to the device returns once the host bytes are in a slot (the DMA from the
//! slot runs on, in the stream's order, and everything later on that stream sees it); a copy
//! back lands in a slot and is moved out once the stream is synchronized. Each slot
//! is guarded by an event recorded after the copy that uses it: its own, or one the caller
//! records after the copy anyway and names by a *ticket* ([`Claim::to_device_followed_by`]),
//! which saves a record and lets the caller tell that many slots are free from one answer
//! ([`Previous::Ticket`]).
//!
//! A copy first *claims* a slot ([`StagingRing::claim`]): the claim is exclusive, taken with
//! `try_lock` only, so no thread ever waits for a lock here, and it is held across the copy's
//! steps without any lock. Waiting for a slot's previous copy ([`Claim::wait_free`]) is a
//! step of its own, so that the caller can let go of what it holds (Python's GIL) around it
//! (and around a copy back, which waits too). When no slot can be claimed (all are in
//! use by other threads, or pinned memory ran out), the caller copies without staging.
//!
//! A slot's own event remembers the stream it was recorded on (its handle and unique id) and
//! its place in the ring's records, so that a synchronization of that stream (or of the
//! context) begun after the record tells the slot free with no query of the event
//! ([`StagingRing::synchronizing_stream`], [`StagingRing::synchronizing_context`]): a query
//! is one of the dearest driver calls on a GPU.
//!
//! A ring belongs to one context (its events do); its slots are portable pinned memory.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::pinned::PinnedBuffer;
use crate::error::{Error, Result};
use crate::stream::Event;
use crate::sys::CUdeviceptr;
use crate::Driver;

/// Bytes a slot holds: copies up to this size are staged.
pub const SLOT_BYTES: usize = 1 << 20;
/// Slots in a ring: enough for the copies of one call to be in flight at once.
pub const SLOTS: usize = 4;

/// A slot's pinned memory and the event recorded after the last copy through it.
struct SlotMemory {
    buffer: PinnedBuffer,
    event: Event,
}

/// What follows a slot's last copy, which may still run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Previous {
    /// Nothing: the slot is free.
    #[default]
    Done,
    /// The slot's own event ([`Claim::is_free`], [`Claim::wait_free`]), recorded as said.
    Event(Recorded),
    /// The caller's ticket ([`Claim::to_device_followed_by`]): the caller tells when it is
    /// done ([`Claim::note_previous_done`]).
    Ticket(u64),
}

/// Where a slot's own event was recorded: the ring's record count after it, and its stream,
/// named by its unique id too where the driver gives ids (a destroyed stream's handle may go
/// to a new stream, whose synchronization says nothing of the old one's work).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recorded {
    number: u64,
    stream: usize,
    id: Option<u64>,
}

#[derive(Default)]
struct SlotState {
    /// Made on the slot's first claim.
    memory: Option<SlotMemory>,
    /// A copy holds the slot.
    claimed: bool,
    previous: Previous,
}

/// A context's staging slots, each made on first use.
pub struct StagingRing {
    driver: &'static Driver,
    slots: [Mutex<SlotState>; SLOTS],
    next: AtomicUsize,
    /// The slots' own events recorded so far.
    records: AtomicU64,
}

// SAFETY: a slot's memory is touched only by the one holder of its claim (`Claim`), and its
// state only under its mutex; the pinned memory is plain host memory usable from any thread.
unsafe impl Sync for StagingRing {}
// SAFETY: as above.
unsafe impl Send for StagingRing {}

impl StagingRing {
    pub fn new(driver: &'static Driver) -> StagingRing {
        StagingRing {
            driver,
            slots: Default::default(),
            next: AtomicUsize::new(0),
            records: AtomicU64::new(0),
        }
    }

    /// Runs `synchronize`, a synchronization of `stream` (call without the GIL), then tells
    /// free every slot whose event was recorded on `stream` before it began. Slots held by a
    /// copy are left to it; a stream known by no id (`stream_identity`) tells none free.
    pub fn synchronizing_stream<T>(
        &self,
        stream: usize,
        synchronize: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let id = stream_identity(self.driver, stream);
        let before = self.records.load(Ordering::Acquire);
        let synchronized = synchronize()?;
        if id.is_some() {
            self.note_done_where(|recorded| {
                recorded.number <= before && recorded.stream == stream && recorded.id == id
            });
        }
        Ok(synchronized)
    }

    /// Runs `synchronize`, a synchronization of the whole context (call without the GIL),
    /// then tells free every slot whose event was recorded before it began.
    pub fn synchronizing_context<T>(&self, synchronize: impl FnOnce() -> Result<T>) -> Result<T> {
        let before = self.records.load(Ordering::Acquire);
        let synchronized = synchronize()?;
        self.note_done_where(|recorded| recorded.number <= before);
        Ok(synchronized)
    }

    fn note_done_where(&self, done: impl Fn(&Recorded) -> bool) {
        for slot in &self.slots {
            let mut state = slot.lock().unwrap_or_else(|p| p.into_inner());
            if let Previous::Event(recorded) = state.previous {
                if !state.claimed && done(&recorded) {
                    state.previous = Previous::Done;
                }
            }
        }
    }

    /// Whether a copy of `len` bytes goes through a slot.
    pub fn stages(len: usize) -> bool {
        len <= SLOT_BYTES
    }

    /// A slot for one copy, the one used longest ago first (the likeliest to be done), made
    /// if it does not exist yet; `None` when every slot is held by another copy or none could
    /// be made (then the caller copies without staging). Never waits.
    pub fn claim(&self) -> Option<Claim<'_>> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..SLOTS).find_map(|offset| self.try_claim((start + offset) % SLOTS))
    }

    fn try_claim(&self, index: usize) -> Option<Claim<'_>> {
        let mut state = self.slots[index].try_lock().ok()?;
        if state.claimed {
            return None;
        }
        if state.memory.is_none() {
            // a failed allocation leaves the slot as it was: unmade, to be tried again later.
            // Made in the relaxed capture mode: page-locking memory is one of CUDA's
            // "potentially unsafe" calls, which a capture in global mode (another thread's)
            // refuses, invalidated by it; a slot has nothing to do with any capture.
            let driver = self.driver;
            let made = driver.relaxed(|| {
                Ok(SlotMemory {
                    buffer: PinnedBuffer::alloc(driver, SLOT_BYTES)?,
                    event: Event::create(driver, false)?,
                })
            });
            state.memory = Some(made.ok()?);
        }
        let memory = state.memory.as_ref()?;
        let claim = Claim {
            ring: self,
            index,
            buffer: memory.buffer.as_ptr() as usize,
            event: memory.event.handle(),
            previous: state.previous,
        };
        state.claimed = true;
        Some(claim)
    }
}

/// One copy's hold on a slot; given back on drop.
pub struct Claim<'r> {
    ring: &'r StagingRing,
    index: usize,
    /// The slot's pinned memory (`SLOT_BYTES`), as an address: the claim may cross threads.
    buffer: usize,
    event: usize,
    previous: Previous,
}

impl Claim<'_> {
    /// What follows the slot's previous copy.
    pub fn previous(&self) -> Previous {
        self.previous
    }

    /// The caller saw the ticket of the slot's previous copy done.
    pub fn note_previous_done(&mut self) {
        self.previous = Previous::Done;
    }

    /// Whether the slot's previous copy is done (a query: never waits). An event the driver
    /// refuses to answer for is not asked again: the error is returned once. Asked in the
    /// relaxed capture mode (`Driver::relaxed`): the slot's event is recorded outside any
    /// capture, and asking must not break another thread's. A ticket is the caller's to
    /// resolve: refused here.
    pub fn is_free(&mut self) -> Result<bool> {
        match self.previous {
            Previous::Done => Ok(true),
            Previous::Ticket(_) => Err(self.unresolved_ticket()),
            Previous::Event(_) => {
                let driver = self.ring.driver;
                let done = driver.relaxed(|| driver.event_query(self.event));
                if !matches!(done, Ok(false)) {
                    self.previous = Previous::Done;
                }
                done
            }
        }
    }

    /// Waits until the slot's previous copy is done (in the relaxed capture mode, as
    /// [`Claim::is_free`] asks): call without the GIL. A ticket is refused, as there.
    pub fn wait_free(&mut self) -> Result<()> {
        match self.previous {
            Previous::Done => Ok(()),
            Previous::Ticket(_) => Err(self.unresolved_ticket()),
            Previous::Event(_) => {
                self.previous = Previous::Done;
                let driver = self.ring.driver;
                driver.relaxed(|| driver.event_synchronize(self.event))
            }
        }
    }

    fn unresolved_ticket(&self) -> Error {
        Error::Invalid("a staging slot's ticket is its caller's to wait for".into())
    }

    /// Copies `host` into the slot and from there to `device` on `stream`; returns once the
    /// host bytes are taken. The slot must be free ([`Claim::is_free`], [`Claim::wait_free`]),
    /// `host` at most [`SLOT_BYTES`], and `stream` not being captured (a graph would replay
    /// the slot's later contents).
    ///
    /// # Safety
    /// `device` must be writable for `host.len()` bytes until the copy has run.
    pub unsafe fn to_device(
        &mut self,
        device: CUdeviceptr,
        host: &[u8],
        stream: usize,
    ) -> Result<()> {
        // SAFETY: per the caller.
        unsafe { self.copy_from_slot(device, host, stream) }?;
        self.record_event(stream)
    }

    /// Records the slot's event on `stream`, after the copy just enqueued there.
    fn record_event(&mut self, stream: usize) -> Result<()> {
        let driver = self.ring.driver;
        driver.record_event(self.event, stream)?;
        let id = stream_identity(driver, stream);
        let number = self.ring.records.fetch_add(1, Ordering::AcqRel) + 1;
        self.previous = Previous::Event(Recorded { number, stream, id });
        Ok(())
    }

    /// As [`Claim::to_device`], the copy followed by the caller's own record instead of the
    /// slot's event: `ticket` records, on `stream` after everything enqueued there so far,
    /// what the caller will tell done, and names it. Should `ticket` fail, the slot's event
    /// follows the copy instead.
    ///
    /// # Safety
    /// As for [`Claim::to_device`].
    pub unsafe fn to_device_followed_by<E: From<Error>>(
        &mut self,
        device: CUdeviceptr,
        host: &[u8],
        stream: usize,
        ticket: impl FnOnce() -> std::result::Result<u64, E>,
    ) -> std::result::Result<(), E> {
        // SAFETY: per the caller.
        unsafe { self.copy_from_slot(device, host, stream) }?;
        match ticket() {
            Ok(ticket) => {
                self.previous = Previous::Ticket(ticket);
                Ok(())
            }
            Err(error) => {
                self.record_event(stream)?;
                Err(error)
            }
        }
    }

    /// Copies `host` into the slot and enqueues its copy to `device` on `stream`, followed
    /// by nothing yet.
    ///
    /// # Safety
    /// As for [`Claim::to_device`].
    unsafe fn copy_from_slot(
        &mut self,
        device: CUdeviceptr,
        host: &[u8],
        stream: usize,
    ) -> Result<()> {
        let driver = self.ring.driver;
        let staged = self.free_bytes(host.len());
        staged.copy_from_slice(host);
        // SAFETY: per the caller for `device`; the slot stays untouched until what follows
        // the copy says it has run.
        unsafe { driver.copy_host_to_device_async(device, staged, stream) }
    }

    /// Copies `host.len()` bytes from `device` into `host` through the slot, after the work
    /// enqueued on `stream` (not the legacy stream: [`Claim::to_host_now`]): the copy is
    /// enqueued there and the stream synchronized, after which every slot whose event was
    /// recorded on `stream` before is known free too. No event is recorded. Made in the
    /// relaxed capture mode, as the waits are; `stream` must not be being captured, and the
    /// slot must be free. Call without the GIL.
    ///
    /// # Safety
    /// `device` must be readable for `host.len()` bytes.
    pub unsafe fn to_host_on(
        &mut self,
        device: CUdeviceptr,
        host: &mut [u8],
        stream: usize,
    ) -> Result<()> {
        let (ring, driver) = (self.ring, self.ring.driver);
        let landing = self.free_bytes(host.len());
        // SAFETY: per the caller for `device`.
        unsafe { driver.copy_device_to_host_async(landing, device, stream) }?;
        ring.synchronizing_stream(stream, || {
            driver.relaxed(|| driver.stream_synchronize(stream))
        })?;
        host.copy_from_slice(landing);
        Ok(())
    }

    /// Copies `len` bytes from `device` into `host` through the slot with the synchronous
    /// `cuMemcpyDtoH`, which runs after all the work on the legacy stream (and the blocking
    /// streams) enqueued before it and returns once the bytes are in the slot: no event to
    /// record or wait for. Made in the relaxed capture mode, as the waits are. The slot must
    /// be free; call without the GIL.
    ///
    /// # Safety
    /// `device` must be readable for `host.len()` bytes.
    pub unsafe fn to_host_now(&mut self, device: CUdeviceptr, host: &mut [u8]) -> Result<()> {
        let driver = self.ring.driver;
        let landing = self.free_bytes(host.len());
        // SAFETY: per the caller for `device`; stream 0 makes the copy synchronous.
        driver.relaxed(|| unsafe { driver.copy_device_to_host_unstaged(landing, device, 0) })?;
        host.copy_from_slice(landing);
        Ok(())
    }

    /// The slot's first `len` bytes, for a copy through it now: the slot must be free (its
    /// last copy done) and `len` at most [`SLOT_BYTES`].
    fn free_bytes(&mut self, len: usize) -> &mut [u8] {
        assert!(
            len <= SLOT_BYTES && self.previous == Previous::Done,
            "a staging slot used out of turn"
        );
        // SAFETY: the slot's pinned memory holds SLOT_BYTES >= len bytes, lives as long as the
        // ring, and this claim is its only user: no other reference to it exists.
        unsafe { std::slice::from_raw_parts_mut(self.buffer as *mut u8, len) }
    }
}

/// `stream`'s unique id, by which its synchronization tells slots free; none for a default
/// stream (the per-thread one is a different stream in each thread under one handle) or
/// where the driver gives no id: no synchronization of the stream tells its slots free, their
/// events are asked instead.
fn stream_identity(driver: &Driver, stream: usize) -> Option<u64> {
    if crate::stream::is_default_stream(stream) {
        return None;
    }
    driver.stream_id(stream).ok().flatten()
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut state = self.ring.slots[self.index]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        state.claimed = false;
        state.previous = self.previous;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_up_to_a_slot_are_staged_and_larger_ones_are_not() {
        assert!(StagingRing::stages(1));
        assert!(StagingRing::stages(32 * 1024));
        assert!(StagingRing::stages(SLOT_BYTES));
        assert!(!StagingRing::stages(SLOT_BYTES + 1));
        assert!(!StagingRing::stages(2 << 20));
    }
}
