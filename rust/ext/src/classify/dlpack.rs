//! DLPack: producers of the DLPack C exchange API (torch: a tensor view with no Python
//! call) and generic `__dlpack__` producers (a capsule). The tensor structs are read in
//! `crate::interop::dlpack`, which states their invariants.

use std::cell::RefCell;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyString};

use super::arrays::push_array;
use super::known::KnownObjects;
use super::{type_name, Position, Scratch, ValueAt};
use crate::errors::Result;
use crate::interop::dlpack::{self as ffi_dlpack, DLTensor, ExchangeApi};
use crate::scalar::Scalar;
use fastlaunch_driver as driver;

/// A producer of the DLPack C exchange API: its tensor, and where to ask its current stream.
#[inline]
pub(super) fn read_exchange(
    arg: &Bound<'_, PyAny>,
    api: ExchangeApi,
    at: Position<'_>,
    scratch: &mut Scratch,
) -> Result<()> {
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
    note_exchange_read(arg, &tensor, api, at, scratch)?;
    push_dltensor(arg, &tensor, at, scratch)
}

/// What a read of `arg`'s exchange-API tensor tells the launch beside the array, the same for
/// a full read and a new tensor of the layout read last (`same_layout.rs`): a lazy sign view
/// is refused (whether the tensor was known goes into `scratch`), and the producer's current
/// stream is where to ask for the tensor's device.
#[inline]
pub(super) fn note_exchange_read(
    arg: &Bound<'_, PyAny>,
    tensor: &DLTensor,
    api: ExchangeApi,
    at: Position<'_>,
    scratch: &mut Scratch,
) -> Result<()> {
    if api.lazy_sign_views && refuse_lazy_sign_view(arg, tensor, at, !scratch.forget_reads)? {
        scratch.read_was_known = true;
    }
    if let Some(query) = api.current_work_stream {
        scratch.streams.exchange_stream =
            Some((query, tensor.device.device_type, tensor.device.device_id));
    }
    Ok(())
}

thread_local! {
    /// Real tensors found free of the negative bit, with the memory they had then (see below).
    static SIGN_CHECKED: RefCell<KnownObjects<u64>> =
        const { RefCell::new(KnownObjects::new()) };
}

/// Refuses a torch tensor whose conjugate or negative bit is set: its memory holds the
/// values before that lazy conjugation or negation, which a kernel would read silently
/// (torch's own `__dlpack__` refuses such tensors too). Only complex tensors can carry the
/// conjugate bit; the negative bit can be on any (`x.conj().imag`).
///
/// `is_neg()` costs a torch call (~0.1 µs on the H200), so a real tensor found clear is
/// remembered (`known.rs`) with its memory address. A tensor's bits are fixed when it is
/// made; only `.data = ...` can give an existing tensor another's bits, which changes its
/// memory (but for a negated view of the very same memory, which is not noticed). A tensor
/// that is not a view may carry the bit (`t.data = x.conj().imag` leaves `_base` None), so
/// every tensor not in the table is asked. `remember`: the launch keeps what it reads (not
/// during a run of new tensors, each read once: `repeat.rs`), so a clear tensor goes into the
/// table. Whether the tensor was found in the table (a tensor read before).
fn refuse_lazy_sign_view(
    arg: &Bound<'_, PyAny>,
    tensor: &DLTensor,
    at: Position<'_>,
    remember: bool,
) -> Result<bool> {
    let py = arg.py();
    let is_set = |method: &Bound<'_, PyString>| -> Result<bool> {
        Ok(arg.call_method0(method)?.is(PyBool::new(py, true)))
    };
    let complex = tensor.dtype.code == ffi_dlpack::KDL_COMPLEX;
    let data = (tensor.data as u64).wrapping_add(tensor.byte_offset);
    if complex {
        if is_set(intern!(py, "is_conj"))? {
            return Err(at.error(
                "tensor has its conjugate bit set (a lazy .conj() view, whose memory holds \
                 the unconjugated values); pass t.resolve_conj() instead",
            ));
        }
    } else {
        let checked = SIGN_CHECKED.with(|known| {
            known
                .try_borrow()
                .is_ok_and(|known| known.find(arg) == Some(&data))
        });
        if checked {
            return Ok(true);
        }
    }
    if is_set(intern!(py, "is_neg"))? {
        return Err(at.error(
            "tensor has its negative bit set (a lazy negated view, whose memory holds the \
             values before negation); pass t.resolve_neg() instead",
        ));
    }
    if !complex && remember {
        SIGN_CHECKED.with(|known| {
            if let Ok(mut known) = known.try_borrow_mut() {
                known.remember(arg, data);
            }
        });
    }
    Ok(false)
}

/// Pushes the array a DLPack tensor describes.
fn push_dltensor(
    arg: &Bound<'_, PyAny>,
    tensor: &DLTensor,
    at: Position<'_>,
    scratch: &mut Scratch,
) -> Result<()> {
    let device = tensor.device.device_type;
    if device == ffi_dlpack::KDL_CUDA {
        let ordinal = usize::try_from(tensor.device.device_id)
            .map_err(|_| at.error("DLPack tensor has a negative device id"))?;
        let value = ValueAt::next(scratch, at);
        scratch.devices.claimed.push((value, ordinal));
    }
    if !matches!(
        device,
        ffi_dlpack::KDL_CUDA | ffi_dlpack::KDL_CUDA_MANAGED | ffi_dlpack::KDL_CUDA_HOST
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
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else {
        // SAFETY: per the module invariants, shape has ndim values and strides is null or has
        // ndim values, valid while `arg` (held by the caller) lives.
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
        scalar.into(),
        shape.iter().copied(),
        strides.map(|s| s.iter().map(move |elements| elements * itemsize)),
        false,
    )
}

/// A generic `__dlpack__` producer, asked for a capsule ordered before the launch stream.
pub(super) fn read(arg: &Bound<'_, PyAny>, at: Position<'_>, scratch: &mut Scratch) -> Result<()> {
    let py = arg.py();
    let kwargs = PyDict::new(py);
    // The consumer's stream (1 for the legacy default): the producer orders itself before it.
    let stream = if scratch.streams.launch_stream == 0 {
        driver::LEGACY_STREAM
    } else {
        scratch.streams.launch_stream
    };
    kwargs.set_item("stream", stream)?;
    let capsule = arg
        .call_method(intern!(py, "__dlpack__"), (), Some(&kwargs))
        .map_err(|e| at.error(format!("{}.__dlpack__() failed: {e}", type_name(arg))))?;
    let tensor = ffi_dlpack::tensor_from_capsule(&capsule).ok_or_else(|| {
        at.error(format!(
            "{}.__dlpack__() did not return a DLPack capsule",
            type_name(arg)
        ))
    })?;
    scratch.keepalive.push(capsule.unbind());
    push_dltensor(arg, &tensor, at, scratch)
}
