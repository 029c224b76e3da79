//! CuPy's current stream, which a launch with CuPy arrays orders after (`streams.rs`).
//!
//! `cupy.cuda.get_current_stream().ptr` from Rust costs a Python call, a `Stream` object
//! and an attribute read on every such launch. CuPy's own Cython modules read the same
//! pointer through one C function, `get_current_stream_ptr` of `cupy_backends.cuda.stream`,
//! which Cython exports for them in the module's `__pyx_capi__` (a capsule per function,
//! named by its C signature: how `cimport` links CuPy's modules together). We call that
//! function when its signature is the expected one and it agrees with the Python call the
//! first time both are asked; otherwise the Python call stays.

use std::ffi::{c_char, CStr};

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::errors::Result;

/// `intptr_t get_current_stream_ptr()`: may raise (a Python exception set, CUDA errors).
type GetCurrentStreamPtr = unsafe extern "C" fn() -> isize;

/// The C signature Cython names the capsule by (an exception clause may follow).
const SIGNATURE: &str = "intptr_t (void)";

enum Reader {
    /// CuPy's C function.
    Exported(GetCurrentStreamPtr),
    /// `cupy.cuda.get_current_stream`, called, then its `ptr`.
    Python(Py<PyAny>),
}

static READER: PyOnceLock<Reader> = PyOnceLock::new();

/// CuPy's current stream on the current device, as `cupy.cuda.get_current_stream().ptr`.
pub(crate) fn current_stream(py: Python<'_>) -> Result<usize> {
    match READER.get_or_try_init(py, || find_reader(py))? {
        // SAFETY: a function CuPy exports with this signature, called under the GIL.
        Reader::Exported(read) => unsafe { call_exported(py, *read) },
        Reader::Python(get) => python_current_stream(get.bind(py)),
    }
}

fn python_current_stream(get: &Bound<'_, PyAny>) -> Result<usize> {
    Ok(get.call0()?.getattr(intern!(get.py(), "ptr"))?.extract()?)
}

/// # Safety
/// `read` is CuPy's `get_current_stream_ptr`; the GIL is held.
unsafe fn call_exported(py: Python<'_>, read: GetCurrentStreamPtr) -> Result<usize> {
    // SAFETY: per the caller.
    let stream = unsafe { read() };
    // SAFETY: reading the thread's error indicator under the GIL.
    if unsafe { !ffi::PyErr_Occurred().is_null() } {
        return Err(PyErr::fetch(py).into());
    }
    Ok(stream as usize)
}

fn find_reader(py: Python<'_>) -> Result<Reader> {
    let get = py.import("cupy.cuda")?.getattr("get_current_stream")?;
    if let Some(read) = exported_reader(py) {
        // Checked once against the Python call; a disagreement keeps the Python call.
        // SAFETY: the capsule's signature is the one this type declares.
        let agrees = unsafe { call_exported(py, read) }
            .ok()
            .is_some_and(|stream| python_current_stream(&get).ok() == Some(stream));
        if agrees {
            return Ok(Reader::Exported(read));
        }
    }
    Ok(Reader::Python(get.unbind()))
}

/// `get_current_stream_ptr` from `cupy_backends.cuda.stream.__pyx_capi__`, when CuPy
/// exports it with the expected signature.
fn exported_reader(py: Python<'_>) -> Option<GetCurrentStreamPtr> {
    let exported = py
        .import("cupy_backends.cuda.stream")
        .and_then(|module| module.getattr("__pyx_capi__"))
        .and_then(|capi| capi.get_item("get_current_stream_ptr"))
        .ok()?;
    // SAFETY: GetName on any object: null with an exception set unless it is a capsule.
    let name = unsafe { ffi::PyCapsule_GetName(exported.as_ptr()) };
    if name.is_null() {
        // SAFETY: clearing the exception just set (or none).
        unsafe { ffi::PyErr_Clear() };
        return None;
    }
    // SAFETY: a capsule's name is a NUL-terminated string it keeps alive.
    let signature = unsafe { CStr::from_ptr(name) }.to_str().ok()?;
    if !is_expected_signature(signature) {
        return None;
    }
    // SAFETY: the capsule is alive (its module holds it) and its name is `name`.
    let pointer = unsafe { ffi::PyCapsule_GetPointer(exported.as_ptr(), name as *const c_char) };
    if pointer.is_null() {
        // SAFETY: clearing the exception just set.
        unsafe { ffi::PyErr_Clear() };
        return None;
    }
    // SAFETY: Cython exports a function by its address, under a name giving its signature,
    // checked above; the module stays imported for the process.
    Some(unsafe { std::mem::transmute::<*mut std::ffi::c_void, GetCurrentStreamPtr>(pointer) })
}

/// Whether a Cython signature is `intptr_t (void)`, with or without an exception clause.
fn is_expected_signature(signature: &str) -> bool {
    signature
        .strip_prefix(SIGNATURE)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
}

/// `(stream, "exported" | "python")`: CuPy's current stream as a launch reads it, and how
/// (for tests).
#[pyfunction]
pub(crate) fn _cupy_current_stream(py: Python<'_>) -> Result<(usize, &'static str)> {
    let stream = current_stream(py)?;
    let how = match READER.get(py) {
        Some(Reader::Exported(_)) => "exported",
        _ => "python",
    };
    Ok((stream, how))
}

#[cfg(test)]
mod tests {
    use super::is_expected_signature;

    #[test]
    fn signatures() {
        assert!(is_expected_signature("intptr_t (void)"));
        assert!(is_expected_signature("intptr_t (void) except? -1"));
        assert!(!is_expected_signature("intptr_t (int)"));
        assert!(!is_expected_signature("intptr_t (void)x"));
        assert!(!is_expected_signature("PyObject *(void)"));
    }
}
