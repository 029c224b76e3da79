//! Generic CUDA Array Interface objects: the interface dict read key by key. Their pointer
//! may be anything, so the launch asks the driver about it (`Scratch::unverified_pointers`).

use pyo3::exceptions::PyAttributeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::arrays::{datetime_element, int_tuple, push_array, tuple_ints, ElementType};
use super::{type_name, Position, Scratch, ValueAt};
use crate::errors::Result;
use crate::scalar::Scalar;

/// A generic `__cuda_array_interface__` object (v3: its `stream` orders the launch).
pub(super) fn read(arg: &Bound<'_, PyAny>, at: Position<'_>, scratch: &mut Scratch) -> Result<()> {
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
    let get = |key: &str| -> Result<Bound<'_, PyAny>> {
        cai.get_item(key)?.ok_or_else(|| {
            at.error(format!(
                "__cuda_array_interface__ lacks the required key '{key}'"
            ))
        })
    };
    if let Some(mask) = cai.get_item("mask")? {
        if !mask.is_none() {
            return Err(
                at.error("masked arrays (__cuda_array_interface__ 'mask') are not supported")
            );
        }
    }
    let typestr: String = get("typestr")?
        .extract()
        .map_err(|_| at.error("__cuda_array_interface__ 'typestr' must be a str"))?;
    let Some(element) = typestr_element(&typestr) else {
        if matches!(typestr.as_bytes().get(1), Some(b'V' | b'M' | b'm')) {
            scratch.needs_numba = true;
            return Ok(());
        }
        return Err(at.error(format!(
            "__cuda_array_interface__ typestr {typestr:?} is not supported"
        )));
    };
    let (data, readonly): (u64, bool) = get("data")?.extract().map_err(|_| {
        at.error("__cuda_array_interface__ 'data' must be a (pointer, read-only) tuple")
    })?;
    let shape = tuple_ints(&int_tuple(&get("shape")?, "shape", at)?, "shape", at)?;
    let strides = match cai.get_item("strides")? {
        Some(s) if !s.is_none() => Some(tuple_ints(&int_tuple(&s, "strides", at)?, "strides", at)?),
        _ => None,
    };
    if let Some(strides) = &strides {
        if strides.len() != shape.len() {
            return Err(at.error(format!(
                "__cuda_array_interface__ has {} dimensions but {} strides",
                shape.len(),
                strides.len()
            )));
        }
    }
    match cai.get_item("stream")? {
        Some(stream) if !stream.is_none() => {
            let handle: usize = stream.extract().map_err(|_| {
                at.error("__cuda_array_interface__ 'stream' must be None or an int")
            })?;
            if handle == 0 {
                return Err(at.error("__cuda_array_interface__ 'stream' must not be 0 (ambiguous)"));
            }
            scratch.streams.producers.push(handle);
        }
        _ => {}
    }
    let nonempty = !shape.contains(&0);
    if data == 0 && nonempty && shape.iter().product::<i64>() > 0 {
        return Err(
            at.error("__cuda_array_interface__ has a null data pointer for a non-empty array")
        );
    }
    if nonempty {
        let value = ValueAt::next(scratch, at);
        scratch.devices.unverified_pointers.push(value);
    }
    push_array(
        scratch,
        at,
        data,
        element,
        shape.into_iter(),
        strides.map(Vec::into_iter),
        readonly,
    )
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
