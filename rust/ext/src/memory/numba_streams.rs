//! `cuda.stream()` under install: [`numba_stream`], a numba-cuda `Stream` over a stream of its
//! context's pool (`python/fastlaunch/memory/streams.py` keeps the idle lists), as
//! `Context.create_stream` makes one, made without a Python frame; its collection gives the
//! pooled stream back to the idle list ([`StreamReturn`], which the object holds in its
//! instance dict), unless it is still being captured (or its context went):
//! that one is destroyed, as numba-cuda destroys the stream of a collected `Stream`, and
//! never handed out again. Its class comes from `numba_stream_class.rs`.

use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};

use super::instances::new_instance;
use super::pool::current_context_key;
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

/// The attribute of a `Stream` handed out by [`numba_stream`] that holds its
/// [`StreamReturn`].
const POOLED_ATTRIBUTE: &str = "_fastlaunch_pooled";

/// `cuda.stream()`'s object over `owned`, a pooled stream taken from `idle` (its context's
/// idle streams): a numba-cuda `Stream` with the attributes `Stream.__init__` sets (`handle`,
/// `external`), whose collection appends `owned` to `idle` again.
fn pooled_numba_stream<'py>(
    owned: Bound<'py, Stream>,
    idle: Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = owned.py();
    // made first: whatever fails below, the stream goes back with it
    let release = Bound::new(
        py,
        StreamReturn {
            owned: owned.unbind(),
            idle: idle.unbind(),
        },
    )?;
    let classes = numba_stream_classes(py).ok_or_else(|| {
        PyRuntimeError::new_err("numba-cuda's Stream class was not given (read_numba_streams)")
    })?;
    let class = classes.stream.bind(py);
    // object.__new__, as numba-cuda's Context.create_stream leaves __init__ to the class
    let made = new_instance(class.as_any())?;
    let handle = release
        .get()
        .owned
        .get()
        .numba_handle(classes.handle.bind(py).as_any())?;
    // the attributes Stream.__init__ sets, in its order
    made.setattr(intern!(py, "handle"), handle)?;
    made.setattr(intern!(py, "external"), false)?;
    made.setattr(intern!(py, POOLED_ATTRIBUTE), release)?;
    Ok(made)
}

/// Gives a pooled stream back to its idle list when the `Stream` it was handed out in is
/// collected: that object's instance dict holds it (under [`POOLED_ATTRIBUTE`]), so it goes
/// with the object, at no cost per stream beyond one attribute (a weak reference with a
/// callback, each stream's until now, cost a reference, a Python call and a lock). One
/// whose capture is still open, whose capture state cannot be asked, or whose context was
/// reset is left out, destroyed when this goes (`Stream`'s drop; the driver destroys the
/// stream of a live context).
#[pyclass(frozen, freelist = 64, module = "fastlaunch._core")]
pub(crate) struct StreamReturn {
    owned: Py<Stream>,
    idle: Py<PyList>,
}

impl Drop for StreamReturn {
    fn drop(&mut self) {
        // Dropped by Python (the `Stream`'s dict cleared), with the GIL held.
        Python::attach(|py| {
            if self.owned.get().reusable() {
                // (an append that fails leaves the stream to be destroyed with this)
                let _ = self.idle.bind(py).append(self.owned.clone_ref(py));
            }
        });
    }
}
