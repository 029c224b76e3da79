//! The fingerprint format: the bytes that fix each argument's numba type exactly. This
//! file owns it: one encoder (the `push_*` functions, which classification calls) and one
//! walker ([`Walker`]), which the packing plan's checker (`Plan::check_fingerprint`), the
//! skipper ([`Walker::skip_argument`], [`argument_of_value`], [`split_arguments`]) and
//! the describer ([`describe`], the descriptors a miss hands to Python) all use.
//!
//! Per argument:
//! - scalar: one byte, the [`Scalar`] code (below 0x80);
//! - array: `ARRAY_TAG`, element, ndim, flags (layout | readonly), where the element is
//!   encoded as an argument of its type would be: a [`Scalar`] code (one byte), a record's
//!   three bytes or a datetime's three ([`Element`]); so an array takes 4 or 6 bytes;
//! - tuple: `TUPLE_TAG`, member count, then each member's encoding;
//! - named tuple: `NAMED_TUPLE_TAG`, class id (2 bytes, little-endian), count, members;
//! - enum member: `ENUM_TAG`, class id (2 bytes);
//! - `datetime64` / `timedelta64` scalar: `DATETIME_TAG`, kind (0 / 1), unit index;
//! - record (structured NumPy scalar): `RECORD_TAG`, dtype id (2 bytes, little-endian).
//!
//! Class ids index the process-wide list of classes (enums, named tuples) and record dtypes
//! in `classes.rs`, filled on first sight.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyList, PyTuple};

use super::classes;
use crate::scalar::Scalar;

/// Tuples nest at most this deep: deeper ones go to numba-cuda's path (and no recursion, in
/// reading or walking, runs away).
pub(crate) const MAX_TUPLE_DEPTH: usize = 8;

pub(crate) const ARRAY_TAG: u8 = 0x80;
pub(crate) const TUPLE_TAG: u8 = 0x81;
pub(crate) const NAMED_TUPLE_TAG: u8 = 0x82;
pub(crate) const ENUM_TAG: u8 = 0x83;
pub(crate) const DATETIME_TAG: u8 = 0x84;
pub(crate) const RECORD_TAG: u8 = 0x85;
/// NumPy's datetime units, by their index in a fingerprint ("" is the generic unit).
pub(crate) const DATETIME_UNITS: [&str; 14] = [
    "", "Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as",
];
pub(crate) const LAYOUT_C: u8 = 0;
pub(crate) const LAYOUT_F: u8 = 1;
pub(crate) const LAYOUT_A: u8 = 2;
pub(crate) const READONLY_FLAG: u8 = 4;
/// The most bytes one array takes (a record or datetime element's three, four around them).
pub(crate) const MAX_ARRAY_BYTES: usize = 6;

/// An array's element type, as the fingerprint tells it: the types numba gives array
/// elements that fastlaunch packs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Element {
    Scalar(Scalar),
    /// A record of the dtype with this id (`classes.rs`).
    Record(u16),
    /// A `datetime64` (`kind` 0) or `timedelta64` (1) of unit `DATETIME_UNITS[unit]`.
    Datetime {
        kind: u8,
        unit: u8,
    },
}

impl From<Scalar> for Element {
    fn from(scalar: Scalar) -> Element {
        Element::Scalar(scalar)
    }
}

// ---- The encoder ----------------------------------------------------------------------

/// A scalar of type `scalar`.
#[inline]
pub(crate) fn push_scalar(fingerprint: &mut Vec<u8>, scalar: Scalar) {
    fingerprint.push(scalar_byte(scalar));
}

/// The one fingerprint byte of a scalar.
#[inline]
pub(crate) fn scalar_byte(scalar: Scalar) -> u8 {
    scalar as u8
}

/// An array of `element`s, `ndim` dimensions (at most `MAX_NDIM`), `layout`.
#[inline]
pub(crate) fn push_array(
    fingerprint: &mut Vec<u8>,
    element: Element,
    ndim: usize,
    layout: u8,
    readonly: bool,
) {
    fingerprint.push(ARRAY_TAG);
    match element {
        Element::Scalar(scalar) => push_scalar(fingerprint, scalar),
        Element::Record(dtype) => push_record(fingerprint, dtype),
        Element::Datetime { kind, unit } => push_datetime(fingerprint, kind, unit),
    }
    fingerprint.extend_from_slice(&[
        ndim as u8,
        layout | if readonly { READONLY_FLAG } else { 0 },
    ]);
}

/// A tuple's header (`class`: a named tuple's class id); its members' encodings follow.
pub(crate) fn push_tuple(fingerprint: &mut Vec<u8>, class: Option<u16>, count: u8) {
    match class {
        None => fingerprint.extend_from_slice(&[TUPLE_TAG, count]),
        Some(id) => {
            let [lo, hi] = id.to_le_bytes();
            fingerprint.extend_from_slice(&[NAMED_TUPLE_TAG, lo, hi, count]);
        }
    }
}

/// A member of the enum class with id `class`.
pub(crate) fn push_enum(fingerprint: &mut Vec<u8>, class: u16) {
    let [lo, hi] = class.to_le_bytes();
    fingerprint.extend_from_slice(&[ENUM_TAG, lo, hi]);
}

/// A `datetime64` (`kind` 0) or `timedelta64` (1) scalar of unit `DATETIME_UNITS[unit]`.
pub(crate) fn push_datetime(fingerprint: &mut Vec<u8>, kind: u8, unit: u8) {
    fingerprint.extend_from_slice(&[DATETIME_TAG, kind, unit]);
}

/// A record of the dtype with id `dtype`.
pub(crate) fn push_record(fingerprint: &mut Vec<u8>, dtype: u16) {
    let [lo, hi] = dtype.to_le_bytes();
    fingerprint.extend_from_slice(&[RECORD_TAG, lo, hi]);
}

// ---- The walker -----------------------------------------------------------------------

/// One item of a fingerprint, decoded. Field values are as stored: the describer checks
/// the ones it names (layout, datetime unit, class ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Item {
    Scalar(Scalar),
    Array {
        element: Element,
        ndim: u8,
        flags: u8,
    },
    /// A tuple's header (`class`: a named tuple's class id); `count` member items follow.
    Tuple {
        class: Option<u16>,
        count: u8,
    },
    Enum(u16),
    Datetime {
        kind: u8,
        unit: u8,
    },
    Record(u16),
}

/// Bytes that are no fingerprint (truncated, or an unknown tag or scalar code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Malformed;

/// Reads a fingerprint item by item. Past a malformed item it is done.
pub(crate) struct Walker<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Walker<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Walker<'a> {
        Walker { bytes, at: 0 }
    }

    /// Where the next item starts.
    pub(crate) fn position(&self) -> usize {
        self.at
    }

    pub(crate) fn is_done(&self) -> bool {
        self.at >= self.bytes.len()
    }

    /// The next item (a tuple's header only: its members are the next items).
    pub(crate) fn item(&mut self) -> Result<Item, Malformed> {
        let decoded = self.decode();
        self.at = match decoded {
            Ok((_, len)) => self.at + len,
            Err(Malformed) => self.bytes.len(),
        };
        decoded.map(|(item, _)| item)
    }

    fn decode(&self) -> Result<(Item, usize), Malformed> {
        let byte = |offset: usize| self.bytes.get(self.at + offset).copied().ok_or(Malformed);
        let id = |offset: usize| Ok(u16::from_le_bytes([byte(offset)?, byte(offset + 1)?]));
        Ok(match byte(0)? {
            ARRAY_TAG => {
                let (element, len) = self.decode_element(1)?;
                let item = Item::Array {
                    element,
                    ndim: byte(1 + len)?,
                    flags: byte(2 + len)?,
                };
                (item, 3 + len)
            }
            TUPLE_TAG => (
                Item::Tuple {
                    class: None,
                    count: byte(1)?,
                },
                2,
            ),
            NAMED_TUPLE_TAG => (
                Item::Tuple {
                    class: Some(id(1)?),
                    count: byte(3)?,
                },
                4,
            ),
            ENUM_TAG => (Item::Enum(id(1)?), 3),
            _ => match self.decode_element(0)? {
                (Element::Scalar(scalar), len) => (Item::Scalar(scalar), len),
                (Element::Record(dtype), len) => (Item::Record(dtype), len),
                (Element::Datetime { kind, unit }, len) => (Item::Datetime { kind, unit }, len),
            },
        })
    }

    /// The scalar, record or datetime encoded `offset` bytes on (alone, or as an array's
    /// element), and its length.
    fn decode_element(&self, offset: usize) -> Result<(Element, usize), Malformed> {
        let byte = |at: usize| {
            self.bytes
                .get(self.at + offset + at)
                .copied()
                .ok_or(Malformed)
        };
        Ok(match byte(0)? {
            DATETIME_TAG => (
                Element::Datetime {
                    kind: byte(1)?,
                    unit: byte(2)?,
                },
                3,
            ),
            RECORD_TAG => (Element::Record(u16::from_le_bytes([byte(1)?, byte(2)?])), 3),
            code => (
                Element::Scalar(Scalar::from_code(code).ok_or(Malformed)?),
                1,
            ),
        })
    }

    /// Moves past one argument (an item, and a tuple's members); returns how many values
    /// (packed kernel arguments) it holds: a tuple's members', else one.
    pub(crate) fn skip_argument(&mut self) -> Result<usize, Malformed> {
        match self.item()? {
            Item::Tuple { count, .. } => {
                (0..count).try_fold(0, |values, _| Ok(values + self.skip_argument()?))
            }
            _ => Ok(1),
        }
    }
}

// ---- The skipper ----------------------------------------------------------------------

/// The argument that value `value` (in `Scratch::values` order) belongs to: tuples put
/// several values in one argument. Used to name arguments in errors, off the hot path.
pub(crate) fn argument_of_value(fingerprint: &[u8], value: usize) -> usize {
    let mut walker = Walker::new(fingerprint);
    let (mut seen, mut argument) = (0, 0);
    while !walker.is_done() {
        seen += walker.skip_argument().unwrap_or(1);
        if value < seen {
            return argument;
        }
        argument += 1;
    }
    argument
}

/// The fingerprint bytes each argument contributed, in order, and how many values each
/// holds (several for a tuple).
pub(crate) fn split_arguments(fingerprint: &[u8]) -> (Vec<Box<[u8]>>, Vec<usize>) {
    let mut walker = Walker::new(fingerprint);
    let (mut parts, mut counts) = (Vec::new(), Vec::new());
    while !walker.is_done() {
        let start = walker.position();
        counts.push(walker.skip_argument().unwrap_or(0));
        parts.push(fingerprint[start..walker.position().min(fingerprint.len())].into());
    }
    (parts, counts)
}

// ---- The describer --------------------------------------------------------------------

/// A fingerprint decoded into Python descriptors, which Python turns into numba types:
/// `("array", dtype, ndim, layout, readonly)` (dtype: a NumPy name such as `"float32"` or
/// `"datetime64[ns]"`, or a record's dtype object), `("scalar", numba name)`,
/// `("tuple", [members])`, `("namedtuple", class, [members])`, `("enum", class)`,
/// `("record", dtype)`, `("datetime", unit)` or `("timedelta", unit)`.
pub(crate) fn describe<'py>(
    py: Python<'py>,
    fingerprint: &[u8],
) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    let mut walker = Walker::new(fingerprint);
    let mut out = Vec::new();
    while !walker.is_done() {
        out.push(describe_one(py, &mut walker, 0)?);
    }
    Ok(out)
}

fn describe_one<'py>(
    py: Python<'py>,
    walker: &mut Walker<'_>,
    depth: usize,
) -> PyResult<Bound<'py, PyTuple>> {
    let any =
        |value: &str| -> PyResult<Bound<'py, PyAny>> { Ok(value.into_pyobject(py)?.into_any()) };
    match walker.item().map_err(|_| bad_fingerprint())? {
        Item::Array {
            element,
            ndim,
            flags,
        } => {
            let layout = match flags & 3 {
                LAYOUT_C => "C",
                LAYOUT_F => "F",
                _ => "A",
            };
            let dtype = match element {
                Element::Scalar(scalar) => any(scalar.numpy_name())?,
                Element::Record(id) => class_by_id(py, id)?.into_bound(py),
                Element::Datetime { kind, unit } => {
                    any(&datetime_dtype_name(kind, unit).ok_or_else(bad_fingerprint)?)?
                }
            };
            PyTuple::new(
                py,
                [
                    any("array")?,
                    dtype,
                    ndim.into_pyobject(py)?.into_any(),
                    any(layout)?,
                    PyBool::new(py, flags & READONLY_FLAG != 0)
                        .to_owned()
                        .into_any(),
                ],
            )
        }
        Item::Tuple { class, count } => {
            if depth >= MAX_TUPLE_DEPTH {
                return Err(bad_fingerprint());
            }
            let class = class.map(|id| class_by_id(py, id)).transpose()?;
            let members = (0..count)
                .map(|_| describe_one(py, walker, depth + 1))
                .collect::<PyResult<Vec<_>>>()?;
            let members = PyList::new(py, members)?.into_any();
            match class {
                None => PyTuple::new(py, [any("tuple")?, members]),
                Some(class) => {
                    PyTuple::new(py, [any("namedtuple")?, class.into_bound(py), members])
                }
            }
        }
        Item::Enum(id) => PyTuple::new(py, [any("enum")?, class_by_id(py, id)?.into_bound(py)]),
        Item::Record(id) => PyTuple::new(py, [any("record")?, class_by_id(py, id)?.into_bound(py)]),
        Item::Datetime { kind, unit } => {
            let kind = if kind == 0 { "datetime" } else { "timedelta" };
            let unit = DATETIME_UNITS
                .get(usize::from(unit))
                .ok_or_else(bad_fingerprint)?;
            PyTuple::new(py, [kind, unit])
        }
        Item::Scalar(scalar) => PyTuple::new(py, ["scalar", scalar.numba_name()]),
    }
}

/// NumPy's name of a datetime dtype: `"datetime64[ns]"`, `"timedelta64"` (generic unit);
/// `None` for a unit index past `DATETIME_UNITS`.
pub(crate) fn datetime_dtype_name(kind: u8, unit: u8) -> Option<String> {
    let kind = if kind == 0 {
        "datetime64"
    } else {
        "timedelta64"
    };
    Some(match *DATETIME_UNITS.get(usize::from(unit))? {
        "" => kind.to_owned(),
        unit => format!("{kind}[{unit}]"),
    })
}

pub(crate) fn bad_fingerprint() -> PyErr {
    pyo3::exceptions::PyValueError::new_err("malformed fingerprint")
}

/// The class a fingerprint names by id.
fn class_by_id(py: Python<'_>, id: u16) -> PyResult<Py<PyAny>> {
    classes::class_by_id(py, id).ok_or_else(bad_fingerprint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walker_reads_what_the_encoder_writes() {
        let mut bytes = Vec::new();
        push_array(&mut bytes, Scalar::F32.into(), 2, LAYOUT_F, true);
        push_tuple(&mut bytes, Some(7), 2);
        push_scalar(&mut bytes, Scalar::I64);
        push_enum(&mut bytes, 3);
        push_datetime(&mut bytes, 1, 10);
        push_record(&mut bytes, 258);
        push_array(&mut bytes, Element::Record(513), 1, LAYOUT_C, false);
        push_array(
            &mut bytes,
            Element::Datetime { kind: 0, unit: 0 },
            3,
            LAYOUT_A,
            false,
        );
        let mut walker = Walker::new(&bytes);
        let mut items = Vec::new();
        while !walker.is_done() {
            items.push(walker.item().unwrap());
        }
        assert_eq!(
            items,
            [
                Item::Array {
                    element: Element::Scalar(Scalar::F32),
                    ndim: 2,
                    flags: LAYOUT_F | READONLY_FLAG
                },
                Item::Tuple {
                    class: Some(7),
                    count: 2
                },
                Item::Scalar(Scalar::I64),
                Item::Enum(3),
                Item::Datetime { kind: 1, unit: 10 },
                Item::Record(258),
                Item::Array {
                    element: Element::Record(513),
                    ndim: 1,
                    flags: LAYOUT_C
                },
                Item::Array {
                    element: Element::Datetime { kind: 0, unit: 0 },
                    ndim: 3,
                    flags: LAYOUT_A
                },
            ]
        );
        let (parts, counts) = split_arguments(&bytes);
        assert_eq!(counts, [1, 2, 1, 1, 1, 1]);
        assert_eq!(parts[4].len(), MAX_ARRAY_BYTES);
        assert_eq!(parts[5].len(), MAX_ARRAY_BYTES);
        assert_eq!(argument_of_value(&bytes, 0), 0);
        assert_eq!(argument_of_value(&bytes, 2), 1);
        assert_eq!(argument_of_value(&bytes, 3), 2);
    }

    #[test]
    fn malformed_bytes_end_the_walk() {
        for bytes in [
            &[ARRAY_TAG, 0][..],
            &[0x7f],
            &[NAMED_TUPLE_TAG, 1],
            &[ARRAY_TAG, ARRAY_TAG, 11, 1, 0],
            &[ARRAY_TAG, TUPLE_TAG, 1, 1, 0],
            &[ARRAY_TAG, RECORD_TAG, 1, 0, 1],
            &[ARRAY_TAG, DATETIME_TAG, 0, 10, 1],
        ] {
            let mut walker = Walker::new(bytes);
            assert_eq!(walker.item(), Err(Malformed));
            assert!(walker.is_done());
        }
    }
}
