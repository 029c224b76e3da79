//! What a tensor of the DLPack C exchange API (torch's) described when it was read: its
//! memory, dtype, shape, strides and device. A torch tensor can change all of these under
//! the same identity (`set_()`, `resize_()`, `as_strided_()`, `.data = ...`), so holding an
//! object does not hold what it describes: [`HeldTensor::still`] reads it again (one C call)
//! and compares. Used by graphed calls (`held_args.rs`) and launches like the last
//! (`classify/recheck.rs`); [`TensorLayout`], all of it but the memory, by
//! `classify/same_layout.rs` too.

use pyo3::prelude::*;
use smallvec::SmallVec;

use crate::interop::dlpack::{
    dims, read_tensor, DLTensor, DLTensorFromPyObject, ExchangeApi, KDL_COMPLEX,
};

/// What a tensor describes but its memory: its device (DLPack's device type and id), dtype,
/// shape and strides (`None`: the producer gave none, compact). A held tensor compares it
/// beside its memory; a new tensor in the place of one read before
/// (`classify/same_layout.rs`) compares it alone.
pub(crate) struct TensorLayout {
    pub(crate) device: (i32, i32),
    dtype: (u8, u8, u16),
    shape: SmallVec<[i64; 4]>,
    strides: Option<SmallVec<[i64; 4]>>,
}

impl TensorLayout {
    /// `tensor`'s layout; None when its dims cannot be read.
    pub(crate) fn of(tensor: &DLTensor) -> Option<TensorLayout> {
        let (shape, strides) = dims(tensor)?;
        Some(TensorLayout {
            device: (tensor.device.device_type, tensor.device.device_id),
            dtype: (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes),
            shape: shape.into(),
            strides: strides.map(SmallVec::from),
        })
    }

    /// Whether `tensor` has this layout.
    #[inline]
    pub(crate) fn describes(&self, tensor: &DLTensor) -> bool {
        let Some((shape, strides)) = dims(tensor) else {
            return false;
        };
        (tensor.device.device_type, tensor.device.device_id) == self.device
            && (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes) == self.dtype
            && shape == self.shape.as_slice()
            && strides == self.strides.as_deref()
    }
}

/// A tensor as it was read: how to read it again, and what it described.
pub(crate) struct HeldTensor {
    read: DLTensorFromPyObject,
    data: usize,
    byte_offset: u64,
    layout: TensorLayout,
}

impl HeldTensor {
    /// The device it was on: DLPack's (device type, device id).
    pub(crate) fn device(&self) -> (i32, i32) {
        self.layout.device
    }

    /// What `arg` describes now, or None when it cannot be read or cannot be held: a
    /// complex tensor of a producer with lazy conjugate views (torch), whose conjugate bit
    /// the launch checks on every read.
    pub(crate) fn read(arg: &Bound<'_, PyAny>, api: ExchangeApi) -> Option<HeldTensor> {
        let tensor = read_tensor(arg, api.from_py_object)?;
        if api.lazy_sign_views && tensor.dtype.code == KDL_COMPLEX {
            return None;
        }
        Some(HeldTensor {
            read: api.from_py_object,
            data: tensor.data as usize,
            byte_offset: tensor.byte_offset,
            layout: TensorLayout::of(&tensor)?,
        })
    }

    /// Whether `arg` (the very object held) describes the same tensor as when it was held.
    pub(crate) fn still(&self, arg: &Bound<'_, PyAny>) -> bool {
        let Some(tensor) = read_tensor(arg, self.read) else {
            return false;
        };
        tensor.data as usize == self.data
            && tensor.byte_offset == self.byte_offset
            && self.layout.describes(&tensor)
    }
}
