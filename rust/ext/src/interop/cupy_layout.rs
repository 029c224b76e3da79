//! A CuPy array as C reads it: the object layout that CuPy's own public C API header
//! (`cupy/include/cupy_public_c_api.h`, its fallback for CuPy before 14.3) reads, which CuPy
//! keeps ABI-stable from 8.0 up to 14.3. A launch like the last proves a CuPy array
//! unchanged by its shape (the one thing that can change in place: `a.shape = ...`); read
//! here, that is a few integers compared instead of an attribute read. An array read for
//! the first time gets its pointer, shape, strides and dtype from here too.
//!
//! Trust is earned, not assumed. The layout is read only for subclasses of `cupy.ndarray`
//! of a CuPy in that range whose instances are as large as the layout
//! ([`applies_to`]), and only once an array read through its attributes agreed with it:
//! every array's first read is compared ([`confirm`]), and one disagreement turns the
//! layout off for the process. Until then, and after, shapes are read as attributes.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU8, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;
use pyo3::Borrowed;

/// `cupy.cuda.memory.MemoryPointer`'s fields.
#[repr(C)]
struct MemoryPointerObject {
    ob_base: ffi::PyObject,
    vtab: *mut c_void,
    ptr: isize,
    device_id: c_int,
    mem: *mut ffi::PyObject,
}

/// A C++ `std::vector<Py_ssize_t>` (libstdc++ and MSVC alike): three pointers.
#[repr(C)]
struct SsizeVector {
    begin: *const isize,
    end: *const isize,
    capacity_end: *const isize,
}

/// `cupy._core.core._ndarray_base`'s leading fields, as the header declares them.
#[repr(C)]
struct NdarrayObject {
    ob_base: ffi::PyObject,
    vtab: *mut c_void,
    weakref: *mut ffi::PyObject,
    size: isize,
    shape: SsizeVector,
    strides: SsizeVector,
    c_contiguous: c_int,
    f_contiguous: c_int,
    index_32_bits: c_int,
    dtype: *mut ffi::PyObject,
    data: *mut MemoryPointerObject,
    base: *mut ffi::PyObject,
}

/// More dimensions than any CuPy array has: a longer shape is a misread.
const MAX_NDIM: usize = 64;

const UNCONFIRMED: u8 = 0;
const CONFIRMED: u8 = 1;
const REFUTED: u8 = 2;

/// Whether the layout has been confirmed by an array read through its attributes, and not
/// refuted by any.
static TRUST: AtomicU8 = AtomicU8::new(UNCONFIRMED);

/// Whether instances of `class` may be read through the layout: a subclass of
/// `cupy.ndarray`, from a CuPy of 8.0 up to 14.3, whose instances are at least as large.
pub(crate) fn applies_to(class: &Bound<'_, PyType>) -> bool {
    let py = class.py();
    let Ok(cupy) = py.import("cupy") else {
        return false;
    };
    let in_range = cupy
        .getattr("__version__")
        .and_then(|version| version.extract::<String>())
        .ok()
        .and_then(|version| major_minor(&version))
        .is_some_and(|version| ((8, 0)..(14, 3)).contains(&version));
    let subclass = cupy
        .getattr("ndarray")
        .ok()
        .and_then(|ndarray| ndarray.cast_into::<PyType>().ok())
        .is_some_and(|ndarray| class.is_subclass(&ndarray).unwrap_or(false));
    let large_enough = class
        .getattr("__basicsize__")
        .and_then(|size| size.extract::<usize>())
        .is_ok_and(|size| size >= std::mem::size_of::<NdarrayObject>());
    in_range && subclass && large_enough
}

/// `(major, minor)` of a version string such as `14.2.0` or `14.3.0rc1`.
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor: String = parts
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((major, minor.parse().ok()?))
}

/// Whether `arg`'s shape, read from its memory, is `expected`, once the layout is confirmed;
/// `None` before that, after a refutation, or when the vector read does not look like a
/// shape.
///
/// # Safety
/// `arg`'s type is one [`applies_to`] accepted.
#[inline]
pub(crate) unsafe fn has_shape(arg: &Bound<'_, PyAny>, expected: &[i64]) -> Option<bool> {
    if TRUST.load(Ordering::Relaxed) != CONFIRMED {
        return None;
    }
    // SAFETY: per the caller, `arg` is an instance of a type with this layout.
    let read = unsafe { read_shape(arg.as_ptr().cast()) }?;
    Some(same_extents(read, expected))
}

/// Whether a shape read from the layout is `expected`.
#[inline]
fn same_extents(read: &[isize], expected: &[i64]) -> bool {
    read.len() == expected.len() && read.iter().zip(expected).all(|(&a, &b)| a as i64 == b)
}

/// What a first read takes from a CuPy array: the address of its first element, its shape
/// and byte strides, whether CuPy holds it C-contiguous, and its dtype (borrowed from the
/// array).
pub(crate) struct LaidOut<'a, 'py> {
    pub data: u64,
    pub shape: &'a [isize],
    /// As CuPy keeps them: for an empty array they need not be the C strides its CUDA Array
    /// Interface (and numba-cuda) gives, which follow from the shape when `c_contiguous`.
    pub strides: &'a [isize],
    pub c_contiguous: bool,
    pub dtype: Borrowed<'a, 'py, PyAny>,
}

/// `arg` read from its memory, once the layout is confirmed; `None` before that, after a
/// refutation, or when what is read does not look like an array.
///
/// # Safety
/// `arg`'s type is one [`applies_to`] accepted.
pub(crate) unsafe fn read<'a, 'py>(arg: &'a Bound<'py, PyAny>) -> Option<LaidOut<'a, 'py>> {
    if TRUST.load(Ordering::Relaxed) != CONFIRMED {
        return None;
    }
    // SAFETY: per the caller, `arg` is an instance of a type with this layout, alive while
    // borrowed.
    unsafe { read_object(arg.py(), arg.as_ptr().cast()) }
}

/// The array at `object`, read from its fields.
///
/// # Safety
/// `object` points to a live object with the layout of [`NdarrayObject`], for `'a`.
unsafe fn read_object<'a, 'py>(
    py: Python<'py>,
    object: *const NdarrayObject,
) -> Option<LaidOut<'a, 'py>> {
    // SAFETY: per the caller; its `data` and `dtype` fields are its own live MemoryPointer
    // and dtype (or null).
    unsafe {
        let shape = read_vector(&(*object).shape)?;
        let strides = read_vector(&(*object).strides)?;
        let pointer = memory_pointer(object)?;
        if strides.len() != shape.len() {
            return None;
        }
        Some(LaidOut {
            data: (*pointer).ptr as u64,
            shape,
            strides,
            c_contiguous: (*object).c_contiguous != 0,
            dtype: Borrowed::from_ptr_or_opt(py, (*object).dtype)?,
        })
    }
}

/// Compares the layout with what `arg`'s attributes gave (`shape` and `data`), until it is
/// confirmed: a first agreement confirms it, a disagreement refutes it for good.
///
/// # Safety
/// `arg`'s type is one [`applies_to`] accepted.
pub(crate) unsafe fn confirm(arg: &Bound<'_, PyAny>, shape: &[i64], data: u64) {
    if TRUST.load(Ordering::Relaxed) != UNCONFIRMED {
        return;
    }
    // SAFETY: per the caller, `arg` is an instance of a type with this layout.
    let agrees = unsafe { agrees(arg.as_ptr().cast(), shape, data) };
    let next = if agrees { CONFIRMED } else { REFUTED };
    // A refutation wins over a confirmation made at the same time by another thread.
    TRUST.fetch_max(next, Ordering::Relaxed);
}

/// Whether the array at `object` has `shape` and `data` by its layout, and a size that is
/// the product of that shape.
///
/// # Safety
/// `object` points to a live object with the layout of [`NdarrayObject`].
unsafe fn agrees(object: *const NdarrayObject, shape: &[i64], data: u64) -> bool {
    // SAFETY: per the caller.
    let Some(read) = (unsafe { read_shape(object) }) else {
        return false;
    };
    // SAFETY: per the caller, the object has its fields.
    let (size, pointer) = unsafe { ((*object).size, memory_pointer(object)) };
    let same_shape = same_extents(read, shape)
        && shape
            .iter()
            .fold(1i64, |product, &extent| product.wrapping_mul(extent))
            == size as i64;
    // SAFETY: `memory_pointer` gave the array's live MemoryPointer.
    let same_data = pointer.is_some_and(|pointer| unsafe { (*pointer).ptr } as u64 == data);
    same_shape && same_data
}

/// The array's `data` field when it holds a MemoryPointer: a typed Cython attribute may be
/// None (or null before initialisation), neither of which has a `ptr` to read.
///
/// # Safety
/// `object` points to a live object with the layout of [`NdarrayObject`].
unsafe fn memory_pointer(object: *const NdarrayObject) -> Option<*const MemoryPointerObject> {
    // SAFETY: per the caller, the object has this field.
    let pointer = unsafe { (*object).data };
    // SAFETY: reading the address of the None singleton.
    let none = unsafe { ffi::Py_None() };
    (!pointer.is_null() && pointer.cast::<ffi::PyObject>() != none).then_some(pointer.cast_const())
}

/// The `_shape` vector of the array at `object`, when it looks like one.
///
/// # Safety
/// `object` points to a live object with the layout of [`NdarrayObject`]; the slice is
/// valid until Python code runs (which may assign the shape).
unsafe fn read_shape<'a>(object: *const NdarrayObject) -> Option<&'a [isize]> {
    // SAFETY: per the caller, the object has this field, a vector it owns.
    unsafe { read_vector(&(*object).shape) }
}

/// The values of a vector of an array, when it looks like a shape or strides.
///
/// # Safety
/// `vector` is a field of a live CuPy array; the slice is valid until Python code runs.
unsafe fn read_vector<'a>(vector: &SsizeVector) -> Option<&'a [isize]> {
    if vector.begin.is_null() {
        return vector.end.is_null().then_some(&[]);
    }
    // The length from the addresses, not `offset_from`: that would be undefined behaviour
    // for pointers of two allocations, which a misread layout could give.
    let bytes = (vector.end as usize).checked_sub(vector.begin as usize)?;
    let element = std::mem::size_of::<isize>();
    if !vector.begin.is_aligned() || bytes % element != 0 {
        return None;
    }
    let len = bytes / element;
    if len > MAX_NDIM {
        return None;
    }
    // SAFETY: this rests on the layout: the type is one `applies_to` accepted (CuPy's own
    // `_ndarray_base`, whose header declares these fields), and launches read through it
    // only once `confirm` found it agreeing with the attributes. Then `begin..end` is one
    // `std::vector<Py_ssize_t>`'s storage: `len` initialized values, owned by the object.
    Some(unsafe { std::slice::from_raw_parts(vector.begin, len) })
}

/// `"unconfirmed"`, `"confirmed"` or `"refuted"`: whether launches read CuPy shapes from
/// the layout (for tests).
#[pyfunction]
pub(crate) fn _cupy_layout() -> &'static str {
    match TRUST.load(Ordering::Relaxed) {
        CONFIRMED => "confirmed",
        REFUTED => "refuted",
        _ => "unconfirmed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An object with the layout, over `shape`'s memory, not a Python object.
    fn fake_array(shape: &[isize], data: &mut MemoryPointerObject) -> NdarrayObject {
        // SAFETY: all-zero is a valid value of these C fields (null pointers, zero counts).
        let mut object: NdarrayObject = unsafe { std::mem::zeroed() };
        object.size = shape.iter().product();
        object.shape = SsizeVector {
            begin: shape.as_ptr(),
            end: shape.as_ptr().wrapping_add(shape.len()),
            capacity_end: shape.as_ptr().wrapping_add(shape.len()),
        };
        object.data = data;
        object
    }

    fn pointer(ptr: isize) -> MemoryPointerObject {
        // SAFETY: as above.
        let mut data: MemoryPointerObject = unsafe { std::mem::zeroed() };
        data.ptr = ptr;
        data
    }

    #[test]
    fn the_layout_is_the_headers() {
        // 16-byte object header, then 3 pointers and a size, two vectors, three ints
        // (padded), three pointers.
        assert_eq!(std::mem::size_of::<NdarrayObject>(), 128);
        assert_eq!(std::mem::offset_of!(NdarrayObject, shape), 40);
        assert_eq!(std::mem::offset_of!(NdarrayObject, dtype), 104);
        assert_eq!(std::mem::offset_of!(MemoryPointerObject, ptr), 24);
    }

    #[test]
    fn a_shape_and_pointer_read_from_the_layout_agree_with_the_attributes() {
        let shape = [4isize, 6];
        let mut data = pointer(0x7000);
        let object = fake_array(&shape, &mut data);
        // SAFETY: `object` has the layout and outlives the calls.
        unsafe {
            assert_eq!(read_shape(&object), Some(&shape[..]));
            assert!(agrees(&object, &[4, 6], 0x7000));
            assert!(!agrees(&object, &[6, 4], 0x7000));
            assert!(!agrees(&object, &[24], 0x7000));
            assert!(!agrees(&object, &[4, 6], 0x7008));
        }
    }

    #[test]
    fn a_first_read_takes_pointer_shape_strides_and_dtype() {
        Python::initialize();
        Python::attach(|py| {
            let shape = [4isize, 6];
            let strides = [48isize, 8];
            let mut data = pointer(0x7000);
            let mut object = fake_array(&shape, &mut data);
            let dtype = py.None();
            object.strides = SsizeVector {
                begin: strides.as_ptr(),
                end: strides.as_ptr().wrapping_add(2),
                capacity_end: strides.as_ptr().wrapping_add(2),
            };
            object.dtype = dtype.as_ptr();
            object.c_contiguous = 1;
            // SAFETY: `object` has the layout and outlives the read.
            let read = unsafe { read_object(py, &object) }.expect("an array");
            assert_eq!(read.data, 0x7000);
            assert_eq!(read.shape, &shape[..]);
            assert_eq!(read.strides, &strides[..]);
            assert!(read.c_contiguous);
            assert!(read.dtype.is_none());
            object.strides.end = strides.as_ptr().wrapping_add(1);
            // SAFETY: as above.
            let mismatched = unsafe { read_object(py, &object) };
            assert!(mismatched.is_none(), "as many strides as dimensions");
        });
    }

    #[test]
    fn a_zero_dimensional_array_has_an_empty_shape() {
        let mut data = pointer(0);
        let mut object = fake_array(&[], &mut data);
        object.shape.begin = std::ptr::null();
        object.shape.end = std::ptr::null();
        object.size = 1;
        // SAFETY: as above.
        unsafe {
            assert_eq!(read_shape(&object), Some(&[][..]));
            assert!(agrees(&object, &[], 0));
        }
    }

    #[test]
    fn what_does_not_look_like_a_vector_is_no_shape() {
        let shape = [1isize; 70];
        let mut data = pointer(0);
        let mut object = fake_array(&shape, &mut data);
        // SAFETY: as above; the pointers stay within `shape`.
        unsafe {
            assert_eq!(
                read_shape(&object),
                None,
                "more dimensions than an array has"
            );
            object.shape.end = shape.as_ptr();
            object.shape.begin = shape.as_ptr().wrapping_add(1);
            assert_eq!(read_shape(&object), None, "end before begin");
            object.shape.begin = std::ptr::null();
            assert_eq!(read_shape(&object), None, "null begin, end not null");
        }
    }

    #[test]
    fn versions_are_read_to_major_and_minor() {
        assert_eq!(major_minor("14.2.0"), Some((14, 2)));
        assert_eq!(major_minor("14.3.0rc1"), Some((14, 3)));
        assert_eq!(major_minor("13.6"), Some((13, 6)));
        assert_eq!(major_minor("fourteen"), None);
        assert!(((8, 0)..(14, 3)).contains(&(14, 2)));
        assert!(!((8, 0)..(14, 3)).contains(&(14, 3)));
    }
}
