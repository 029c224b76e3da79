//! What the memory API's Rust side builds numba-cuda's objects from: numba-cuda's classes and
//! `objects.layout` with its cache (given once by `objects.kinds()`), and numba-cuda's
//! `Context` objects with the weak proxies its pointers hold, by context key (the dictionaries
//! of `allocation.py`, given once when it is imported).

use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple};

/// numba-cuda's classes (`_numba_compat.memory_classes()`) and the layouts of its arrays.
pub(super) struct NumbaClasses {
    pub(super) device_nd_array: Py<PyAny>,
    pub(super) memory_pointer: Py<PyAny>,
    pub(super) auto_free_pointer: Py<PyAny>,
    pub(super) owned_pointer: Py<PyAny>,
    /// `CUdeviceptr`, a `MemoryPointer`'s `device_pointer` and `handle`.
    pub(super) device_pointer: Py<PyAny>,
    /// The ctypes type of `device_ctypes_pointer`.
    pub(super) ctypes_pointer: Py<PyAny>,
    /// numba-cuda's own memory manager (not an EMM plugin's).
    pub(super) memory_manager: Py<PyAny>,
    /// `objects._layouts`, by `(shape, strides, itemsize)`, and `objects.layout`, which fills it.
    layouts: Py<PyDict>,
    layout: Py<PyAny>,
}

static CLASSES: PyOnceLock<NumbaClasses> = PyOnceLock::new();

/// Gives the classes of `classes` (`_numba_compat.memory_classes()`), `objects._layouts` and
/// `objects.layout`. The first call counts.
#[pyfunction]
pub(crate) fn read_numba_memory_classes(
    classes: &Bound<'_, PyAny>,
    layouts: Bound<'_, PyDict>,
    layout: Py<PyAny>,
) -> PyResult<()> {
    let py = classes.py();
    let class = |name: &str| classes.getattr(name).map(Bound::unbind);
    let read = NumbaClasses {
        device_nd_array: class("DeviceNDArray")?,
        memory_pointer: class("MemoryPointer")?,
        auto_free_pointer: class("AutoFreePointer")?,
        owned_pointer: class("OwnedPointer")?,
        device_pointer: class("CUdeviceptr")?,
        ctypes_pointer: class("device_ctypes_pointer")?,
        memory_manager: class("NumbaCUDAMemoryManager")?,
        layouts: layouts.unbind(),
        layout,
    };
    let _ = CLASSES.set(py, read);
    Ok(())
}

/// The classes, once given.
pub(super) fn numba_classes(py: Python<'_>) -> Option<&NumbaClasses> {
    CLASSES.get(py)
}

/// The classes, which a caller in Python gave first (`objects.kinds()`).
pub(super) fn given_numba_classes(py: Python<'_>) -> PyResult<&NumbaClasses> {
    numba_classes(py).ok_or_else(|| {
        PyRuntimeError::new_err("numba-cuda's memory classes were not given (objects.kinds())")
    })
}

impl NumbaClasses {
    /// `objects.layout(shape, strides, itemsize)`: its cached tuple, else its call.
    pub(super) fn layout<'py>(
        &self,
        shape: Bound<'py, PyTuple>,
        strides: &Bound<'py, PyTuple>,
        itemsize: i64,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let py = shape.py();
        let key = (shape, strides, itemsize);
        let described = match self.layouts.bind(py).get_item(&key)? {
            Some(found) => found,
            None => self.layout.bind(py).call1(key)?,
        };
        Ok(described.cast_into()?)
    }
}

/// `allocation._contexts` and `allocation._proxies`: numba-cuda's `Context` per context key,
/// and a weak proxy of it.
struct NumbaContexts {
    contexts: Py<PyDict>,
    proxies: Py<PyDict>,
}

static CONTEXTS: PyOnceLock<NumbaContexts> = PyOnceLock::new();

/// Gives `allocation._contexts` and `allocation._proxies`. The first call counts.
#[pyfunction]
pub(crate) fn read_numba_contexts(contexts: Bound<'_, PyDict>, proxies: Py<PyDict>) {
    let py = contexts.py();
    let _ = CONTEXTS.set(
        py,
        NumbaContexts {
            contexts: contexts.unbind(),
            proxies,
        },
    );
}

/// numba-cuda's memory manager of the context whose key is `key` and the weak proxy of its
/// `Context`, where `allocation.py` keeps them and the manager is numba-cuda's own.
pub(super) fn numba_memory_manager<'py>(
    py: Python<'py>,
    classes: &NumbaClasses,
    key: u64,
) -> PyResult<Option<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
    let Some(known) = CONTEXTS.get(py) else {
        return Ok(None);
    };
    let Some(context) = known.contexts.bind(py).get_item(key)? else {
        return Ok(None);
    };
    let manager = context.getattr(intern!(py, "memory_manager"))?;
    if !manager.get_type().is(classes.memory_manager.bind(py)) {
        return Ok(None); // an EMM plugin's
    }
    let Some(proxy) = known.proxies.bind(py).get_item(key)? else {
        return Ok(None);
    };
    Ok(Some((manager, proxy)))
}
