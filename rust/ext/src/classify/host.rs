//! Host NumPy arrays (`k[g, b](numpy_array)`) and numba-cuda's transfer hints (`cuda.In`,
//! `cuda.Out`, `cuda.InOut`): passed as device arrays over copies the launch stages
//! (`staging.rs`), as numba-cuda's launch passes them: copied in before the launch and back
//! after it, `In` not copied back and `Out` not copied in. What numba-cuda passes another way
//! stays numba-cuda's: subclasses of `ndarray`, arrays that are not C- or F-contiguous or not
//! aligned, dtypes fastlaunch does not pack, and hints around anything but a host array.
//! Record and datetime arrays are staged as numeric ones are (numba-cuda copies them too).

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyType;
use smallvec::SmallVec;

use super::arrays::{dtype_element, layout_of, push_array};
use super::fingerprint::LAYOUT_A;
use super::{Position, Scratch};
use crate::errors::Result;
use crate::scratch::HostCopy;

/// Which way a host array's bytes go around the launch.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Transfer {
    /// A bare host array, or `cuda.InOut`: in before, back after.
    InOut,
    /// `cuda.In`: in only.
    In,
    /// `cuda.Out`: back only (the device copy starts uninitialised).
    Out,
}

/// The transfer a class of `numba.cuda.args` stands for, by its name.
pub(super) fn hint_transfer(class: &Bound<'_, PyType>) -> Option<Transfer> {
    match class.name().ok()?.to_str().ok()? {
        "InOut" => Some(Transfer::InOut),
        "In" => Some(Transfer::In),
        "Out" => Some(Transfer::Out),
        _ => None,
    }
}

/// A transfer hint: the host array it holds (`.value`), or numba-cuda's launch for anything
/// else it may hold.
pub(super) fn read_hint(
    arg: &Bound<'_, PyAny>,
    transfer: Transfer,
    at: Position<'_>,
    scratch: &mut Scratch,
) -> Result<()> {
    let py = arg.py();
    let value = arg.getattr(intern!(py, "value"))?;
    let ndarray = py
        .import(intern!(py, "numpy"))?
        .getattr(intern!(py, "ndarray"))?;
    if !value.get_type().is(&ndarray) {
        scratch.needs_numba = true;
        return Ok(());
    }
    read(&value, transfer, false, at, scratch)
}

/// A host NumPy array (of exactly `numpy.ndarray`): its shape, strides and dtype read
/// through the buffer protocol and its dtype, its bytes staged for the launch. `implicit`:
/// passed bare, not in a transfer hint.
pub(super) fn read(
    arg: &Bound<'_, PyAny>,
    transfer: Transfer,
    implicit: bool,
    at: Position<'_>,
    scratch: &mut Scratch,
) -> Result<()> {
    let py = arg.py();
    let Some(element) = dtype_element(&arg.getattr(intern!(py, "dtype"))?, at)? else {
        scratch.needs_numba = true; // unstructured void, objects, strings: numba-cuda decides
        return Ok(());
    };
    let Some(exported) = Exported::of(arg) else {
        scratch.needs_numba = true;
        return Ok(());
    };
    let itemsize = element.itemsize() as i64;
    if layout_of(&exported.shape, &exported.strides, itemsize) == LAYOUT_A
        || exported.host % element.alignment() != 0
    {
        scratch.needs_numba = true; // numba-cuda copies these its own way
        return Ok(());
    }
    let value = scratch.values.len();
    push_array(
        scratch,
        at,
        exported.host as u64,
        element,
        exported.shape.iter().copied(),
        Some(exported.strides.iter().copied()),
        exported.readonly,
    )?;
    scratch.staging.copies.push(HostCopy {
        value,
        host: exported.host,
        len: exported.len,
        copy_in: transfer != Transfer::Out,
        copy_back: transfer != Transfer::In && !exported.readonly,
    });
    scratch.staging.implicit |= implicit;
    Ok(())
}

/// What a host array's buffer export says of it.
struct Exported {
    host: usize,
    len: usize,
    readonly: bool,
    shape: SmallVec<[i64; 4]>,
    strides: SmallVec<[i64; 4]>,
}

impl Exported {
    /// `array`'s export with shape and strides, or `None` (its error cleared) when NumPy
    /// does not export it.
    fn of(array: &Bound<'_, PyAny>) -> Option<Exported> {
        let mut view = std::mem::MaybeUninit::<ffi::Py_buffer>::uninit();
        // SAFETY: a valid object and an out-struct; on success the view is released below.
        if unsafe { ffi::PyObject_GetBuffer(array.as_ptr(), view.as_mut_ptr(), ffi::PyBUF_STRIDES) }
            != 0
        {
            drop(PyErr::take(array.py()));
            return None;
        }
        // SAFETY: initialised by the successful call above.
        let mut view = unsafe { view.assume_init() };
        let ndim = usize::try_from(view.ndim).unwrap_or(0);
        let dims = |pointer: *mut ffi::Py_ssize_t| -> SmallVec<[i64; 4]> {
            if ndim == 0 || pointer.is_null() {
                return SmallVec::new();
            }
            // SAFETY: with PyBUF_STRIDES the exporter fills `shape` and `strides` with `ndim`
            // values each, valid until the view is released.
            unsafe { std::slice::from_raw_parts(pointer, ndim) }
                .iter()
                .map(|&d| d as i64)
                .collect()
        };
        let exported = Exported {
            host: view.buf as usize,
            len: usize::try_from(view.len).unwrap_or(0),
            readonly: view.readonly != 0,
            shape: dims(view.shape),
            strides: dims(view.strides),
        };
        // The address stays valid after the release: an ndarray's data lives as long as the
        // array (or what it views, which it holds), and the argument outlives the launch.
        // SAFETY: releasing the view obtained above, once.
        unsafe { ffi::PyBuffer_Release(&mut view) };
        (exported.shape.len() == ndim && exported.strides.len() == ndim).then_some(exported)
    }
}
