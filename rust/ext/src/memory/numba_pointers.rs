//! numba-cuda's pointers as their constructors leave them (the same attributes, in the same
//! order), for the arrays and views made in Rust (`numba_arrays.rs`, `numba_views.rs`): a
//! `MemoryPointer` (or `AutoFreePointer`) and the `OwnedPointer` an array holds it through.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyWeakrefProxy;

use super::instances::new_instance;
use super::numba_classes::NumbaClasses;
use super::releases::{deref_when_collected, PoolRelease};

/// What `MemoryPointer.__init__` is given.
pub(super) struct MemoryPointerFields<'a, 'py> {
    /// numba-cuda's `Context` (a weak proxy of it).
    pub(super) context: &'a Bound<'py, PyAny>,
    /// The address, a Python int (shared with the `OwnedPointer`'s, as one conversion).
    pub(super) address: &'a Bound<'py, PyAny>,
    pub(super) size: u64,
    /// Whether freeing it is numba-cuda's (its own allocations), not another pointer's.
    pub(super) managed: bool,
    /// The owning allocation: None for the allocation itself.
    pub(super) owner: &'a Bound<'py, PyAny>,
    pub(super) finalizer: Option<&'a Bound<'py, PyAny>>,
}

/// Sets on `memory` (a new `MemoryPointer` or `AutoFreePointer`) the attributes `MemoryPointer.__init__`
/// sets, in its order. Its `refct` is 1: a view's, and an `AutoFreePointer`'s once its
/// `OwnedPointer` holds it (its `__init__` takes it to 0, `own()` back to 1).
pub(super) fn init_memory_pointer(
    classes: &NumbaClasses,
    memory: &Bound<'_, PyAny>,
    fields: MemoryPointerFields<'_, '_>,
) -> PyResult<()> {
    let py = memory.py();
    let pointer = classes.device_pointer.bind(py).call1((fields.address,))?;
    // one int for both, as `__init__` sets them from its one argument
    let size = fields.size.into_pyobject(py)?;
    memory.setattr(intern!(py, "context"), fields.context)?;
    memory.setattr(intern!(py, "device_pointer"), &pointer)?;
    memory.setattr(intern!(py, "size"), &size)?;
    memory.setattr(intern!(py, "_cuda_memsize_"), &size)?;
    memory.setattr(intern!(py, "is_managed"), fields.managed)?;
    memory.setattr(intern!(py, "refct"), 1)?;
    memory.setattr(intern!(py, "handle"), &pointer)?;
    memory.setattr(intern!(py, "_owner"), fields.owner)?;
    if let Some(finalizer) = fields.finalizer {
        memory.setattr(intern!(py, "_finalizer"), finalizer)?;
    }
    Ok(())
}

/// An `OwnedPointer` over `view` (the allocation behind `proxy`, or a view of it), holding a
/// reference on that allocation through `proxy` (a weak proxy of it), as
/// `OwnedPointer.__init__` sets it; its `deref` runs in Rust when it is collected (`release`:
/// the allocation's, for pool memory). Its `device_ctypes_pointer` (`address`) is set too, so
/// reading it takes no `__getattr__` through the view (`address`: a Python int).
pub(super) fn owned_pointer<'py>(
    classes: &NumbaClasses,
    proxy: Bound<'py, PyWeakrefProxy>,
    view: &Bound<'py, PyAny>,
    release: Option<Py<PoolRelease>>,
    address: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = proxy.py();
    let owned = new_instance(classes.owned_pointer.bind(py))?;
    owned.setattr(intern!(py, "_mem"), &proxy)?;
    owned.setattr(intern!(py, "_view"), view)?;
    deref_when_collected(&owned, proxy.into_any().unbind(), release)?;
    let ctypes_pointer = classes.ctypes_pointer.bind(py).call1((address,))?;
    owned.setattr(intern!(py, "device_ctypes_pointer"), ctypes_pointer)?;
    Ok(owned)
}
