//! numba-cuda's `Stream` class and the type of its handle, given once by
//! [`read_numba_streams`] (`objects.kinds()` in Python), and a launch's reading of such a
//! `Stream` ([`numba_stream_handle`]: what its `__cuda_stream__` returns, without calling that
//! Python method). `memory/numba_streams.rs` makes `cuda.stream()`'s objects of that class.

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

/// numba-cuda's `Stream` class and the type of the handle its streams hold.
pub(crate) struct NumbaStreamClasses {
    pub(crate) stream: Py<PyType>,
    pub(crate) handle: Py<PyType>,
    /// Whether `Stream.__cuda_stream__` returns `int()` of the handle (numba-cuda 0.30's
    /// `CUstream`; not 0.26's ctypes handle, read through the method).
    readable: bool,
}

static CLASSES: PyOnceLock<NumbaStreamClasses> = PyOnceLock::new();

/// Gives numba-cuda's `Stream` class and its handle's type (`CUstream`); `readable`: the
/// caller checked that `Stream.__cuda_stream__` returns `int()` of the handle. The first call
/// counts.
#[pyfunction]
pub(crate) fn read_numba_streams(
    stream: Bound<'_, PyType>,
    handle: Bound<'_, PyType>,
    readable: bool,
) {
    let py = stream.py();
    let _ = CLASSES.set(
        py,
        NumbaStreamClasses {
            stream: stream.unbind(),
            handle: handle.unbind(),
            readable,
        },
    );
}

/// The handle `stream.__cuda_stream__()` returns, where `stream` is exactly numba-cuda's
/// `Stream` holding a handle of the registered type: `None` for any other object (read
/// through its `__cuda_stream__`). As numba-cuda reads it: 0 for a false handle, else its
/// `int()`.
#[inline]
pub(crate) fn numba_stream_handle(stream: &Bound<'_, PyAny>) -> Option<PyResult<usize>> {
    let py = stream.py();
    let classes = CLASSES.get(py).filter(|classes| classes.readable)?;
    if !stream.get_type().is(classes.stream.bind(py)) {
        return None;
    }
    let handle = stream.getattr(intern!(py, "handle")).ok()?;
    if !handle.get_type().is(classes.handle.bind(py)) {
        return None;
    }
    Some((|| {
        if !handle.is_truthy()? {
            return Ok(0);
        }
        // int(handle), as __cuda_stream__ calls it
        // SAFETY: PyNumber_Long returns a new reference, or null with an exception set.
        unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyNumber_Long(handle.as_ptr())) }?
            .extract::<usize>()
    })())
}

/// numba-cuda's `Stream` class and its handle's type, once given (`read_numba_streams`).
pub(crate) fn numba_stream_classes(py: Python<'_>) -> Option<&NumbaStreamClasses> {
    CLASSES.get(py)
}
