//! What every array source shares: the element type of a dtype, shape and byte strides
//! staged into the scratch (and dropped again if the array is refused), numba's layout,
//! and fast reads of Python ints.

use std::cell::{Cell, RefCell};

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyTuple};

use super::classes::{is_first_of_its_record_type, record_id};
use super::fingerprint::{self, Element, DATETIME_UNITS, LAYOUT_A, LAYOUT_C, LAYOUT_F};
use super::known::HeldObjects;
use super::{type_name, ArgValue, ArrayArg, Position, Scratch};
use crate::errors::Result;
use crate::scalar::Scalar;

/// Arrays with more dimensions than this are refused (NumPy's own limit is 64).
pub(crate) const MAX_NDIM: usize = 64;

/// An array's element type: what the fingerprint says of it, and the size and alignment
/// numba gives it (a record's are its dtype's; a datetime's those of the int64 it is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ElementType {
    element: Element,
    itemsize: usize,
    /// A power of two.
    align: usize,
}

impl ElementType {
    pub(super) fn itemsize(self) -> usize {
        self.itemsize
    }

    pub(super) fn alignment(self) -> usize {
        self.align
    }

    /// The scalar type of a numeric element.
    pub(super) fn scalar(self) -> Option<Scalar> {
        match self.element {
            Element::Scalar(scalar) => Some(scalar),
            _ => None,
        }
    }

    /// A record's dtype id and itemsize.
    pub(super) fn record(self) -> Option<(u16, usize)> {
        match self.element {
            Element::Record(id) => Some((id, self.itemsize)),
            _ => None,
        }
    }

    /// The element type's name in error messages.
    fn name(self) -> String {
        match self.element {
            Element::Scalar(scalar) => scalar.numpy_name().to_owned(),
            Element::Record(_) => format!("{}-byte record", self.itemsize),
            Element::Datetime { kind, unit } => {
                fingerprint::datetime_dtype_name(kind, unit).unwrap_or_default()
            }
        }
    }
}

impl From<Scalar> for ElementType {
    fn from(scalar: Scalar) -> ElementType {
        ElementType {
            element: Element::Scalar(scalar),
            itemsize: scalar.itemsize(),
            align: alignment(scalar),
        }
    }
}

thread_local! {
    /// The element types of the dtypes of packed element types, the dtype held.
    static DTYPES: RefCell<HeldObjects<ElementType>> = const { RefCell::new(HeldObjects::new()) };
    /// The dtype last answered from `DTYPES` (held there, so its address stays its own):
    /// arrays of one dtype come in runs, answered without borrowing and searching the table.
    static LAST_DTYPE: Cell<Option<(usize, ElementType)>> = const { Cell::new(None) };
}

/// The element type of a NumPy dtype object, cached per dtype object; `None` for a dtype
/// whose arrays fastlaunch does not pack.
#[inline]
pub(super) fn dtype_element(
    dtype: &Bound<'_, PyAny>,
    at: Position<'_>,
) -> Result<Option<ElementType>> {
    let address = dtype.as_ptr() as usize;
    if let Some((last, element)) = LAST_DTYPE.get() {
        if last == address {
            return Ok(Some(element));
        }
    }
    let cached = DTYPES.with(|dtypes| dtypes.borrow().get(address));
    if let Some(element) = cached {
        LAST_DTYPE.set(Some((address, element)));
        return Ok(cached);
    }
    read_and_keep_dtype_element(dtype, at)
}

#[cold]
fn read_and_keep_dtype_element(
    dtype: &Bound<'_, PyAny>,
    at: Position<'_>,
) -> Result<Option<ElementType>> {
    let element = read_dtype_element(dtype, at)?;
    if let Some(element) = element {
        // Not a record dtype equal to an earlier one (read again each time): a program making
        // a dtype afresh for each array would fill the table with them.
        if element.record().is_none() || is_first_of_its_record_type(dtype) {
            DTYPES.with(|dtypes| dtypes.borrow_mut().insert(dtype, element));
        }
    }
    Ok(element)
}

#[cold]
fn read_dtype_element(dtype: &Bound<'_, PyAny>, at: Position<'_>) -> Result<Option<ElementType>> {
    let typestr: String = dtype.getattr(intern!(dtype.py(), "str"))?.extract()?;
    if let Some(scalar) = Scalar::from_typestr(&typestr) {
        return Ok(Some(scalar.into()));
    }
    if let Some(datetime) = datetime_element(&typestr) {
        return Ok(Some(datetime));
    }
    record_element(dtype, at)
}

/// A datetime or timedelta array element of type string `typestr` (`"<M8[ns]"`), an int64
/// to numba: native byte order only (numba would type a big-endian one as native; numba-cuda
/// passes those).
pub(super) fn datetime_element(typestr: &str) -> Option<ElementType> {
    if typestr.starts_with('>') {
        return None;
    }
    let (kind, unit) = parse_datetime_dtype(typestr)?;
    Some(ElementType {
        element: Element::Datetime { kind, unit },
        itemsize: 8,
        align: 8,
    })
}

/// `"<M8[ns]"` → (0, index of "ns"); `"<m8"` → (1, generic). Multiples (`[10s]`) are not
/// numba units.
pub(super) fn parse_datetime_dtype(code: &str) -> Option<(u8, u8)> {
    let rest = code.trim_start_matches(['<', '>', '=', '|']);
    let kind = match rest.as_bytes().first()? {
        b'M' => 0,
        b'm' => 1,
        _ => return None,
    };
    let rest = rest.get(1..)?.strip_prefix('8')?;
    let unit = match rest {
        "" => "",
        bracketed => bracketed.strip_prefix('[')?.strip_suffix(']')?,
    };
    let index = DATETIME_UNITS.iter().position(|&u| u == unit)?;
    Some((kind, u8::try_from(index).ok()?))
}

/// A structured dtype's element type: its id (`classes.rs`), itemsize and alignment. `None`
/// for unstructured void (raw bytes, which numba-cuda refuses), dtypes holding Python objects
/// (which numba refuses), empty ones and alignments that are no power of two: numba-cuda
/// decides about those.
fn record_element(dtype: &Bound<'_, PyAny>, at: Position<'_>) -> Result<Option<ElementType>> {
    let py = dtype.py();
    if dtype.getattr(intern!(py, "names"))?.is_none()
        || dtype.getattr(intern!(py, "hasobject"))?.is_truthy()?
    {
        return Ok(None);
    }
    let itemsize: usize = dtype.getattr(intern!(py, "itemsize"))?.extract()?;
    let align = record_alignment(dtype)?;
    if itemsize == 0 || !align.is_power_of_two() {
        return Ok(None);
    }
    let id = record_id(dtype)?.ok_or_else(|| at.error("too many record dtypes"))?;
    Ok(Some(ElementType {
        element: Element::Record(id),
        itemsize,
        align,
    }))
}

/// One array's shape and byte strides, appended to `Scratch::dims` and checked.
#[derive(Clone, Copy)]
pub(super) struct StagedDims {
    /// Where the shape starts in `Scratch::dims`; the strides follow it.
    at: usize,
    ndim: usize,
    nitems: i64,
}

/// Appends the shape then byte strides of an array of `element`s at `data` to `dims`
/// with `append` (which sees `dims` as it was), and checks them. On any error what was
/// appended is dropped, so a refused argument leaves nothing behind: every array source
/// stages its dims through here.
#[inline]
pub(super) fn stage_dims(
    dims: &mut Vec<i64>,
    at: Position<'_>,
    (data, element): (u64, ElementType),
    append: impl FnOnce(&mut Vec<i64>) -> Result<()>,
) -> Result<StagedDims> {
    let start = dims.len();
    let checked = append(dims).and_then(|()| check_dims(&dims[start..], at, data, element));
    match checked {
        Ok((ndim, nitems)) => Ok(StagedDims {
            at: start,
            ndim,
            nitems,
        }),
        Err(error) => {
            dims.truncate(start);
            Err(error)
        }
    }
}

/// The dimension count and element count of staged shape-then-strides values, whose
/// elements must all be aligned.
#[inline]
fn check_dims(
    staged: &[i64],
    at: Position<'_>,
    data: u64,
    element: ElementType,
) -> Result<(usize, i64)> {
    let ndim = staged.len() / 2;
    if ndim > MAX_NDIM {
        return Err(at.error(format!(
            "arrays of {ndim} dimensions are not supported (at most {MAX_NDIM})"
        )));
    }
    let nitems = staged[..ndim].iter().try_fold(1i64, |nitems, &extent| {
        if extent < 0 {
            return Err(at.error(format!("array shape has a negative extent {extent}")));
        }
        nitems
            .checked_mul(extent)
            .ok_or_else(|| at.error("array shape overflows 64 bits"))
    })?;
    if nitems > 0 {
        let (shape, strides) = staged[..2 * ndim].split_at(ndim);
        if let Some(message) = misalignment(data, shape, strides, element) {
            return Err(at.error(message));
        }
    }
    Ok((ndim, nitems))
}

/// The alignment numba gives a numeric element: its size, a complex number's parts' size (a
/// power of two).
fn alignment(scalar: Scalar) -> usize {
    if scalar.is_complex() {
        scalar.itemsize() / 2
    } else {
        scalar.itemsize()
    }
}

/// Why a non-empty array's elements are not all aligned for its type, if they are not: a
/// kernel reading one would fault with `CUDA_ERROR_MISALIGNED_ADDRESS`, which leaves the
/// context unusable. The alignment is numba's for the element (a complex number's is its
/// parts', a record's its dtype's), a power of two, so this costs two masks per dimension.
#[inline]
fn misalignment(data: u64, shape: &[i64], strides: &[i64], element: ElementType) -> Option<String> {
    let align = element.align as u64;
    let mask = align - 1;
    if data & mask != 0 {
        return Some(format!(
            "array data pointer {data:#x} is not aligned to {align} bytes, as {} elements \
             must be",
            element.name()
        ));
    }
    let stride = shape
        .iter()
        .zip(strides)
        .find(|&(&extent, &stride)| extent > 1 && (stride as u64) & mask != 0)?
        .1;
    Some(format!(
        "array stride of {stride} bytes is not a multiple of {align}, the alignment {} \
         elements need",
        element.name()
    ))
}

/// Records an array whose dims were staged: computes its layout, pushes value and
/// fingerprint.
#[inline]
pub(super) fn push_staged(
    scratch: &mut Scratch,
    data: u64,
    element: ElementType,
    staged: StagedDims,
    readonly: bool,
) {
    let StagedDims { at, ndim, nitems } = staged;
    let (shape, strides) = scratch.dims[at..at + 2 * ndim].split_at(ndim);
    let itemsize = element.itemsize as i64;
    let layout = layout_of(shape, strides, itemsize);
    fingerprint::push_array(
        &mut scratch.fingerprint,
        element.element,
        ndim,
        layout,
        readonly,
    );
    scratch.values.push(ArgValue::Array(ArrayArg {
        data,
        itemsize: itemsize as u64,
        nitems: nitems as u64,
        ndim,
        dims_at: at,
    }));
}

/// Pushes an array given its shape and byte strides (C-contiguous strides when `None`).
pub(super) fn push_array(
    scratch: &mut Scratch,
    at: Position<'_>,
    data: u64,
    element: ElementType,
    shape: impl ExactSizeIterator<Item = i64>,
    strides: Option<impl ExactSizeIterator<Item = i64>>,
    readonly: bool,
) -> Result<()> {
    let staged = stage_dims(&mut scratch.dims, at, (data, element), |dims| {
        let (start, ndim) = (dims.len(), shape.len());
        dims.extend(shape);
        match strides {
            Some(strides) if strides.len() != ndim => Err(at.error(format!(
                "array has {ndim} dimensions but {} strides",
                strides.len()
            ))),
            Some(strides) => {
                dims.extend(strides);
                Ok(())
            }
            None => {
                append_c_strides(dims, start, element.itemsize as i64);
                Ok(())
            }
        }
    })?;
    push_staged(scratch, data, element, staged, readonly);
    Ok(())
}

/// Pushes an array whose `shape` and `strides` (bytes) are tuples of ints, read straight
/// into the scratch.
pub(super) fn push_from_tuples(
    at: Position<'_>,
    scratch: &mut Scratch,
    data: u64,
    element: ElementType,
    shape: &Bound<'_, PyAny>,
    strides: &Bound<'_, PyAny>,
) -> Result<()> {
    let staged = stage_dims(&mut scratch.dims, at, (data, element), |dims| {
        let ndim = extend_from_int_tuple(dims, shape, "shape", at)?;
        let nstrides = extend_from_int_tuple(dims, strides, "strides", at)?;
        if nstrides == ndim {
            Ok(())
        } else {
            Err(at.error(format!(
                "array has {ndim} dimensions but {nstrides} strides"
            )))
        }
    })?;
    push_staged(scratch, data, element, staged, false);
    Ok(())
}

/// Appends C-contiguous byte strides for the shape staged in `dims` from `staged` on.
pub(super) fn append_c_strides(dims: &mut Vec<i64>, staged: usize, itemsize: i64) {
    let ndim = dims.len() - staged;
    dims.resize(staged + 2 * ndim, 0);
    let mut stride = itemsize;
    for d in (0..ndim).rev() {
        dims[staged + ndim + d] = stride;
        stride = stride.saturating_mul(dims[staged + d].max(1));
    }
}

/// numba's layout for an array: 'C' if C-contiguous, else 'F' if Fortran-contiguous,
/// else 'A'. Extents of 1 place no constraint on their stride; an empty array is
/// contiguous. A zero stride on a non-empty array (broadcast) is always 'A'.
pub(super) fn layout_of(shape: &[i64], strides: &[i64], itemsize: i64) -> u8 {
    if shape.contains(&0) {
        return LAYOUT_C;
    }
    // i128: a stride product past i64 cannot wrap around to a matching value.
    let contiguous = |order: &mut dyn Iterator<Item = usize>| {
        let mut expected = i128::from(itemsize);
        for d in order {
            if shape[d] != 1 && i128::from(strides[d]) != expected {
                return false;
            }
            expected = expected.saturating_mul(i128::from(shape[d]));
        }
        true
    };
    if contiguous(&mut (0..shape.len()).rev()) {
        LAYOUT_C
    } else if contiguous(&mut (0..shape.len())) {
        LAYOUT_F
    } else {
        LAYOUT_A
    }
}

fn int_tuple<'py>(
    obj: &Bound<'py, PyAny>,
    what: &str,
    at: Position<'_>,
) -> Result<Bound<'py, PyTuple>> {
    obj.cast::<PyTuple>().cloned().map_err(|_| {
        at.error(format!(
            "{what} must be a tuple of ints, got {}",
            type_name(obj)
        ))
    })
}

/// The alignment numba's code assumes of a record: an aligned struct's fields are at their
/// natural alignment, so the struct is aligned to the largest of theirs (the dtype's
/// `alignment`, except for a record array's `np.record` dtype, which says 1); a packed
/// struct's fields are read at any address.
fn record_alignment(dtype: &Bound<'_, PyAny>) -> Result<usize> {
    let py = dtype.py();
    if !dtype.getattr(intern!(py, "isalignedstruct"))?.is_truthy()? {
        return Ok(1);
    }
    let fields = dtype.getattr(intern!(py, "fields"))?;
    let mut align = 1;
    for name in dtype.getattr(intern!(py, "names"))?.try_iter()? {
        // A subarray field's elements (`base`) are what is aligned; a nested record's
        // alignment is worked out as this one's.
        let field = fields
            .get_item(name?)?
            .get_item(0)?
            .getattr(intern!(py, "base"))?;
        let field_align = if field.getattr(intern!(py, "names"))?.is_none() {
            field.getattr(intern!(py, "alignment"))?.extract()?
        } else {
            record_alignment(&field)?
        };
        align = align.max(field_align);
    }
    Ok(align)
}

/// Void and datetime dtypes fastlaunch does not pack (unstructured void, datetime multiples
/// such as `[10s]`, big-endian datetimes...): numba-cuda types and passes (or refuses) these.
pub(super) fn numba_only_dtype(dtype: &Bound<'_, PyAny>) -> bool {
    dtype
        .getattr(intern!(dtype.py(), "kind"))
        .and_then(|kind| kind.extract::<String>())
        .is_ok_and(|kind| matches!(kind.as_str(), "V" | "M" | "m"))
}

/// The element type of an array's dtype: numeric, record, datetime or timedelta; `None` when
/// only numba-cuda can pass the array.
#[inline]
pub(super) fn element_type(
    dtype: &Bound<'_, PyAny>,
    at: Position<'_>,
) -> Result<Option<ElementType>> {
    match dtype_element(dtype, at)? {
        Some(element) => Ok(Some(element)),
        None if numba_only_dtype(dtype) => Ok(None),
        None => Err(at.error(format!("arrays of dtype {dtype} are not supported"))),
    }
}

/// The numeric element type of an array's dtype, for sources whose record and datetime
/// arrays numba-cuda passes its own way (CuPy has none; a cuda.core view may); `None` when
/// only numba-cuda can pass the array.
pub(super) fn numeric_element_type(
    dtype: &Bound<'_, PyAny>,
    at: Position<'_>,
) -> Result<Option<Scalar>> {
    Ok(element_type(dtype, at)?.and_then(ElementType::scalar))
}

/// Appends the ints of a tuple to `dims`, returning how many: item access is borrowed (no
/// reference counting) and each int is read with one C call.
pub(super) fn extend_from_int_tuple(
    dims: &mut Vec<i64>,
    value: &Bound<'_, PyAny>,
    what: &str,
    at: Position<'_>,
) -> Result<usize> {
    let tuple = int_tuple(value, what, at)?;
    let len = tuple.len();
    for i in 0..len {
        // SAFETY: `i` is below the tuple's length; the borrowed item lives as long as the tuple.
        let item = unsafe { ffi::PyTuple_GetItem(tuple.as_ptr(), i as ffi::Py_ssize_t) };
        // SAFETY: `item` is a valid object.
        let number = unsafe { signed_64(item) };
        // SAFETY: checking and clearing this thread's exception state.
        if number == -1 && unsafe { !ffi::PyErr_Occurred().is_null() } {
            // SAFETY: as above.
            unsafe { ffi::PyErr_Clear() };
            return Err(at.error(format!("{what} must be a tuple of ints, got {tuple}")));
        }
        dims.push(number);
    }
    Ok(len)
}

/// An int as u64 with one C call (PyO3's generic extraction is several times slower).
pub(super) fn int_as_u64(value: &Bound<'_, PyAny>) -> PyResult<u64> {
    // SAFETY: a valid object.
    let number = unsafe { unsigned_64(value.as_ptr()) };
    if number == u64::MAX {
        if let Some(err) = PyErr::take(value.py()) {
            return Err(err);
        }
    }
    Ok(number)
}

/// An int as i64 with one C call.
pub(super) fn int_as_i64(value: &Bound<'_, PyAny>) -> PyResult<i64> {
    // SAFETY: a valid object.
    let number = unsafe { signed_64(value.as_ptr()) };
    if number == -1 {
        if let Some(err) = PyErr::take(value.py()) {
            return Err(err);
        }
    }
    Ok(number)
}

// CPython 3.11 converts an int of more than one digit (2**30 and up: any device pointer) to a
// `long long` through its generic byte-array conversion, several times slower than the digit
// loop that converts to a `long`; where a `long` is 64 bits (64-bit Unix), the `long`
// conversions are used.

/// `PyLong_AsUnsignedLongLong(object)`: failure returns `u64::MAX` with an exception set.
///
/// # Safety
/// `object` is a valid object, and the GIL is held.
#[inline]
unsafe fn unsigned_64(object: *mut ffi::PyObject) -> u64 {
    #[cfg(all(target_pointer_width = "64", not(windows)))]
    // SAFETY: as the caller promises.
    return unsafe { ffi::PyLong_AsUnsignedLong(object) };
    #[cfg(not(all(target_pointer_width = "64", not(windows))))]
    // SAFETY: as the caller promises.
    return unsafe { ffi::PyLong_AsUnsignedLongLong(object) };
}

/// `PyLong_AsLongLong(object)`: failure returns -1 with an exception set.
///
/// # Safety
/// `object` is a valid object, and the GIL is held.
#[inline]
unsafe fn signed_64(object: *mut ffi::PyObject) -> i64 {
    #[cfg(all(target_pointer_width = "64", not(windows)))]
    // SAFETY: as the caller promises.
    return unsafe { ffi::PyLong_AsLong(object) };
    #[cfg(not(all(target_pointer_width = "64", not(windows))))]
    // SAFETY: as the caller promises.
    return unsafe { ffi::PyLong_AsLongLong(object) };
}

/// A device pointer given as an int, or as an object `int()` converts (a cuda.bindings
/// `CUdeviceptr`).
pub(super) fn pointer_as_u64(value: &Bound<'_, PyAny>) -> PyResult<u64> {
    if value.is_exact_instance_of::<PyInt>() {
        return int_as_u64(value);
    }
    // SAFETY: PyNumber_Long returns a new reference, or null with an exception set.
    let number =
        unsafe { Bound::from_owned_ptr_or_err(value.py(), ffi::PyNumber_Long(value.as_ptr())) }?;
    int_as_u64(&number)
}
