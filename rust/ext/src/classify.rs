//! Argument classification: read each launch argument once, into a value the packer
//! uses and a fingerprint byte string that fixes its numba type exactly.
//!
//! Python builtins are recognised by exact type pointer. Every other type is
//! resolved once per thread to a [`Strategy`] (NumPy scalar, numba device array,
//! cuda.core `Buffer` / `StridedMemoryView`, CuPy array, DLPack C exchange API producer
//! such as torch, generic CUDA Array Interface, generic `__dlpack__`), cached by type
//! pointer; the type is held so the pointer cannot be reused.
//!
//! Fingerprint encoding, per argument:
//! - scalar: one byte, the [`Scalar`] code;
//! - array: `ARRAY_TAG`, element [`Scalar`] code, ndim, flags (layout | readonly);
//! - tuple: `TUPLE_TAG`, member count, then each member's encoding;
//! - named tuple: `NAMED_TUPLE_TAG`, class id (2 bytes, little-endian), count, members;
//! - enum member: `ENUM_TAG`, class id (2 bytes);
//! - `datetime64` / `timedelta64` scalar: `DATETIME_TAG`, kind (0 / 1), unit index;
//! - record (structured NumPy scalar): `RECORD_TAG`, dtype id (2 bytes, little-endian).
//!
//! Tuples are flattened: each member pushes its own value, as numba passes them.
//! Class ids index a process-wide list of classes (enums, named tuples) and record dtypes,
//! filled on misses.

use std::cell::RefCell;
use std::sync::OnceLock;

use pyo3::exceptions::PyAttributeError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyString, PyTuple, PyType};
use smallvec::SmallVec;

use crate::dlpack::{self, DLTensor, ExchangeApi};
use crate::errors::{Error, Result};
use crate::scalar::{Scalar, Value};
use fastlaunch_driver as driver;

pub const ARRAY_TAG: u8 = 0x80;
pub const TUPLE_TAG: u8 = 0x81;
pub const NAMED_TUPLE_TAG: u8 = 0x82;
pub const ENUM_TAG: u8 = 0x83;
pub const DATETIME_TAG: u8 = 0x84;
pub const RECORD_TAG: u8 = 0x85;
/// NumPy's datetime units, by their index in a fingerprint ("" is the generic unit).
pub const DATETIME_UNITS: [&str; 14] = [
    "", "Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as",
];
pub const LAYOUT_C: u8 = 0;
pub const LAYOUT_F: u8 = 1;
pub const LAYOUT_A: u8 = 2;
pub const READONLY_FLAG: u8 = 4;

/// Arrays with more dimensions than this are refused (NumPy's own limit is 64).
pub const MAX_NDIM: usize = 64;

/// An array argument: what the packer needs. `dims_at` indexes the scratch's `dims`,
/// where `ndim` shape values are followed by `ndim` byte strides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayArg {
    pub data: u64,
    pub itemsize: u64,
    pub nitems: u64,
    pub ndim: usize,
    pub dims_at: usize,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArgValue {
    Array(ArrayArg),
    Scalar(Value),
    /// A record: the device address of its copy (0 until the launch stages it; see
    /// [`RecordCopy`]), passed as one pointer parameter.
    Record {
        device: u64,
    },
}

/// A record argument's host bytes, which the launch copies to the device before packing and
/// back after (numba-cuda's `InOut` default for records). The argument object keeps the
/// bytes alive and in place for the launch (a structured scalar holds its array).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordCopy {
    /// Its value in `Scratch::values`.
    pub value: usize,
    pub host: usize,
    pub len: usize,
    /// Whether the bytes may be written: a record of a read-only array is not copied back.
    pub writable: bool,
}

/// Per-launch working memory, reused by each thread so a launch allocates nothing.
#[derive(Default)]
pub struct Scratch {
    pub fingerprint: Vec<u8>,
    pub values: Vec<ArgValue>,
    pub dims: Vec<i64>,
    pub params: fastlaunch_driver::ParamBuffer,
    /// Objects that must live until the launch is submitted (DLPack capsules).
    pub keepalive: Vec<Py<PyAny>>,
    /// The launch's stream, given to `__dlpack__` producers.
    pub launch_stream: usize,
    /// Streams that produced the inputs (CUDA Array Interface v3 `stream`).
    pub producers: Vec<usize>,
    /// A DLPack exchange-API producer among the inputs: where to ask its current stream.
    pub exchange_stream: Option<(dlpack::CurrentWorkStream, i32, i32)>,
    /// Whether a CuPy array is among the inputs (CuPy's current stream then counts).
    pub has_cupy: bool,
    /// An argument only numba-cuda's own launch path can pass (see `Strategy::Numba`).
    pub needs_numba: bool,
    /// Arrays whose source names their device, and the device.
    pub claimed_devices: Vec<(ValueAt, usize)>,
    /// Arrays whose pointers the launch asks the driver about (generic CUDA Array
    /// Interface objects, whose pointer may be anything).
    pub unverified_pointers: Vec<ValueAt>,
    /// How many tuples the member being read is inside.
    pub tuple_depth: usize,
    /// Records among the arguments, to copy to the device and back around the launch.
    pub records: Vec<RecordCopy>,
    /// Their device copies while the launch runs (emptied by the launch that made them).
    pub staged: Vec<driver::StagedCopy>,
}

impl Scratch {
    pub fn reset(&mut self) {
        self.fingerprint.clear();
        self.values.clear();
        self.dims.clear();
        self.params.clear();
        self.keepalive.clear();
        self.producers.clear();
        self.exchange_stream = None;
        self.has_cupy = false;
        self.needs_numba = false;
        self.claimed_devices.clear();
        self.unverified_pointers.clear();
        self.tuple_depth = 0;
        self.records.clear();
    }
}

/// Where an array's value is in `Scratch::values`, and which argument it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueAt {
    pub value: usize,
    pub argument: usize,
}

impl ValueAt {
    fn next(scratch: &Scratch, at: Position<'_>) -> ValueAt {
        ValueAt {
            value: scratch.values.len(),
            argument: at.index,
        }
    }
}

/// How arguments of one Python type are read.
#[derive(Clone, Copy)]
enum Strategy {
    /// Kinds numba-cuda launches and fastlaunch does not pack: host arrays, `cuda.In` /
    /// `Out` / `InOut`, datetime arrays, device records, enums of other values.
    Numba,
    NumpyScalar(Scalar),
    NumbaDeviceArray,
    /// cuda.core `Buffer`: bytes, typed as numba-cuda types them (1-D C uint8, writable).
    CoreBuffer,
    /// cuda.core `StridedMemoryView`: read through its attributes.
    CoreStridedView,
    CupyArray,
    Exchange(ExchangeApi),
    CudaArrayInterface,
    DLPack,
    /// Tuples and named tuples (class id for named ones): members read one by one.
    Tuple(Option<u16>),
    /// `Enum` / `IntEnum` members of the class with this id: their `value` is passed.
    Enum(u16),
    /// NumPy `datetime64` / `timedelta64` scalars: passed as int64.
    Datetime,
    /// NumPy structured scalars (`np.void`, `np.record`): passed as a pointer to a device copy.
    Record,
    /// Subclasses of `int`, `float` and `complex` (not enums, not NumPy scalars): typed as
    /// numba types their base, int64 (uint64) / float64 / complex128.
    IntSubclass,
    FloatSubclass,
    ComplexSubclass,
}

/// Tuples deeper than this go to numba-cuda's path (and no recursion runs away).
const MAX_TUPLE_DEPTH: usize = 8;

/// Classes whose identity is part of a numba type (enums, named tuples), by id.
static CLASSES: std::sync::Mutex<Vec<Py<PyAny>>> = std::sync::Mutex::new(Vec::new());

/// The id of `class` in [`CLASSES`], adding it on first sight (`None` past 65 536 classes).
#[cold]
fn class_id(class: &Bound<'_, PyAny>) -> Option<u16> {
    let mut classes = CLASSES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(id) = classes.iter().position(|c| c.as_ptr() == class.as_ptr()) {
        return u16::try_from(id).ok();
    }
    let id = u16::try_from(classes.len()).ok()?;
    classes.push(class.clone().unbind());
    Some(id)
}

/// The class with id `id` (for describing fingerprints on a miss).
fn class_by_id(py: Python<'_>, id: u16) -> PyResult<Py<PyAny>> {
    let classes = CLASSES.lock().unwrap_or_else(|p| p.into_inner());
    classes
        .get(usize::from(id))
        .map(|c| c.clone_ref(py))
        .ok_or_else(bad_fingerprint)
}

struct CachedType {
    type_ptr: usize,
    strategy: Strategy,
    _class: Py<PyAny>,
}

struct CachedDtype {
    dtype_ptr: usize,
    scalar: Scalar,
    _dtype: Py<PyAny>,
}

thread_local! {
    static TYPES: RefCell<Vec<CachedType>> = const { RefCell::new(Vec::new()) };
    static DTYPES: RefCell<Vec<CachedDtype>> = const { RefCell::new(Vec::new()) };
}

/// Where an argument is, for error messages.
#[derive(Clone, Copy)]
pub struct Position<'a> {
    pub index: usize,
    pub name: &'a str,
}

impl Position<'_> {
    pub fn error(&self, message: impl Into<String>) -> Error {
        Error::Argument {
            position: self.index,
            name: self.name.to_owned(),
            message: message.into(),
        }
    }
}

/// Reads one argument into `scratch`: its value and its fingerprint bytes.
#[inline]
pub fn read_arg(arg: &Bound<'_, PyAny>, at: Position<'_>, scratch: &mut Scratch) -> Result<()> {
    // SAFETY: `arg` is a valid object; its type is read without taking a reference.
    let type_ptr = unsafe { ffi::Py_TYPE(arg.as_ptr()) };
    // SAFETY: reading the address of static builtin type objects.
    unsafe {
        if type_ptr == (&raw mut ffi::PyFloat_Type).cast() {
            return read_float(arg, scratch);
        }
        if type_ptr == (&raw mut ffi::PyLong_Type).cast() {
            return read_int(arg, at, scratch);
        }
        if type_ptr == (&raw mut ffi::PyBool_Type).cast() {
            let value = arg.as_ptr() == ffi::Py_True();
            return push_scalar(scratch, Scalar::Bool, Value::Bool(value));
        }
        if type_ptr == (&raw mut ffi::PyComplex_Type).cast() {
            return read_complex(arg, scratch);
        }
    }
    let strategy = strategy_for(arg, at)?;
    match strategy {
        Strategy::NumpyScalar(scalar) => {
            let value = read_numpy_scalar(arg, scalar)?;
            push_scalar(scratch, scalar, value)
        }
        Strategy::NumbaDeviceArray => read_numba_array(arg, at, scratch),
        Strategy::CoreBuffer => read_core_buffer(arg, at, scratch),
        Strategy::CoreStridedView => read_core_view(arg, at, scratch),
        Strategy::CupyArray => {
            scratch.has_cupy = true;
            read_cupy_array(arg, at, scratch)
        }
        Strategy::Exchange(api) => {
            let mut tensor = DLTensor::empty();
            // SAFETY: the API belongs to this object's type; the tensor is caller-owned.
            let rc = unsafe { (api.from_py_object)(arg.as_ptr().cast(), &mut tensor) };
            if rc != 0 {
                let cause = PyErr::fetch(arg.py());
                return Err(at.error(format!(
                    "{} could not be exported through DLPack: {cause}",
                    type_name(arg)
                )));
            }
            if api.lazy_sign_views {
                refuse_lazy_sign_view(arg, &tensor, at)?;
            }
            if let Some(query) = api.current_work_stream {
                scratch.exchange_stream =
                    Some((query, tensor.device.device_type, tensor.device.device_id));
            }
            push_dltensor(arg, &tensor, at, scratch)
        }
        Strategy::CudaArrayInterface => read_cai(arg, at, scratch),
        Strategy::DLPack => read_dlpack(arg, at, scratch),
        Strategy::Tuple(class) => read_tuple(arg, class, at, scratch),
        Strategy::Enum(class) => read_enum(arg, class, at, scratch),
        Strategy::Datetime => read_datetime(arg, at, scratch),
        Strategy::Record => read_record(arg, at, scratch),
        Strategy::IntSubclass => read_int(arg, at, scratch),
        Strategy::FloatSubclass => read_float(arg, scratch),
        Strategy::ComplexSubclass => read_complex(arg, scratch),
        Strategy::Numba => {
            scratch.needs_numba = true;
            Ok(())
        }
    }
}

/// Refuses a torch tensor whose conjugate or negative bit is set: its memory holds the
/// values before that lazy conjugation or negation, which a kernel would read silently
/// (torch's own `__dlpack__` refuses such tensors too). Only complex tensors can carry the
/// conjugate bit; the negative bit can be on any (`x.conj().imag`).
fn refuse_lazy_sign_view(
    arg: &Bound<'_, PyAny>,
    tensor: &DLTensor,
    at: Position<'_>,
) -> Result<()> {
    let py = arg.py();
    let is_set = |method: &Bound<'_, pyo3::types::PyString>| -> Result<bool> {
        Ok(arg
            .call_method0(method)?
            .is(pyo3::types::PyBool::new(py, true)))
    };
    if tensor.dtype.code == dlpack::KDL_COMPLEX && is_set(intern!(py, "is_conj"))? {
        return Err(at.error(
            "tensor has its conjugate bit set (a lazy .conj() view, whose memory holds the \
             unconjugated values); pass t.resolve_conj() instead",
        ));
    }
    if is_set(intern!(py, "is_neg"))? {
        return Err(at.error(
            "tensor has its negative bit set (a lazy negated view, whose memory holds the \
             values before negation); pass t.resolve_neg() instead",
        ));
    }
    Ok(())
}

#[inline]
fn push_scalar(scratch: &mut Scratch, scalar: Scalar, value: Value) -> Result<()> {
    scratch.fingerprint.push(scalar as u8);
    scratch.values.push(ArgValue::Scalar(value));
    Ok(())
}

/// A float (or a subclass of float): numba types it float64.
#[inline]
fn read_float(arg: &Bound<'_, PyAny>, scratch: &mut Scratch) -> Result<()> {
    // SAFETY: `arg` is a float or a subclass of it, whose value is read directly.
    let value = unsafe { ffi::PyFloat_AsDouble(arg.as_ptr()) };
    push_scalar(scratch, Scalar::F64, Value::Float(value))
}

/// A complex (or a subclass of complex): numba types it complex128.
#[inline]
fn read_complex(arg: &Bound<'_, PyAny>, scratch: &mut Scratch) -> Result<()> {
    // SAFETY: `arg` is a complex or a subclass of it, whose parts are read directly.
    let (re, im) = unsafe {
        (
            ffi::PyComplex_RealAsDouble(arg.as_ptr()),
            ffi::PyComplex_ImagAsDouble(arg.as_ptr()),
        )
    };
    push_scalar(scratch, Scalar::C128, Value::Complex(re, im))
}

/// An int (or a subclass of int that is not an enum): int64, or uint64 above int64's range.
fn read_int(arg: &Bound<'_, PyAny>, at: Position<'_>, scratch: &mut Scratch) -> Result<()> {
    let mut overflow = 0;
    // SAFETY: `arg` is an int or a subclass of it (the value is read, never `__index__`).
    let value = unsafe { ffi::PyLong_AsLongLongAndOverflow(arg.as_ptr(), &mut overflow) };
    if overflow == 0 {
        return push_scalar(scratch, Scalar::I64, Value::Int(i128::from(value)));
    }
    // numba types ints above int64 that fit 64 bits unsigned as uint64.
    match arg.extract::<u64>() {
        Ok(unsigned) => push_scalar(scratch, Scalar::U64, Value::Int(i128::from(unsigned))),
        Err(_) => Err(at.error(format!("int value is too large for 64 bits: {arg}"))),
    }
}

fn type_name(arg: &Bound<'_, PyAny>) -> String {
    let class = arg.get_type();
    match (class.module(), class.qualname()) {
        (Ok(module), Ok(name)) if module != "builtins" => format!("{module}.{name}"),
        (_, Ok(name)) => name.to_string(),
        _ => "object".into(),
    }
}

fn strategy_for(arg: &Bound<'_, PyAny>, at: Position<'_>) -> Result<Strategy> {
    // SAFETY: `arg` is a valid object; its type is read without taking a reference.
    let type_ptr = unsafe { ffi::Py_TYPE(arg.as_ptr()) } as usize;
    let cached = TYPES.with(|types| {
        types
            .borrow()
            .iter()
            .find(|t| t.type_ptr == type_ptr)
            .map(|t| t.strategy)
    });
    if let Some(strategy) = cached {
        return Ok(strategy);
    }
    let strategy = resolve_strategy(arg, at)?;
    TYPES.with(|types| {
        types.borrow_mut().push(CachedType {
            type_ptr,
            strategy,
            _class: arg.get_type().into_any().unbind(),
        })
    });
    Ok(strategy)
}

fn numpy_generic(py: Python<'_>) -> Option<Bound<'_, PyAny>> {
    py.import("numpy").and_then(|np| np.getattr("generic")).ok()
}

fn has_attribute(object: &Bound<'_, PyAny>, name: &str) -> bool {
    object.hasattr(name).unwrap_or(false)
}

/// Decides how to read a type never seen before on this thread.
#[cold]
fn resolve_strategy(arg: &Bound<'_, PyAny>, at: Position<'_>) -> Result<Strategy> {
    let py = arg.py();
    let class = arg.get_type().into_any();
    if let Some(generic) = numpy_generic(py) {
        if arg.is_instance(&generic)? {
            let dtype = arg.getattr(intern!(py, "dtype"))?;
            let kind: String = dtype.getattr(intern!(py, "kind"))?.extract()?;
            if kind == "M" || kind == "m" {
                return Ok(Strategy::Datetime);
            }
            if kind == "V" {
                return Ok(Strategy::Record);
            }
            return match dtype_scalar(&dtype)? {
                Some(scalar) => Ok(Strategy::NumpyScalar(scalar)),
                None if numba_only_dtype(&dtype) => Ok(Strategy::Numba),
                None => Err(at.error(format!("NumPy scalars of dtype {dtype} are not supported"))),
            };
        }
    }
    // Before the protocols: a view offers the DLPack C exchange API, whose tensor carries
    // no read-only flag, and a buffer's `__dlpack__` says int8 where numba-cuda says uint8.
    if let Some(strategy) = cuda_core_strategy(&arg.get_type()) {
        return Ok(strategy);
    }
    if class
        .getattr("__cuda_ndarray__")
        .is_ok_and(|v| v.is_truthy().unwrap_or(false))
        && has_attribute(arg, "gpu_data")
    {
        return Ok(Strategy::NumbaDeviceArray);
    }
    if let Some(mut api) = dlpack::exchange_api(&class) {
        api.lazy_sign_views = has_attribute(&class, "is_conj") && has_attribute(&class, "is_neg");
        return Ok(Strategy::Exchange(api));
    }
    let module = arg
        .get_type()
        .module()
        .map(|m| m.to_string())
        .unwrap_or_default();
    if module.starts_with("cupy")
        && has_attribute(&class, "__cuda_array_interface__")
        && has_attribute(&class, "data")
    {
        return Ok(Strategy::CupyArray);
    }
    let is_host_array = py
        .import("numpy")
        .and_then(|np| np.getattr("ndarray"))
        .and_then(|ndarray| arg.is_instance(&ndarray))
        .unwrap_or(false);
    let is_enum = py
        .import("enum")
        .and_then(|e| e.getattr("Enum"))
        .and_then(|enum_class| arg.is_instance(&enum_class))
        .unwrap_or(false);
    if is_enum && enum_values_are_numbers(&class) {
        if let Some(id) = class_id(&class) {
            return Ok(Strategy::Enum(id));
        }
    }
    if !is_enum {
        if arg.is_instance_of::<pyo3::types::PyInt>() {
            return Ok(Strategy::IntSubclass);
        }
        if arg.is_instance_of::<pyo3::types::PyFloat>() {
            return Ok(Strategy::FloatSubclass);
        }
        if arg.is_instance_of::<pyo3::types::PyComplex>() {
            return Ok(Strategy::ComplexSubclass);
        }
    }
    if arg.is_instance_of::<PyTuple>() {
        if arg.get_type().is(py.get_type::<PyTuple>()) {
            return Ok(Strategy::Tuple(None));
        }
        if has_attribute(&class, "_fields") {
            if let Some(id) = class_id(&class) {
                return Ok(Strategy::Tuple(Some(id)));
            }
        }
    }
    let is_device_record =
        has_attribute(&class, "__cuda_memory__") && !has_attribute(&class, "__cuda_ndarray__");
    if is_host_array
        || is_enum
        || is_device_record
        || arg.is_instance_of::<PyTuple>()
        || module == "numba.cuda.args"
    {
        return Ok(Strategy::Numba);
    }
    // The generic protocols may be instance attributes (as on many test doubles).
    if has_attribute(arg, "__cuda_array_interface__") {
        return Ok(Strategy::CudaArrayInterface);
    }
    if has_attribute(arg, "__dlpack__") && has_attribute(arg, "__dlpack_device__") {
        return Ok(Strategy::DLPack);
    }
    Err(at.error(format!(
        "{} is not a supported kernel argument (expected a device array with \
         __cuda_array_interface__ or __dlpack__, or a bool, int, float, complex or NumPy scalar)",
        type_name(arg)
    )))
}

/// cuda.core's `Buffer` and `StridedMemoryView`, and subclasses of them, found by module and
/// name along the MRO so that cuda.core is never imported here (its classes live in versioned
/// modules such as `cuda.core._memory._buffer`).
fn cuda_core_strategy(class: &Bound<'_, PyType>) -> Option<Strategy> {
    class.mro().iter().find_map(|base| {
        let base = base.cast::<PyType>().ok()?;
        let module = base.module().ok()?;
        let module = module.to_str().ok()?;
        if module != "cuda.core" && !module.starts_with("cuda.core.") {
            return None;
        }
        match base.name().ok()?.to_str().ok()? {
            "Buffer" => Some(Strategy::CoreBuffer),
            "StridedMemoryView" => Some(Strategy::CoreStridedView),
            _ => None,
        }
    })
}

/// The element type of a NumPy dtype object, cached per dtype object.
fn dtype_scalar(dtype: &Bound<'_, PyAny>) -> Result<Option<Scalar>> {
    let dtype_ptr = dtype.as_ptr() as usize;
    let cached = DTYPES.with(|dtypes| {
        dtypes
            .borrow()
            .iter()
            .find(|d| d.dtype_ptr == dtype_ptr)
            .map(|d| d.scalar)
    });
    if cached.is_some() {
        return Ok(cached);
    }
    let typestr: String = dtype.getattr(intern!(dtype.py(), "str"))?.extract()?;
    let scalar = Scalar::from_typestr(&typestr);
    if let Some(scalar) = scalar {
        DTYPES.with(|dtypes| {
            dtypes.borrow_mut().push(CachedDtype {
                dtype_ptr,
                scalar,
                _dtype: dtype.clone().unbind(),
            })
        });
    }
    Ok(scalar)
}

/// Whether NumPy scalar objects store their value right after the object header
/// (NumPy's `Py<Type>ScalarObject { PyObject_HEAD; obval; }`), checked once.
fn numpy_scalar_layout_known(py: Python<'_>) -> bool {
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

fn read_numpy_scalar(arg: &Bound<'_, PyAny>, scalar: Scalar) -> Result<Value> {
    if numpy_scalar_layout_known(arg.py()) {
        // SAFETY: the strategy was chosen because `arg` is a NumPy scalar of dtype `scalar`,
        // whose value follows the header (checked once above).
        let value = unsafe {
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
        };
        return Ok(value);
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

mod num_complex_free {
    use pyo3::prelude::*;
    use pyo3::types::PyComplex;

    /// A Python complex read without the num-complex crate.
    pub struct Complex {
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

/// Appends an array's shape and byte strides to the scratch, computes its layout,
/// and records value and fingerprint.
fn push_array(
    scratch: &mut Scratch,
    at: Position<'_>,
    data: u64,
    scalar: Scalar,
    shape: impl ExactSizeIterator<Item = i64>,
    strides: Option<impl ExactSizeIterator<Item = i64>>,
    readonly: bool,
) -> Result<()> {
    let ndim = shape.len();
    let staged = scratch.dims.len();
    scratch.dims.extend(shape);
    match strides {
        Some(strides) => {
            if strides.len() != ndim {
                scratch.dims.truncate(staged);
                return Err(at.error(format!(
                    "array has {ndim} dimensions but {} strides",
                    strides.len()
                )));
            }
            scratch.dims.extend(strides);
        }
        None => append_c_strides(&mut scratch.dims, staged, scalar.itemsize() as i64),
    }
    push_staged_array(scratch, at, data, scalar, staged, readonly)
}

/// Appends C-contiguous byte strides for the shape staged in `dims` from `staged` on.
fn append_c_strides(dims: &mut Vec<i64>, staged: usize, itemsize: i64) {
    let ndim = dims.len() - staged;
    dims.resize(staged + 2 * ndim, 0);
    let mut stride = itemsize;
    for d in (0..ndim).rev() {
        dims[staged + ndim + d] = stride;
        stride = stride.saturating_mul(dims[staged + d].max(1));
    }
}

/// Records an array whose shape and byte strides are the last values of `scratch.dims`,
/// from `dims_at` on: checks the shape, computes nitems and layout, pushes value and
/// fingerprint. On error the staged values are dropped.
fn push_staged_array(
    scratch: &mut Scratch,
    at: Position<'_>,
    data: u64,
    scalar: Scalar,
    dims_at: usize,
    readonly: bool,
) -> Result<()> {
    let ndim = (scratch.dims.len() - dims_at) / 2;
    let (shape, strides) = scratch.dims[dims_at..].split_at(ndim);
    let checked = if ndim > MAX_NDIM {
        Err(at.error(format!(
            "arrays of {ndim} dimensions are not supported (at most {MAX_NDIM})"
        )))
    } else {
        shape.iter().try_fold(1i64, |nitems, &extent| {
            if extent < 0 {
                return Err(at.error(format!("array shape has a negative extent {extent}")));
            }
            nitems
                .checked_mul(extent)
                .ok_or_else(|| at.error("array shape overflows 64 bits"))
        })
    };
    let nitems = match checked {
        Ok(nitems) => nitems,
        Err(e) => {
            scratch.dims.truncate(dims_at);
            return Err(e);
        }
    };
    let itemsize = scalar.itemsize() as i64;
    if nitems > 0 {
        if let Some(message) = misalignment(data, shape, strides, scalar) {
            scratch.dims.truncate(dims_at);
            return Err(at.error(message));
        }
    }
    let layout = layout_of(shape, strides, itemsize);
    scratch.fingerprint.extend_from_slice(&[
        ARRAY_TAG,
        scalar as u8,
        ndim as u8,
        layout | if readonly { READONLY_FLAG } else { 0 },
    ]);
    scratch.values.push(ArgValue::Array(ArrayArg {
        data,
        itemsize: itemsize as u64,
        nitems: nitems as u64,
        ndim,
        dims_at,
    }));
    Ok(())
}

/// Why a non-empty array's elements are not all aligned for its type, if they are not: a
/// kernel reading one would fault with `CUDA_ERROR_MISALIGNED_ADDRESS`, which leaves the
/// context unusable. The alignment is numba's for the element (a complex number's is its
/// parts'), a power of two, so this costs two masks per dimension.
#[inline]
fn misalignment(data: u64, shape: &[i64], strides: &[i64], scalar: Scalar) -> Option<String> {
    let align = if scalar.is_complex() {
        scalar.itemsize() / 2
    } else {
        scalar.itemsize()
    } as u64;
    let mask = align - 1;
    if data & mask != 0 {
        return Some(format!(
            "array data pointer {data:#x} is not aligned to {align} bytes, as {} elements \
             must be",
            scalar.numpy_name()
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
        scalar.numpy_name()
    ))
}

/// numba's layout for an array: 'C' if C-contiguous, else 'F' if Fortran-contiguous,
/// else 'A'. Extents of 1 place no constraint on their stride; an empty array is
/// contiguous. A zero stride on a non-empty array (broadcast) is always 'A'.
pub fn layout_of(shape: &[i64], strides: &[i64], itemsize: i64) -> u8 {
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

fn tuple_ints<'a>(
    tuple: &'a Bound<'_, PyTuple>,
    what: &'a str,
    at: Position<'a>,
) -> Result<Vec<i64>> {
    tuple
        .iter()
        .map(|v| {
            v.extract::<i64>()
                .map_err(|_| at.error(format!("{what} must be a tuple of ints, got {tuple}")))
        })
        .collect()
}

/// Structured, datetime and timedelta dtypes: numba-cuda types and passes these itself.
/// Whether every member of an enum class has an int, float or bool value (numba types
/// such enums; others go to its own launch path).
fn enum_values_are_numbers(class: &Bound<'_, PyAny>) -> bool {
    let py = class.py();
    let Ok(members) = class.getattr(intern!(py, "__members__")) else {
        return false;
    };
    let Ok(values) = members.call_method0(intern!(py, "values")) else {
        return false;
    };
    let Ok(values) = values.try_iter() else {
        return false;
    };
    let mut any = false;
    for member in values {
        let Ok(value) = member.and_then(|m| m.getattr(intern!(py, "value"))) else {
            return false;
        };
        let exact = value.get_type();
        let number = exact.is(py.get_type::<pyo3::types::PyInt>())
            || exact.is(py.get_type::<pyo3::types::PyFloat>())
            || exact.is(py.get_type::<pyo3::types::PyBool>());
        if !number {
            return false;
        }
        any = true;
    }
    any
}

/// A tuple: its header, then each member read as an argument of its own.
fn read_tuple(
    arg: &Bound<'_, PyAny>,
    class: Option<u16>,
    at: Position<'_>,
    scratch: &mut Scratch,
) -> Result<()> {
    let tuple = arg.cast::<PyTuple>().map_err(PyErr::from)?;
    let Ok(count) = u8::try_from(tuple.len()) else {
        scratch.needs_numba = true; // numba-cuda passes long tuples itself
        return Ok(());
    };
    if scratch.tuple_depth >= MAX_TUPLE_DEPTH {
        scratch.needs_numba = true;
        return Ok(());
    }
    match class {
        None => scratch.fingerprint.extend_from_slice(&[TUPLE_TAG, count]),
        Some(id) => {
            let [lo, hi] = id.to_le_bytes();
            scratch
                .fingerprint
                .extend_from_slice(&[NAMED_TUPLE_TAG, lo, hi, count]);
        }
    }
    scratch.tuple_depth += 1;
    let members = tuple
        .iter()
        .try_for_each(|member| read_arg(&member, at, scratch));
    scratch.tuple_depth -= 1;
    members
}

/// An `Enum` / `IntEnum` member: numba passes its `value`.
fn read_enum(
    arg: &Bound<'_, PyAny>,
    class: u16,
    at: Position<'_>,
    scratch: &mut Scratch,
) -> Result<()> {
    let value = arg.getattr(intern!(arg.py(), "value"))?;
    let [lo, hi] = class.to_le_bytes();
    scratch.fingerprint.extend_from_slice(&[ENUM_TAG, lo, hi]);
    // The value is an exact int, float or bool (`enum_values_are_numbers`): read it as
    // such an argument, then drop its type byte, which the enum class already fixes.
    let class_end = scratch.fingerprint.len();
    read_arg(&value, at, scratch)?;
    scratch.fingerprint.truncate(class_end);
    Ok(())
}

/// A NumPy `datetime64` / `timedelta64` scalar: its unit in the fingerprint, its int64
/// count as the value (as numba passes it).
fn read_datetime(arg: &Bound<'_, PyAny>, at: Position<'_>, scratch: &mut Scratch) -> Result<()> {
    let py = arg.py();
    let dtype = arg.getattr(intern!(py, "dtype"))?;
    let code: String = dtype.getattr(intern!(py, "str"))?.extract()?;
    let (kind, unit) = parse_datetime_dtype(&code)
        .ok_or_else(|| at.error(format!("datetime dtype {code} is not supported")))?;
    let count: i64 = arg
        .call_method1(intern!(py, "astype"), ("int64",))?
        .extract()?;
    scratch
        .fingerprint
        .extend_from_slice(&[DATETIME_TAG, kind, unit]);
    scratch
        .values
        .push(ArgValue::Scalar(Value::Int(i128::from(count))));
    Ok(())
}

thread_local! {
    /// Record dtypes this thread has seen, by address, with their id in [`CLASSES`] (which
    /// holds each dtype, so an address is never reused for another).
    static RECORD_DTYPES: RefCell<Vec<(usize, u16)>> = const { RefCell::new(Vec::new()) };
}

/// A structured NumPy scalar (`np.void`, `np.record`): its dtype in the fingerprint, its
/// bytes staged for the launch to copy. Unstructured void scalars (raw bytes) go to
/// numba-cuda, which refuses them as numba-cuda does.
fn read_record(arg: &Bound<'_, PyAny>, at: Position<'_>, scratch: &mut Scratch) -> Result<()> {
    let py = arg.py();
    let dtype = arg.getattr(intern!(py, "dtype"))?;
    let address = dtype.as_ptr() as usize;
    let known = RECORD_DTYPES.with(|known| {
        known
            .borrow()
            .iter()
            .find(|(seen, _)| *seen == address)
            .map(|&(_, id)| id)
    });
    let id = match known {
        Some(id) => id,
        None => {
            if dtype.getattr(intern!(py, "names"))?.is_none() {
                scratch.needs_numba = true;
                return Ok(());
            }
            let id = class_id(&dtype).ok_or_else(|| at.error("too many record dtypes"))?;
            RECORD_DTYPES.with(|known| known.borrow_mut().push((address, id)));
            id
        }
    };
    let len: usize = dtype.getattr(intern!(py, "itemsize"))?.extract()?;
    let mut view = std::mem::MaybeUninit::<ffi::Py_buffer>::uninit();
    // SAFETY: a valid object and an out-struct; on success the view is released below.
    if unsafe { ffi::PyObject_GetBuffer(arg.as_ptr(), view.as_mut_ptr(), ffi::PyBUF_SIMPLE) } != 0 {
        let cause = PyErr::fetch(py);
        return Err(at.error(format!("record bytes could not be read: {cause}")));
    }
    // SAFETY: initialised by the successful call above.
    let mut view = unsafe { view.assume_init() };
    let (host, exported) = (view.buf as usize, usize::try_from(view.len).unwrap_or(0));
    // The address stays valid after the release: a NumPy scalar's bytes live as long as the
    // scalar (or the array it views, which it holds), and the argument outlives the launch.
    // SAFETY: releasing the view obtained above, once.
    unsafe { ffi::PyBuffer_Release(&mut view) };
    if exported != len {
        return Err(at.error(format!(
            "record exports {exported} bytes but its dtype has {len}"
        )));
    }
    let writable = arg
        .getattr(intern!(py, "flags"))?
        .getattr(intern!(py, "writeable"))?
        .is_truthy()?;
    scratch.fingerprint.push(RECORD_TAG);
    scratch.fingerprint.extend_from_slice(&id.to_le_bytes());
    scratch.records.push(RecordCopy {
        value: scratch.values.len(),
        host,
        len,
        writable,
    });
    scratch.values.push(ArgValue::Record { device: 0 });
    Ok(())
}

/// `"<M8[ns]"` → (0, index of "ns"); `"<m8"` → (1, generic). Multiples (`[10s]`) are not
/// numba units.
fn parse_datetime_dtype(code: &str) -> Option<(u8, u8)> {
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

fn numba_only_dtype(dtype: &Bound<'_, PyAny>) -> bool {
    dtype
        .getattr(intern!(dtype.py(), "kind"))
        .and_then(|kind| kind.extract::<String>())
        .is_ok_and(|kind| matches!(kind.as_str(), "V" | "M" | "m"))
}

/// The element type of an array's dtype; `None` when only numba-cuda can pass the array.
fn element_type(dtype: &Bound<'_, PyAny>, at: Position<'_>) -> Result<Option<Scalar>> {
    match dtype_scalar(dtype)? {
        Some(scalar) => Ok(Some(scalar)),
        None if numba_only_dtype(dtype) => Ok(None),
        None => Err(at.error(format!("arrays of dtype {dtype} are not supported"))),
    }
}

/// Pushes an array whose `shape` and `strides` (bytes) are tuples of ints, read straight
/// into the scratch.
fn push_from_tuples(
    at: Position<'_>,
    scratch: &mut Scratch,
    data: u64,
    scalar: Scalar,
    shape: &Bound<'_, PyAny>,
    strides: &Bound<'_, PyAny>,
) -> Result<()> {
    let staged = scratch.dims.len();
    let read = extend_from_int_tuple(&mut scratch.dims, shape, "shape", at).and_then(|ndim| {
        let nstrides = extend_from_int_tuple(&mut scratch.dims, strides, "strides", at)?;
        if nstrides == ndim {
            Ok(())
        } else {
            Err(at.error(format!(
                "array has {ndim} dimensions but {nstrides} strides"
            )))
        }
    });
    match read {
        Ok(()) => push_staged_array(scratch, at, data, scalar, staged, false),
        Err(e) => {
            scratch.dims.truncate(staged);
            Err(e)
        }
    }
}

/// Appends the ints of a tuple to `dims`, returning how many: item access is borrowed (no
/// reference counting) and each int is read with one C call.
fn extend_from_int_tuple(
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
        // SAFETY: `item` is a valid object; a failure returns -1 with an exception set.
        let number = unsafe { ffi::PyLong_AsLongLong(item) };
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

/// A numba array read before on this thread: its fingerprint bytes, value and dims, under
/// its object address. The weak reference proves the address still holds that same array
/// (a dead array's reference is dead, so a new object at a reused address misses) without
/// keeping the array, or its device memory, alive.
struct KnownArray {
    address: usize,
    weak: Py<PyAny>,
    fingerprint: [u8; 4],
    array: ArrayArg,
    dims: SmallVec<[i64; 8]>,
}

/// Recently launched numba arrays, hashed by address into buckets of `KNOWN_ARRAY_WAYS`
/// slots. numba device arrays do not change their memory, shape, strides or dtype after
/// construction, so repeated launches with the same arrays skip reading them (measured:
/// ~0.4 µs per array down to ~0.1).
const KNOWN_ARRAY_SLOTS: usize = 512;
const KNOWN_ARRAY_WAYS: usize = 4;

thread_local! {
    static KNOWN_NUMBA_ARRAYS: RefCell<Vec<Option<KnownArray>>> = const { RefCell::new(Vec::new()) };
}

/// The first slot of an address's bucket (Fibonacci hashing of the address).
fn known_array_bucket(address: usize) -> usize {
    let hash = ((address >> 4) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (hash >> 55) as usize & (KNOWN_ARRAY_SLOTS - KNOWN_ARRAY_WAYS) // 512 slots, 4-aligned
}

/// Pushes a numba array from the cache; false if it is not there (or no longer valid).
fn push_known_numba_array(arg: &Bound<'_, PyAny>, scratch: &mut Scratch) -> bool {
    let address = arg.as_ptr() as usize;
    KNOWN_NUMBA_ARRAYS.with(|known| {
        let Ok(known) = known.try_borrow() else {
            return false;
        };
        let bucket = known_array_bucket(address);
        let Some(entry) = known
            .get(bucket..bucket + KNOWN_ARRAY_WAYS)
            .into_iter()
            .flatten()
            .flatten()
            .find(|entry| entry.address == address)
        else {
            return false;
        };
        // SAFETY: `weak` is a live weak reference object; GetObject returns a borrowed
        // reference to the referent, or None once it has died.
        let target = unsafe { ffi::PyWeakref_GetObject(entry.weak.as_ptr()) };
        if target as usize != address {
            return false;
        }
        scratch.fingerprint.extend_from_slice(&entry.fingerprint);
        let dims_at = scratch.dims.len();
        scratch.dims.extend_from_slice(&entry.dims);
        scratch.values.push(ArgValue::Array(ArrayArg {
            dims_at,
            ..entry.array
        }));
        true
    })
}

/// Remembers the numba array just pushed (the scratch's last value), if it takes weak
/// references.
fn remember_numba_array(arg: &Bound<'_, PyAny>, scratch: &Scratch) {
    let Some(ArgValue::Array(array)) = scratch.values.last() else {
        return;
    };
    // SAFETY: `arg` is a valid object; NewRef returns a new reference or null with an
    // exception set (types without weak reference support), which we clear.
    let weak = unsafe { ffi::PyWeakref_NewRef(arg.as_ptr(), std::ptr::null_mut()) };
    if weak.is_null() {
        // SAFETY: clearing the exception NewRef just set.
        unsafe { ffi::PyErr_Clear() };
        return;
    }
    // SAFETY: a new, owned reference.
    let weak = unsafe { Bound::from_owned_ptr(arg.py(), weak) }.unbind();
    let fingerprint_start = scratch.fingerprint.len() - 4;
    let mut fingerprint = [0u8; 4];
    fingerprint.copy_from_slice(&scratch.fingerprint[fingerprint_start..]);
    let address = arg.as_ptr() as usize;
    let entry = KnownArray {
        address,
        weak,
        fingerprint,
        array: *array,
        dims: scratch.dims[array.dims_at..array.dims_at + 2 * array.ndim].into(),
    };
    KNOWN_NUMBA_ARRAYS.with(|known| {
        if let Ok(mut known) = known.try_borrow_mut() {
            if known.is_empty() {
                known.resize_with(KNOWN_ARRAY_SLOTS, || None);
            }
            // Replace this address's entry, else a free slot, else the bucket's first; the
            // entry replaced is dropped here, with the GIL held.
            let bucket = known_array_bucket(address);
            let ways = &mut known[bucket..bucket + KNOWN_ARRAY_WAYS];
            let slot = ways
                .iter()
                .position(|e| e.as_ref().is_some_and(|e| e.address == address))
                .or_else(|| ways.iter().position(Option::is_none))
                .unwrap_or((address >> 4) % KNOWN_ARRAY_WAYS);
            ways[slot] = Some(entry);
        }
    });
}

/// A numba `DeviceNDArray`: from the cache of recently launched arrays, or read and then
/// remembered.
fn read_numba_array(arg: &Bound<'_, PyAny>, at: Position<'_>, scratch: &mut Scratch) -> Result<()> {
    if push_known_numba_array(arg, scratch) {
        return Ok(());
    }
    let values_before = scratch.values.len();
    read_numba_array_fields(arg, at, scratch)?;
    if scratch.values.len() > values_before {
        remember_numba_array(arg, scratch);
    }
    Ok(())
}

/// A numba `DeviceNDArray`'s fields, read from the instance dict (one dict lookup each, no
/// type-attribute lookups), falling back to attribute access for subclasses that compute
/// them.
fn read_numba_array_fields<'py>(
    arg: &Bound<'py, PyAny>,
    at: Position<'_>,
    scratch: &mut Scratch,
) -> Result<()> {
    let py = arg.py();
    let fields = arg.getattr(intern!(py, "__dict__"))?;
    let fields = fields.cast::<PyDict>().ok();
    let field = |name: &Bound<'py, PyString>| field_of(arg, fields, name);
    let Some(scalar) = element_type(&field(intern!(py, "dtype"))?, at)? else {
        scratch.needs_numba = true;
        return Ok(());
    };
    let data = numba_device_pointer(&field(intern!(py, "gpu_data"))?)
        .map_err(|_| at.error("numba device array has no readable device pointer"))?;
    push_from_tuples(
        at,
        scratch,
        data,
        scalar,
        &field(intern!(py, "shape"))?,
        &field(intern!(py, "strides"))?,
    )
}

/// An int as u64 with one C call (PyO3's generic extraction is several times slower).
fn int_as_u64(value: &Bound<'_, PyAny>) -> PyResult<u64> {
    // SAFETY: a valid object; failure returns u64::MAX with an exception set.
    let number = unsafe { ffi::PyLong_AsUnsignedLongLong(value.as_ptr()) };
    if number == u64::MAX {
        if let Some(err) = PyErr::take(value.py()) {
            return Err(err);
        }
    }
    Ok(number)
}

/// An int as i64 with one C call.
fn int_as_i64(value: &Bound<'_, PyAny>) -> PyResult<i64> {
    // SAFETY: a valid object; failure returns -1 with an exception set.
    let number = unsafe { ffi::PyLong_AsLongLong(value.as_ptr()) };
    if number == -1 {
        if let Some(err) = PyErr::take(value.py()) {
            return Err(err);
        }
    }
    Ok(number)
}

/// A device pointer given as an int, or as an object `int()` converts (a cuda.bindings
/// `CUdeviceptr`).
fn pointer_as_u64(value: &Bound<'_, PyAny>) -> PyResult<u64> {
    if value.is_exact_instance_of::<PyInt>() {
        return int_as_u64(value);
    }
    // SAFETY: PyNumber_Long returns a new reference, or null with an exception set.
    let number =
        unsafe { Bound::from_owned_ptr_or_err(value.py(), ffi::PyNumber_Long(value.as_ptr())) }?;
    int_as_u64(&number)
}

/// `name` from the instance dict `fields`, or by attribute access when it is not there.
fn field_of<'py>(
    object: &Bound<'py, PyAny>,
    fields: Option<&Bound<'py, PyDict>>,
    name: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    match fields.map(|f| f.get_item(name)).transpose()?.flatten() {
        Some(value) => Ok(value),
        None => object.getattr(name),
    }
}

/// The address behind a numba `gpu_data` (an `OwnedPointer` or a `MemoryPointer`), read
/// from the instance dict: `OwnedPointer` keeps `device_ctypes_pointer` there, and
/// `MemoryPointer` keeps `device_pointer` (a CUdeviceptr). Plain attribute access would
/// go through `OwnedPointer.__getattr__`, which raises and catches an AttributeError
/// first (over 1 µs per array).
fn numba_device_pointer(gpu_data: &Bound<'_, PyAny>) -> PyResult<u64> {
    let py = gpu_data.py();
    let fields = gpu_data.getattr(intern!(py, "__dict__"))?;
    let fields = fields.cast::<PyDict>()?;
    if let Some(pointer) = fields.get_item(intern!(py, "device_ctypes_pointer"))? {
        let value = pointer.getattr(intern!(py, "value"))?;
        return if value.is_none() {
            Ok(0)
        } else {
            int_as_u64(&value)
        };
    }
    let pointer = match fields.get_item(intern!(py, "device_pointer"))? {
        Some(pointer) => pointer,
        None => gpu_data.getattr(intern!(py, "device_pointer"))?,
    };
    pointer_as_u64(&pointer)
}

fn read_cupy_array(arg: &Bound<'_, PyAny>, at: Position<'_>, scratch: &mut Scratch) -> Result<()> {
    let py = arg.py();
    let Some(scalar) = element_type(&arg.getattr(intern!(py, "dtype"))?, at)? else {
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
        .is_ok_and(|flag| flag.is(&*pyo3::types::PyBool::new(py, true)));
    if c_contiguous {
        let staged = scratch.dims.len();
        let read = cupy_shape(arg, at, &mut scratch.dims);
        if let Err(e) = read {
            scratch.dims.truncate(staged);
            return Err(e);
        }
        append_c_strides(&mut scratch.dims, staged, scalar.itemsize() as i64);
        return push_staged_array(scratch, at, data, scalar, staged, false);
    }
    push_from_tuples(
        at,
        scratch,
        data,
        scalar,
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

/// A cuda.core `Buffer`: `size` bytes at `int(handle)`, typed as numba-cuda types a buffer
/// (a 1-D C-contiguous uint8 array, always writable).
fn read_core_buffer(arg: &Bound<'_, PyAny>, at: Position<'_>, scratch: &mut Scratch) -> Result<()> {
    let py = arg.py();
    refuse_host_memory(arg, at)?;
    let handle = core_attribute(arg, intern!(py, "handle"), at)?;
    let data = pointer_as_u64(&handle).map_err(|_| {
        at.error(format!(
            "{}.handle is not a pointer: {handle}",
            type_name(arg)
        ))
    })?;
    let size = core_attribute(arg, intern!(py, "size"), at)?;
    let size = int_as_u64(&size)
        .ok()
        .and_then(|size| i64::try_from(size).ok())
        .ok_or_else(|| at.error(format!("{}.size is not a size: {size}", type_name(arg))))?;
    if data == 0 && size > 0 {
        return Err(at.error(format!(
            "{} has a null pointer but {size} bytes",
            type_name(arg)
        )));
    }
    claim_core_device(arg, at, scratch);
    push_array(
        scratch,
        at,
        data,
        Scalar::U8,
        std::iter::once(size),
        None::<std::iter::Empty<i64>>,
        false,
    )
}

/// A cuda.core `StridedMemoryView`: pointer, shape, strides (in elements, `None` when
/// C-contiguous), dtype and read-only flag, from its attributes (its DLPack C exchange API
/// gives a tensor without the read-only flag, which numba-cuda's type carries). numba-cuda
/// refuses views that are not contiguous; fastlaunch passes them with layout 'A' and their
/// strides, as any strided array.
fn read_core_view(arg: &Bound<'_, PyAny>, at: Position<'_>, scratch: &mut Scratch) -> Result<()> {
    let py = arg.py();
    refuse_host_memory(arg, at)?;
    let dtype = core_attribute(arg, intern!(py, "dtype"), at)?;
    if dtype.is_none() {
        return Err(at.error(format!(
            "{} has no dtype (made from a Buffer with an itemsize only); give it a dtype",
            type_name(arg)
        )));
    }
    let Some(scalar) = element_type(&dtype, at)? else {
        scratch.needs_numba = true; // structured and datetime views: numba-cuda passes them
        return Ok(());
    };
    let ptr = core_attribute(arg, intern!(py, "ptr"), at)?;
    let data = int_as_u64(&ptr)
        .map_err(|_| at.error(format!("{}.ptr is not a pointer: {ptr}", type_name(arg))))?;
    let readonly = core_attribute(arg, intern!(py, "readonly"), at)?.is_truthy()?;
    let shape = core_attribute(arg, intern!(py, "shape"), at)?;
    let strides = core_attribute(arg, intern!(py, "strides"), at)?;
    claim_core_device(arg, at, scratch);
    let staged = scratch.dims.len();
    match stage_view_dims(
        &mut scratch.dims,
        &shape,
        &strides,
        scalar.itemsize() as i64,
        at,
    ) {
        Ok(()) => push_staged_array(scratch, at, data, scalar, staged, readonly),
        Err(e) => {
            scratch.dims.truncate(staged);
            Err(e)
        }
    }
}

/// Appends a view's shape and byte strides to `dims`: its strides count elements.
fn stage_view_dims(
    dims: &mut Vec<i64>,
    shape: &Bound<'_, PyAny>,
    strides: &Bound<'_, PyAny>,
    itemsize: i64,
    at: Position<'_>,
) -> Result<()> {
    let staged = dims.len();
    let ndim = extend_from_int_tuple(dims, shape, "shape", at)?;
    if strides.is_none() {
        append_c_strides(dims, staged, itemsize);
        return Ok(());
    }
    let nstrides = extend_from_int_tuple(dims, strides, "strides", at)?;
    if nstrides != ndim {
        return Err(at.error(format!(
            "array has {ndim} dimensions but {nstrides} strides"
        )));
    }
    for stride in &mut dims[staged + ndim..] {
        *stride = stride
            .checked_mul(itemsize)
            .ok_or_else(|| at.error("array strides overflow 64 bits"))?;
    }
    Ok(())
}

/// An attribute of a cuda.core object; a failure (cuda.core asking a driver it cannot load,
/// say) names the argument.
fn core_attribute<'py>(
    arg: &Bound<'py, PyAny>,
    name: &Bound<'py, PyString>,
    at: Position<'_>,
) -> Result<Bound<'py, PyAny>> {
    arg.getattr(name)
        .map_err(|e| at.error(format!("{}.{name} failed: {e}", type_name(arg))))
}

/// Refuses cuda.core memory kernels cannot reach (host-only buffers, views of host arrays).
fn refuse_host_memory(arg: &Bound<'_, PyAny>, at: Position<'_>) -> Result<()> {
    let accessible = core_attribute(arg, intern!(arg.py(), "is_device_accessible"), at)?;
    if !accessible.is_truthy()? {
        return Err(at.error(format!(
            "{} is not in CUDA memory (is_device_accessible is False); move it to the GPU first",
            type_name(arg)
        )));
    }
    Ok(())
}

/// Claims the device a cuda.core object names (`device_id`), as a DLPack CUDA device is
/// claimed, for the launch's reachability check. Pinned memory names none (-1, or an error
/// from cuda.core's legacy pinned resource): nothing is claimed. Managed memory names its
/// preferred device, but every device reaches it: `limits::check_devices` asks the driver
/// before refusing a claim.
fn claim_core_device(arg: &Bound<'_, PyAny>, at: Position<'_>, scratch: &mut Scratch) {
    let device = arg
        .getattr(intern!(arg.py(), "device_id"))
        .and_then(|device| int_as_i64(&device));
    if let Some(ordinal) = device.ok().and_then(|d| usize::try_from(d).ok()) {
        let value = ValueAt::next(scratch, at);
        scratch.claimed_devices.push((value, ordinal));
    }
}

fn push_dltensor(
    arg: &Bound<'_, PyAny>,
    tensor: &DLTensor,
    at: Position<'_>,
    scratch: &mut Scratch,
) -> Result<()> {
    let device = tensor.device.device_type;
    if device == dlpack::KDL_CUDA {
        let ordinal = usize::try_from(tensor.device.device_id)
            .map_err(|_| at.error("DLPack tensor has a negative device id"))?;
        let value = ValueAt::next(scratch, at);
        scratch.claimed_devices.push((value, ordinal));
    }
    if !matches!(
        device,
        dlpack::KDL_CUDA | dlpack::KDL_CUDA_MANAGED | dlpack::KDL_CUDA_HOST
    ) {
        return Err(at.error(format!(
            "{} is not in CUDA memory (DLPack device type {device}); move it to the GPU first",
            type_name(arg)
        )));
    }
    let dtype = tensor.dtype;
    let scalar = Scalar::from_dlpack(dtype.code, dtype.bits, dtype.lanes).ok_or_else(|| {
        at.error(format!(
            "{} has DLPack dtype (code {}, bits {}, lanes {}), which numba kernels cannot take",
            type_name(arg),
            dtype.code,
            dtype.bits,
            dtype.lanes
        ))
    })?;
    let ndim =
        usize::try_from(tensor.ndim).map_err(|_| at.error("DLPack tensor has negative ndim"))?;
    if ndim > 0 && tensor.shape.is_null() {
        return Err(at.error("DLPack tensor has no shape"));
    }
    // SAFETY: per the module invariants, shape has ndim values and strides is null or has
    // ndim values, valid while `arg` (held by the caller) lives.
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(tensor.shape, ndim) }
    };
    let strides: Option<&[i64]> = if tensor.strides.is_null() || ndim == 0 {
        None
    } else {
        // SAFETY: as above.
        Some(unsafe { std::slice::from_raw_parts(tensor.strides, ndim) })
    };
    let itemsize = scalar.itemsize() as i64;
    let data = (tensor.data as u64).wrapping_add(tensor.byte_offset);
    push_array(
        scratch,
        at,
        data,
        scalar,
        shape.iter().copied(),
        strides.map(|s| s.iter().map(move |elements| elements * itemsize)),
        false,
    )
}

fn read_dlpack(arg: &Bound<'_, PyAny>, at: Position<'_>, scratch: &mut Scratch) -> Result<()> {
    let py = arg.py();
    let kwargs = PyDict::new(py);
    // The consumer's stream (1 for the legacy default): the producer orders itself before it.
    let stream = if scratch.launch_stream == 0 {
        driver::sys::CU_STREAM_LEGACY
    } else {
        scratch.launch_stream
    };
    kwargs.set_item("stream", stream)?;
    let capsule = arg
        .call_method(intern!(py, "__dlpack__"), (), Some(&kwargs))
        .map_err(|e| at.error(format!("{}.__dlpack__() failed: {e}", type_name(arg))))?;
    let tensor = dlpack::tensor_from_capsule(&capsule).ok_or_else(|| {
        at.error(format!(
            "{}.__dlpack__() did not return a DLPack capsule",
            type_name(arg)
        ))
    })?;
    scratch.keepalive.push(capsule.unbind());
    push_dltensor(arg, &tensor, at, scratch)
}

fn read_cai(arg: &Bound<'_, PyAny>, at: Position<'_>, scratch: &mut Scratch) -> Result<()> {
    let py = arg.py();
    let interface = match arg.getattr(intern!(py, "__cuda_array_interface__")) {
        Ok(interface) => interface,
        Err(e) if e.is_instance_of::<PyAttributeError>(py) => {
            return Err(at.error(format!(
                "{}.__cuda_array_interface__ failed: {e}",
                type_name(arg)
            )))
        }
        Err(e) => return Err(e.into()),
    };
    let cai = interface
        .cast::<PyDict>()
        .map_err(|_| at.error("__cuda_array_interface__ must be a dict"))?;
    let get = |key: &str| -> Result<Bound<'_, PyAny>> {
        cai.get_item(key)?.ok_or_else(|| {
            at.error(format!(
                "__cuda_array_interface__ lacks the required key '{key}'"
            ))
        })
    };
    if let Some(mask) = cai.get_item("mask")? {
        if !mask.is_none() {
            return Err(
                at.error("masked arrays (__cuda_array_interface__ 'mask') are not supported")
            );
        }
    }
    let typestr: String = get("typestr")?
        .extract()
        .map_err(|_| at.error("__cuda_array_interface__ 'typestr' must be a str"))?;
    if matches!(typestr.as_bytes().get(1), Some(b'V' | b'M' | b'm')) {
        scratch.needs_numba = true;
        return Ok(());
    }
    let scalar = Scalar::from_typestr(&typestr).ok_or_else(|| {
        at.error(format!(
            "__cuda_array_interface__ typestr {typestr:?} is not supported"
        ))
    })?;
    let (data, readonly): (u64, bool) = get("data")?.extract().map_err(|_| {
        at.error("__cuda_array_interface__ 'data' must be a (pointer, read-only) tuple")
    })?;
    let shape = tuple_ints(&int_tuple(&get("shape")?, "shape", at)?, "shape", at)?;
    let strides = match cai.get_item("strides")? {
        Some(s) if !s.is_none() => Some(tuple_ints(&int_tuple(&s, "strides", at)?, "strides", at)?),
        _ => None,
    };
    if let Some(strides) = &strides {
        if strides.len() != shape.len() {
            return Err(at.error(format!(
                "__cuda_array_interface__ has {} dimensions but {} strides",
                shape.len(),
                strides.len()
            )));
        }
    }
    match cai.get_item("stream")? {
        Some(stream) if !stream.is_none() => {
            let handle: usize = stream.extract().map_err(|_| {
                at.error("__cuda_array_interface__ 'stream' must be None or an int")
            })?;
            if handle == 0 {
                return Err(at.error("__cuda_array_interface__ 'stream' must not be 0 (ambiguous)"));
            }
            scratch.producers.push(handle);
        }
        _ => {}
    }
    let nonempty = !shape.contains(&0);
    if data == 0 && nonempty && shape.iter().product::<i64>() > 0 {
        return Err(
            at.error("__cuda_array_interface__ has a null data pointer for a non-empty array")
        );
    }
    if nonempty {
        let value = ValueAt::next(scratch, at);
        scratch.unverified_pointers.push(value);
    }
    push_array(
        scratch,
        at,
        data,
        scalar,
        shape.into_iter(),
        strides.map(Vec::into_iter),
        readonly,
    )
}

/// The argument that value `value` (in `Scratch::values` order) belongs to: tuples put
/// several values in one argument. Used to name arguments in errors, off the hot path.
pub fn argument_of_value(fingerprint: &[u8], value: usize) -> usize {
    let (mut i, mut seen, mut argument) = (0, 0, 0);
    while i < fingerprint.len() {
        seen += skip_argument(fingerprint, &mut i);
        if value < seen {
            return argument;
        }
        argument += 1;
    }
    argument
}

/// Moves `i` past one argument's encoding in `fingerprint`; returns how many values
/// (kernel arguments as packed) it holds: several for a tuple, else one.
pub fn skip_argument(fingerprint: &[u8], i: &mut usize) -> usize {
    let Some(&tag) = fingerprint.get(*i) else {
        return 0;
    };
    match tag {
        TUPLE_TAG | NAMED_TUPLE_TAG => {
            let header = if tag == TUPLE_TAG { 2 } else { 4 };
            let count = fingerprint.get(*i + header - 1).copied().unwrap_or(0);
            *i += header;
            (0..count).map(|_| skip_argument(fingerprint, i)).sum()
        }
        ARRAY_TAG => {
            *i += 4;
            1
        }
        ENUM_TAG | DATETIME_TAG | RECORD_TAG => {
            *i += 3;
            1
        }
        _ => {
            *i += 1;
            1
        }
    }
}

/// A fingerprint decoded into Python descriptors, which Python turns into numba types:
/// `("array", dtype, ndim, layout, readonly)`, `("scalar", numba name)`,
/// `("tuple", [members])`, `("namedtuple", class, [members])`, `("enum", class)`,
/// `("datetime", unit)` or `("timedelta", unit)`.
pub fn describe<'py>(py: Python<'py>, fingerprint: &[u8]) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < fingerprint.len() {
        out.push(describe_one(py, fingerprint, &mut i, 0)?);
    }
    Ok(out)
}

fn describe_one<'py>(
    py: Python<'py>,
    fingerprint: &[u8],
    i: &mut usize,
    depth: usize,
) -> PyResult<Bound<'py, PyTuple>> {
    let byte = |at: usize| fingerprint.get(at).copied().ok_or_else(bad_fingerprint);
    let tag = byte(*i)?;
    match tag {
        ARRAY_TAG => {
            let scalar = Scalar::from_code(byte(*i + 1)?).ok_or_else(bad_fingerprint)?;
            let ndim = byte(*i + 2)?;
            let flags = byte(*i + 3)?;
            let layout = match flags & 3 {
                LAYOUT_C => "C",
                LAYOUT_F => "F",
                _ => "A",
            };
            *i += 4;
            PyTuple::new(
                py,
                [
                    "array".into_pyobject(py)?.into_any(),
                    scalar.numpy_name().into_pyobject(py)?.into_any(),
                    ndim.into_pyobject(py)?.into_any(),
                    layout.into_pyobject(py)?.into_any(),
                    pyo3::types::PyBool::new(py, flags & READONLY_FLAG != 0)
                        .to_owned()
                        .into_any(),
                ],
            )
        }
        TUPLE_TAG | NAMED_TUPLE_TAG => {
            if depth >= MAX_TUPLE_DEPTH {
                return Err(bad_fingerprint());
            }
            let class = if tag == NAMED_TUPLE_TAG {
                let id = u16::from_le_bytes([byte(*i + 1)?, byte(*i + 2)?]);
                *i += 2;
                Some(class_by_id(py, id)?)
            } else {
                None
            };
            let count = byte(*i + 1)?;
            *i += 2;
            let members = (0..count)
                .map(|_| describe_one(py, fingerprint, i, depth + 1))
                .collect::<PyResult<Vec<_>>>()?;
            let members = pyo3::types::PyList::new(py, members)?.into_any();
            match class {
                None => PyTuple::new(py, ["tuple".into_pyobject(py)?.into_any(), members]),
                Some(class) => PyTuple::new(
                    py,
                    [
                        "namedtuple".into_pyobject(py)?.into_any(),
                        class.into_bound(py),
                        members,
                    ],
                ),
            }
        }
        ENUM_TAG => {
            let id = u16::from_le_bytes([byte(*i + 1)?, byte(*i + 2)?]);
            *i += 3;
            PyTuple::new(
                py,
                [
                    "enum".into_pyobject(py)?.into_any(),
                    class_by_id(py, id)?.into_bound(py),
                ],
            )
        }
        RECORD_TAG => {
            let id = u16::from_le_bytes([byte(*i + 1)?, byte(*i + 2)?]);
            *i += 3;
            PyTuple::new(
                py,
                [
                    "record".into_pyobject(py)?.into_any(),
                    class_by_id(py, id)?.into_bound(py),
                ],
            )
        }
        DATETIME_TAG => {
            let kind = if byte(*i + 1)? == 0 {
                "datetime"
            } else {
                "timedelta"
            };
            let unit = DATETIME_UNITS
                .get(usize::from(byte(*i + 2)?))
                .ok_or_else(bad_fingerprint)?;
            *i += 3;
            PyTuple::new(py, [kind, unit])
        }
        _ => {
            let scalar = Scalar::from_code(tag).ok_or_else(bad_fingerprint)?;
            *i += 1;
            PyTuple::new(py, ["scalar", scalar.numba_name()])
        }
    }
}

fn bad_fingerprint() -> PyErr {
    pyo3::exceptions::PyValueError::new_err("malformed fingerprint")
}
