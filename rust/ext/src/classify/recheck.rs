//! What a launch remembered from the last (`repeat.rs`) needs from classification: a proof
//! that an array argument is still as it was read, for the sources whose objects cannot
//! change (numba device arrays) or can be checked cheaply (a CuPy array's shape, a torch
//! tensor read again through the DLPack C exchange API), and a scalar's value read by its
//! exact type.

use pyo3::ffi;
use pyo3::prelude::*;
use smallvec::SmallVec;

use super::fingerprint::{scalar_byte, ARRAY_TAG};
use super::known::Identity;
use super::{cached_strategy, cupy, scalars, Scratch, Strategy};
use crate::interop::dlpack::CurrentWorkStream;
use crate::interop::held_tensor::HeldTensor;
use crate::scalar::{Scalar, Value};

/// An array argument proven unchanged when the very same object comes back (its
/// [`Identity`], see `known.rs`).
pub(crate) struct Unchanged {
    identity: Identity,
    kind: UnchangedKind,
}

enum UnchangedKind {
    /// numba-cuda device arrays never change their memory, shape, strides or dtype.
    NumbaArray,
    /// A CuPy array's pointer and dtype are fixed; its shape can be assigned in place.
    CupyArray(HeldCupyShape),
    /// A tensor of the DLPack C exchange API can change everything in place (`set_()`, ...):
    /// read again and compared. Its lazy negative bit was checked when it was read, with
    /// this memory (as `dlpack.rs` remembers it); complex tensors, whose conjugate bit is
    /// checked on every launch, are not proven so. `stream`: where the launch asks the
    /// producer's current stream, as reading it sets.
    Tensor {
        held: HeldTensor,
        stream: Option<(CurrentWorkStream, i32, i32)>,
    },
}

impl Unchanged {
    /// The proof for `arg`, read with `fingerprint` (its bytes) and `shape`, when its source
    /// has one; `None` for every other argument (read again on each launch).
    pub(crate) fn of(arg: &Bound<'_, PyAny>, fingerprint: &[u8], shape: &[i64]) -> Option<Self> {
        if fingerprint.first() != Some(&ARRAY_TAG) {
            return None;
        }
        // SAFETY: `arg` is a valid object; its type is read without taking a reference.
        let type_ptr = unsafe { ffi::Py_TYPE(arg.as_ptr()) } as usize;
        let kind = match cached_strategy(type_ptr)? {
            Strategy::NumbaDeviceArray => UnchangedKind::NumbaArray,
            Strategy::CupyArray { layout } => UnchangedKind::CupyArray(HeldCupyShape {
                shape: shape.into(),
                layout,
            }),
            Strategy::Exchange(api) => {
                let held = HeldTensor::read(arg, api)?;
                let (device_type, device_id) = held.device();
                let stream = api
                    .current_work_stream
                    .map(|query| (query, device_type, device_id));
                UnchangedKind::Tensor { held, stream }
            }
            _ => return None,
        };
        Some(Unchanged {
            identity: Identity::of(arg)?,
            kind,
        })
    }

    /// What is proven: `"numba array"`, `"cupy array"` or `"tensor"` (for tests).
    pub(crate) fn kind_name(&self) -> &'static str {
        match self.kind {
            UnchangedKind::NumbaArray => "numba array",
            UnchangedKind::CupyArray(_) => "cupy array",
            UnchangedKind::Tensor { .. } => "tensor",
        }
    }

    /// Whether `arg` is the object proven and still as it was; a CuPy array or a tensor also
    /// makes its producer's current stream count for the launch's ordering, as reading it
    /// does.
    #[inline]
    pub(crate) fn holds(&self, arg: &Bound<'_, PyAny>, scratch: &mut Scratch) -> bool {
        if !self.identity.is(arg) {
            return false;
        }
        match &self.kind {
            UnchangedKind::NumbaArray => true,
            UnchangedKind::CupyArray(shape) => {
                scratch.streams.has_cupy = true;
                shape.still(arg)
            }
            UnchangedKind::Tensor { held, stream } => {
                if stream.is_some() {
                    scratch.streams.exchange_stream = *stream;
                }
                held.still(arg)
            }
        }
    }
}

/// A CuPy array's shape as it was read: the one thing about a CuPy array that can change
/// while it lives (`a.shape = ...`), checked again by launches like the last ([`Unchanged`])
/// and by graphed calls (`held_args.rs`).
pub(crate) struct HeldCupyShape {
    shape: SmallVec<[i64; 4]>,
    /// The shape may be read from CuPy's object layout (`crate::interop::cupy_layout`).
    layout: bool,
}

impl HeldCupyShape {
    /// `arg`'s shape, when it is a CuPy array of a type read before on this thread.
    pub(crate) fn read(arg: &Bound<'_, PyAny>) -> Option<Self> {
        // SAFETY: `arg` is a valid object; its type is read without taking a reference.
        let type_ptr = unsafe { ffi::Py_TYPE(arg.as_ptr()) } as usize;
        let Strategy::CupyArray { layout } = cached_strategy(type_ptr)? else {
            return None;
        };
        let shape = arg.getattr(pyo3::intern!(arg.py(), "shape")).ok()?;
        let shape: Vec<i64> = shape.extract().ok()?;
        Some(HeldCupyShape {
            shape: shape.into(),
            layout,
        })
    }

    /// Whether `arg` (the very object read) still has that shape.
    #[inline]
    pub(crate) fn still(&self, arg: &Bound<'_, PyAny>) -> bool {
        cupy::has_shape(arg, &self.shape, self.layout).unwrap_or(false)
    }
}

/// How a scalar argument is read again: by its exact type, the value then read straight
/// from the object (Python `float`, `int` within int64, `bool`, `complex`; NumPy scalars of
/// a packed dtype, when NumPy's layout is the known one).
#[derive(Clone, Copy)]
struct ScalarReader {
    type_ptr: usize,
    source: ScalarSource,
    /// Its fingerprint byte.
    kind: u8,
}

#[derive(Clone, Copy)]
enum ScalarSource {
    Float,
    Int,
    Bool,
    Complex,
    Numpy(Scalar),
}

/// The address of a static builtin type object.
fn builtin(type_object: *mut ffi::PyTypeObject) -> usize {
    type_object as usize
}

impl ScalarReader {
    /// The reader for scalars of `arg`'s type, if it has one.
    fn of(arg: &Bound<'_, PyAny>) -> Option<ScalarReader> {
        // SAFETY: `arg` is a valid object; its type is read without taking a reference.
        let type_ptr = unsafe { ffi::Py_TYPE(arg.as_ptr()) } as usize;
        let (source, scalar) = if type_ptr == builtin(&raw mut ffi::PyFloat_Type) {
            (ScalarSource::Float, Scalar::F64)
        } else if type_ptr == builtin(&raw mut ffi::PyLong_Type) {
            (ScalarSource::Int, Scalar::I64)
        } else if type_ptr == builtin(&raw mut ffi::PyBool_Type) {
            (ScalarSource::Bool, Scalar::Bool)
        } else if type_ptr == builtin(&raw mut ffi::PyComplex_Type) {
            (ScalarSource::Complex, Scalar::C128)
        } else {
            match cached_strategy(type_ptr)? {
                Strategy::NumpyScalar(scalar) if scalars::numpy_layout_known(arg.py()) => {
                    (ScalarSource::Numpy(scalar), scalar)
                }
                _ => return None,
            }
        };
        Some(ScalarReader {
            type_ptr,
            source,
            kind: scalar_byte(scalar),
        })
    }

    /// `arg`'s value, if it is of this reader's type (and an int within int64).
    #[inline]
    fn read(&self, arg: &Bound<'_, PyAny>) -> Option<Value> {
        let object = arg.as_ptr();
        // SAFETY: `arg` is a valid object; its type is read without taking a reference.
        if unsafe { ffi::Py_TYPE(object) } as usize != self.type_ptr {
            return None;
        }
        // SAFETY: `arg` is exactly of the type this reader was made for, so its value is
        // read as that type's.
        unsafe {
            Some(match self.source {
                ScalarSource::Float => Value::Float(ffi::PyFloat_AsDouble(object)),
                ScalarSource::Int => {
                    let mut overflow = 0;
                    let value = ffi::PyLong_AsLongLongAndOverflow(object, &mut overflow);
                    if overflow != 0 {
                        return None; // uint64, or too large: the full read decides
                    }
                    Value::Int(i128::from(value))
                }
                ScalarSource::Bool => Value::Bool(object == ffi::Py_True()),
                ScalarSource::Complex => Value::Complex(
                    ffi::PyComplex_RealAsDouble(object),
                    ffi::PyComplex_ImagAsDouble(object),
                ),
                ScalarSource::Numpy(scalar) => scalars::numpy_value_after_header(arg, scalar),
            })
        }
    }
}

/// A scalar argument written straight into its parameter slot: the reader of its type and
/// the parameter's type, with the common pairs (a float to float64 or float32, an int to
/// int64, a NumPy scalar to its own type) converted without the general conversion.
#[derive(Clone, Copy)]
pub(crate) struct ScalarSlots {
    reader: ScalarReader,
    target: Scalar,
    how: How,
}

#[derive(Clone, Copy)]
enum How {
    FloatToF64,
    FloatToF32,
    IntToI64,
    NumpyF32ToF32,
    NumpyF64ToF64,
    /// Anything else: [`Value::slots_for`].
    General,
}

impl ScalarSlots {
    /// How `arg` is written into a parameter of type `target`, if it is a scalar with a
    /// reader (see [`ScalarReader`]).
    pub(crate) fn of(arg: &Bound<'_, PyAny>, target: Scalar) -> Option<ScalarSlots> {
        let reader = ScalarReader::of(arg)?;
        let how = match (reader.source, target) {
            (ScalarSource::Float, Scalar::F64) => How::FloatToF64,
            (ScalarSource::Float, Scalar::F32) => How::FloatToF32,
            (ScalarSource::Int, Scalar::I64 | Scalar::U64) => How::IntToI64,
            (ScalarSource::Numpy(Scalar::F32), Scalar::F32) => How::NumpyF32ToF32,
            (ScalarSource::Numpy(Scalar::F64), Scalar::F64) => How::NumpyF64ToF64,
            _ => How::General,
        };
        Some(ScalarSlots {
            reader,
            target,
            how,
        })
    }

    /// The fingerprint byte of the scalars written.
    pub(crate) fn kind(&self) -> u8 {
        self.reader.kind
    }

    /// How many slots the parameter takes (two for complex).
    pub(crate) fn width(&self) -> usize {
        if self.target.is_complex() {
            2
        } else {
            1
        }
    }

    /// Writes `arg` into `slots` (its parameter's, [`ScalarSlots::width`] of them): false
    /// when `arg` is not of the reader's type, or does not convert.
    #[inline(always)]
    pub(crate) fn write(&self, arg: &Bound<'_, PyAny>, slots: &mut [u64]) -> bool {
        let object = arg.as_ptr();
        // SAFETY: `arg` is a valid object; its type is read without taking a reference.
        if unsafe { ffi::Py_TYPE(object) } as usize != self.reader.type_ptr {
            return false;
        }
        // SAFETY: `arg` is exactly of the reader's type, so its value is read as that type's
        // (NumPy scalars only when their layout is the known one, see `ScalarReader::of`).
        let first = unsafe {
            match self.how {
                How::FloatToF64 => ffi::PyFloat_AsDouble(object).to_bits(),
                How::FloatToF32 => u64::from((ffi::PyFloat_AsDouble(object) as f32).to_bits()),
                How::IntToI64 => {
                    let mut overflow = 0;
                    let value = ffi::PyLong_AsLongLongAndOverflow(object, &mut overflow);
                    if overflow != 0 {
                        return false; // uint64, or too large: the full read decides
                    }
                    value as u64
                }
                How::NumpyF32ToF32 => match scalars::numpy_value_after_header(arg, Scalar::F32) {
                    Value::Float(value) => u64::from((value as f32).to_bits()),
                    _ => return false,
                },
                How::NumpyF64ToF64 => match scalars::numpy_value_after_header(arg, Scalar::F64) {
                    Value::Float(value) => value.to_bits(),
                    _ => return false,
                },
                How::General => {
                    let Some(converted) = self
                        .reader
                        .read(arg)
                        .and_then(|value| value.slots_for(self.target))
                    else {
                        return false;
                    };
                    if let [first, second] = slots {
                        *second = converted[1];
                        *first = converted[0];
                        return true;
                    }
                    converted[0]
                }
            }
        };
        match slots.first_mut() {
            Some(slot) => {
                *slot = first;
                true
            }
            None => false,
        }
    }
}
