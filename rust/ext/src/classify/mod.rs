//! Argument classification: read each launch argument once, into a value the packer
//! uses and fingerprint bytes (see [`fingerprint`]) that fix its numba type exactly.
//!
//! Python builtins (`float`, `int`, `bool`, `complex`) are recognised by exact type
//! pointer in [`read_arg`]. Every other type is resolved once per thread to a [`Strategy`],
//! cached by type pointer (the type is held so the pointer cannot be reused), and read by
//! the file of its source:
//!
//! - `scalars`: Python and NumPy scalars, `datetime64` / `timedelta64`;
//! - `numba`: numba-cuda `DeviceNDArray` (with a cache of recently launched arrays);
//! - `born`: the launch descriptions that arrays made by fastlaunch's memory API carry;
//! - `cupy`: `cupy.ndarray`;
//! - `dlpack`: DLPack C exchange API producers (torch) and generic `__dlpack__`;
//! - `cai`: generic `__cuda_array_interface__` objects;
//! - `cuda_core`: cuda.core `Buffer` and `StridedMemoryView`;
//! - `aggregates`: tuples, named tuples and enum members;
//! - `classes`: the process-wide ids of classes that are part of a numba type;
//! - `records`: structured NumPy scalars;
//! - `ctypes_word`: a ctypes unsigned word's value (numba's `device_ctypes_pointer`);
//! - `arrays`: what every array source shares (shape, strides, layout, element types:
//!   numeric, record, datetime);
//! - `recheck`: what a launch like the last one (`repeat.rs`) checks of its arguments;
//! - `same_layout`: a new array where a launch like the last read one of the same layout.
//!
//! Adding a source: a file with its `read` function, a [`Strategy`] variant, its arm in
//! [`read_arg`], and its test in [`resolve_strategy`] (in the order the sources are tried).

mod aggregates;
mod arrays;
pub(crate) mod born;
mod cai;
mod classes;
mod ctypes_word;
mod cuda_core;
mod cupy;
mod dlpack;
pub(crate) mod fingerprint;
mod host;
mod known;
mod numba;
mod recheck;
mod records;
mod same_layout;
mod scalars;

use std::cell::{Cell, RefCell};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::errors::{Error, Result};
use crate::interop::dlpack::ExchangeApi;
use crate::scalar::{Scalar, Value};
use crate::scratch::{ArgValue, ArrayArg, HostCopy, Scratch, ValueAt};

#[cfg(test)]
pub(crate) use arrays::MAX_NDIM;
pub(crate) use known::HeldObjects;
pub(crate) use recheck::{HeldCupyShape, ScalarSlots, Unchanged};
pub(crate) use same_layout::SameLayout;

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
    /// Kinds numba-cuda launches and fastlaunch does not pack: subclasses of `ndarray`,
    /// device records, enums of other values.
    Numba,
    /// Host NumPy arrays (exactly `numpy.ndarray`) and `cuda.In` / `Out` / `InOut` around
    /// one: device copies staged around the launch (`host.rs`).
    HostArray(host::Transfer),
    TransferHint(host::Transfer),
    NumpyScalar(Scalar),
    NumbaDeviceArray,
    /// numba-cuda arrays that are NumPy arrays too (`mapped_array`, `managed_array`): NumPy
    /// lets a program assign their shape or dtype in place, so they are read on every launch,
    /// never remembered or proven by identity.
    NumbaHostBackedArray,
    /// cuda.core `Buffer`: bytes, typed as numba-cuda types them (1-D C uint8, writable).
    CoreBuffer,
    /// cuda.core `StridedMemoryView`: read through its attributes.
    CoreStridedView,
    /// `layout`: its arrays may be read from CuPy's object layout (`crate::interop::cupy_layout`).
    CupyArray {
        layout: bool,
    },
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

thread_local! {
    /// Each type's strategy, the type held.
    static TYPES: RefCell<HeldObjects<Strategy>> = const { RefCell::new(HeldObjects::new()) };
    static LAST_TYPE: Cell<Option<(usize, Strategy)>> = const { Cell::new(None) };
}

/// Where an argument is, for error messages.
#[derive(Clone, Copy)]
pub(crate) struct Position<'a> {
    pub index: usize,
    pub name: &'a str,
}

impl Position<'_> {
    pub(crate) fn error(&self, message: impl Into<String>) -> Error {
        Error::Argument {
            position: self.index,
            name: self.name.to_owned(),
            message: message.into(),
        }
    }
}

/// Reads one argument into `scratch`: its value and its fingerprint bytes.
#[inline]
pub(crate) fn read_arg(
    arg: &Bound<'_, PyAny>,
    at: Position<'_>,
    scratch: &mut Scratch,
) -> Result<()> {
    // SAFETY: `arg` is a valid object; its type is read without taking a reference.
    let type_ptr = unsafe { ffi::Py_TYPE(arg.as_ptr()) };
    // SAFETY: reading the address of static builtin type objects.
    unsafe {
        if type_ptr == (&raw mut ffi::PyFloat_Type).cast() {
            return scalars::read_float(arg, scratch);
        }
        if type_ptr == (&raw mut ffi::PyLong_Type).cast() {
            return scalars::read_int(arg, at, scratch);
        }
        if type_ptr == (&raw mut ffi::PyBool_Type).cast() {
            let value = arg.as_ptr() == ffi::Py_True();
            return scalars::push(scratch, Scalar::Bool, Value::Bool(value));
        }
        if type_ptr == (&raw mut ffi::PyComplex_Type).cast() {
            return scalars::read_complex(arg, scratch);
        }
    }
    let strategy = match cached_strategy(type_ptr as usize) {
        Some(strategy) => strategy,
        None => resolve_and_cache(arg, at)?,
    };
    match strategy {
        Strategy::NumpyScalar(scalar) => scalars::read_numpy(arg, scalar, scratch),
        // from the description it was born with (`born.rs`), else read (`numba.rs`)
        Strategy::NumbaDeviceArray if born::push_described(arg, scratch) => Ok(()),
        Strategy::NumbaDeviceArray => numba::read(arg, at, scratch),
        Strategy::NumbaHostBackedArray => numba::read_host_backed(arg, at, scratch),
        Strategy::CoreBuffer => cuda_core::read_buffer(arg, at, scratch),
        Strategy::CoreStridedView => cuda_core::read_view(arg, at, scratch),
        Strategy::CupyArray { layout } => cupy::read(arg, at, scratch, layout),
        Strategy::Exchange(api) => dlpack::read_exchange(arg, api, at, scratch),
        Strategy::CudaArrayInterface => cai::read(arg, at, scratch),
        Strategy::DLPack => dlpack::read(arg, at, scratch),
        Strategy::Tuple(class) => aggregates::read_tuple(arg, class, at, scratch),
        Strategy::Enum(class) => aggregates::read_enum(arg, class, at, scratch),
        Strategy::Datetime => scalars::read_datetime(arg, at, scratch),
        Strategy::Record => records::read(arg, at, scratch),
        Strategy::HostArray(transfer) => host::read(arg, transfer, true, at, scratch),
        Strategy::TransferHint(transfer) => host::read_hint(arg, transfer, at, scratch),
        Strategy::IntSubclass => scalars::read_int(arg, at, scratch),
        Strategy::FloatSubclass => scalars::read_float(arg, scratch),
        Strategy::ComplexSubclass => scalars::read_complex(arg, scratch),
        Strategy::Numba => {
            scratch.needs_numba = true;
            Ok(())
        }
    }
}

/// `module.qualname` of an argument's type, for error messages.
fn type_name(arg: &Bound<'_, PyAny>) -> String {
    let class = arg.get_type();
    match (class.module(), class.qualname()) {
        (Ok(module), Ok(name)) if module != "builtins" => format!("{module}.{name}"),
        (_, Ok(name)) => name.to_string(),
        _ => "object".into(),
    }
}

/// The strategy cached for a type on this thread, if any: the hit path, kept small (no
/// `Result` to build) so that `read_arg` stays cheap.
#[inline(always)]
fn cached_strategy(type_ptr: usize) -> Option<Strategy> {
    // Arguments of one type often come in runs (26 arrays, 256 scalars): the last type read
    // is answered from a `Cell`, without borrowing and scanning the list. Cached types stay
    // cached (and alive) for the thread's lifetime, so the pair stays valid.
    if let Some((last, strategy)) = LAST_TYPE.get() {
        if last == type_ptr {
            return Some(strategy);
        }
    }
    let found = TYPES.with(|types| types.borrow().get(type_ptr));
    if let Some(strategy) = found {
        LAST_TYPE.set(Some((type_ptr, strategy)));
    }
    found
}

/// The DLPack C exchange API the launch reads `arg`'s type through (torch's tensors), if
/// it does; only types already read once on this thread are answered.
pub(crate) fn exchange_api_of(arg: &Bound<'_, PyAny>) -> Option<ExchangeApi> {
    // SAFETY: `arg` is a valid object; its type is read without taking a reference.
    let type_ptr = unsafe { ffi::Py_TYPE(arg.as_ptr()) } as usize;
    match cached_strategy(type_ptr)? {
        Strategy::Exchange(api) => Some(api),
        _ => None,
    }
}

/// Which source the launch reads an argument's type from, as far as a graphed step's form
/// needs to know (`step_form.rs`): the one order of [`resolve_strategy`], cached per type.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Source {
    /// A numba-cuda device array: its form cannot change while it lives.
    NumbaArray,
    /// Any other device array (torch, CuPy, cuda.core, the CUDA Array Interface, DLPack,
    /// numba's mapped and managed arrays).
    Array,
    /// A NumPy scalar of a dtype fastlaunch packs.
    NumpyScalar,
    /// Anything else the launch takes: scalars of other types, tuples, enum members,
    /// records, and what only numba-cuda's launch passes (host arrays among them).
    Other,
}

/// The [`Source`] of `arg`'s type; `None` when a launch would refuse the type.
pub(crate) fn source_of(arg: &Bound<'_, PyAny>) -> Option<Source> {
    // SAFETY: `arg` is a valid object; its type is read without taking a reference.
    let type_ptr = unsafe { ffi::Py_TYPE(arg.as_ptr()) } as usize;
    let strategy = match cached_strategy(type_ptr) {
        Some(strategy) => strategy,
        None => resolve_and_cache(arg, Position { index: 0, name: "" }).ok()?,
    };
    Some(match strategy {
        Strategy::NumbaDeviceArray => Source::NumbaArray,
        Strategy::NumbaHostBackedArray
        | Strategy::CoreBuffer
        | Strategy::CoreStridedView
        | Strategy::CupyArray { .. }
        | Strategy::Exchange(_)
        | Strategy::CudaArrayInterface
        | Strategy::DLPack => Source::Array,
        Strategy::NumpyScalar(_) => Source::NumpyScalar,
        _ => Source::Other,
    })
}

/// Resolves the strategy for a type seen for the first time on this thread, and caches it.
#[cold]
#[inline(never)]
fn resolve_and_cache(arg: &Bound<'_, PyAny>, at: Position<'_>) -> Result<Strategy> {
    let strategy = resolve_strategy(arg, at)?;
    TYPES.with(|types| types.borrow_mut().insert(arg.get_type().as_any(), strategy));
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
            return scalars::numpy_strategy(arg, at);
        }
    }
    // Before the protocols: a view offers the DLPack C exchange API, whose tensor carries
    // no read-only flag, and a buffer's `__dlpack__` says int8 where numba-cuda says uint8.
    if let Some(strategy) = cuda_core::strategy(&arg.get_type()) {
        return Ok(strategy);
    }
    let is_host_array = py
        .import("numpy")
        .and_then(|np| np.getattr("ndarray"))
        .and_then(|ndarray| arg.is_instance(&ndarray))
        .unwrap_or(false);
    if numba::is_device_array(arg, &class) {
        return Ok(if is_host_array {
            Strategy::NumbaHostBackedArray
        } else {
            Strategy::NumbaDeviceArray
        });
    }
    if let Some(mut api) = crate::interop::dlpack::exchange_api(&class) {
        api.lazy_sign_views = has_attribute(&class, "is_conj") && has_attribute(&class, "is_neg");
        return Ok(Strategy::Exchange(api));
    }
    let module = arg
        .get_type()
        .module()
        .map(|m| m.to_string())
        .unwrap_or_default();
    if cupy::is_cupy_array(&arg.get_type()) {
        return Ok(Strategy::CupyArray {
            layout: crate::interop::cupy_layout::applies_to(&arg.get_type()),
        });
    }
    let is_enum = py
        .import("enum")
        .and_then(|e| e.getattr("Enum"))
        .and_then(|enum_class| arg.is_instance(&enum_class))
        .unwrap_or(false);
    if let Some(strategy) = aggregates::enum_strategy(&class, is_enum) {
        return Ok(strategy);
    }
    if !is_enum {
        if let Some(strategy) = scalars::subclass_strategy(arg) {
            return Ok(strategy);
        }
    }
    if let Some(strategy) = aggregates::tuple_strategy(arg, &class) {
        return Ok(strategy);
    }
    let ndarray_type = py.import("numpy").and_then(|np| np.getattr("ndarray")).ok();
    if ndarray_type.is_some_and(|ndarray| class.is(&ndarray)) {
        return Ok(Strategy::HostArray(host::Transfer::InOut));
    }
    if module == "numba.cuda.args" {
        if let Some(transfer) = host::hint_transfer(&arg.get_type()) {
            return Ok(Strategy::TransferHint(transfer));
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
