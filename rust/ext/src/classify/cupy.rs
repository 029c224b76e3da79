//! CuPy arrays: read from CuPy's object layout where it is confirmed (`crate::interop::cupy_layout`);
//! else through attributes: pointer from `data.ptr`, a C-contiguous array's dims from its
//! size or shape alone (CuPy builds its `shape` and `strides` tuples anew on each access).
//!
//! Arrays launched before are pushed from a per-thread table (`known.rs`): a CuPy array's
//! `data` (pointer and offset) and `dtype` are fixed for its life; only its `shape` can be
//! assigned in place (same size, so the same shape or another ndim), and is checked on every
//! launch: from CuPy's object layout where it is confirmed (`crate::interop::cupy_layout`), else
//! `ndim` for a 1-D array and the `shape` tuple otherwise.

use std::cell::RefCell;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyString, PyTuple, PyType};

use super::arrays::{
    append_c_strides, extend_from_int_tuple, int_as_u64, numeric_element_type, push_array,
    push_from_tuples, push_staged, stage_dims,
};
use super::known::{push_known_or_read, KnownArray, KnownObjects};
use super::{Position, Scratch};

thread_local! {
    static KNOWN_CUPY_ARRAYS: RefCell<KnownObjects<KnownArray>> =
        const { RefCell::new(KnownObjects::new()) };
}
use crate::errors::Result;

/// Whether `class` is CuPy's array type or a subclass: `cupy.ndarray`, or the base class
/// it derives from (`cupy._core.core._ndarray_base`, CuPy 13 and newer). CuPy is not
/// imported for this: an instance of its array means that it has been.
pub(super) fn is_cupy_array<'py>(class: &Bound<'py, PyType>) -> bool {
    let py = class.py();
    let Ok(modules) = py
        .import(intern!(py, "sys"))
        .and_then(|sys| sys.getattr(intern!(py, "modules")))
    else {
        return false;
    };
    let cupy_class = |module: &Bound<'py, PyString>, name: &Bound<'py, PyString>| {
        modules
            .get_item(module)
            .and_then(|module| module.getattr(name))
            .ok()
            .and_then(|found| found.cast_into::<PyType>().ok())
    };
    [
        (intern!(py, "cupy"), intern!(py, "ndarray")),
        (intern!(py, "cupy._core.core"), intern!(py, "_ndarray_base")),
    ]
    .into_iter()
    .filter_map(|(module, name)| cupy_class(module, name))
    .any(|cupy| class.is_subclass(&cupy).unwrap_or(false))
}

/// A `cupy.ndarray` (CuPy's current stream then counts for ordering): from the table of
/// arrays launched before if its shape is unchanged, else read and then remembered.
/// `layout`: the strategy found CuPy's object layout readable for `arg`'s type.
pub(super) fn read(
    arg: &Bound<'_, PyAny>,
    at: Position<'_>,
    scratch: &mut Scratch,
    layout: bool,
) -> Result<()> {
    scratch.streams.has_cupy = true;
    push_known_or_read(
        &KNOWN_CUPY_ARRAYS,
        arg,
        scratch,
        |array| has_shape(arg, array.shape(), layout),
        |scratch| read_fields(arg, at, scratch, layout),
    )
}

/// Whether CuPy array `arg` has `shape`: only the shape of a CuPy array can change in place,
/// and only to one of the same size, so a 1-D array keeps its shape while it stays 1-D.
/// `layout`: `arg`'s type is one whose layout may be read.
#[inline]
pub(super) fn has_shape(arg: &Bound<'_, PyAny>, expected: &[i64], layout: bool) -> PyResult<bool> {
    if layout {
        // SAFETY: `layout` is only set for types `cupy_layout::applies_to` accepted.
        if let Some(same) = unsafe { crate::interop::cupy_layout::has_shape(arg, expected) } {
            return Ok(same);
        }
    }
    let py = arg.py();
    if expected.len() == 1 {
        return Ok(int_as_u64(&arg.getattr(intern!(py, "ndim"))?)? == 1);
    }
    let shape = arg.getattr(intern!(py, "shape"))?;
    let Ok(shape) = shape.cast::<PyTuple>() else {
        return Ok(false);
    };
    if shape.len() != expected.len() {
        return Ok(false);
    }
    for (item, &extent) in shape.iter().zip(expected) {
        if item.extract::<i64>().ok() != Some(extent) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Reads a CuPy array's fields: from CuPy's object layout once it is confirmed, else
/// through its attributes.
fn read_fields(
    arg: &Bound<'_, PyAny>,
    at: Position<'_>,
    scratch: &mut Scratch,
    layout: bool,
) -> Result<()> {
    let laid_out = if layout {
        // SAFETY: `layout` is only set for types `cupy_layout::applies_to` accepted.
        unsafe { crate::interop::cupy_layout::read(arg) }
    } else {
        None
    };
    if let Some(array) = laid_out {
        let Some(scalar) = numeric_element_type(&array.dtype, at)? else {
            scratch.needs_numba = true;
            return Ok(());
        };
        let shape = array.shape.iter().map(|&extent| extent as i64);
        // As the attribute read below: a C-contiguous array's strides follow from its shape.
        let strides = (!array.c_contiguous).then(|| array.strides.iter().map(|&s| s as i64));
        return push_array(
            scratch,
            at,
            array.data,
            scalar.into(),
            shape,
            strides,
            false,
        );
    }
    let (values_before, fingerprint_before) = (scratch.values.len(), scratch.fingerprint.len());
    read_attributes(arg, at, scratch)?;
    // Not confirmed yet (or refuted): compared with what the attributes just gave, if they
    // gave an array (not one numba-cuda launches: the last value is then another argument's).
    if layout && scratch.values.len() > values_before {
        if let Some(known) = KnownArray::last_pushed(scratch, fingerprint_before) {
            // SAFETY: `layout` is only set for types `cupy_layout::applies_to` accepted.
            unsafe { crate::interop::cupy_layout::confirm(arg, known.shape(), known.data()) };
        }
    }
    Ok(())
}

/// Reads a CuPy array's fields through its attributes.
fn read_attributes(arg: &Bound<'_, PyAny>, at: Position<'_>, scratch: &mut Scratch) -> Result<()> {
    let py = arg.py();
    let Some(scalar) = numeric_element_type(&arg.getattr(intern!(py, "dtype"))?, at)? else {
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
        let staged = stage_dims(&mut scratch.dims, at, (data, scalar.into()), |dims| {
            let start = dims.len();
            cupy_shape(arg, at, dims)?;
            append_c_strides(dims, start, scalar.itemsize() as i64);
            Ok(())
        })?;
        push_staged(scratch, data, scalar.into(), staged, false);
        return Ok(());
    }
    push_from_tuples(
        at,
        scratch,
        data,
        scalar.into(),
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
