//! `cuda.stream()` under install: [`numba_stream`], a numba-cuda `Stream` over a stream of its
//! context's pool (`python/fastlaunch/memory/streams.py` keeps the idle lists), as
//! `Context.create_stream` makes one, made without a Python frame; its collection gives the
//! pooled stream back to the idle list ([`StreamReturn`], watching it as `releases.rs`'s
//! releases watch their pointers), unless it is still being captured (or its context went):
//! that one is destroyed, as numba-cuda destroys the stream of a collected `Stream`, and
//! never handed out again. Its class comes from `numba_stream_class.rs`.

use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};

use super::instances::new_instance;
use super::pool::current_context_key;
use super::watch::Watch;
use crate::numba_stream_class::numba_stream_classes;
use crate::streams::Stream;

/// The idle streams by context key (`streams._idle`) and the Python function that makes a
/// context's idle list (giving numba-cuda's classes to Rust first), given once.
struct Pool {
    idle: Py<PyDict>,
    first: Py<PyAny>,
}

static POOL: PyOnceLock<Pool> = PyOnceLock::new();

/// Gives [`numba_stream`] the idle lists by context key and `first`, which returns the current
/// context's idle list where it has none yet (or makes a context current where none is). The
/// first call counts.
#[pyfunction]
pub(crate) fn pool_numba_streams(idle: Bound<'_, PyDict>, first: Bound<'_, PyAny>) {
    let py = idle.py();
    let _ = POOL.set(
        py,
        Pool {
            idle: idle.unbind(),
            first: first.unbind(),
        },
    );
}

/// numba-cuda's `cuda.stream()`: a `Stream` over an idle stream of the current context's
/// pool (a new one when none is idle), given back to the pool when collected.
#[pyfunction]
pub(crate) fn numba_stream(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let pool = POOL.get(py).ok_or_else(|| {
        PyRuntimeError::new_err("the stream pool was not given (pool_numba_streams)")
    })?;
    let idle = match current_context_key()? {
        Some(key) => pool.idle.bind(py).get_item(key)?,
        None => None,
    };
    let idle = match idle {
        Some(idle) => idle,
        None => pool.first.bind(py).call0()?,
    };
    let idle = idle.cast_into::<PyList>()?;
    let owned = match idle.len().checked_sub(1) {
        // (the list's own pop, without its method call: nothing runs between the two steps)
        Some(last) => {
            let owned = idle.get_item(last)?.cast_into::<Stream>()?;
            idle.del_item(last)?;
            owned
        }
        None => Bound::new(py, Stream::create(false)?)?,
    };
    pooled_numba_stream(owned, idle)
}

/// `cuda.stream()`'s object over `owned`, a pooled stream taken from `idle` (its context's
/// idle streams): a numba-cuda `Stream` with the attributes `Stream.__init__` sets (`handle`,
/// `external`), whose collection appends `owned` to `idle` again.
fn pooled_numba_stream<'py>(
    owned: Bound<'py, Stream>,
    idle: Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = owned.py();
    let classes = numba_stream_classes(py).ok_or_else(|| {
        PyRuntimeError::new_err("numba-cuda's Stream class was not given (read_numba_streams)")
    })?;
    let class = classes.stream.bind(py);
    // object.__new__, as numba-cuda's Context.create_stream leaves __init__ to the class
    let made = new_instance(class.as_any())?;
    let handle = owned.get().numba_handle(classes.handle.bind(py).as_any())?;
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

/// Gives a pooled stream back to its idle list when its `Stream` is collected (`watch.rs`);
/// one whose capture is still open, whose capture state cannot be asked, or whose context
/// was reset is left out, destroyed when this goes (`Stream`'s drop; the driver destroys the
/// stream of a live context).
#[pyclass(frozen, freelist = 64, module = "fastlaunch._core")]
pub(crate) struct StreamReturn {
    owned: Py<Stream>,
    idle: Py<PyList>,
    watch: Watch,
}

#[pymethods]
impl StreamReturn {
    /// Gives the stream back, once (a second call does nothing: the stream is not pooled
    /// twice), when it can be reused.
    fn __call__(&self, py: Python<'_>, _collected: &Bound<'_, PyAny>) -> PyResult<()> {
        if !self.watch.stop() || !self.owned.get().reusable() {
            return Ok(());
        }
        self.idle.bind(py).append(self.owned.clone_ref(py))
    }
}
