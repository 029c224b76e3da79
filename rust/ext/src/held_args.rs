//! The arguments of one `fastlaunch.graphed` call, kept with what each tensor among them
//! (torch's, or any producer of the DLPack C exchange API) described then: its memory,
//! dtype, shape, strides and device. A torch tensor can change all of these under the same
//! identity (`set_()`, `resize_()`, `as_strided_()`, `.data = ...`), so identity alone does
//! not say that a later call has the same form, nor that a graph pinned to the tensor still
//! reads and writes the tensor's memory. [`HeldArgs::holds`] says both in one call: the very
//! same objects, the same current device, and every tensor reads as it did.
//!
//! Built by `step_form` (`step_form.rs`) only when every other argument keeps its form for
//! as long as it lives (scalars, plain values, streams, numba arrays).

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::dlpack::{DLTensor, DLTensorFromPyObject, ExchangeApi, KDL_COMPLEX};
use crate::errors::Error;
use fastlaunch_driver as driver;

/// One tensor argument: where it is in the call, how to read it, what it read.
struct HeldTensor {
    index: usize,
    read: DLTensorFromPyObject,
    data: usize,
    byte_offset: u64,
    device: (i32, i32),
    dtype: (u8, u8, u16),
    shape: Vec<i64>,
    /// Empty when the producer gave no strides (compact).
    strides: Vec<i64>,
    strides_given: bool,
}

impl HeldTensor {
    /// What `arg` describes now, or None when it cannot be read or cannot be held: a
    /// complex tensor of a producer with lazy conjugate views (torch), whose conjugate bit
    /// the launch checks on every read.
    fn read(arg: &Bound<'_, PyAny>, index: usize, api: ExchangeApi) -> Option<HeldTensor> {
        let tensor = read_tensor(arg, api.from_py_object)?;
        if api.lazy_sign_views && tensor.dtype.code == KDL_COMPLEX {
            return None;
        }
        let (shape, strides) = dims(&tensor)?;
        Some(HeldTensor {
            index,
            read: api.from_py_object,
            data: tensor.data as usize,
            byte_offset: tensor.byte_offset,
            device: (tensor.device.device_type, tensor.device.device_id),
            dtype: (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes),
            shape: shape.to_vec(),
            strides: strides.map(<[i64]>::to_vec).unwrap_or_default(),
            strides_given: strides.is_some(),
        })
    }

    /// Whether `arg` (the very object held) describes the same tensor as when it was held.
    fn still(&self, arg: &Bound<'_, PyAny>) -> bool {
        let Some(tensor) = read_tensor(arg, self.read) else {
            return false;
        };
        let Some((shape, strides)) = dims(&tensor) else {
            return false;
        };
        tensor.data as usize == self.data
            && tensor.byte_offset == self.byte_offset
            && (tensor.device.device_type, tensor.device.device_id) == self.device
            && (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes) == self.dtype
            && shape == self.shape.as_slice()
            && strides.is_some() == self.strides_given
            && strides.unwrap_or_default() == self.strides.as_slice()
    }
}

/// `arg` read through its producer's exchange API; None (and no Python error left set) when
/// the producer refuses.
fn read_tensor(arg: &Bound<'_, PyAny>, read: DLTensorFromPyObject) -> Option<DLTensor> {
    let mut tensor = DLTensor::empty();
    // SAFETY: `read` is the exchange API of `arg`'s type (found through the launch's type
    // cache, which holds the type and so the producer's library); the tensor is ours.
    let rc = unsafe { read(arg.as_ptr().cast(), &mut tensor) };
    if rc != 0 {
        drop(PyErr::take(arg.py()));
        return None;
    }
    Some(tensor)
}

/// A tensor's shape and strides (None: none given). Valid while the tensor's object lives
/// and is not changed, which holds for the length of a call that holds the object.
fn dims(tensor: &DLTensor) -> Option<(&[i64], Option<&[i64]>)> {
    let ndim = usize::try_from(tensor.ndim).ok()?;
    if ndim == 0 {
        return Some((&[], None));
    }
    if tensor.shape.is_null() {
        return None;
    }
    // SAFETY: per `crate::dlpack`'s invariants, `shape` points to `ndim` values and `strides`
    // is null or points to `ndim` values, valid while the producing object lives unchanged.
    let shape = unsafe { std::slice::from_raw_parts(tensor.shape, ndim) };
    let strides = (!tensor.strides.is_null())
        // SAFETY: as above.
        .then(|| unsafe { std::slice::from_raw_parts(tensor.strides, ndim) });
    Some((shape, strides))
}

/// A call's arguments and what its tensors described; see the module documentation.
#[pyclass(frozen, module = "fastlaunch._core")]
pub(crate) struct HeldArgs {
    args: Py<PyTuple>,
    device: i64,
    tensors: Vec<HeldTensor>,
}

impl HeldArgs {
    /// Starts holding `args` (called with `device` current).
    pub(crate) fn new(args: &Bound<'_, PyTuple>, device: i64) -> HeldArgs {
        HeldArgs {
            args: args.clone().unbind(),
            device,
            tensors: Vec::new(),
        }
    }

    /// Adds argument `index`, `arg`, a tensor read through `api`; false when it cannot be
    /// held.
    pub(crate) fn hold_tensor(
        &mut self,
        arg: &Bound<'_, PyAny>,
        index: usize,
        api: ExchangeApi,
    ) -> bool {
        match HeldTensor::read(arg, index, api) {
            Some(tensor) => {
                self.tensors.push(tensor);
                true
            }
            None => false,
        }
    }
}

#[pymethods]
impl HeldArgs {
    /// `holds(args)`: whether `args` are the very objects held, in order, the current device
    /// is the one they were held on, and every tensor among them reads as it did then.
    fn holds(&self, args: &Bound<'_, PyTuple>) -> bool {
        let held = self.args.bind(args.py());
        let same = held.len() == args.len()
            && held
                .iter_borrowed()
                .zip(args.iter_borrowed())
                .all(|(x, y)| x.as_ptr() == y.as_ptr());
        same && current_device() == Some(self.device)
            && self.tensors.iter().all(|tensor| {
                held.get_borrowed_item(tensor.index)
                    .is_ok_and(|arg| tensor.still(&arg))
            })
    }

    /// The arguments held.
    #[getter]
    fn args(&self, py: Python<'_>) -> Py<PyTuple> {
        self.args.clone_ref(py)
    }

    /// How many of them are tensors whose description is checked.
    #[getter]
    fn tensor_count(&self) -> usize {
        self.tensors.len()
    }
}

/// The current device as `graphed.py`'s `_device()` counts it (0 without CUDA or without a
/// current context); None when asking fails otherwise (the caller's slower path says why).
fn current_device() -> Option<i64> {
    match crate::devices::current_device() {
        Ok(device) => Some(device.map_or(0, |d| d as i64)),
        Err(Error::Driver(driver::Error::Unavailable(_))) => Some(0),
        Err(_) => None,
    }
}
