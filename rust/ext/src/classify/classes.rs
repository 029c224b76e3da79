//! The classes whose identity is part of a numba type (enum classes, named tuple classes,
//! record dtypes), by a process-wide id that fingerprints carry: ids are given on first sight
//! (a miss) and never reused, so a fingerprint names its class for as long as the process runs.

use std::sync::Mutex;

use pyo3::prelude::*;

static CLASSES: Mutex<Vec<Py<PyAny>>> = Mutex::new(Vec::new());

/// The id of `class`, adding it on first sight (`None` past 65 536 classes).
#[cold]
pub(super) fn class_id(class: &Bound<'_, PyAny>) -> Option<u16> {
    let mut classes = CLASSES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(id) = classes.iter().position(|c| c.as_ptr() == class.as_ptr()) {
        return u16::try_from(id).ok();
    }
    let id = u16::try_from(classes.len()).ok()?;
    classes.push(class.clone().unbind());
    Some(id)
}

/// The class with id `id` (for describing fingerprints on a miss); `None` for an id never
/// given.
pub(super) fn class_by_id(py: Python<'_>, id: u16) -> Option<Py<PyAny>> {
    let classes = CLASSES.lock().unwrap_or_else(|p| p.into_inner());
    classes.get(usize::from(id)).map(|c| c.clone_ref(py))
}
