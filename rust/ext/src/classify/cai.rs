//! Generic CUDA Array Interface objects: the interface dict read key by key. Their pointer
//! may be anything, so the launch asks the driver about it (`Scratch::unverified_pointers`).
//!
//! The interface is read afresh on every launch (an object may hand out another dict, or
//! change its own, between launches), so the read is kept cheap: keys are interned strings
//! (a `&str` key would be made into a new Python string, and hashed, per lookup), the
//! typestr is read in place, and shape and strides go straight into the scratch.

use pyo3::exceptions::PyAttributeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyString, PyTuple};

use super::arrays::{
    append_c_strides, datetime_element, extend_from_int_tuple, int_as_u64, push_staged, stage_dims,
    ElementType,
};
use super::{type_name, Position, Scratch, ValueAt};
use crate::errors::Result;
use crate::scalar::Scalar;

/// A generic `__cuda_array_interface__` object (v3: its `stream` orders the launch).
pub(super) fn read<'py>(
    arg: &Bound<'py, PyAny>,
    at: Position<'_>,
    scratch: &mut Scratch,
) -> Result<()> {
    let py = arg.py();
    let interface = match arg.getattr(intern!(py, "__cuda_array_interface__")) {
        Ok(interface) => interface,
        Err(e) if e.is_instance_of::<PyAttributeError>(py) => {
            return Err(at.error(format!(
                "{}.__cuda_array_interface__ failed: {e}",
                type_name(arg)
            )))
        }
        Err(e) => return Err(e.into()),
    };
    let cai = interface
        .cast::<PyDict>()
        .map_err(|_| at.error("__cuda_array_interface__ must be a dict"))?;
    let get = |key: &Bound<'py, PyString>| -> Result<Bound<'py, PyAny>> {
        cai.get_item(key)?.ok_or_else(|| {
            at.error(format!(
                "__cuda_array_interface__ lacks the required key '{key}'"
            ))
        })
    };
    // `None` is as good as absent for the optional keys.
    let optional = |key: &Bound<'py, PyString>| -> Result<Option<Bound<'py, PyAny>>> {
        Ok(cai.get_item(key)?.filter(|value| !value.is_none()))
    };
    if optional(intern!(py, "mask"))?.is_some() {
        return Err(at.error("masked arrays (__cuda_array_interface__ 'mask') are not supported"));
    }
    let typestr = get(intern!(py, "typestr"))?;
    let typestr = typestr
        .cast::<PyString>()
        .ok()
        .and_then(|typestr| typestr.to_str().ok())
        .ok_or_else(|| at.error("__cuda_array_interface__ 'typestr' must be a str"))?;
    let Some(element) = typestr_element(typestr) else {
        if matches!(typestr.as_bytes().get(1), Some(b'V' | b'M' | b'm')) {
            scratch.needs_numba = true;
            return Ok(());
        }
        return Err(at.error(format!(
            "__cuda_array_interface__ typestr {typestr:?} is not supported"
        )));
    };
    let (data, readonly) = pointer_and_flag(&get(intern!(py, "data"))?).ok_or_else(|| {
        at.error("__cuda_array_interface__ 'data' must be a (pointer, read-only) tuple")
    })?;
    let shape = get(intern!(py, "shape"))?;
    let strides = optional(intern!(py, "strides"))?;
    let stream = optional(intern!(py, "stream"))?;
    let value = ValueAt::next(scratch, at);
    let (producers, unverified) = (
        &mut scratch.streams.producers,
        &mut scratch.devices.unverified_pointers,
    );
    let staged = stage_dims(&mut scratch.dims, at, (data, element), |dims| {
        let start = dims.len();
        let ndim = extend_from_int_tuple(dims, &shape, "shape", at)?;
        match &strides {
            Some(strides) => {
                let nstrides = extend_from_int_tuple(dims, strides, "strides", at)?;
                if nstrides != ndim {
                    return Err(at.error(format!(
                        "__cuda_array_interface__ has {ndim} dimensions but {nstrides} strides"
                    )));
                }
            }
            None => append_c_strides(dims, start, element.itemsize() as i64),
        }
        if let Some(stream) = &stream {
            let handle: usize = stream.extract().map_err(|_| {
                at.error("__cuda_array_interface__ 'stream' must be None or an int")
            })?;
            if handle == 0 {
                return Err(at.error("__cuda_array_interface__ 'stream' must not be 0 (ambiguous)"));
            }
            producers.push(handle);
        }
        let shape = &dims[start..start + ndim];
        let nonempty = !shape.contains(&0);
        if data == 0 && nonempty && shape.iter().product::<i64>() > 0 {
            return Err(
                at.error("__cuda_array_interface__ has a null data pointer for a non-empty array")
            );
        }
        if nonempty {
            unverified.push(value);
        }
        Ok(())
    })?;
    push_staged(scratch, data, element, staged, readonly);
    Ok(())
}

/// The `(pointer, read-only)` of an interface's `data`: a 2-tuple of an int within u64 (or
/// an object with `__index__`) and a bool; `None` for anything else.
fn pointer_and_flag(data: &Bound<'_, PyAny>) -> Option<(u64, bool)> {
    let data = data.cast::<PyTuple>().ok()?;
    if data.len() != 2 {
        return None;
    }
    let pointer = data.get_borrowed_item(0).ok()?;
    let pointer = if pointer.is_exact_instance_of::<PyInt>() {
        int_as_u64(&pointer).ok()?
    } else {
        pointer.extract().ok()?
    };
    let readonly = data.get_borrowed_item(1).ok()?.extract().ok()?;
    Some((pointer, readonly))
}

/// The element type of a CUDA Array Interface type string: numeric, datetime or timedelta.
/// Not a record: numba-cuda types the array by its typestr alone (`"|V8"`, raw bytes, which
/// it refuses), never by its `descr`, so such arrays stay numba-cuda's.
fn typestr_element(typestr: &str) -> Option<ElementType> {
    if let Some(scalar) = Scalar::from_typestr(typestr) {
        return Some(scalar.into());
    }
    datetime_element(typestr)
}
