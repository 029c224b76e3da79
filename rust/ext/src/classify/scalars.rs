//! Scalars: Python `bool` / `int` / `float` / `complex` (recognised in `read_arg` by exact
//! type), NumPy scalars (read straight from the object when NumPy's layout is the known
//! one), and NumPy `datetime64` / `timedelta64` scalars (passed as int64).

use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyComplex, PyFloat, PyInt};

use super::arrays::{dtype_element, numba_only_dtype, parse_datetime_dtype};
use super::{fingerprint, ArgValue, Position, Scratch, Strategy};
use crate::errors::Result;
use crate::scalar::{Scalar, Value};

/// Pushes a scalar argument: its type into the fingerprint, its value.
#[inline]
pub(super) fn push(scratch: &mut Scratch, scalar: Scalar, value: Value) -> Result<()> {
    fingerprint::push_scalar(&mut scratch.fingerprint, scalar);
    scratch.values.push(ArgValue::Scalar(value));
    Ok(())
}

/// How a subclass of `int`, `float` or `complex` (not an enum) is read: as its base.
pub(super) fn subclass_strategy(arg: &Bound<'_, PyAny>) -> Option<Strategy> {
    if arg.is_instance_of::<PyInt>() {
        Some(Strategy::IntSubclass)
    } else if arg.is_instance_of::<PyFloat>() {
        Some(Strategy::FloatSubclass)
    } else if arg.is_instance_of::<PyComplex>() {
        Some(Strategy::ComplexSubclass)
    } else {
        None
    }
}

/// A float (or a subclass of float): numba types it float64.
#[inline]
pub(super) fn read_float(arg: &Bound<'_, PyAny>, scratch: &mut Scratch) -> Result<()> {
    // SAFETY: `arg` is a float or a subclass of it, whose value is read directly.
    let value = unsafe { ffi::PyFloat_AsDouble(arg.as_ptr()) };
    push(scratch, Scalar::F64, Value::Float(value))
}

/// A complex (or a subclass of complex): numba types it complex128.
#[inline]
pub(super) fn read_complex(arg: &Bound<'_, PyAny>, scratch: &mut Scratch) -> Result<()> {
    // SAFETY: `arg` is a complex or a subclass of it, whose parts are read directly.
    let (re, im) = unsafe {
        (
            ffi::PyComplex_RealAsDouble(arg.as_ptr()),
            ffi::PyComplex_ImagAsDouble(arg.as_ptr()),
        )
    };
    push(scratch, Scalar::C128, Value::Complex(re, im))
}

/// An int (or a subclass of int that is not an enum): int64, or uint64 above int64's range.
pub(super) fn read_int(
    arg: &Bound<'_, PyAny>,
    at: Position<'_>,
    scratch: &mut Scratch,
) -> Result<()> {
    let mut overflow = 0;
    // SAFETY: `arg` is an int or a subclass of it (the value is read, never `__index__`).
    let value = unsafe { ffi::PyLong_AsLongLongAndOverflow(arg.as_ptr(), &mut overflow) };
    if overflow == 0 {
        return push(scratch, Scalar::I64, Value::Int(i128::from(value)));
    }
    // numba types ints above int64 that fit 64 bits unsigned as uint64.
    match arg.extract::<u64>() {
        Ok(unsigned) => push(scratch, Scalar::U64, Value::Int(i128::from(unsigned))),
        Err(_) => Err(at.error(format!("int value is too large for 64 bits: {arg}"))),
    }
}

/// Whether NumPy scalar objects store their value right after the object header
/// (NumPy's `Py<Type>ScalarObject { PyObject_HEAD; obval; }`), checked once.
pub(super) fn numpy_layout_known(py: Python<'_>) -> bool {
    static KNOWN: OnceLock<bool> = OnceLock::new();
    *KNOWN.get_or_init(|| {
        let probe = || -> PyResult<bool> {
            let np = py.import("numpy")?;
            let f = np.getattr("float64")?.call1((1.25f64,))?;
            let i = np.getattr("int16")?.call1((-3i64,))?;
            // SAFETY: both objects are NumPy scalars, which are larger than a PyObject
            // header plus 8 bytes; we only read within them.
            let (fv, iv) = unsafe { (read_after_header::<f64>(&f), read_after_header::<i16>(&i)) };
            Ok(fv == 1.25 && iv == -3)
        };
        probe().unwrap_or(false)
    })
}

/// # Safety
/// `obj` must be a NumPy scalar whose value is a `T` right after the object header.
unsafe fn read_after_header<T: Copy>(obj: &Bound<'_, PyAny>) -> T {
    let base = obj.as_ptr().cast::<u8>();
    // SAFETY: guaranteed by the caller.
    unsafe {
        base.add(std::mem::size_of::<ffi::PyObject>())
            .cast::<T>()
            .read_unaligned()
    }
}

/// How NumPy scalars of `arg`'s type are read (`arg` is a `numpy.generic`).
pub(super) fn numpy_strategy(arg: &Bound<'_, PyAny>, at: Position<'_>) -> Result<Strategy> {
    let py = arg.py();
    let dtype = arg.getattr(intern!(py, "dtype"))?;
    let kind: String = dtype.getattr(intern!(py, "kind"))?.extract()?;
    if kind == "M" || kind == "m" {
        return Ok(Strategy::Datetime);
    }
    if kind == "V" {
        return Ok(Strategy::Record);
    }
    match dtype_element(&dtype, at)?.and_then(|element| element.scalar()) {
        Some(scalar) => Ok(Strategy::NumpyScalar(scalar)),
        None if numba_only_dtype(&dtype) => Ok(Strategy::Numba),
        None => Err(at.error(format!("NumPy scalars of dtype {dtype} are not supported"))),
    }
}

/// A NumPy scalar of dtype `scalar`.
pub(super) fn read_numpy(
    arg: &Bound<'_, PyAny>,
    scalar: Scalar,
    scratch: &mut Scratch,
) -> Result<()> {
    let value = numpy_value(arg, scalar)?;
    push(scratch, scalar, value)
}

/// The value of a NumPy scalar of dtype `scalar`.
#[inline]
pub(super) fn numpy_value(arg: &Bound<'_, PyAny>, scalar: Scalar) -> Result<Value> {
    if numpy_layout_known(arg.py()) {
        // SAFETY: the strategy was chosen because `arg` is a NumPy scalar of dtype `scalar`,
        // whose value follows the header (checked once above).
        return Ok(unsafe { numpy_value_after_header(arg, scalar) });
    }
    // Unknown layout: ask Python.
    let item = arg.call_method0("item")?;
    Ok(match scalar {
        Scalar::Bool => Value::Bool(item.extract()?),
        Scalar::F16 => Value::Half(crate::scalar::f64_to_half(item.extract()?)),
        Scalar::F32 | Scalar::F64 => Value::Float(item.extract()?),
        Scalar::C64 | Scalar::C128 => {
            let c: num_complex_free::Complex = item.extract()?;
            Value::Complex(c.re, c.im)
        }
        _ => Value::Int(item.extract()?),
    })
}

/// The value of NumPy scalar `arg`, read after its header.
///
/// # Safety
/// `arg` must be a NumPy scalar of dtype `scalar`, and [`numpy_layout_known`] true.
#[inline(always)]
pub(super) unsafe fn numpy_value_after_header(arg: &Bound<'_, PyAny>, scalar: Scalar) -> Value {
    // SAFETY: guaranteed by the caller.
    unsafe {
        match scalar {
            Scalar::Bool => Value::Bool(read_after_header::<u8>(arg) != 0),
            Scalar::I8 => Value::Int(read_after_header::<i8>(arg).into()),
            Scalar::I16 => Value::Int(read_after_header::<i16>(arg).into()),
            Scalar::I32 => Value::Int(read_after_header::<i32>(arg).into()),
            Scalar::I64 => Value::Int(read_after_header::<i64>(arg).into()),
            Scalar::U8 => Value::Int(read_after_header::<u8>(arg).into()),
            Scalar::U16 => Value::Int(read_after_header::<u16>(arg).into()),
            Scalar::U32 => Value::Int(read_after_header::<u32>(arg).into()),
            Scalar::U64 => Value::Int(read_after_header::<u64>(arg).into()),
            Scalar::F16 => Value::Half(read_after_header::<u16>(arg)),
            Scalar::F32 => Value::Float(read_after_header::<f32>(arg).into()),
            Scalar::F64 => Value::Float(read_after_header::<f64>(arg)),
            Scalar::C64 => {
                let [re, im] = read_after_header::<[f32; 2]>(arg);
                Value::Complex(re.into(), im.into())
            }
            Scalar::C128 => {
                let [re, im] = read_after_header::<[f64; 2]>(arg);
                Value::Complex(re, im)
            }
        }
    }
}

mod num_complex_free {
    use pyo3::prelude::*;
    use pyo3::types::PyComplex;

    /// A Python complex read without the num-complex crate.
    pub(super) struct Complex {
        pub re: f64,
        pub im: f64,
    }

    impl<'a, 'py> FromPyObject<'a, 'py> for Complex {
        type Error = PyErr;
        fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
            let c = obj.cast::<PyComplex>()?;
            Ok(Complex {
                re: c.real(),
                im: c.imag(),
            })
        }
    }
}

/// A NumPy `datetime64` / `timedelta64` scalar: its unit in the fingerprint, its int64
/// count as the value (as numba passes it).
pub(super) fn read_datetime(
    arg: &Bound<'_, PyAny>,
    at: Position<'_>,
    scratch: &mut Scratch,
) -> Result<()> {
    let py = arg.py();
    let dtype = arg.getattr(intern!(py, "dtype"))?;
    let code: String = dtype.getattr(intern!(py, "str"))?.extract()?;
    let (kind, unit) = parse_datetime_dtype(&code)
        .ok_or_else(|| at.error(format!("datetime dtype {code} is not supported")))?;
    let count: i64 = arg
        .call_method1(intern!(py, "astype"), ("int64",))?
        .extract()?;
    fingerprint::push_datetime(&mut scratch.fingerprint, kind, unit);
    scratch
        .values
        .push(ArgValue::Scalar(Value::Int(i128::from(count))));
    Ok(())
}
