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
//!
//! Every array pays for its birth, launched or not, so a birth does little: all that an
//! array reads but its pointer (its [`Layout`]) is the same for every array of one
//! `objects.layout` and dtype, read once and shared; the description itself holds the
//! pointer, the owner's address and the `gpu_data`.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

use super::arrays::element_type;
use super::known::KnownArray;
use super::numba::{self, DeviceArrayFields};
use super::{Position, Scratch};

/// The attribute a described array carries its description in (the class says `None`).
const ATTRIBUTE: &str = "_fastlaunch_description";

/// What a launch reads of one array, for that array only (kept on a free list: one is made
/// at every birth).
#[pyclass(frozen, freelist = 64, module = "fastlaunch._core")]
pub(crate) struct ArrayDescription {
    /// The address of the array described.
    owner: usize,
    /// The array's `gpu_data` when described (held: its address stays its own).
    gpu_data: Py<PyAny>,
    /// The address of the array's first element.
    data: u64,
    layout: Arc<Layout>,
}

#[pymethods]
impl ArrayDescription {
    fn __traverse__(&self, visit: PyVisit<'_>) -> std::result::Result<(), PyTraverseError> {
        visit.call(&self.gpu_data)
    }
}

/// What every array of one layout and element type reads the same: all but its pointer.
pub(super) struct Layout {
    /// An array of this layout as read (its pointer is another array's).
    array: KnownArray,
    /// The bits that must be clear in a pointer to these elements (none for an empty array).
    misaligned: u64,
}

/// The class whose instances may be described (numba-cuda's `DeviceNDArray`), held; its
/// address is what a launch compares an array's type with.
static DESCRIBED_CLASS: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static DESCRIBED_CLASS_ADDRESS: AtomicUsize = AtomicUsize::new(0);

/// Slots in a thread's table of layouts.
const LAYOUT_SLOTS: usize = 64;

/// A layout by the `objects.layout` tuple and the dtype it was read from, both held (their
/// addresses stay theirs); `None`: arrays of it are not described.
struct LayoutEntry {
    described: Py<PyTuple>,
    dtype: Py<PyAny>,
    layout: Option<Arc<Layout>>,
}

thread_local! {
    /// Where arrays are read as they are described (its memory reused).
    static BIRTHS: RefCell<Scratch> = RefCell::new(Scratch::default());
    /// The layouts read on this thread, by the addresses of their tuple and dtype, one
    /// per slot (a new one replaces the slot's).
    static LAYOUTS: RefCell<Vec<Option<LayoutEntry>>> = const { RefCell::new(Vec::new()) };
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

/// The description of `array`, just made with the shape and strides of `described` (an
/// `objects.layout` tuple), `dtype` and `gpu_data` (the very objects it holds), for its
/// `_fastlaunch_description`, when it is an instance of exactly the class described; `None`
/// for an array the launch could not read (a dtype that numba-cuda passes, no readable or a
/// misaligned pointer, ...), to be read (and refused) at its launch. `address` is
/// `gpu_data`'s, where the caller knows it (which saves reading it).
#[pyfunction]
pub(crate) fn describe_birth(
    array: &Bound<'_, PyAny>,
    described: &Bound<'_, PyTuple>,
    dtype: &Bound<'_, PyAny>,
    gpu_data: &Bound<'_, PyAny>,
    address: Option<u64>,
) -> Option<ArrayDescription> {
    if !is_of_described_class(array) {
        return None;
    }
    let data = match address {
        Some(address) => address,
        None => numba::owned_device_pointer(gpu_data).ok()?,
    };
    let layout = match cached_layout(described, dtype) {
        Some(cached) => cached,
        None => remember_layout(described, dtype, gpu_data, data),
    }?;
    if data & layout.misaligned != 0 {
        return None;
    }
    Some(ArrayDescription {
        owner: array.as_ptr() as usize,
        gpu_data: gpu_data.clone().unbind(),
        data,
        layout,
    })
}

/// Whether `array`'s type is exactly the class described.
#[inline]
fn is_of_described_class(array: &Bound<'_, PyAny>) -> bool {
    // SAFETY: `array` is a valid object; its type is read without taking a reference.
    let type_address = unsafe { ffi::Py_TYPE(array.as_ptr()) } as usize;
    type_address == DESCRIBED_CLASS_ADDRESS.load(Ordering::Acquire)
}

/// The slot of the layout of `described` and `dtype` (Fibonacci hashing of both addresses).
fn layout_slot(described: &Bound<'_, PyTuple>, dtype: &Bound<'_, PyAny>) -> usize {
    let key = (described.as_ptr() as u64 >> 4) ^ (dtype.as_ptr() as u64 >> 4).rotate_left(17);
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % LAYOUT_SLOTS
}

/// The layout read before for `described` and `dtype`, if any (`Some(None)`: not described).
#[inline]
fn cached_layout(
    described: &Bound<'_, PyTuple>,
    dtype: &Bound<'_, PyAny>,
) -> Option<Option<Arc<Layout>>> {
    LAYOUTS.with(|layouts| {
        let layouts = layouts.try_borrow().ok()?;
        let entry = layouts.get(layout_slot(described, dtype))?.as_ref()?;
        let found = entry.described.bind(described.py()).is(described)
            && entry.dtype.bind(described.py()).is(dtype);
        found.then(|| entry.layout.clone())
    })
}

/// Reads the layout of `described` and `dtype`, as `numba.rs` reads the array of them over
/// `gpu_data` (at `data`), and keeps it.
fn remember_layout(
    described: &Bound<'_, PyTuple>,
    dtype: &Bound<'_, PyAny>,
    gpu_data: &Bound<'_, PyAny>,
    data: u64,
) -> Option<Arc<Layout>> {
    let at = Position { index: 0, name: "" };
    let element = element_type(dtype, at).ok().flatten();
    let alignment = element.map_or(1, |element| element.alignment() as u64);
    if data & (alignment - 1) != 0 {
        return None; // refused for its pointer, which says nothing of other arrays: not kept
    }
    // (an array read at another address than the caller's: not described, nor kept)
    let array = read_layout(described, dtype, gpu_data, at);
    if array.as_ref().is_some_and(|array| array.data() != data) {
        return None;
    }
    let layout = array.map(|array| {
        let misaligned = if array.is_empty() { 0 } else { alignment - 1 };
        Arc::new(Layout { array, misaligned })
    });
    LAYOUTS.with(|layouts| {
        let Ok(mut layouts) = layouts.try_borrow_mut() else {
            return;
        };
        if layouts.is_empty() {
            layouts.resize_with(LAYOUT_SLOTS, || None);
        }
        if let Some(slot) = layouts.get_mut(layout_slot(described, dtype)) {
            // the entry replaced is dropped here, with the GIL held
            *slot = Some(LayoutEntry {
                described: described.clone().unbind(),
                dtype: dtype.clone().unbind(),
                layout: layout.clone(),
            });
        }
    });
    layout
}

/// The array of `described` and `dtype` over `gpu_data`, as `numba.rs` reads it; `None` where
/// a launch reads something else (numba-cuda passes it) or refuses it.
fn read_layout(
    described: &Bound<'_, PyTuple>,
    dtype: &Bound<'_, PyAny>,
    gpu_data: &Bound<'_, PyAny>,
    at: Position<'_>,
) -> Option<KnownArray> {
    let fields = DeviceArrayFields {
        dtype,
        gpu_data,
        shape: &described.get_item(2).ok()?,
        strides: &described.get_item(3).ok()?,
    };
    BIRTHS.with(|births| {
        let mut scratch = births.try_borrow_mut().ok()?;
        scratch.reset();
        numba::read_device_array_fields(fields, at, &mut scratch).ok()?;
        if scratch.needs_numba || scratch.values.len() != 1 {
            return None;
        }
        KnownArray::last_pushed(&scratch, 0)
    })
}

/// Pushes `arg` from its description, if it carries its own, still true; `false`: read it.
#[inline]
pub(super) fn push_described(arg: &Bound<'_, PyAny>, scratch: &mut Scratch) -> bool {
    let Some(description) = own_description(arg) else {
        return false;
    };
    let description = description.get();
    description
        .layout
        .array
        .push_over(description.data, scratch);
    true
}

/// The description `arg` carries, when it may be used: its own, of the memory it holds.
#[inline]
fn own_description<'py>(arg: &Bound<'py, PyAny>) -> Option<Bound<'py, ArrayDescription>> {
    if !is_of_described_class(arg) {
        return None;
    }
    let py = arg.py();
    let value = arg.getattr(intern!(py, ATTRIBUTE)).ok()?;
    // None: made by numba-cuda, or not describable
    let description = value.cast_into_exact::<ArrayDescription>().ok()?;
    let described = description.get();
    if described.owner != arg.as_ptr() as usize {
        return None;
    }
    let same_memory = arg
        .getattr(intern!(py, "gpu_data"))
        .is_ok_and(|gpu_data| gpu_data.is(described.gpu_data.bind(py)));
    same_memory.then_some(description)
}

/// The layout `arg` shares with the arrays described like it, when it carries its own
/// description (`same_layout.rs`).
pub(super) fn described_layout(arg: &Bound<'_, PyAny>) -> Option<Arc<Layout>> {
    Some(own_description(arg)?.get().layout.clone())
}

/// `arg`'s pointer, when it carries its own description, of `layout`.
#[inline]
pub(super) fn described_data(arg: &Bound<'_, PyAny>, layout: &Arc<Layout>) -> Option<u64> {
    let description = own_description(arg)?;
    let description = description.get();
    Arc::ptr_eq(&description.layout, layout).then_some(description.data)
}
