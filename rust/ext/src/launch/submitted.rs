//! For tests: the parameter slots of this thread's last submitted launch, kept only while
//! `_core._keep_submitted(True)` (launches then pay a copy; otherwise one relaxed load).
//! The stand-in driver ignores parameters, so this is how CPU tests see what was packed.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

use fastlaunch_driver::ParamBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

static KEEP: AtomicBool = AtomicBool::new(false);

thread_local! {
    static LAST: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Notes `params` as submitted, when tests asked for it.
#[inline]
pub(crate) fn note(params: &ParamBuffer) {
    if KEEP.load(Ordering::Relaxed) {
        LAST.with(|last| {
            if let Ok(mut last) = last.try_borrow_mut() {
                last.clear();
                last.extend_from_slice(params.slots());
            }
        });
    }
}

/// Keeps (or stops keeping) each launch's parameters for `_submitted()`.
#[pyfunction]
pub(crate) fn _keep_submitted(keep: bool) {
    KEEP.store(keep, Ordering::Relaxed);
}

/// The parameter slots (8 bytes each, as `_core.pack` gives them) of this thread's last
/// launch submitted while they were kept.
#[pyfunction]
pub(crate) fn _submitted(py: Python<'_>) -> Bound<'_, PyBytes> {
    LAST.with(|last| {
        let bytes: Vec<u8> = last
            .borrow()
            .iter()
            .flat_map(|slot| slot.to_ne_bytes())
            .collect();
        PyBytes::new(py, &bytes)
    })
}
