//! The value of a ctypes unsigned word (numba-cuda's `device_ctypes_pointer`, a `c_size_t`)
//! read from its buffer: its `value` attribute would make a Python int of it, which the read
//! then turns back into a u64 (an allocation and two conversions per new array).

use std::cell::RefCell;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;

use super::known::HeldObjects;

thread_local! {
    /// Whether each type met is one of ctypes' own unsigned 8-byte integers or `c_void_p`
    /// (the type held).
    static WORD_TYPES: RefCell<HeldObjects<bool>> = const { RefCell::new(HeldObjects::new()) };
}

/// The value of `object` when it is exactly a ctypes `c_size_t`, `c_uint64` (`c_ulong`,
/// `c_ulonglong`) or `c_void_p` of 8 bytes (a null `c_void_p`, whose `value` is `None`, is 0);
/// `None` for anything else, whose `value` the caller reads.
#[inline]
pub(super) fn word_value(object: &Bound<'_, PyAny>) -> Option<u64> {
    let class = object.get_type();
    let address = class.as_ptr() as usize;
    let known = WORD_TYPES.with(|types| types.borrow().get(address));
    let is_word = match known {
        Some(is_word) => is_word,
        None => {
            let is_word = is_ctypes_word(&class);
            WORD_TYPES.with(|types| types.borrow_mut().insert(class.as_any(), is_word));
            is_word
        }
    };
    if !is_word {
        return None;
    }
    let mut view = ffi::Py_buffer::new();
    // SAFETY: `object` is a valid object and `view` a buffer structure to fill; on failure
    // (-1) an exception is set, which is cleared.
    if unsafe { ffi::PyObject_GetBuffer(object.as_ptr(), &mut view, ffi::PyBUF_SIMPLE) } != 0 {
        // SAFETY: clearing the exception GetBuffer just set.
        unsafe { ffi::PyErr_Clear() };
        return None;
    }
    let value = (view.len == 8 && !view.buf.is_null()).then(|| {
        // SAFETY: the buffer holds `len` (8) bytes, exported until it is released below; a
        // ctypes object's memory need not be aligned for a u64, so it is read unaligned.
        unsafe { view.buf.cast::<u64>().read_unaligned() }
    });
    // SAFETY: releasing the buffer obtained above, once.
    unsafe { ffi::PyBuffer_Release(&mut view) };
    value
}

/// Whether `class` is exactly one of ctypes' unsigned 8-byte integer types or `c_void_p`
/// (their subclasses may answer `value` their own way).
#[cold]
fn is_ctypes_word(class: &Bound<'_, PyType>) -> bool {
    let Ok(ctypes) = class.py().import("ctypes") else {
        return false;
    };
    let Ok(sizeof) = ctypes.getattr("sizeof") else {
        return false;
    };
    ["c_size_t", "c_uint64", "c_ulong", "c_ulonglong", "c_void_p"]
        .into_iter()
        .filter_map(|name| ctypes.getattr(name).ok())
        .any(|word| {
            word.is(class)
                && sizeof
                    .call1((&word,))
                    .and_then(|size| size.extract::<usize>())
                    .is_ok_and(|size| size == 8)
        })
}
