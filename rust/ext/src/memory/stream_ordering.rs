//! A context's ordering state (what `ordering.rs` orders with): the *marks*, events recorded
//! on the legacy stream after each piece of legacy work; the device ranges whose readiness
//! waits for a mark ([`PendingUse`]); and the events of the non-blocking streams it follows.
//! Data and its events only; the rules are in `ordering.rs`.

use fastlaunch_driver::{self as driver, Event, LEGACY_STREAM};

/// How many non-blocking streams a context follows at once; beyond, the oldest one's event
/// is waited for on the legacy stream at once (what a free would do) and its place reused.
pub(crate) const FOLLOWED_STREAMS: usize = 16;

/// Marks kept at once: mark `k` is recorded on event `k % MARKS`. A wait for a mark whose
/// event was recorded again since waits for that later record, on the same stream: never
/// for less than it asked.
pub(crate) const MARKS: usize = 16;

/// Device ranges kept waiting at once; beyond, the oldest one's mark becomes the floor
/// every range waits for until it is done.
pub(crate) const PENDING_USES: usize = 64;

/// A non-blocking stream worked on: `event` recorded after its last piece of work,
/// `pending` while no free has waited for that record yet.
pub(crate) struct FollowedStream {
    pub(crate) stream: usize,
    pub(crate) event: Event,
    pub(crate) pending: bool,
}

/// Device memory `[start, end)` that is ready for any reader once mark `mark` is done: a
/// staged copy into it, or its allocation after a free, enqueued on the legacy stream.
#[derive(Clone, Copy, Debug)]
struct PendingUse {
    start: u64,
    end: u64,
    mark: u64,
}

/// A context's marks, pending ranges and followed streams.
pub(crate) struct StreamOrdering {
    marks: [Option<Event>; MARKS],
    /// The mark each event holds now (0: none yet).
    held: [u64; MARKS],
    /// The newest mark recorded (0: none yet).
    pub(crate) newest: u64,
    /// A free was enqueued since the newest mark: an allocation may get its block, whose
    /// earlier users only a new mark follows.
    pub(crate) freed_since_mark: bool,
    pending: Vec<PendingUse>,
    /// The newest mark of the ranges given up for room (0: none).
    floor: u64,
    pub(crate) followed: Vec<FollowedStream>,
    /// Asks of a mark that go straight to it, not to the newest mark first: after the newest
    /// was seen busy (the GPU behind the host), a few asks skip it.
    newest_skips: u8,
}

/// How many asks skip the newest mark after it was seen busy.
const NEWEST_SKIPS: u8 = 3;

/// Where a free was made on the legacy stream, as the newest mark then: a later mark is a
/// command on the legacy stream after the free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FreePoint(pub(crate) u64);

impl StreamOrdering {
    pub(crate) fn new() -> StreamOrdering {
        StreamOrdering {
            marks: Default::default(),
            held: [0; MARKS],
            newest: 0,
            freed_since_mark: false,
            pending: Vec::new(),
            floor: 0,
            followed: Vec::new(),
            newest_skips: 0,
        }
    }

    /// Records the next mark on the legacy stream, after everything enqueued there so far;
    /// its number.
    pub(crate) fn record_mark(&mut self, driver: &'static driver::Driver) -> driver::Result<u64> {
        let mark = self.newest + 1;
        let slot = (mark % MARKS as u64) as usize;
        let event = match &mut self.marks[slot] {
            Some(event) => event,
            empty => empty.insert(Event::create(driver, false)?),
        };
        event.record(LEGACY_STREAM)?;
        self.held[slot] = mark;
        self.newest = mark;
        self.freed_since_mark = false;
        Ok(mark)
    }

    /// The event to wait on for `mark` (recorded: at most `newest`), and the mark it holds
    /// now (`mark` or a later one).
    pub(crate) fn mark_event(&self, mark: u64) -> Option<(usize, u64)> {
        let slot = (mark % MARKS as u64) as usize;
        let event = self.marks[slot].as_ref()?;
        (self.held[slot] >= mark).then(|| (event.handle(), self.held[slot]))
    }

    /// Whether an ask whether a mark is done asks the newest mark first (seen done, it tells
    /// every mark before it done: one ask for many), unless the newest was seen busy lately
    /// (then asking it first costs a second ask for nothing).
    pub(crate) fn ask_newest_first(&mut self) -> bool {
        if self.newest_skips == 0 {
            return true;
        }
        self.newest_skips -= 1;
        false
    }

    /// The newest mark was asked first and was busy.
    pub(crate) fn note_newest_busy(&mut self) {
        self.newest_skips = NEWEST_SKIPS;
    }

    /// Notes that `[start, start + len)` is ready once `mark` is done.
    pub(crate) fn note_pending(&mut self, start: u64, len: usize, mark: u64) {
        let end = start.saturating_add(len.max(1) as u64);
        if let Some(same) = self
            .pending
            .iter_mut()
            .find(|p| p.start == start && p.end == end)
        {
            same.mark = same.mark.max(mark);
            return;
        }
        if self.pending.len() == PENDING_USES {
            let oldest = self.pending.remove(0);
            self.floor = self.floor.max(oldest.mark);
        }
        self.pending.push(PendingUse { start, end, mark });
    }

    /// The newest mark that `[start, end)` waits for (0: none).
    pub(crate) fn pending_mark(&self, start: u64, end: u64) -> u64 {
        self.pending
            .iter()
            .filter(|p| p.start < end && start < p.end)
            .map(|p| p.mark)
            .fold(self.floor, u64::max)
    }

    /// Forgets the ranges whose marks are done (`done` and before).
    pub(crate) fn prune(&mut self, done: u64) {
        self.pending.retain(|p| p.mark > done);
        if self.floor <= done {
            self.floor = 0;
        }
    }

    /// How many ranges wait (the floor counting as one).
    pub(crate) fn waiting(&self) -> usize {
        self.pending.len() + usize::from(self.floor != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_the_newest_mark_is_seen_busy_a_few_asks_skip_it() {
        let mut ordering = StreamOrdering::new();
        assert!(ordering.ask_newest_first());
        ordering.note_newest_busy();
        let asks: Vec<bool> = (0..5).map(|_| ordering.ask_newest_first()).collect();
        assert_eq!(asks, [false, false, false, true, true]);
    }
}
