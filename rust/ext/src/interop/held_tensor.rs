//! What a tensor of the DLPack C exchange API (torch's) described when it was read: its
//! memory, dtype, shape, strides and device. A torch tensor can change all of these under
//! the same identity (`set_()`, `resize_()`, `as_strided_()`, `.data = ...`), so holding an
//! object does not hold what it describes: [`HeldTensor::still`] reads it again (one C call)
//! and compares. Used by graphed calls (`held_args.rs`) and launches like the last
//! (`classify/recheck.rs`).

use pyo3::prelude::*;

use crate::interop::dlpack::{dims, read_tensor, DLTensorFromPyObject, ExchangeApi, KDL_COMPLEX};

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
