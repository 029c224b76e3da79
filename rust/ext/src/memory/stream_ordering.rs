//! A context's ordering state (what `ordering.rs` orders with): the `copied` event recorded
//! on the legacy stream after the legacy work, and the events of the non-blocking streams it
//! follows. Data and its events only; the rules are in `ordering.rs`.

use fastlaunch_driver::{self as driver, Event, LEGACY_STREAM};

/// How many non-blocking streams a context follows at once; beyond, the oldest one's event
/// is waited for on the legacy stream at once (what a free would do) and its place reused.
pub(crate) const FOLLOWED_STREAMS: usize = 16;

/// A non-blocking stream worked on: `event` recorded after its last piece of work,
/// `pending` while no free has waited for that record yet.
pub(crate) struct FollowedStream {
    pub(crate) stream: usize,
    pub(crate) event: Event,
    pub(crate) pending: bool,
}

/// A context's events: `copied`, recorded on the legacy stream when `LEGACY_WORK` stood at
/// `recorded_at` (`records` times so far), and one per followed non-blocking stream.
pub(crate) struct StreamOrdering {
    pub(crate) copied: Event,
    pub(crate) recorded_at: u64,
    pub(crate) records: u64,
    pub(crate) followed: Vec<FollowedStream>,
}

/// Where a free was made on the legacy stream, as the count of `copied` records then: a
/// later record of `copied` is a command on the legacy stream after the free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FreePoint(pub(crate) u64);

impl StreamOrdering {
    pub(crate) fn new(driver: &'static driver::Driver) -> driver::Result<StreamOrdering> {
        Ok(StreamOrdering {
            copied: Event::create(driver, false)?,
            recorded_at: 0,
            records: 0,
            followed: Vec::new(),
        })
    }

    /// The `copied` event, recorded on the legacy stream after all legacy work counted so
    /// far (again only if more was counted since its last record).
    pub(crate) fn copied_after(&mut self, work: u64) -> driver::Result<usize> {
        if self.recorded_at != work {
            // after every piece counted so far: each was enqueued before it was counted
            self.record_copied(work)?;
        }
        Ok(self.copied.handle())
    }

    pub(crate) fn record_copied(&mut self, work: u64) -> driver::Result<()> {
        self.copied.record(LEGACY_STREAM)?;
        self.recorded_at = work;
        self.records += 1;
        Ok(())
    }
}
