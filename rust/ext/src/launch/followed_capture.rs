//! Following a capture another framework makes (torch's `CUDAGraph.capture_begin` /
//! `capture_end`, CuPy's `Stream.begin_capture` / `end_capture`): while this thread's
//! framework captures on a stream, launches given no stream go to that stream, so they are
//! captured with the framework's own work around them. Python hooks (`fastlaunch._torch`,
//! `fastlaunch._cupy_capture`) call [`follow_capture`] and [`end_followed_capture`]; the
//! launch reads [`followed_capture_stream`]: one relaxed atomic load while no thread follows
//! a capture.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::prelude::*;

use crate::errors::{Error, Result};

/// Threads following a framework's capture now.
static FOLLOWING: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's followed capture streams, innermost last (captures may nest).
    static FOLLOWED: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The stream this thread's framework is capturing on, if any.
#[inline]
pub(crate) fn followed_capture_stream() -> Option<usize> {
    if FOLLOWING.load(Ordering::Relaxed) == 0 {
        return None;
    }
    FOLLOWED.with(|followed| followed.borrow().last().copied())
}

/// Launches on this thread given no stream go to `stream` until the matching
/// [`end_followed_capture`].
#[pyfunction]
pub(crate) fn follow_capture(stream: usize) -> Result<()> {
    if fastlaunch_driver::is_legacy_stream(stream) {
        return Err(Error::Value(
            "a capture cannot be on the legacy default stream (0 or 1)".into(),
        ));
    }
    FOLLOWED.with(|followed| {
        let mut stack = followed.borrow_mut();
        if stack.is_empty() {
            FOLLOWING.fetch_add(1, Ordering::Relaxed);
        }
        stack.push(stream);
    });
    Ok(())
}

/// Ends the innermost followed capture of this thread; false if there was none.
#[pyfunction]
pub(crate) fn end_followed_capture() -> bool {
    FOLLOWED.with(|followed| {
        let mut stack = followed.borrow_mut();
        let ended = stack.pop().is_some();
        if ended && stack.is_empty() {
            FOLLOWING.fetch_sub(1, Ordering::Relaxed);
        }
        ended
    })
}

/// The stream launches given no stream go to on this thread now, because of a followed
/// capture (None: none is followed).
#[pyfunction]
pub(crate) fn followed_capture() -> Option<usize> {
    followed_capture_stream()
}
