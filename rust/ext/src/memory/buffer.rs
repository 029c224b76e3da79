//! A host object's bytes, borrowed through the buffer protocol for one copy.

use std::ffi::c_int;

use pyo3::ffi;
use pyo3::prelude::*;

use crate::errors::{Error, Result};

/// A contiguous buffer export, released on drop (with the GIL held: dropped where taken).
pub(super) struct HostBuffer {
    view: ffi::Py_buffer,
}

impl HostBuffer {
    /// `host`'s bytes, C- or Fortran-contiguous; `writable` asks for a writable export.
    /// `name` names the argument in errors.
    pub(super) fn take(host: &Bound<'_, PyAny>, writable: bool, name: &str) -> Result<HostBuffer> {
        let mut flags: c_int = ffi::PyBUF_ANY_CONTIGUOUS;
        if writable {
            flags |= ffi::PyBUF_WRITABLE;
        }
        let mut view = std::mem::MaybeUninit::<ffi::Py_buffer>::uninit();
        // SAFETY: a valid object and an out-struct; on success the view is released on drop.
        if unsafe { ffi::PyObject_GetBuffer(host.as_ptr(), view.as_mut_ptr(), flags) } != 0 {
            let cause = PyErr::take(host.py())
                .map(|e| e.to_string())
                .unwrap_or_default();
            let wanted = if writable {
                "a writable, contiguous buffer"
            } else {
                "a contiguous buffer"
            };
            return Err(Error::Value(format!(
                "{name} must export {wanted} (a C- or F-contiguous NumPy array): {cause}"
            )));
        }
        Ok(HostBuffer {
            // SAFETY: initialised by the successful call above.
            view: unsafe { view.assume_init() },
        })
    }

    /// The address of the bytes (valid while this lives).
    pub(super) fn address(&self) -> usize {
        self.view.buf as usize
    }

    pub(super) fn len(&self) -> usize {
        usize::try_from(self.view.len).unwrap_or(0)
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // SAFETY: the view obtained in `take`, released once (with the GIL: a HostBuffer is
        // dropped by the Python-facing function that took it).
        unsafe { ffi::PyBuffer_Release(&mut self.view) };
    }
}
