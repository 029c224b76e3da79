//! CuPy arrays: pointer from `data.ptr`; a C-contiguous array's dims from its size or
//! shape alone (CuPy builds its `shape` and `strides` tuples anew on each access).

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyBool;

use super::arrays::{
    append_c_strides, element_type, extend_from_int_tuple, int_as_u64, push_from_tuples,
    push_staged, stage_dims,
};
use super::{has_attribute, Position, Scratch};
use crate::errors::Result;

/// Whether a type from `module` with `class`'s attributes is a CuPy array.
pub(super) fn is_cupy_array(module: &str, class: &Bound<'_, PyAny>) -> bool {
    module.starts_with("cupy")
        && has_attribute(class, "__cuda_array_interface__")
        && has_attribute(class, "data")
}

/// A `cupy.ndarray` (CuPy's current stream then counts for ordering).
pub(super) fn read(arg: &Bound<'_, PyAny>, at: Position<'_>, scratch: &mut Scratch) -> Result<()> {
    scratch.streams.has_cupy = true;
    let py = arg.py();
    let Some(scalar) = element_type(&arg.getattr(intern!(py, "dtype"))?, at)? else {
        scratch.needs_numba = true;
        return Ok(());
    };
    let data = int_as_u64(
        &arg.getattr(intern!(py, "data"))?
            .getattr(intern!(py, "ptr"))?,
    )?;
    // CuPy keeps `_c_contiguous` current through every reshape. A C-contiguous array's
    // strides follow from its shape, and a 1-D one's shape is its size: plain attribute reads
    // instead of the `shape` and `strides` tuples CuPy builds on each access (~0.1 µs each).
    let c_contiguous = arg
        .getattr(intern!(py, "_c_contiguous"))
        .is_ok_and(|flag| flag.is(&*PyBool::new(py, true)));
    if c_contiguous {
        let staged = stage_dims(&mut scratch.dims, at, (data, scalar), |dims| {
            let start = dims.len();
            cupy_shape(arg, at, dims)?;
            append_c_strides(dims, start, scalar.itemsize() as i64);
            Ok(())
        })?;
        push_staged(scratch, data, scalar, staged, false);
        return Ok(());
    }
    push_from_tuples(
        at,
        scratch,
        data,
        scalar,
        &arg.getattr(intern!(py, "shape"))?,
        &arg.getattr(intern!(py, "strides"))?,
    )
}

/// Appends a C-contiguous CuPy array's shape to `dims`: a 1-D array's from its `size`,
/// others' from the `shape` tuple.
fn cupy_shape(arg: &Bound<'_, PyAny>, at: Position<'_>, dims: &mut Vec<i64>) -> Result<()> {
    let py = arg.py();
    if int_as_u64(&arg.getattr(intern!(py, "ndim"))?)? == 1 {
        let size = int_as_u64(&arg.getattr(intern!(py, "size"))?)?;
        dims.push(i64::try_from(size).map_err(|_| at.error("array size overflows 64 bits"))?);
        return Ok(());
    }
    extend_from_int_tuple(dims, &arg.getattr(intern!(py, "shape"))?, "shape", at).map(|_| ())
}
