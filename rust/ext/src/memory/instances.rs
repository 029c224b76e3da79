//! Instances of numba-cuda's classes made as `object.__new__` makes them (their `__init__`
//! left out: the callers set the attributes it sets), without the call through `__new__`.

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyTuple, PyType};

/// `class.__new__(class)`, calling the class's `tp_new` slot straight (no method lookup and
/// argument tuple of the call through `__new__`).
pub(super) fn new_instance<'py>(class: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = class.py();
    let class = class.cast::<PyType>()?;
    let class_pointer = class.as_type_ptr();
    // SAFETY: reading a slot of a live type object.
    let slot = unsafe { ffi::PyType_GetSlot(class_pointer, ffi::Py_tp_new) };
    if slot.is_null() {
        return class.call_method1(intern!(py, "__new__"), (class,));
    }
    // SAFETY: a non-null Py_tp_new slot is a `newfunc`; called as `class.__new__(class)`
    // calls it, with an empty argument tuple and no keywords, it returns a new reference or
    // null with an exception set.
    unsafe {
        let new: ffi::newfunc = std::mem::transmute(slot);
        Bound::from_owned_ptr_or_err(
            py,
            new(
                class_pointer,
                PyTuple::empty(py).as_ptr(),
                std::ptr::null_mut(),
            ),
        )
    }
}
