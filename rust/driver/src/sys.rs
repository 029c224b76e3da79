//! Raw CUDA driver types and the table of entry points, resolved once from the
//! driver library at run time. Nothing here is called directly by other crates:
//! the safe wrappers in the sibling modules are the interface.

use std::ffi::{c_char, c_int, c_uint, c_void};

use libloading::Library as DynamicLibrary;

pub type CUresult = c_int;
pub type CUdevice = c_int;
pub type CUdeviceptr = u64;
pub type CUcontext = *mut c_void;
pub type CUlibrary = *mut c_void;
pub type CUkernel = *mut c_void;
pub type CUfunction = *mut c_void;
pub type CUstream = *mut c_void;
pub type CUevent = *mut c_void;
pub type CUgraph = *mut c_void;
pub type CUgraphExec = *mut c_void;
pub type CUgraphNode = *mut c_void;
pub type CUmemoryPool = *mut c_void;

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
/// An operation on the legacy stream while a blocking stream is being captured (or asking
/// the legacy stream whether it is).
pub const CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: CUresult = 906;
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
pub const CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: CUresult = 704;
pub const CU_STREAM_CAPTURE_STATUS_ACTIVE: c_int = 1;
pub const CU_MEMORYTYPE_HOST: c_uint = 1;
pub const CU_POINTER_ATTRIBUTE_IS_MANAGED: c_int = 8;

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`: the special stream handles.
pub const CU_STREAM_LEGACY: usize = 0x1;
pub const CU_STREAM_PER_THREAD: usize = 0x2;
pub const CU_STREAM_NON_BLOCKING: c_uint = 0x1;
pub const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;
/// `CUmemPool_attribute` values (cuda.h).
pub const CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: c_int = 4;
pub const CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: c_int = 5;
pub const CU_MEMPOOL_ATTR_USED_MEM_CURRENT: c_int = 7;
/// Pinned host memory usable from every context.
pub const CU_MEM_ALLOCATION_TYPE_PINNED: c_int = 1;
pub const CU_MEM_LOCATION_TYPE_DEVICE: c_int = 1;
pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 0x1;

pub const CU_LAUNCH_ATTRIBUTE_COOPERATIVE: c_uint = 2;
pub const CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: c_uint = 4;

pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_int = 2;
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;

/// `CUlaunchAttribute`: an id, then a 64-byte value union, 8-byte aligned.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUlaunchAttribute {
    pub id: c_uint,
    pub pad: [u8; 4],
    pub value: [u64; 8],
}

impl CUlaunchAttribute {
    /// An attribute whose value is up to three leading `u32`s (cooperative flag, cluster dims).
    pub fn with_u32s(id: c_uint, values: &[u32]) -> CUlaunchAttribute {
        let mut words = [0u32; 16];
        words[..values.len()].copy_from_slice(values);
        let mut value = [0u64; 8];
        for (slot, pair) in value.iter_mut().zip(words.chunks_exact(2)) {
            *slot = u64::from(pair[0]) | (u64::from(pair[1]) << 32);
        }
        CUlaunchAttribute {
            id,
            pad: [0; 4],
            value,
        }
    }
}

/// `CUlaunchConfig` for `cuLaunchKernelEx`.
#[repr(C)]
pub struct CUlaunchConfig {
    pub grid_dim_x: c_uint,
    pub grid_dim_y: c_uint,
    pub grid_dim_z: c_uint,
    pub block_dim_x: c_uint,
    pub block_dim_y: c_uint,
    pub block_dim_z: c_uint,
    pub shared_mem_bytes: c_uint,
    pub h_stream: CUstream,
    pub attrs: *mut CUlaunchAttribute,
    pub num_attrs: c_uint,
}

/// `CUDA_KERNEL_NODE_PARAMS_v2`: a kernel node of a graph.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CudaKernelNodeParams {
    pub func: CUfunction,
    pub grid_dim_x: c_uint,
    pub grid_dim_y: c_uint,
    pub grid_dim_z: c_uint,
    pub block_dim_x: c_uint,
    pub block_dim_y: c_uint,
    pub block_dim_z: c_uint,
    pub shared_mem_bytes: c_uint,
    pub kernel_params: *mut *mut c_void,
    pub extra: *mut *mut c_void,
    pub kern: CUkernel,
    pub ctx: CUcontext,
}

/// A required entry point the driver library does not export (an older driver).
#[derive(Debug)]
pub struct MissingSymbol {
    pub symbol: &'static str,
    pub reason: String,
}

/// `CUmemPoolProps`: 88 bytes; what is not set here is zero (no export handles, no size
/// limit, default usage).
#[repr(C)]
pub struct CUmemPoolProps {
    pub alloc_type: c_int,
    pub handle_types: c_int,
    pub location_type: c_int,
    pub location_id: c_int,
    pub win32_security_attributes: *mut c_void,
    pub reserved: [u8; 64],
}

/// Declares the entry-point table: one field per driver function, and a loader
/// that resolves each by its exported (versioned) symbol name. Functions under
/// `optional` are `Option`s: a driver without them still loads, and only the feature
/// that needs them reports it.
macro_rules! driver_api {
    (
        required {
            $( $field:ident = $symbol:literal : fn($($arg:ty),*); )*
        }
        optional {
            $( $ofield:ident = $osymbol:literal : fn($($oarg:ty),*); )*
        }
    ) => {
        pub struct Api {
            $( pub $field: unsafe extern "C" fn($($arg),*) -> CUresult, )*
            $( pub $ofield: Option<unsafe extern "C" fn($($oarg),*) -> CUresult>, )*
            /// Keeps the shared object mapped for as long as the pointers above live.
            _library: DynamicLibrary,
        }

        impl Api {
            pub(crate) fn load(library: DynamicLibrary) -> Result<Api, MissingSymbol> {
                $(
                    // SAFETY: the symbol is a C function of the CUDA driver whose
                    // signature is the one written in this table (cuda.h, CUDA 12/13).
                    // Every required symbol is in CUDA 12.0's driver API (the library and
                    // kernel calls and the _v2 graph kernel-node calls are 12.0's newest).
                    let $field = unsafe {
                        *library
                            .get::<unsafe extern "C" fn($($arg),*) -> CUresult>(
                                concat!($symbol, "\0").as_bytes(),
                            )
                            .map_err(|e| MissingSymbol {
                                symbol: $symbol,
                                reason: e.to_string(),
                            })?
                    };
                )*
                $(
                    // SAFETY: as above.
                    let $ofield = unsafe {
                        library
                            .get::<unsafe extern "C" fn($($oarg),*) -> CUresult>(
                                concat!($osymbol, "\0").as_bytes(),
                            )
                            .ok()
                            .map(|symbol| *symbol)
                    };
                )*
                Ok(Api { $( $field, )* $( $ofield, )* _library: library })
            }
        }
    };
}

driver_api! {
    required {
    init = "cuInit": fn(c_uint);
    driver_get_version = "cuDriverGetVersion": fn(*mut c_int);
    get_error_name = "cuGetErrorName": fn(CUresult, *mut *const c_char);
    get_error_string = "cuGetErrorString": fn(CUresult, *mut *const c_char);

    device_get_count = "cuDeviceGetCount": fn(*mut c_int);
    device_get = "cuDeviceGet": fn(*mut CUdevice, c_int);
    device_get_name = "cuDeviceGetName": fn(*mut c_char, c_int, CUdevice);
    device_get_uuid = "cuDeviceGetUuid_v2": fn(*mut [u8; 16], CUdevice);
    device_get_attribute = "cuDeviceGetAttribute": fn(*mut c_int, c_int, CUdevice);
    device_get_pci_bus_id = "cuDeviceGetPCIBusId": fn(*mut c_char, c_int, CUdevice);
    device_total_mem = "cuDeviceTotalMem_v2": fn(*mut usize, CUdevice);

    primary_ctx_retain = "cuDevicePrimaryCtxRetain": fn(*mut CUcontext, CUdevice);
    ctx_get_current = "cuCtxGetCurrent": fn(*mut CUcontext);
    ctx_set_current = "cuCtxSetCurrent": fn(CUcontext);
    ctx_push_current = "cuCtxPushCurrent_v2": fn(CUcontext);
    ctx_pop_current = "cuCtxPopCurrent_v2": fn(*mut CUcontext);
    ctx_get_device = "cuCtxGetDevice": fn(*mut CUdevice);
    ctx_synchronize = "cuCtxSynchronize": fn();
    mem_get_info = "cuMemGetInfo_v2": fn(*mut usize, *mut usize);

    library_load_data = "cuLibraryLoadData": fn(
        *mut CUlibrary, *const c_void,
        *mut c_int, *mut *mut c_void, c_uint,
        *mut c_int, *mut *mut c_void, c_uint);
    library_get_kernel = "cuLibraryGetKernel": fn(*mut CUkernel, CUlibrary, *const c_char);
    library_unload = "cuLibraryUnload": fn(CUlibrary);
    kernel_get_function = "cuKernelGetFunction": fn(*mut CUfunction, CUkernel);
    kernel_get_attribute = "cuKernelGetAttribute": fn(*mut c_int, c_int, CUkernel, CUdevice);
    kernel_set_attribute = "cuKernelSetAttribute": fn(c_int, c_int, CUkernel, CUdevice);
    occupancy_max_active_blocks = "cuOccupancyMaxActiveBlocksPerMultiprocessor":
        fn(*mut c_int, CUfunction, c_int, usize);

    stream_create = "cuStreamCreate": fn(*mut CUstream, c_uint);
    stream_destroy = "cuStreamDestroy_v2": fn(CUstream);
    stream_synchronize = "cuStreamSynchronize": fn(CUstream);
    stream_query = "cuStreamQuery": fn(CUstream);
    stream_wait_event = "cuStreamWaitEvent": fn(CUstream, CUevent, c_uint);
    stream_get_flags = "cuStreamGetFlags": fn(CUstream, *mut c_uint);
    stream_is_capturing = "cuStreamIsCapturing": fn(CUstream, *mut c_int);
    event_create = "cuEventCreate": fn(*mut CUevent, c_uint);
    event_destroy = "cuEventDestroy_v2": fn(CUevent);
    event_record = "cuEventRecord": fn(CUevent, CUstream);
    event_synchronize = "cuEventSynchronize": fn(CUevent);
    event_query = "cuEventQuery": fn(CUevent);
    event_elapsed_time = "cuEventElapsedTime": fn(*mut f32, CUevent, CUevent);

    launch_kernel = "cuLaunchKernel": fn(
        CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint,
        c_uint, CUstream, *mut *mut c_void, *mut *mut c_void);
    launch_kernel_ex = "cuLaunchKernelEx": fn(
        *const CUlaunchConfig, CUfunction, *mut *mut c_void, *mut *mut c_void);

    mem_alloc = "cuMemAlloc_v2": fn(*mut CUdeviceptr, usize);
    mem_free = "cuMemFree_v2": fn(CUdeviceptr);
    memcpy_htod = "cuMemcpyHtoD_v2": fn(CUdeviceptr, *const c_void, usize);
    memcpy_dtoh = "cuMemcpyDtoH_v2": fn(*mut c_void, CUdeviceptr, usize);
    memcpy_dtod = "cuMemcpyDtoD_v2": fn(CUdeviceptr, CUdeviceptr, usize);
    memcpy_htod_async = "cuMemcpyHtoDAsync_v2": fn(CUdeviceptr, *const c_void, usize, CUstream);
    memcpy_dtoh_async = "cuMemcpyDtoHAsync_v2": fn(*mut c_void, CUdeviceptr, usize, CUstream);
    memset_d8 = "cuMemsetD8_v2": fn(CUdeviceptr, u8, usize);
    mem_alloc_async = "cuMemAllocAsync": fn(*mut CUdeviceptr, usize, CUstream);
    mem_free_async = "cuMemFreeAsync": fn(CUdeviceptr, CUstream);
    memcpy_dtod_async = "cuMemcpyDtoDAsync_v2": fn(CUdeviceptr, CUdeviceptr, usize, CUstream);
    memset_d8_async = "cuMemsetD8Async": fn(CUdeviceptr, u8, usize, CUstream);
    device_get_mem_pool = "cuDeviceGetMemPool": fn(*mut CUmemoryPool, CUdevice);
    mem_pool_set_attribute = "cuMemPoolSetAttribute": fn(CUmemoryPool, c_int, *mut c_void);
    mem_pool_get_attribute = "cuMemPoolGetAttribute": fn(CUmemoryPool, c_int, *mut c_void);
    mem_pool_trim_to = "cuMemPoolTrimTo": fn(CUmemoryPool, usize);
    mem_host_alloc = "cuMemHostAlloc": fn(*mut *mut c_void, usize, c_uint);
    mem_free_host = "cuMemFreeHost": fn(*mut c_void);
    pointer_get_attribute = "cuPointerGetAttribute": fn(*mut c_void, c_int, CUdeviceptr);
    device_can_access_peer = "cuDeviceCanAccessPeer": fn(*mut c_int, CUdevice, CUdevice);
    ctx_enable_peer_access = "cuCtxEnablePeerAccess": fn(CUcontext, c_uint);

    stream_begin_capture = "cuStreamBeginCapture_v2": fn(CUstream, c_int);
    stream_end_capture = "cuStreamEndCapture": fn(CUstream, *mut CUgraph);
    graph_instantiate = "cuGraphInstantiateWithFlags": fn(*mut CUgraphExec, CUgraph, u64);
    graph_launch = "cuGraphLaunch": fn(CUgraphExec, CUstream);
    graph_exec_destroy = "cuGraphExecDestroy": fn(CUgraphExec);
    graph_destroy = "cuGraphDestroy": fn(CUgraph);
    graph_get_nodes = "cuGraphGetNodes": fn(CUgraph, *mut CUgraphNode, *mut usize);
    graph_kernel_node_get_params = "cuGraphKernelNodeGetParams_v2":
        fn(CUgraphNode, *mut CudaKernelNodeParams);
    graph_exec_kernel_node_set_params = "cuGraphExecKernelNodeSetParams_v2":
        fn(CUgraphExec, CUgraphNode, *const CudaKernelNodeParams);
    }

    optional {
        // A context's unique id (CUDA 12.0+).
        ctx_get_id = "cuCtxGetId": fn(CUcontext, *mut u64);
        // The context a stream belongs to.
        stream_get_ctx = "cuStreamGetCtx": fn(CUstream, *mut CUcontext);
        // A stream's id, unique over the context's life (CUDA 12.0+): a handle may be reused.
        stream_get_id = "cuStreamGetId": fn(CUstream, *mut u64);
        // Memory pools of fastlaunch's own (CUDA 11.2+); without them, the device's current pool.
        mem_pool_create = "cuMemPoolCreate": fn(*mut CUmemoryPool, *const CUmemPoolProps);
        mem_pool_destroy = "cuMemPoolDestroy": fn(CUmemoryPool);
        mem_alloc_from_pool_async = "cuMemAllocFromPoolAsync":
            fn(*mut CUdeviceptr, usize, CUmemoryPool, CUstream);
        // The node a capture just added: _v3 (CUDA 12.3+) adds edge data; _v2 for older drivers.
        stream_get_capture_info_v3 = "cuStreamGetCaptureInfo_v3": fn(
            CUstream, *mut c_int, *mut u64, *mut CUgraph,
            *mut *const CUgraphNode, *mut *const c_void, *mut usize);
        stream_get_capture_info_v2 = "cuStreamGetCaptureInfo_v2": fn(
            CUstream, *mut c_int, *mut u64, *mut CUgraph, *mut *const CUgraphNode, *mut usize);
        // The calling thread's stream-capture interaction mode (CUDA 10.1+).
        thread_exchange_stream_capture_mode = "cuThreadExchangeStreamCaptureMode": fn(*mut c_int);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_structs_match_cuda_h() {
        assert_eq!(std::mem::size_of::<CUlaunchAttribute>(), 72);
        assert_eq!(std::mem::size_of::<CUlaunchConfig>(), 56);
        assert_eq!(std::mem::size_of::<CudaKernelNodeParams>(), 72);
        assert_eq!(std::mem::size_of::<CUmemPoolProps>(), 88);
    }
}
