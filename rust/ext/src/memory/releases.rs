//! The releases of numba-cuda's pointers over pool memory (`python/fastlaunch/memory/objects.py`
//! builds the pointers), run without a Python frame:
//!
//! - [`PoolRelease`]: an `AutoFreePointer`'s `_finalizer`, what `MemoryPointer.free` asks of
//!   numba-cuda's `weakref.finalize` (`alive`, and a call that releases once): the memory
//!   leaves the manager's `allocations` and is freed (`pool::mem_free`) at once, or queued
//!   in the context's deallocations while `cuda.defer_cleanup()` holds them. It also runs
//!   when the pointer is collected unreleased (a context reset clears `allocations`).
//! - [`OwnerDeref`]: numba-cuda's `deref` of an `OwnedPointer`, run when it is collected: the
//!   owner's reference count down, the owner released at zero.
//!
//! Each watches its pointer through a weak reference whose callback is itself (`watch.rs`).

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::{PyAssertionError, PyKeyError, PyReferenceError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;

use super::pool::free_block;
use super::watch::Watch;

/// The finalizer of an `AutoFreePointer` over pool memory (`pool_release`).
#[pyclass(frozen, freelist = 64, module = "fastlaunch._core")]
pub(crate) struct PoolRelease {
    /// numba-cuda's memory manager's `allocations` (a dict, by address) and `deallocations`.
    allocations: Py<PyAny>,
    deallocations: Py<PyAny>,
    address: u64,
    /// The key of the context allocated in (`context_key`).
    context: u64,
    nbytes: u64,
    alive: AtomicBool,
    /// Another library read the memory (`exports.rs`): its free waits for every stream.
    exported: AtomicBool,
    watch: Watch,
}

#[pymethods]
impl PoolRelease {
    /// Whether the memory is still to be released (numba-cuda's `weakref.finalize.alive`).
    #[getter]
    fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Releases the memory, once (again: nothing); `_collected` is the weak reference when
    /// the pointer was collected.
    #[pyo3(signature = (_collected = None))]
    fn __call__(&self, py: Python<'_>, _collected: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.release(py)
    }
}

impl PoolRelease {
    /// The block released: its address and size, and its context's key.
    pub(crate) fn block(&self) -> (u64, u64, u64) {
        (self.address, self.nbytes, self.context)
    }

    /// Notes that another library read the memory.
    pub(crate) fn note_exported(&self) {
        if !self.exported.load(Ordering::Relaxed) {
            self.exported.store(true, Ordering::Release);
        }
    }

    fn release(&self, py: Python<'_>) -> PyResult<()> {
        if !self.alive.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        self.watch.stop();
        let allocations = self.allocations.bind(py);
        if let Ok(allocations) = allocations.cast::<PyDict>() {
            // (a context reset cleared it already; the pointer goes with its entry)
            if let Err(error) = allocations.del_item(self.address) {
                if !error.is_instance_of::<PyKeyError>(py) {
                    return Err(error);
                }
            }
        } else {
            allocations.call_method1(intern!(py, "pop"), (self.address, py.None()))?;
        }
        let deallocations = self.deallocations.bind(py);
        let exported = self.exported.load(Ordering::Acquire);
        if is_disabled(deallocations)? {
            let item = (self.address, self.context, exported);
            let free = deferred_free_function(py)?;
            deallocations.call_method1(intern!(py, "add_item"), (free, item, self.nbytes))?;
            return Ok(());
        }
        Ok(free_block(
            py,
            self.address,
            0,
            Some(self.context),
            exported,
        )?)
    }
}

/// Whether numba-cuda's `deallocations` (a `_PendingDeallocs`) are held back by
/// `cuda.defer_cleanup()`: its count of holds, read without its `is_disabled` property's
/// Python frame (the property where the count is not there).
fn is_disabled(deallocations: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = deallocations.py();
    match deallocations.getattr(intern!(py, "_disable_count")) {
        Ok(count) => count.is_truthy(),
        Err(_) => deallocations
            .getattr(intern!(py, "is_disabled"))?
            .is_truthy(),
    }
}

/// `deferred_free` as a Python function, made once: what a queued free calls.
fn deferred_free_function(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static FUNCTION: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    FUNCTION
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(wrap_pyfunction!(deferred_free, py)?.into_any().unbind())
        })
        .map(|function| function.bind(py))
}

/// A free queued in numba-cuda's deallocations, `(address, context key, exported)`: on the
/// legacy default stream in its context (nothing when that was reset since), after the work
/// that may still use the memory.
#[pyfunction]
fn deferred_free(py: Python<'_>, item: (u64, u64, bool)) -> PyResult<()> {
    Ok(free_block(py, item.0, 0, Some(item.1), item.2)?)
}

/// The finalizer of `memory`, an `AutoFreePointer` over `nbytes` of pool memory at `address`
/// in the context whose key is `context`, entered in the memory manager's `allocations`
/// (whose `deallocations` queue the free while `cuda.defer_cleanup()` holds them); it
/// releases the memory when called, or when `memory` is collected unreleased.
#[pyfunction]
pub(crate) fn pool_release<'py>(
    memory: &Bound<'py, PyAny>,
    allocations: Py<PyAny>,
    deallocations: Py<PyAny>,
    address: u64,
    context: u64,
    nbytes: u64,
) -> PyResult<Bound<'py, PoolRelease>> {
    let release = Bound::new(
        memory.py(),
        PoolRelease {
            allocations,
            deallocations,
            address,
            context,
            nbytes,
            alive: AtomicBool::new(true),
            exported: AtomicBool::new(false),
            watch: Watch::default(),
        },
    )?;
    release.get().watch.start(memory, release.as_any())?;
    Ok(release)
}

/// numba-cuda's `deref` of one `OwnedPointer` (`deref_when_collected`).
#[pyclass(frozen, freelist = 64, module = "fastlaunch._core")]
pub(crate) struct OwnerDeref {
    /// The owning allocation (a weak proxy), whose reference count the pointer holds one of.
    owner: Py<PyAny>,
    /// The owner's release, where it is a pool pointer's; else the owner's `free()` runs.
    release: Option<Py<PoolRelease>>,
    watch: Watch,
}

#[pymethods]
impl OwnerDeref {
    fn __call__(&self, py: Python<'_>, _collected: &Bound<'_, PyAny>) -> PyResult<()> {
        self.watch.stop();
        match self.deref(py) {
            Err(error) if error.is_instance_of::<PyReferenceError>(py) => Ok(()), // owner gone
            done => done,
        }
    }
}

impl OwnerDeref {
    fn deref(&self, py: Python<'_>) -> PyResult<()> {
        let owner = self.owner.bind(py);
        let refct = intern!(py, "refct");
        let count = owner.getattr(refct)?.extract::<i64>()? - 1;
        owner.setattr(refct, count)?;
        if count < 0 {
            return Err(PyAssertionError::new_err("reference count below zero"));
        }
        if count > 0 {
            return Ok(());
        }
        match &self.release {
            Some(release) if release.get().alive() => release.get().release(py),
            // (numba-cuda's error for memory freed already, too)
            _ => owner.call_method0(intern!(py, "free")).map(drop),
        }
    }
}

/// Runs numba-cuda's `deref` of `owned` (an `OwnedPointer` holding a reference on `owner`,
/// a weak proxy of the owning allocation) when `owned` is collected: the owner's reference
/// count down and, at zero, `release` (the owner's, where it is pool memory) or the owner's
/// `free()`.
#[pyfunction]
#[pyo3(signature = (owned, owner, release = None))]
pub(crate) fn deref_when_collected(
    owned: &Bound<'_, PyAny>,
    owner: Py<PyAny>,
    release: Option<Py<PoolRelease>>,
) -> PyResult<()> {
    let deref = Bound::new(
        owned.py(),
        OwnerDeref {
            owner,
            release,
            watch: Watch::default(),
        },
    )?;
    deref.get().watch.start(owned, deref.as_any())
}
