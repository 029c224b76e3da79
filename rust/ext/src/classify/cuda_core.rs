//! cuda.core `Buffer` (bytes, typed as numba-cuda types them: 1-D C uint8, writable) and
//! `StridedMemoryView` (read through its attributes), found by module and class name so
//! that cuda.core is never imported here.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyType};

use super::arrays::{
    append_c_strides, extend_from_int_tuple, int_as_i64, int_as_u64, numeric_element_type,
    pointer_as_u64, push_array, push_staged, stage_dims,
};
use super::{type_name, Position, Scratch, Strategy, ValueAt};
use crate::errors::Result;
use crate::scalar::Scalar;

/// cuda.core's `Buffer` and `StridedMemoryView`, and subclasses of them, found by module and
/// name along the MRO so that cuda.core is never imported here (its classes live in versioned
/// modules such as `cuda.core._memory._buffer`).
pub(super) fn strategy(class: &Bound<'_, PyType>) -> Option<Strategy> {
    class.mro().iter().find_map(|base| {
        let base = base.cast::<PyType>().ok()?;
        let module = base.module().ok()?;
        let module = module.to_str().ok()?;
        if module != "cuda.core" && !module.starts_with("cuda.core.") {
            return None;
        }
        match base.name().ok()?.to_str().ok()? {
            "Buffer" => Some(Strategy::CoreBuffer),
            "StridedMemoryView" => Some(Strategy::CoreStridedView),
            _ => None,
        }
    })
}

/// A cuda.core `Buffer`: `size` bytes at `int(handle)`, typed as numba-cuda types a buffer
/// (a 1-D C-contiguous uint8 array, always writable).
pub(super) fn read_buffer(
    arg: &Bound<'_, PyAny>,
    at: Position<'_>,
    scratch: &mut Scratch,
) -> Result<()> {
    let py = arg.py();
    refuse_host_memory(arg, at)?;
    let handle = core_attribute(arg, intern!(py, "handle"), at)?;
    let data = pointer_as_u64(&handle).map_err(|_| {
        at.error(format!(
            "{}.handle is not a pointer: {handle}",
            type_name(arg)
        ))
    })?;
    let size = core_attribute(arg, intern!(py, "size"), at)?;
    let size = int_as_u64(&size)
        .ok()
        .and_then(|size| i64::try_from(size).ok())
        .ok_or_else(|| at.error(format!("{}.size is not a size: {size}", type_name(arg))))?;
    if data == 0 && size > 0 {
        return Err(at.error(format!(
            "{} has a null pointer but {size} bytes",
            type_name(arg)
        )));
    }
    claim_core_device(arg, at, scratch);
    push_array(
        scratch,
        at,
        data,
        Scalar::U8.into(),
        std::iter::once(size),
        None::<std::iter::Empty<i64>>,
        false,
    )
}

/// A cuda.core `StridedMemoryView`: pointer, shape, strides (in elements, `None` when
/// C-contiguous), dtype and read-only flag, from its attributes (its DLPack C exchange API
/// gives a tensor without the read-only flag, which numba-cuda's type carries). numba-cuda
/// refuses views that are not contiguous; fastlaunch passes them with layout 'A' and their
/// strides, as any strided array.
pub(super) fn read_view(
    arg: &Bound<'_, PyAny>,
    at: Position<'_>,
    scratch: &mut Scratch,
) -> Result<()> {
    let py = arg.py();
    refuse_host_memory(arg, at)?;
    let dtype = core_attribute(arg, intern!(py, "dtype"), at)?;
    if dtype.is_none() {
        return Err(at.error(format!(
            "{} has no dtype (made from a Buffer with an itemsize only); give it a dtype",
            type_name(arg)
        )));
    }
    let Some(scalar) = numeric_element_type(&dtype, at)? else {
        scratch.needs_numba = true; // structured and datetime views: numba-cuda passes them
        return Ok(());
    };
    let ptr = core_attribute(arg, intern!(py, "ptr"), at)?;
    let data = int_as_u64(&ptr)
        .map_err(|_| at.error(format!("{}.ptr is not a pointer: {ptr}", type_name(arg))))?;
    let readonly = core_attribute(arg, intern!(py, "readonly"), at)?.is_truthy()?;
    let shape = core_attribute(arg, intern!(py, "shape"), at)?;
    let strides = core_attribute(arg, intern!(py, "strides"), at)?;
    claim_core_device(arg, at, scratch);
    let itemsize = scalar.itemsize() as i64;
    let staged = stage_dims(&mut scratch.dims, at, (data, scalar.into()), |dims| {
        stage_view_dims(dims, &shape, &strides, itemsize, at)
    })?;
    push_staged(scratch, data, scalar.into(), staged, readonly);
    Ok(())
}

/// Appends a view's shape and byte strides to `dims`: its strides count elements.
fn stage_view_dims(
    dims: &mut Vec<i64>,
    shape: &Bound<'_, PyAny>,
    strides: &Bound<'_, PyAny>,
    itemsize: i64,
    at: Position<'_>,
) -> Result<()> {
    let staged = dims.len();
    let ndim = extend_from_int_tuple(dims, shape, "shape", at)?;
    if strides.is_none() {
        append_c_strides(dims, staged, itemsize);
        return Ok(());
    }
    let nstrides = extend_from_int_tuple(dims, strides, "strides", at)?;
    if nstrides != ndim {
        return Err(at.error(format!(
            "array has {ndim} dimensions but {nstrides} strides"
        )));
    }
    for stride in &mut dims[staged + ndim..] {
        *stride = stride
            .checked_mul(itemsize)
            .ok_or_else(|| at.error("array strides overflow 64 bits"))?;
    }
    Ok(())
}

/// An attribute of a cuda.core object; a failure (cuda.core asking a driver it cannot load,
/// say) names the argument.
fn core_attribute<'py>(
    arg: &Bound<'py, PyAny>,
    name: &Bound<'py, PyString>,
    at: Position<'_>,
) -> Result<Bound<'py, PyAny>> {
    arg.getattr(name)
        .map_err(|e| at.error(format!("{}.{name} failed: {e}", type_name(arg))))
}

/// Refuses cuda.core memory kernels cannot reach (host-only buffers, views of host arrays).
fn refuse_host_memory(arg: &Bound<'_, PyAny>, at: Position<'_>) -> Result<()> {
    let accessible = core_attribute(arg, intern!(arg.py(), "is_device_accessible"), at)?;
    if !accessible.is_truthy()? {
        return Err(at.error(format!(
            "{} is not in CUDA memory (is_device_accessible is False); move it to the GPU first",
            type_name(arg)
        )));
    }
    Ok(())
}

/// Claims the device a cuda.core object names (`device_id`), as a DLPack CUDA device is
/// claimed, for the launch's reachability check. Pinned memory names none (-1, or an error
/// from cuda.core's legacy pinned resource): nothing is claimed. Managed memory names its
/// preferred device, but every device reaches it: `limits::check_devices` asks the driver
/// before refusing a claim.
fn claim_core_device(arg: &Bound<'_, PyAny>, at: Position<'_>, scratch: &mut Scratch) {
    let device = arg
        .getattr(intern!(arg.py(), "device_id"))
        .and_then(|device| int_as_i64(&device));
    if let Some(ordinal) = device.ok().and_then(|d| usize::try_from(d).ok()) {
        let value = ValueAt::next(scratch, at);
        scratch.devices.claimed.push((value, ordinal));
    }
}
