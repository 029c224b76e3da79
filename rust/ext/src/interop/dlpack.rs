//! DLPack's C structures (dlpack.h v1.3) and the two ways we read a tensor:
//! the C exchange API (`type(x).__dlpack_c_exchange_api__`, no Python call per
//! tensor) and the `__dlpack__()` capsule.
//!
//! Invariants for the `unsafe` reads here: a `DLTensor` filled by a producer is
//! valid while the producing object (or capsule) is alive, which the caller
//! guarantees by holding it until the launch has been submitted; `shape` points
//! to `ndim` values and `strides` is null or points to `ndim` values.

use std::ffi::{c_int, c_void, CStr};

use pyo3::ffi;
use pyo3::prelude::*;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

impl DLTensor {
    pub(crate) fn empty() -> DLTensor {
        DLTensor {
            data: std::ptr::null_mut(),
            device: DLDevice {
                device_type: 0,
                device_id: 0,
            },
            ndim: 0,
            dtype: DLDataType {
                code: 0,
                bits: 0,
                lanes: 0,
            },
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        }
    }
}

#[repr(C)]
pub(crate) struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
pub(crate) struct DLPackVersion {
    pub major: u32,
    pub minor: u32,
}

#[repr(C)]
pub(crate) struct DLPackExchangeAPIHeader {
    pub version: DLPackVersion,
    pub prev_api: *const DLPackExchangeAPIHeader,
}

pub(crate) type DLTensorFromPyObject = unsafe extern "C" fn(*mut c_void, *mut DLTensor) -> c_int;
pub(crate) type CurrentWorkStream = unsafe extern "C" fn(i32, i32, *mut *mut c_void) -> c_int;

#[repr(C)]
pub(crate) struct DLPackExchangeAPI {
    pub header: DLPackExchangeAPIHeader,
    pub managed_tensor_allocator: *const c_void,
    pub managed_tensor_from_py_object_no_sync: *const c_void,
    pub managed_tensor_to_py_object_no_sync: *const c_void,
    pub dltensor_from_py_object_no_sync: Option<DLTensorFromPyObject>,
    pub current_work_stream: Option<CurrentWorkStream>,
}

pub(crate) const KDL_CUDA: i32 = 2;
pub(crate) const KDL_CUDA_HOST: i32 = 3;
pub(crate) const KDL_CUDA_MANAGED: i32 = 13;
pub(crate) const KDL_COMPLEX: u8 = 5;

/// The exchange API's tensor reader, found through a type's
/// `__dlpack_c_exchange_api__` capsule (major version 1), if it offers one.
#[derive(Clone, Copy)]
pub(crate) struct ExchangeApi {
    pub from_py_object: DLTensorFromPyObject,
    /// The producer's current stream for a device (torch: `torch.cuda.current_stream`).
    pub current_work_stream: Option<CurrentWorkStream>,
    /// The producer marks views as conjugated or negated without changing their memory
    /// (torch's conjugate and negative bits), which a `DLTensor` cannot say.
    pub lazy_sign_views: bool,
}

// SAFETY: plain function pointers into a producer library that stays loaded while its
// type lives (the type cache holds the type).
unsafe impl Send for ExchangeApi {}

const EXCHANGE_CAPSULE: &CStr = c"dlpack_exchange_api";

pub(crate) fn exchange_api(class: &Bound<'_, PyAny>) -> Option<ExchangeApi> {
    let capsule = class.getattr("__dlpack_c_exchange_api__").ok()?;
    // SAFETY: PyCapsule_GetPointer checks the name; null (with an exception set) on mismatch.
    let mut header =
        unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), EXCHANGE_CAPSULE.as_ptr()) }
            as *const DLPackExchangeAPIHeader;
    if header.is_null() {
        // SAFETY: clear the name-mismatch exception we just caused.
        unsafe { ffi::PyErr_Clear() };
        return None;
    }
    // Walk to the newest API of major version 1.
    while !header.is_null() {
        // SAFETY: the capsule points at a DLPackExchangeAPI whose header chain is valid.
        let this = unsafe { &*header };
        if this.version.major == 1 {
            // SAFETY: a version-1 header begins a full DLPackExchangeAPI struct.
            let api = unsafe { &*(header as *const DLPackExchangeAPI) };
            return api
                .dltensor_from_py_object_no_sync
                .map(|from_py_object| ExchangeApi {
                    from_py_object,
                    current_work_stream: api.current_work_stream,
                    lazy_sign_views: false,
                });
        }
        header = this.prev_api;
    }
    None
}

/// `arg` read through its producer's exchange API; None (and no Python error left set) when
/// the producer refuses.
pub(crate) fn read_tensor(arg: &Bound<'_, PyAny>, read: DLTensorFromPyObject) -> Option<DLTensor> {
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
pub(crate) fn dims(tensor: &DLTensor) -> Option<(&[i64], Option<&[i64]>)> {
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

const LEGACY_CAPSULE: &CStr = c"dltensor";

/// The `DLTensor` inside a `__dlpack__()` capsule (named "dltensor"); the capsule must
/// outlive every use of the returned copy's pointers.
pub(crate) fn tensor_from_capsule(capsule: &Bound<'_, PyAny>) -> Option<DLTensor> {
    // SAFETY: PyCapsule_GetPointer checks the name; null (with an exception set) on mismatch.
    let managed = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), LEGACY_CAPSULE.as_ptr()) }
        as *const DLManagedTensor;
    if managed.is_null() {
        // SAFETY: clear the name-mismatch exception.
        unsafe { ffi::PyErr_Clear() };
        return None;
    }
    // SAFETY: a "dltensor" capsule holds a valid DLManagedTensor while it lives.
    Some(unsafe { (*managed).dl_tensor })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_sizes_match_dlpack_h() {
        assert_eq!(std::mem::size_of::<DLTensor>(), 48);
        assert_eq!(std::mem::size_of::<DLManagedTensor>(), 64);
        assert_eq!(std::mem::size_of::<DLPackExchangeAPIHeader>(), 16);
        assert_eq!(std::mem::size_of::<DLPackExchangeAPI>(), 56);
    }
}
