//! [`pooled_numba_stream`]: `cuda.stream()`'s object over a pooled stream
//! (`python/fastlaunch/memory/streams.py`), a numba-cuda `Stream` as `Context.create_stream`
//! makes one, made without a Python frame, whose collection gives the pooled stream back to
//! its context's idle list ([`StreamReturn`], watching it as `releases.rs`'s releases watch
//! their pointers). Its class comes from `numba_stream_class.rs`.

use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyList;

use super::watch::Watch;
use crate::numba_stream_class::numba_stream_classes;
use crate::streams::Stream;

/// `cuda.stream()`'s object over `owned`, a pooled stream taken from `idle` (its context's
/// idle streams): a numba-cuda `Stream` with the attributes `Stream.__init__` sets (`handle`,
/// `external`), whose collection appends `owned` to `idle` again.
#[pyfunction]
pub(crate) fn pooled_numba_stream<'py>(
    owned: Bound<'py, Stream>,
    idle: Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = owned.py();
    let classes = numba_stream_classes(py).ok_or_else(|| {
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
