//! What a tensor of the DLPack C exchange API (torch's) described when it was read: its
//! memory, dtype, shape, strides and device. A torch tensor can change all of these under
//! the same identity (`set_()`, `resize_()`, `as_strided_()`, `.data = ...`), so holding an
//! object does not hold what it describes: [`HeldTensor::still`] reads it again (one C call)
//! and compares. Used by graphed calls (`held_args.rs`) and launches like the last
//! (`classify/recheck.rs`).

use pyo3::prelude::*;

use crate::interop::dlpack::{DLTensor, DLTensorFromPyObject, ExchangeApi, KDL_COMPLEX};

/// A tensor as it was read: how to read it again, and what it described.
pub(crate) struct HeldTensor {
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
    /// The device it was on: DLPack's (device type, device id).
    pub(crate) fn device(&self) -> (i32, i32) {
        self.device
    }

    /// What `arg` describes now, or None when it cannot be read or cannot be held: a
    /// complex tensor of a producer with lazy conjugate views (torch), whose conjugate bit
    /// the launch checks on every read.
    pub(crate) fn read(arg: &Bound<'_, PyAny>, api: ExchangeApi) -> Option<HeldTensor> {
        let tensor = read_tensor(arg, api.from_py_object)?;
        if api.lazy_sign_views && tensor.dtype.code == KDL_COMPLEX {
            return None;
        }
        let (shape, strides) = dims(&tensor)?;
        Some(HeldTensor {
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
    pub(crate) fn still(&self, arg: &Bound<'_, PyAny>) -> bool {
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
    // SAFETY: per `crate::interop::dlpack`'s invariants, `shape` points to `ndim` values and `strides`
    // is null or points to `ndim` values, valid while the producing object lives unchanged.
    let shape = unsafe { std::slice::from_raw_parts(tensor.shape, ndim) };
    let strides = (!tensor.strides.is_null())
        // SAFETY: as above.
        .then(|| unsafe { std::slice::from_raw_parts(tensor.strides, ndim) });
    Some((shape, strides))
}
