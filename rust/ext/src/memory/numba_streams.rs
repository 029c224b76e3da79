//! numba-cuda's `Stream` objects, made and read without a Python frame:
//!
//! - [`pooled_numba_stream`]: `cuda.stream()`'s object over a pooled stream
//!   (`python/fastlaunch/memory/streams.py`), a `Stream` as `Context.create_stream` makes one,
//!   whose collection gives the pooled stream back to its context's idle list
//!   ([`StreamReturn`], watching it as `releases.rs`'s releases watch their pointers);
//! - [`numba_stream_handle`]: a launch's reading of such a `Stream` (what its
//!   `__cuda_stream__` returns, without calling that Python method).
//!
//! Both need numba-cuda's `Stream` class and the type of its handle, given once by
//! [`read_numba_streams`] (`objects.kinds()`).

use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyInt, PyList, PyType};

use super::watch::Watch;
use crate::streams::Stream;

/// numba-cuda's `Stream` class and the type of the handle its streams hold.
struct NumbaStreamClasses {
    stream: Py<PyType>,
    handle: Py<PyType>,
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
        py.get_type::<PyInt>().call1((handle,))?.extract::<usize>()
    })())
}

/// `cuda.stream()`'s object over `owned`, a pooled stream taken from `idle` (its context's
/// idle streams): a numba-cuda `Stream` with the attributes `Stream.__init__` sets (`handle`,
/// `external`), whose collection appends `owned` to `idle` again.
#[pyfunction]
pub(crate) fn pooled_numba_stream<'py>(
    owned: Bound<'py, Stream>,
    idle: Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = owned.py();
    let classes = CLASSES.get(py).ok_or_else(|| {
        PyRuntimeError::new_err("numba-cuda's Stream class was not given (read_numba_streams)")
    })?;
    let class = classes.stream.bind(py);
    // object.__new__, as numba-cuda's Context.create_stream leaves __init__ to the class
    let made = class.call_method1(intern!(py, "__new__"), (class,))?;
    let handle = classes.handle.bind(py).call1((owned.get().handle(),))?;
    // the attributes Stream.__init__ sets, in its order
    made.setattr(intern!(py, "handle"), handle)?;
    made.setattr(intern!(py, "external"), false)?;
    let release = Bound::new(
        py,
        StreamReturn {
            owned: owned.unbind(),
            idle: idle.unbind(),
            watch: Watch::default(),
        },
    )?;
    release.get().watch.start(&made, release.as_any())?;
    Ok(made)
}

/// Gives a pooled stream back to its idle list when its `Stream` is collected (`watch.rs`).
#[pyclass(frozen, freelist = 64, module = "fastlaunch._core")]
pub(crate) struct StreamReturn {
    owned: Py<Stream>,
    idle: Py<PyList>,
    watch: Watch,
}

#[pymethods]
impl StreamReturn {
    /// Gives the stream back, once (a second call does nothing: the stream is not pooled twice).
    fn __call__(&self, py: Python<'_>, _collected: &Bound<'_, PyAny>) -> PyResult<()> {
        if !self.watch.stop() {
            return Ok(());
        }
        self.idle.bind(py).append(self.owned.clone_ref(py))
    }
}
