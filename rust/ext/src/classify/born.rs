//! Arrays described from birth: the numba-cuda `DeviceNDArray`s that fastlaunch's memory API
//! makes (`memory/objects.py`) carry what a launch reads of them (pointer, shape, strides,
//! element) as an [`ArrayDescription`] in an instance attribute, so that their first launch
//! reads one attribute instead of reading the array and remembering it (`numba.rs`).
//!
//! A description is used only where it cannot be stale: on an instance of exactly the class
//! described (a subclass may answer `shape` or `gpu_data` its own way), on the very object
//! it was made for (a description copied onto another object, by `copy.copy` say, is not its
//! own), and while the array holds the `gpu_data` it was made from (memory assigned since is
//! read). numba-cuda assigns none of an array's shape, strides, dtype or `gpu_data` after
//! its constructor, which is what the table of arrays read before (`numba.rs`) relies on too.
//! Anything else is read as any numba array is.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use pyo3::{PyTraverseError, PyVisit};

use super::known::KnownArray;
use super::numba::{self, DeviceArrayFields};
use super::{Position, Scratch};

/// The attribute a described array carries its description in (the class says `None`).
const ATTRIBUTE: &str = "_fastlaunch_description";

/// What a launch reads of one array, for that array only.
#[pyclass(frozen, module = "fastlaunch._core")]
pub(crate) struct ArrayDescription {
    /// The address of the array described.
    owner: usize,
    /// The array's `gpu_data` when described (held: its address stays its own).
    gpu_data: Py<PyAny>,
    array: KnownArray,
}

#[pymethods]
impl ArrayDescription {
    fn __traverse__(&self, visit: PyVisit<'_>) -> std::result::Result<(), PyTraverseError> {
        visit.call(&self.gpu_data)
    }
}

/// The class whose instances may be described (numba-cuda's `DeviceNDArray`), held; its
/// address is what a launch compares an array's type with.
static DESCRIBED_CLASS: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static DESCRIBED_CLASS_ADDRESS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Where arrays are read as they are described (its memory reused).
    static BIRTHS: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Lets instances of `class` (numba-cuda's `DeviceNDArray`, once per process) carry a launch
/// description: the class gets the attribute, `None`, so that reading it from an array
/// without one raises nothing.
#[pyfunction]
pub(crate) fn describe_births_of(class: &Bound<'_, PyType>) -> PyResult<()> {
    let py = class.py();
    let held = DESCRIBED_CLASS.get_or_init(py, || class.clone().unbind());
    if !held.bind(py).is(class) {
        return Err(PyValueError::new_err(format!(
            "arrays of {} are described already; not also of {class}",
            held.bind(py)
        )));
    }
    class.setattr(intern!(py, ATTRIBUTE), py.None())?;
    DESCRIBED_CLASS_ADDRESS.store(class.as_ptr() as usize, Ordering::Release);
    Ok(())
}

/// Describes `array`, just made with these attributes (the very objects it holds), as a
/// launch would read it, when it is an instance of exactly the class described; an array the
/// launch could not read (a dtype that numba-cuda passes, no readable pointer, ...) is left
/// undescribed, to be read (and refused) at its launch.
#[pyfunction]
pub(crate) fn describe_birth(
    array: &Bound<'_, PyAny>,
    shape: &Bound<'_, PyAny>,
    strides: &Bound<'_, PyAny>,
    dtype: &Bound<'_, PyAny>,
    gpu_data: &Bound<'_, PyAny>,
) -> PyResult<()> {
    if !is_of_described_class(array) {
        return Ok(());
    }
    let fields = DeviceArrayFields {
        dtype,
        gpu_data,
        shape,
        strides,
    };
    let Some(description) = describe(array, fields) else {
        return Ok(());
    };
    array.setattr(intern!(array.py(), ATTRIBUTE), description)
}

/// Whether `array`'s type is exactly the class described.
#[inline]
fn is_of_described_class(array: &Bound<'_, PyAny>) -> bool {
    // SAFETY: `array` is a valid object; its type is read without taking a reference.
    let type_address = unsafe { ffi::Py_TYPE(array.as_ptr()) } as usize;
    type_address == DESCRIBED_CLASS_ADDRESS.load(Ordering::Acquire)
}

/// `array` read from its `fields` as `numba.rs` reads a numba device array.
fn describe(
    array: &Bound<'_, PyAny>,
    fields: DeviceArrayFields<'_, '_>,
) -> Option<ArrayDescription> {
    let gpu_data = fields.gpu_data.clone().unbind();
    let at = Position { index: 0, name: "" };
    let known = BIRTHS.with(|births| {
        let mut scratch = births.try_borrow_mut().ok()?;
        scratch.reset();
        numba::read_device_array_fields(fields, at, &mut scratch).ok()?;
        if scratch.needs_numba || scratch.values.len() != 1 {
            return None;
        }
        KnownArray::last_pushed(&scratch, 0)
    })?;
    Some(ArrayDescription {
        owner: array.as_ptr() as usize,
        gpu_data,
        array: known,
    })
}

/// Pushes `arg` from its description, if it carries its own, still true; `false`: read it.
#[inline]
pub(super) fn push_described(arg: &Bound<'_, PyAny>, scratch: &mut Scratch) -> bool {
    if !is_of_described_class(arg) {
        return false;
    }
    let py = arg.py();
    let Ok(value) = arg.getattr(intern!(py, ATTRIBUTE)) else {
        return false;
    };
    let Ok(description) = value.cast_exact::<ArrayDescription>() else {
        return false; // None: made by numba-cuda, or not describable
    };
    let description = description.get();
    if description.owner != arg.as_ptr() as usize {
        return false;
    }
    let same_memory = arg
        .getattr(intern!(py, "gpu_data"))
        .is_ok_and(|gpu_data| gpu_data.is(description.gpu_data.bind(py)));
    if !same_memory {
        return false;
    }
    description.array.push(scratch);
    true
}
