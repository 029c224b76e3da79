//! The form of a `fastlaunch.graphed` step's call: its guard key, its leaves (arrays,
//! streams, other objects; each object once) and their kinds. Arrays are read by the launch
//! path's own classifier (`classify::read_arg`, through the source `classify::source_of`
//! picks), so a step's form and its launches never disagree on which protocol an array is
//! read through.
//!
//! The key is bytes: tags, type pointers (of types held by [`FORM_KINDS`] for the life of
//! the process), exact scalar bits, the launch's fingerprint bytes and dims of arrays, stream
//! handles and object addresses (the graphs keep those objects alive).

use std::cell::RefCell;

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::classify::{exchange_api_of, read_arg, source_of, HeldObjects, Position, Source};
use crate::errors::{Error, Result};
use crate::graphed::held_args::HeldArgs;
use crate::scalar::Value;
use crate::scratch::{ArgValue, Scratch};
use crate::streams::{parse_stream, Stream};

/// Kinds of leaves, as `graphed.py` numbers them (`_ARRAY`, `_STREAM`, `_OBJECT`).
const ARRAY: u8 = 3;
const STREAM: u8 = 4;
const OBJECT: u8 = 5;

/// Sequences nested deeper than this are refused (a list that contains itself).
const MAX_DEPTH: usize = 200;

/// How arguments of one type enter the form (resolved once per type and thread).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum FormKind {
    /// Tuples, lists and their subclasses: recursively.
    Sequence,
    /// `str` / `bytes` subclasses: by content.
    Text,
    Bytes,
    /// Enum members: by identity (members are singletons, held by their class).
    EnumMember,
    /// Subclasses of `int`, `float`, `complex` (not NumPy's): by exact value.
    Int,
    Float,
    Complex,
    /// Read by the launch's classifier: device arrays (numba's keep their form while they
    /// live) and NumPy scalars of packed dtypes (dtype and exact bits).
    Array {
        numba: bool,
    },
    NumpyScalar,
    /// Other NumPy scalars (datetimes, records, strings): dtype and bytes, read in Python.
    OtherNumpyScalar,
    /// Anything with `__cuda_stream__`: by handle.
    Stream,
    /// Anything else: by identity.
    Object,
}

thread_local! {
    static FORM_KINDS: RefCell<HeldObjects<FormKind>> = const { RefCell::new(HeldObjects::new()) };
    static STATE: RefCell<FormState> = RefCell::new(FormState::default());
}

/// What one call's form is built in, reused by each thread.
#[derive(Default)]
struct FormState {
    key: Vec<u8>,
    /// Leaves so far: object address and index.
    seen: Vec<(usize, u32)>,
    scratch: Scratch,
}

/// The key, the leaves, their kinds, and the arguments held (see [`step_form`]).
type Form<'py> = (
    Bound<'py, PyBytes>,
    Bound<'py, PyList>,
    Bound<'py, PyList>,
    Option<HeldArgs>,
);

/// `step_form(args, kwargs, device)`: `(key, leaves, kinds, held)`. `held`
/// ([`HeldArgs`]) answers whether a later call passes the very same objects with the same
/// form; it is None when that cannot be checked so: keyword arguments, or a positional
/// argument that is neither a tensor of the DLPack C exchange API (torch's, whose
/// description is kept and read again), nor a CuPy array (whose shape is kept and read
/// again), nor of a form fixed for as long as it lives (scalars, plain values, streams,
/// numba arrays).
#[pyfunction]
#[pyo3(signature = (args, kwargs, device))]
pub(crate) fn step_form<'py>(
    py: Python<'py>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
    device: i64,
) -> Result<Form<'py>> {
    let compute = |state: &mut FormState| {
        state.key.clear();
        state.seen.clear();
        state.scratch.reset();
        let leaves = PyList::empty(py);
        let mut kinds: Vec<u8> = Vec::new();
        let mut builder = Builder {
            state,
            leaves: &leaves,
            kinds: &mut kinds,
        };
        builder.state.key.extend_from_slice(&device.to_le_bytes());
        let mut held = Some(HeldArgs::new(args, device));
        for (index, arg) in args.iter().enumerate() {
            let fixed = builder.part(&arg, index, 0)?;
            if let Some(args) = held.as_mut().filter(|_| !fixed) {
                let held_so = match exchange_api_of(&arg) {
                    Some(api) => args.hold_tensor(&arg, index, api),
                    None => args.hold_cupy_array(&arg, index),
                };
                if !held_so {
                    held = None;
                }
            }
        }
        if let Some(kwargs) = kwargs.filter(|k| !k.is_empty()) {
            held = None;
            let mut items: Vec<(String, Bound<'py, PyAny>)> = Vec::with_capacity(kwargs.len());
            for (name, value) in kwargs.iter() {
                items.push((name.extract()?, value));
            }
            items.sort_by(|a, b| a.0.cmp(&b.0));
            builder.tag(b'K');
            builder.length(items.len());
            for (index, (name, value)) in items.iter().enumerate() {
                builder.length(name.len());
                builder.state.key.extend_from_slice(name.as_bytes());
                builder.part(value, args.len() + index, 0)?;
            }
        }
        let key = PyBytes::new(py, &builder.state.key);
        Ok((key, leaves, PyList::new(py, kinds)?, held))
    };
    // A Python attribute read during the form (a property) may compute another form.
    STATE.with(|state| match state.try_borrow_mut() {
        Ok(mut state) => compute(&mut state),
        Err(_) => compute(&mut FormState::default()),
    })
}

struct Builder<'a, 'py> {
    state: &'a mut FormState,
    leaves: &'a Bound<'py, PyList>,
    kinds: &'a mut Vec<u8>,
}

impl<'py> Builder<'_, 'py> {
    fn tag(&mut self, tag: u8) {
        self.state.key.push(tag);
    }

    fn length(&mut self, n: usize) {
        self.state.key.extend_from_slice(&(n as u64).to_le_bytes());
    }

    fn word(&mut self, w: u64) {
        self.state.key.extend_from_slice(&w.to_le_bytes());
    }

    fn address(&mut self, object: &Bound<'_, PyAny>) {
        self.word(object.as_ptr() as u64);
    }

    /// Appends one argument's part of the key; returns whether its form is fixed for its
    /// lifetime.
    fn part(&mut self, x: &Bound<'py, PyAny>, index: usize, depth: usize) -> Result<bool> {
        // SAFETY: `x` is a valid object; its type is read without taking a reference.
        let type_ptr = unsafe { ffi::Py_TYPE(x.as_ptr()) };
        // SAFETY: comparing with the addresses of static builtin type objects, and reading
        // the values of objects of exactly those types.
        unsafe {
            if type_ptr == (&raw mut ffi::PyFloat_Type).cast() {
                self.tag(b'f');
                self.word(ffi::PyFloat_AsDouble(x.as_ptr()).to_bits());
                return Ok(true);
            }
            if type_ptr == (&raw mut ffi::PyLong_Type).cast() {
                self.int(x)?;
                return Ok(true);
            }
            if type_ptr == (&raw mut ffi::PyBool_Type).cast() {
                self.tag(if x.as_ptr() == ffi::Py_True() {
                    b'T'
                } else {
                    b'F'
                });
                return Ok(true);
            }
            if x.as_ptr() == ffi::Py_None() {
                self.tag(b'N');
                return Ok(true);
            }
            if type_ptr == (&raw mut ffi::PyComplex_Type).cast() {
                self.complex(x);
                return Ok(true);
            }
            if type_ptr == (&raw mut ffi::PyTuple_Type).cast()
                || type_ptr == (&raw mut ffi::PyList_Type).cast()
            {
                self.tag(if type_ptr == (&raw mut ffi::PyTuple_Type).cast() {
                    b't'
                } else {
                    b'l'
                });
                self.sequence(x, index, depth)?;
                return Ok(false);
            }
        }
        let kind = form_kind(x, type_ptr as usize)?;
        if !matches!(kind, FormKind::Sequence) {
            if let Some(&(_, leaf)) = self
                .state
                .seen
                .iter()
                .find(|(address, _)| *address == x.as_ptr() as usize)
            {
                // aliasing is part of the form: a leaf seen again is keyed by its index
                self.tag(b'L');
                self.word(u64::from(leaf));
                return Ok(true);
            }
        }
        self.tag(b'y');
        self.word(type_ptr as u64);
        match kind {
            FormKind::Sequence => {
                self.sequence(x, index, depth)?;
                Ok(false)
            }
            FormKind::Text => {
                let text = x.cast::<PyString>().map_err(PyErr::from)?;
                let encoded =
                    text.call_method1(intern!(x.py(), "encode"), ("utf-8", "surrogatepass"))?;
                self.bytes(encoded.cast::<PyBytes>().map_err(PyErr::from)?.as_bytes());
                Ok(true)
            }
            FormKind::Bytes => {
                self.bytes(x.cast::<PyBytes>().map_err(PyErr::from)?.as_bytes());
                Ok(true)
            }
            FormKind::EnumMember => {
                self.address(x);
                Ok(true)
            }
            FormKind::Int => {
                self.int(x)?;
                Ok(true)
            }
            FormKind::Float => {
                // SAFETY: `x` is an instance of a float subclass.
                let value = unsafe { ffi::PyFloat_AsDouble(x.as_ptr()) };
                self.word(value.to_bits());
                Ok(true)
            }
            FormKind::Complex => {
                self.complex(x);
                Ok(true)
            }
            FormKind::NumpyScalar => {
                if !self.read_by_launch(x, index)? {
                    self.numpy_bytes(x)?;
                }
                Ok(true)
            }
            FormKind::OtherNumpyScalar => {
                self.numpy_bytes(x)?;
                Ok(true)
            }
            FormKind::Array { numba } => {
                if self.read_by_launch(x, index)? {
                    self.leaf(x, ARRAY);
                    Ok(numba)
                } else {
                    self.object(x);
                    Ok(false)
                }
            }
            FormKind::Stream => {
                let handle = match x.cast::<Stream>() {
                    Ok(stream) => stream.get().handle(),
                    Err(_) => parse_stream(x)?,
                };
                self.word(handle as u64);
                self.leaf(x, STREAM);
                Ok(true)
            }
            FormKind::Object => {
                // an interface set on the instance makes an array of it
                if x.hasattr(intern!(x.py(), "__cuda_array_interface__"))
                    .unwrap_or(false)
                    && self.read_by_launch(x, index)?
                {
                    self.leaf(x, ARRAY);
                } else {
                    self.object(x);
                }
                Ok(false)
            }
        }
    }

    fn leaf(&mut self, x: &Bound<'py, PyAny>, kind: u8) {
        let index = self.kinds.len() as u32;
        self.state.seen.push((x.as_ptr() as usize, index));
        // appending to a list we own cannot fail but for memory
        let _ = self.leaves.append(x);
        self.kinds.push(kind);
    }

    fn object(&mut self, x: &Bound<'py, PyAny>) {
        self.tag(b'O');
        self.address(x);
        self.leaf(x, OBJECT);
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.length(bytes.len());
        self.state.key.extend_from_slice(bytes);
    }

    fn complex(&mut self, x: &Bound<'_, PyAny>) {
        // SAFETY: `x` is a complex or an instance of a complex subclass.
        let (re, im) = unsafe {
            (
                ffi::PyComplex_RealAsDouble(x.as_ptr()),
                ffi::PyComplex_ImagAsDouble(x.as_ptr()),
            )
        };
        self.word(re.to_bits());
        self.word(im.to_bits());
    }

    /// An int by value: 64 bits when it fits, else its decimal digits.
    fn int(&mut self, x: &Bound<'_, PyAny>) -> Result<()> {
        match x.extract::<i64>() {
            Ok(value) => {
                self.tag(b'i');
                self.word(value as u64);
            }
            Err(_) => {
                self.tag(b'I');
                let digits = x.str()?;
                self.bytes(digits.to_str()?.as_bytes());
            }
        }
        Ok(())
    }

    fn sequence(&mut self, x: &Bound<'py, PyAny>, index: usize, depth: usize) -> Result<()> {
        if depth >= MAX_DEPTH {
            return Err(Error::Value(format!(
                "argument {index} of the graphed step nests sequences deeper than {MAX_DEPTH} \
                 (a list that contains itself?)"
            )));
        }
        if let Ok(tuple) = x.cast::<PyTuple>() {
            self.length(tuple.len());
            for item in tuple.iter() {
                self.part(&item, index, depth + 1)?;
            }
        } else {
            // a list (or a subclass): its items as they are now
            let items: Vec<Bound<'py, PyAny>> = x.try_iter()?.collect::<PyResult<_>>()?;
            self.length(items.len());
            for item in &items {
                self.part(item, index, depth + 1)?;
            }
        }
        Ok(())
    }

    /// Reads `x` as a launch would: its fingerprint bytes, then its dims and claimed devices
    /// (arrays) or its value's exact bits (NumPy scalars). False when the launch cannot read
    /// it (the launch will say why) or only numba-cuda can.
    fn read_by_launch(&mut self, x: &Bound<'py, PyAny>, index: usize) -> Result<bool> {
        let scratch = &mut self.state.scratch;
        scratch.reset();
        let at = Position { index, name: "" };
        if read_arg(x, at, scratch).is_err() || scratch.needs_numba {
            scratch.reset();
            return Ok(false);
        }
        let key = &mut self.state.key;
        key.push(b'A');
        key.extend_from_slice(&(scratch.fingerprint.len() as u64).to_le_bytes());
        key.extend_from_slice(&scratch.fingerprint);
        key.extend_from_slice(&(scratch.dims.len() as u64).to_le_bytes());
        for dim in &scratch.dims {
            key.extend_from_slice(&dim.to_le_bytes());
        }
        for (_, device) in &scratch.devices.claimed {
            key.extend_from_slice(&(*device as u64).to_le_bytes());
        }
        if let Some(ArgValue::Scalar(value)) = scratch.values.first() {
            match *value {
                Value::Bool(b) => key.push(u8::from(b)),
                Value::Int(i) => key.extend_from_slice(&i.to_le_bytes()),
                Value::Float(f) => key.extend_from_slice(&f.to_bits().to_le_bytes()),
                Value::Half(bits) => key.extend_from_slice(&bits.to_le_bytes()),
                Value::Complex(re, im) => {
                    key.extend_from_slice(&re.to_bits().to_le_bytes());
                    key.extend_from_slice(&im.to_bits().to_le_bytes());
                }
            }
        }
        scratch.reset();
        Ok(true)
    }

    /// A NumPy scalar fastlaunch does not pack: its dtype and its bytes, from Python.
    fn numpy_bytes(&mut self, x: &Bound<'py, PyAny>) -> Result<()> {
        let py = x.py();
        let dtype = x.getattr(intern!(py, "dtype"))?.str()?;
        self.bytes(dtype.to_str()?.as_bytes());
        let data = x.call_method0(intern!(py, "tobytes"))?;
        self.bytes(data.cast::<PyBytes>().map_err(PyErr::from)?.as_bytes());
        Ok(())
    }
}

/// The [`FormKind`] of `x`'s type, resolved once per type and thread.
fn form_kind(x: &Bound<'_, PyAny>, type_ptr: usize) -> Result<FormKind> {
    let known = FORM_KINDS.with(|kinds| kinds.borrow().get(type_ptr));
    if let Some(kind) = known {
        return Ok(kind);
    }
    let kind = resolve_form_kind(x)?;
    FORM_KINDS.with(|kinds| kinds.borrow_mut().insert(x.get_type().as_any(), kind));
    Ok(kind)
}

/// Sequences and plain values first (as the step's form always took them), then the
/// launch's own sources in the launch's order, then streams; anything else by identity.
#[cold]
fn resolve_form_kind(x: &Bound<'_, PyAny>) -> Result<FormKind> {
    let py = x.py();
    if x.is_instance_of::<PyTuple>() || x.is_instance_of::<PyList>() {
        return Ok(FormKind::Sequence);
    }
    if x.is_instance_of::<PyString>() {
        return Ok(FormKind::Text);
    }
    if x.is_instance_of::<PyBytes>() {
        return Ok(FormKind::Bytes);
    }
    let is_enum = py
        .import("enum")?
        .getattr("Enum")
        .and_then(|enum_class| x.is_instance(&enum_class))?;
    if is_enum {
        return Ok(FormKind::EnumMember);
    }
    let numpy_generic = py
        .import("sys")?
        .getattr("modules")?
        .get_item("numpy")
        .ok()
        .and_then(|numpy| numpy.getattr("generic").ok());
    if let Some(generic) = numpy_generic {
        if x.is_instance(&generic)? {
            return Ok(match source_of(x) {
                Some(Source::NumpyScalar) => FormKind::NumpyScalar,
                _ => FormKind::OtherNumpyScalar,
            });
        }
    }
    if x.is_instance_of::<pyo3::types::PyInt>() {
        return Ok(FormKind::Int);
    }
    if x.is_instance_of::<pyo3::types::PyFloat>() {
        return Ok(FormKind::Float);
    }
    if x.is_instance_of::<pyo3::types::PyComplex>() {
        return Ok(FormKind::Complex);
    }
    match source_of(x) {
        Some(Source::NumbaArray) => return Ok(FormKind::Array { numba: true }),
        Some(Source::Array) => return Ok(FormKind::Array { numba: false }),
        _ => {}
    }
    if x.is_instance_of::<Stream>() || x.get_type().hasattr(intern!(py, "__cuda_stream__"))? {
        return Ok(FormKind::Stream);
    }
    Ok(FormKind::Object)
}
