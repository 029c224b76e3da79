//! numba-cuda's `DeviceNDArray` over pool memory made in Rust, every object in the state
//! numba-cuda's constructors leave it (the same attributes, in the same order):
//!
//! - [`numba_pool_memory`]: an `AutoFreePointer` over pool memory with its `OwnedPointer`, as
//!   `NumbaCUDAMemoryManager.memalloc` makes them for `cuMemAlloc` memory (its `_finalizer` a
//!   [`PoolRelease`]: what `MemoryPointer.free` uses of a `weakref.finalize`);
//! - [`numba_device_array`]: a `DeviceNDArray` as `DeviceNDArray.__init__` makes one over
//!   existing memory, from an `objects.layout` (its `_dummy` the very object
//!   `dummyarray.Array.from_desc` returns, which numba-cuda caches per layout); one more
//!   attribute, `_fastlaunch_description`, carries what a launch reads of it
//!   (`classify/born.rs`), so that its first launch costs what a repeat costs;
//! - [`pool_array`]: both over new memory from the current context's pool, in one call: what
//!   `cuda.device_array`, `to_device` and the ufuncs' outputs make ([`pool_array_from`]: with
//!   the host bytes `to_device` copies in, in the same call).

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple, PyWeakrefProxy};

use fastlaunch_driver::{self as driver, is_legacy_stream, Capture, LaunchContext};

use super::current_if_any;
use super::instances::new_instance;
use super::numba_classes::{
    given_numba_classes, numba_classes, numba_memory_manager, NumbaClasses,
};
use super::numba_pointers::{init_memory_pointer, owned_pointer, MemoryPointerFields};
use super::pool::{alloc_in, mem_free};
use super::releases::pool_release;
use super::transfers::copy_into;
use crate::classify::born::describe_birth;
use crate::errors::{Error, Result};

/// A `DeviceNDArray` of the `objects.layout` `described` and NumPy `dtype` over new memory
/// from the current context's pool, used on `stream` (whose handle is `stream_handle`);
/// `None` where Python is to make it (no context or numba-cuda `Context` known yet, an EMM
/// plugin's memory manager, an allocation that failed: `allocation.allocate` retries it and
/// raises numba-cuda's errors).
#[pyfunction]
pub(crate) fn pool_array<'py>(
    described: &Bound<'py, PyTuple>,
    dtype: &Bound<'py, PyAny>,
    stream: &Bound<'py, PyAny>,
    stream_handle: usize,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    Ok(new_pool_array(described, dtype, stream, stream_handle, false)?.map(|made| made.array))
}

/// [`pool_array`] holding `host`'s bytes (a contiguous buffer of the array's size), copied
/// on `stream_handle` as `copy_to_device` copies them: `to_device` in one call, the context
/// read once. `None` as for `pool_array` (nothing copied then).
#[pyfunction]
pub(crate) fn pool_array_from<'py>(
    described: &Bound<'py, PyTuple>,
    dtype: &Bound<'py, PyAny>,
    stream: &Bound<'py, PyAny>,
    stream_handle: usize,
    host: &Bound<'py, PyAny>,
) -> Result<Option<Bound<'py, PyAny>>> {
    let filled = is_legacy_stream(stream_handle);
    let Some(made) = new_pool_array(described, dtype, stream, stream_handle, filled)? else {
        return Ok(None);
    };
    let py = described.py();
    // (the legacy stream refused while a blocking stream is captured: asked again by the
    // copy, which raises what it raised before, enqueueing nothing)
    let capturing = match made.capture {
        Capture::None => Some(false),
        Capture::Active => Some(true),
        Capture::Implicit => None,
    };
    let (driver, context) = (made.driver, &made.context);
    copy_into(
        py,
        driver,
        context,
        made.address,
        host,
        stream_handle,
        None,
        capturing,
    )?;
    Ok(Some(made.array))
}

/// An array [`new_pool_array`] made, with where its memory is.
pub(super) struct PoolArray<'py> {
    pub(super) array: Bound<'py, PyAny>,
    address: u64,
    driver: &'static driver::Driver,
    context: LaunchContext,
    /// The capture state of the stream it was allocated on, asked for the allocation.
    capture: Capture,
}

/// [`pool_array`]'s array, with where its memory is. `filled`: the caller copies all of it to
/// the device next, on the legacy stream ([`pool_array_from`]; `pool::alloc_in`).
pub(super) fn new_pool_array<'py>(
    described: &Bound<'py, PyTuple>,
    dtype: &Bound<'py, PyAny>,
    stream: &Bound<'py, PyAny>,
    stream_handle: usize,
    filled: bool,
) -> PyResult<Option<PoolArray<'py>>> {
    let py = described.py();
    let Some(classes) = numba_classes(py) else {
        return Ok(None);
    };
    let Some((driver, current)) = current_if_any()? else {
        return Ok(None);
    };
    let key = current.key();
    let Some((manager, context)) = numba_memory_manager(py, classes, key)? else {
        return Ok(None);
    };
    let Ok(nbytes) = described.get_item(5)?.extract::<usize>() else {
        return Ok(None);
    };
    let allocations = manager.getattr(intern!(py, "allocations"))?;
    let deallocations = manager.getattr(intern!(py, "deallocations"))?;
    let capture = driver.capture_state(stream_handle).map_err(Error::from)?;
    let allocated = alloc_in(py, driver, &current, nbytes, stream_handle, filled, capture);
    let Ok(address) = allocated else {
        return Ok(None);
    };
    let owned = pool_memory(
        classes,
        (&context, &allocations, &deallocations, key),
        address,
        nbytes as u64,
    )?;
    let array = device_array(classes, described, dtype, stream, &owned, Some(address))?;
    Ok(Some(PoolArray {
        array,
        address,
        driver,
        context: current,
        capture,
    }))
}

/// An `AutoFreePointer` over `address` (`nbytes` of pool memory of the context whose key is
/// `key`), entered in its memory manager's `allocations` and owned through an `OwnedPointer`
/// (what `NumbaCUDAMemoryManager.memalloc` returns), with a `PoolRelease` as its finalizer;
/// returns the `OwnedPointer`. `context` is a weak proxy of numba-cuda's `Context`.
#[pyfunction]
pub(crate) fn numba_pool_memory<'py>(
    context: &Bound<'py, PyAny>,
    address: u64,
    nbytes: u64,
    allocations: &Bound<'py, PyAny>,
    deallocations: &Bound<'py, PyAny>,
    key: u64,
) -> PyResult<Bound<'py, PyAny>> {
    let classes = given_numba_classes(context.py())?;
    pool_memory(
        classes,
        (context, allocations, deallocations, key),
        address,
        nbytes,
    )
}

/// [`numba_pool_memory`]; the memory is freed if its pointer cannot be made, and by the
/// pointer's release once it is.
fn pool_memory<'py>(
    classes: &NumbaClasses,
    (context, allocations, deallocations, key): (
        &Bound<'py, PyAny>,
        &Bound<'py, PyAny>,
        &Bound<'py, PyAny>,
        u64,
    ),
    address: u64,
    nbytes: u64,
) -> PyResult<Bound<'py, PyAny>> {
    let py = context.py();
    let made = new_instance(classes.auto_free_pointer.bind(py)).and_then(|memory| {
        let release = pool_release(
            &memory,
            allocations.clone().unbind(),
            deallocations.clone().unbind(),
            address,
            key,
            nbytes,
        )?;
        Ok((memory, release))
    });
    // from here on, the release frees the memory (when called, or when `memory` is collected)
    let (memory, release) = match made {
        Ok(made) => made,
        Err(error) => {
            let _ = mem_free(py, address, 0, Some(key));
            return Err(error);
        }
    };
    // AutoFreePointer.__init__ is MemoryPointer.__init__'s, and the finalizer
    let address_int = address.into_pyobject(py)?.into_any();
    let fields = MemoryPointerFields {
        context,
        address: &address_int,
        size: nbytes,
        managed: true,
        owner: &py.None().into_bound(py),
        finalizer: Some(release.as_any()),
    };
    init_memory_pointer(classes, &memory, fields)?;
    let proxy = PyWeakrefProxy::new(&memory)?;
    let view = proxy.clone().into_any();
    let owned = owned_pointer(classes, proxy, &view, Some(release.unbind()), &address_int)?;
    // numba-cuda's allocations are a UniqueDict; a live pool address is unique already, so
    // it is entered with dict's own __setitem__, past UniqueDict's check
    match allocations.cast::<PyDict>() {
        Ok(allocations) => allocations.set_item(&address_int, &memory)?,
        Err(_) => allocations.set_item(&address_int, &memory)?,
    }
    Ok(owned)
}

/// `DeviceNDArray(shape, strides, dtype, stream=stream, gpu_data=gpu_data)` for a non-empty
/// array of the `objects.layout` `described`, `dtype` a NumPy dtype; `address`: `gpu_data`'s,
/// where the caller knows it.
#[pyfunction]
#[pyo3(signature = (described, dtype, stream, gpu_data, address = None))]
pub(crate) fn numba_device_array<'py>(
    described: &Bound<'py, PyTuple>,
    dtype: &Bound<'py, PyAny>,
    stream: &Bound<'py, PyAny>,
    gpu_data: &Bound<'py, PyAny>,
    address: Option<u64>,
) -> PyResult<Bound<'py, PyAny>> {
    let classes = given_numba_classes(described.py())?;
    device_array(classes, described, dtype, stream, gpu_data, address)
}

pub(super) fn device_array<'py>(
    classes: &NumbaClasses,
    described: &Bound<'py, PyTuple>,
    dtype: &Bound<'py, PyAny>,
    stream: &Bound<'py, PyAny>,
    gpu_data: &Bound<'py, PyAny>,
    address: Option<u64>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = described.py();
    let array = new_instance(classes.device_nd_array.bind(py))?;
    // the attributes DeviceNDArrayBase.__init__ sets, in its order (`described` holds ndim,
    // the dummy array, shape, strides, size and alloc_size)
    let described_names = [
        intern!(py, "ndim"),
        intern!(py, "_dummy"),
        intern!(py, "shape"),
        intern!(py, "strides"),
    ];
    for (index, name) in described_names.into_iter().enumerate() {
        array.setattr(name, described.get_item(index)?)?;
    }
    array.setattr(intern!(py, "dtype"), dtype)?;
    array.setattr(intern!(py, "size"), described.get_item(4)?)?;
    array.setattr(intern!(py, "alloc_size"), described.get_item(5)?)?;
    array.setattr(intern!(py, "gpu_data"), gpu_data)?;
    array.setattr(intern!(py, "stream"), stream)?;
    let description = match describe_birth(&array, described, dtype, gpu_data, address) {
        Some(description) => Bound::new(py, description)?.into_any(),
        None => py.None().into_bound(py),
    };
    array.setattr(intern!(py, "_fastlaunch_description"), description)?;
    Ok(array)
}
