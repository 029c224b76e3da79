//! The classes whose identity is part of a numba type (enum classes, named tuple classes,
//! record dtypes), by a process-wide id that fingerprints carry: ids are given on first sight
//! and never reused, so a fingerprint names its class for as long as the process runs. Record
//! dtypes that numba types alike share one id ([`record_id`]).

use std::sync::Mutex;

use pyo3::prelude::*;

static CLASSES: Mutex<Vec<Py<PyAny>>> = Mutex::new(Vec::new());

/// The record dtypes given ids, each the first of its numba record type, with its id.
static RECORD_DTYPES: Mutex<Vec<(Py<PyAny>, u16)>> = Mutex::new(Vec::new());

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

/// The id of a structured dtype: the id of the first dtype numba types as the same record
/// (a program may make an equal dtype afresh for each array: `device_array(n, dtype=[...])`),
/// else a new one (`None` past 65 536 classes).
#[cold]
pub(super) fn record_id(dtype: &Bound<'_, PyAny>) -> PyResult<Option<u16>> {
    let py = dtype.py();
    // A copy, compared outside the lock: comparing dtypes is Python code.
    let known: Vec<(Py<PyAny>, u16)> = RECORD_DTYPES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(seen, id)| (seen.clone_ref(py), *id))
        .collect();
    for (seen, id) in &known {
        if seen.bind(py).is(dtype) || same_record_type(seen.bind(py), dtype)? {
            return Ok(Some(*id));
        }
    }
    let Some(id) = class_id(dtype) else {
        return Ok(None);
    };
    let mut records = RECORD_DTYPES.lock().unwrap_or_else(|p| p.into_inner());
    records.push((dtype.clone().unbind(), id));
    Ok(Some(id))
}

/// Whether `dtype` is the dtype object a record id was given to (held for the process).
pub(super) fn is_first_of_its_record_type(dtype: &Bound<'_, PyAny>) -> bool {
    let records = RECORD_DTYPES.lock().unwrap_or_else(|p| p.into_inner());
    records
        .iter()
        .any(|(seen, _)| seen.as_ptr() == dtype.as_ptr())
}

/// Whether numba types two structured dtypes as one record type: NumPy finds them equal
/// (names, field types, offsets, titles, size), which leaves out what numba's type also
/// holds, whether the dtype is an aligned struct.
fn same_record_type(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> PyResult<bool> {
    let aligned = |dtype: &Bound<'_, PyAny>| -> PyResult<bool> {
        dtype
            .getattr(pyo3::intern!(dtype.py(), "isalignedstruct"))?
            .is_truthy()
    };
    Ok(a.eq(b)? && aligned(a)? == aligned(b)?)
}
