//! `cuda.device_array(shape, dtype, strides, order, stream)` under install, called straight
//! from Python: its common call (a contiguous array of a shape and dtype made before on this
//! thread) found in a small per-thread table and made by [`new_pool_array`] with no Python
//! frame; every other call, and every array the pool cannot make, goes to the Python
//! functions `python/fastlaunch/memory/arrays.py` gives once ([`give_device_array`]), which
//! stay the reference: the table holds only what their `_contiguous_layout` returned.

use std::cell::RefCell;

use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyTuple, PyType};
use smallvec::SmallVec;

use super::numba_arrays::new_pool_array;
use crate::streams::memory_stream_handle;

/// The Python side, given once.
struct PythonSide {
    /// `device_array` in Python: every call the table does not serve.
    in_python: Py<PyAny>,
    /// `_contiguous_layout(shape, order, dtype)`: `(NumPy dtype, objects.layout)` or None.
    contiguous_layout: Py<PyAny>,
    /// `allocate_array_in_python(described, dtype, stream, stream_handle)`: where the pool
    /// did not make the array.
    allocate_in_python: Py<PyAny>,
}

static PYTHON_SIDE: PyOnceLock<PythonSide> = PyOnceLock::new();

/// Gives [`device_array`] its Python side. The first call counts.
#[pyfunction]
pub(crate) fn give_device_array(
    in_python: Bound<'_, PyAny>,
    contiguous_layout: Bound<'_, PyAny>,
    allocate_in_python: Bound<'_, PyAny>,
) {
    let py = in_python.py();
    let _ = PYTHON_SIDE.set(
        py,
        PythonSide {
            in_python: in_python.unbind(),
            contiguous_layout: contiguous_layout.unbind(),
            allocate_in_python: allocate_in_python.unbind(),
        },
    );
}

/// An optional argument as the caller wrote it: an explicit None is `Given`, so that what
/// numba-cuda does with None stays the Python side's to decide.
pub(crate) enum Argument<'py> {
    Absent,
    Given(Bound<'py, PyAny>),
}

impl<'a, 'py> FromPyObject<'a, 'py> for Argument<'py> {
    type Error = PyErr;
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(Argument::Given(obj.to_owned()))
    }
}

impl<'py> Argument<'py> {
    /// The argument, or `default` where it was left out.
    fn or(self, default: Bound<'py, PyAny>) -> Bound<'py, PyAny> {
        match self {
            Argument::Absent => default,
            Argument::Given(value) => value,
        }
    }
}

/// numba-cuda's `cuda.device_array`: an uninitialised `DeviceNDArray` (the defaults are
/// numba-cuda's: `dtype="float64"`, `strides=None`, `order="C"`, `stream=0`).
#[pyfunction]
#[pyo3(signature = (
    shape,
    dtype = Argument::Absent,
    strides = Argument::Absent,
    order = Argument::Absent,
    stream = Argument::Absent,
), text_signature = "(shape, dtype='float64', strides=None, order='C', stream=0)")]
pub(crate) fn device_array<'py>(
    shape: &Bound<'py, PyAny>,
    dtype: Argument<'py>,
    strides: Argument<'py>,
    order: Argument<'py>,
    stream: Argument<'py>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = shape.py();
    let side = PYTHON_SIDE
        .get(py)
        .ok_or_else(|| PyRuntimeError::new_err("device_array's Python side was not given"))?;
    let dtype = dtype.or(intern!(py, "float64").clone().into_any());
    let strides = strides.or(py.None().into_bound(py));
    let order = order.or(intern!(py, "C").clone().into_any());
    let stream = stream.or(0i32.into_pyobject(py)?.into_any());
    let in_python = || {
        side.in_python
            .bind(py)
            .call1((shape, &dtype, &strides, &order, &stream))
    };
    if !strides.is_none() {
        return in_python();
    }
    let Some(fortran) = order_of(&order) else {
        return in_python();
    };
    let Some(found) = contiguous_layout(side, shape, &dtype, fortran, &order)? else {
        return in_python();
    };
    let (np_dtype, described) = (found.get_item(0)?, found.get_item(1)?);
    let described = described.cast::<PyTuple>()?;
    let handle = memory_stream_handle(&stream)?;
    match new_pool_array(described, &np_dtype, &stream, handle, false)? {
        Some(made) => Ok(made.array),
        None => side
            .allocate_in_python
            .bind(py)
            .call1((described, &np_dtype, &stream, handle)),
    }
}

/// Whether `order`, an exact `str`, is "F" (false: "C"); None for anything else.
fn order_of(order: &Bound<'_, PyAny>) -> Option<bool> {
    let order = order.cast_exact::<PyString>().ok()?;
    match order.to_str().ok()? {
        "C" => Some(false),
        "F" => Some(true),
        _ => None,
    }
}

/// A shape's extents, where it is an exact `int` or an exact tuple of exact `int`s (each
/// within i64): `n` and `(n,)` give one layout (`objects.layout` is keyed by the extents).
type Extents = SmallVec<[i64; 4]>;

fn extents_of(shape: &Bound<'_, PyAny>) -> Option<Extents> {
    if let Ok(extents) = shape.cast_exact::<PyTuple>() {
        let read = extents.iter_borrowed().map(|extent| exact_i64(&extent));
        return read.collect();
    }
    exact_i64(shape).map(|extent| SmallVec::from_slice(&[extent]))
}

fn exact_i64(value: &Bound<'_, PyAny>) -> Option<i64> {
    // SAFETY: PyLong_CheckExact only reads the object's type.
    if unsafe { ffi::PyLong_CheckExact(value.as_ptr()) } == 0 {
        return None;
    }
    value.extract().ok()
}

/// A contiguous layout `_contiguous_layout` returned, for the very dtype object it was given
/// (held here, so no other object takes its address).
struct Layout {
    extents: Extents,
    dtype: Py<PyAny>,
    fortran: bool,
    /// `(NumPy dtype, objects.layout)`, the very tuple.
    found: Py<PyTuple>,
}

/// Layouts kept per thread; the oldest leaves.
const KEPT: usize = 8;

thread_local! {
    static LAYOUTS: RefCell<Vec<Layout>> = const { RefCell::new(Vec::new()) };
}

/// `(NumPy dtype, objects.layout)` of the contiguous array for these arguments, from the
/// table or from `_contiguous_layout` (None: not a plain contiguous array, which the Python
/// side makes).
fn contiguous_layout<'py>(
    side: &PythonSide,
    shape: &Bound<'py, PyAny>,
    dtype: &Bound<'py, PyAny>,
    fortran: bool,
    order: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let py = shape.py();
    let Some(extents) = extents_of(shape) else {
        return Ok(None);
    };
    let kept = LAYOUTS.with(|layouts| {
        let layouts = layouts.try_borrow().ok()?;
        let layout = layouts.iter().find(|layout| {
            layout.dtype.as_ptr() == dtype.as_ptr()
                && layout.fortran == fortran
                && layout.extents == extents
        })?;
        Some(layout.found.bind(py).clone())
    });
    if kept.is_some() {
        return Ok(kept);
    }
    let found = side
        .contiguous_layout
        .bind(py)
        .call1((shape, order, dtype))?;
    if found.is_none() {
        return Ok(None);
    }
    let found = found.cast_into::<PyTuple>()?;
    if keeps_its_dtype(dtype, &found) {
        LAYOUTS.with(|layouts| {
            if let Ok(mut layouts) = layouts.try_borrow_mut() {
                if layouts.len() >= KEPT {
                    layouts.remove(0);
                }
                layouts.push(Layout {
                    extents,
                    dtype: dtype.clone().unbind(),
                    fortran,
                    found: found.clone().unbind(),
                });
            }
        });
    }
    Ok(Some(found))
}

/// Whether `dtype` always gives the same NumPy dtype, so that its layout may be kept: a name
/// (an exact `str`), a type, or the NumPy dtype `found` holds itself.
fn keeps_its_dtype(dtype: &Bound<'_, PyAny>, found: &Bound<'_, PyTuple>) -> bool {
    dtype.is_exact_instance_of::<PyString>()
        || dtype.is_exact_instance_of::<PyType>()
        || found
            .get_borrowed_item(0)
            .is_ok_and(|numpy_dtype| numpy_dtype.is(dtype))
}
