//! The per-launch state: what classifying a launch's arguments produces and what the rest of
//! the launch reads. Each thread reuses one [`Scratch`] (`launch.rs`), so a launch allocates
//! nothing. Classification (`classify/`) fills it; the groups below are what the later stages
//! read: [`StreamInputs`] (`streams.rs`), [`DeviceClaims`] (`limits.rs`) and
//! [`HostStaging`] (`staging.rs`).

use pyo3::prelude::*;

use crate::scalar::Value;
use fastlaunch_driver as driver;

/// An array argument: what the packer needs. `dims_at` indexes the scratch's `dims`,
/// where `ndim` shape values are followed by `ndim` byte strides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ArrayArg {
    pub data: u64,
    pub itemsize: u64,
    pub nitems: u64,
    pub ndim: usize,
    pub dims_at: usize,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum ArgValue {
    /// An array (for a host array: its host address until the launch stages it; see
    /// [`HostCopy`]).
    Array(ArrayArg),
    Scalar(Value),
    /// A record: the device address of its copy (0 until the launch stages it; see
    /// [`HostCopy`]), passed as one pointer parameter.
    Record {
        device: u64,
    },
}

/// Where an array's value is in `Scratch::values`, and which argument it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ValueAt {
    pub value: usize,
    pub argument: usize,
}

/// Host bytes the launch copies to the device before it and back after it: a record (a
/// structured scalar, passed as a pointer to its device copy) or a host NumPy array (passed
/// as a device array over the copy), as numba-cuda's launch does. The argument object keeps
/// the bytes alive and in place for the launch (a structured scalar holds its array).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HostCopy {
    /// Its value in `Scratch::values`, whose device address staging fills in.
    pub value: usize,
    pub host: usize,
    pub len: usize,
    /// Whether the bytes are copied in (not for `cuda.Out`: the device copy is only
    /// allocated).
    pub copy_in: bool,
    /// Whether they are copied back after the launch: not for read-only bytes, nor for
    /// `cuda.In`.
    pub copy_back: bool,
}

/// What orders the launch after its inputs (`streams::order_inputs`).
#[derive(Default)]
pub(crate) struct StreamInputs {
    /// The launch's stream, given to `__dlpack__` producers.
    pub launch_stream: usize,
    /// Streams that produced the inputs (CUDA Array Interface v3 `stream`).
    pub producers: Vec<usize>,
    /// A DLPack exchange-API producer among the inputs: where to ask its current stream.
    pub exchange_stream: Option<(crate::interop::dlpack::CurrentWorkStream, i32, i32)>,
    /// Whether a CuPy array is among the inputs (CuPy's current stream then counts).
    pub has_cupy: bool,
}

/// What the launch checks about the arrays' devices (`limits::check_devices`).
#[derive(Default)]
pub(crate) struct DeviceClaims {
    /// Arrays whose source names their device, and the device.
    pub claimed: Vec<(ValueAt, usize)>,
    /// Arrays whose pointers the launch asks the driver about (generic CUDA Array
    /// Interface objects, whose pointer may be anything).
    pub unverified_pointers: Vec<ValueAt>,
}

impl DeviceClaims {
    pub(crate) fn is_empty(&self) -> bool {
        self.claimed.is_empty() && self.unverified_pointers.is_empty()
    }
}

/// Host bytes among the arguments (records, host arrays), copied to the device and back
/// around the launch (`staging.rs`).
#[derive(Default)]
pub(crate) struct HostStaging {
    pub copies: Vec<HostCopy>,
    /// Their device copies' addresses while the launch runs, in order (emptied by the
    /// launch that made them).
    pub staged: Vec<u64>,
    /// A host array passed bare (not in `cuda.In` / `Out` / `InOut`): numba-cuda warns
    /// that it is copied.
    pub implicit: bool,
}

/// Per-launch working memory, reused by each thread so a launch allocates nothing.
#[derive(Default)]
pub(crate) struct Scratch {
    pub fingerprint: Vec<u8>,
    pub values: Vec<ArgValue>,
    pub dims: Vec<i64>,
    pub params: driver::ParamBuffer,
    /// Objects that must live until the launch is submitted (DLPack capsules).
    pub keepalive: Vec<Py<PyAny>>,
    /// How many tuples the member being read is inside.
    pub tuple_depth: usize,
    /// An argument only numba-cuda's own launch path can pass (see `Strategy::Numba`).
    pub needs_numba: bool,
    /// Array sources do not remember the arrays they read in their tables of arrays read
    /// before (`classify/known.rs`): a launch like the last sets it for an argument that has
    /// been a new object launch after launch (`launch/repeat.rs`).
    pub forget_reads: bool,
    /// Set when an array source found an argument in its table of arrays read before (or a
    /// tensor in its table of tensors checked for lazy sign bits).
    pub read_was_known: bool,
    pub streams: StreamInputs,
    pub devices: DeviceClaims,
    pub staging: HostStaging,
}

impl Scratch {
    /// A scratch for a launch on `launch_stream` (bound launches and argument updates).
    pub(crate) fn for_stream(launch_stream: usize) -> Scratch {
        let mut scratch = Scratch::default();
        scratch.streams.launch_stream = launch_stream;
        scratch
    }

    /// Forgets the last launch's arguments, keeping the memory and the launch stream.
    pub(crate) fn reset(&mut self) {
        self.fingerprint.clear();
        self.values.clear();
        self.dims.clear();
        self.params.clear();
        self.keepalive.clear();
        self.tuple_depth = 0;
        self.needs_numba = false;
        self.forget_reads = false;
        self.read_was_known = false;
        self.streams.producers.clear();
        self.streams.exchange_stream = None;
        self.streams.has_cupy = false;
        self.devices.claimed.clear();
        self.devices.unverified_pointers.clear();
        self.staging.copies.clear();
        self.staging.implicit = false;
    }
}
