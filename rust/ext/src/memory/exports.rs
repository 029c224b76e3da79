//! What another library's read of a numba-cuda device array (`__cuda_array_interface__`,
//! DLPack) needs from the memory API, [`settle_export`]:
//!
//! - the array's own pending work (a staged copy into it, its allocation after a free, on
//!   the legacy stream) done before the reader sees "no stream" (`ordering::settle_range`);
//! - its pool block marked *exported*: fastlaunch cannot see the streams the reader uses, so
//!   the block's free is then made as numba-cuda's `cuMemFree` makes it, after all the work
//!   of the context queued ahead of it, whatever its stream (`pool::free_block`).
//!   Blocks never exported keep the pool's stream order.

use pyo3::intern;
use pyo3::prelude::*;

use super::ordering::settle_range;
use super::releases::PoolRelease;
use crate::errors::Result;

/// Before `array`'s interface is handed to another library: see the module's text.
/// `pointer`: the address the interface gives, for an array whose memory is not a pool
/// block of fastlaunch's (read with its `alloc_size`).
#[pyfunction]
pub(crate) fn settle_export(py: Python<'_>, array: &Bound<'_, PyAny>, pointer: u64) -> Result<()> {
    settle_export_at(py, array, || Ok(pointer))
}

/// [`settle_export`], the interface's address read (`pointer`) only for memory that is not
/// a pool block.
fn settle_export_at(
    py: Python<'_>,
    array: &Bound<'_, PyAny>,
    pointer: impl FnOnce() -> PyResult<u64>,
) -> Result<()> {
    match pool_release_of(array) {
        Some(release) => {
            let release = release.get();
            release.note_exported();
            let (address, nbytes, context) = release.block();
            settle_range(
                py,
                address,
                address.saturating_add(nbytes.max(1)),
                Some(context),
            )
        }
        None => {
            let pointer = pointer()?;
            let nbytes: u64 = array.getattr(intern!(py, "alloc_size"))?.extract()?;
            settle_range(py, pointer, pointer.saturating_add(nbytes.max(1)), None)
        }
    }
}

/// What `install()` puts on numba-cuda's `DeviceNDArrayBase` as `__cuda_array_interface__`:
/// numba-cuda's own property (`getter`), then [`settle_export`], with no Python frame around
/// them. Read-only, as numba-cuda's property is.
#[pyclass(frozen, module = "fastlaunch._core")]
pub(crate) struct InterfaceProperty {
    getter: Py<PyAny>,
}

#[pymethods]
impl InterfaceProperty {
    #[new]
    fn new(getter: Py<PyAny>) -> Self {
        InterfaceProperty { getter }
    }

    fn __get__<'py>(
        slf: &Bound<'py, Self>,
        array: Option<&Bound<'py, PyAny>>,
        _owner: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let Some(array) = array.filter(|array| !array.is_none()) else {
            return Ok(slf.clone().into_any()); // read on the class
        };
        let interface = slf.get().getter.bind(py).call1((array,))?;
        let pointer = || -> PyResult<u64> {
            let data = interface.get_item(intern!(py, "data"))?.get_item(0)?;
            Ok(data.extract::<Option<u64>>()?.unwrap_or(0))
        };
        settle_export_at(py, array, pointer)?;
        Ok(interface)
    }

    fn __set__(&self, _array: &Bound<'_, PyAny>, _value: &Bound<'_, PyAny>) -> PyResult<()> {
        Err(pyo3::exceptions::PyAttributeError::new_err(
            "property '__cuda_array_interface__' has no setter",
        ))
    }

    /// numba-cuda's own getter.
    #[getter]
    fn fget(&self, py: Python<'_>) -> Py<PyAny> {
        self.getter.clone_ref(py)
    }
}

/// The release of the pool block behind `array`: its `gpu_data` is an `OwnedPointer` whose
/// `_mem` is (a weak proxy of) the block's `AutoFreePointer`, or that pointer itself; its
/// `_finalizer` is the release. `None` for memory that is not a pool block.
fn pool_release_of<'py>(array: &Bound<'py, PyAny>) -> Option<Bound<'py, PoolRelease>> {
    let py = array.py();
    let data = array.getattr(intern!(py, "gpu_data")).ok()?;
    let memory = data.getattr(intern!(py, "_mem")).unwrap_or(data);
    let finalizer = memory.getattr(intern!(py, "_finalizer")).ok()?;
    finalizer.cast_into::<PoolRelease>().ok()
}
