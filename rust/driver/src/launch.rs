//! Kernel launches: `cuLaunchKernel`, and `cuLaunchKernelEx` when attributes
//! (cooperative, thread block clusters) are needed.

use std::ffi::c_void;
use std::ptr;

use crate::error::{Error, Result};
use crate::params::ParamBuffer;
use crate::sys::{self, CUfunction, CUlaunchAttribute, CUlaunchConfig};
use crate::Driver;

/// A function to launch: a kernel's `CUfunction` in one context, or its `CUkernel`, which
/// stands for one in whatever context is current. Valid while its library is loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Function(pub(crate) CUfunction);

// SAFETY: function handles are opaque tokens the driver accepts from any thread.
unsafe impl Send for Function {}
// SAFETY: as above; the handle is never written.
unsafe impl Sync for Function {}

/// What a launch asks beyond its dimensions: `cuLaunchKernelEx` attributes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchOptions {
    /// A cooperative launch (grid-wide synchronisation).
    pub cooperative: bool,
    /// A thread block cluster shape (compute capability 9.0 and newer).
    pub cluster: Option<[u32; 3]>,
}

impl Function {
    /// Launches this function in the current context with the values in `params`, prepared
    /// ([`ParamBuffer::prepare`]) since they last changed: `cuLaunchKernel`, or
    /// `cuLaunchKernelEx` when `options` ask for attributes.
    ///
    /// # Safety
    /// `params` must hold one value per kernel parameter, each of that parameter's size
    /// (at most 8 bytes, at the start of its slot), and every device pointer among them must
    /// be valid for the kernel.
    #[inline]
    pub unsafe fn launch(
        &self,
        driver: &Driver,
        dims: &LaunchDims,
        params: &ParamBuffer,
        options: LaunchOptions,
    ) -> Result<()> {
        let Some(pointers) = params.prepared() else {
            return Err(unprepared());
        };
        // SAFETY: the pointers point at the buffer's slots, which `params` keeps alive and
        // unchanged (it is borrowed) until the driver has copied them; the rest is
        // guaranteed by the caller.
        unsafe {
            if options.cooperative || options.cluster.is_some() {
                driver.launch_ex(self.0, dims, pointers, options.cooperative, options.cluster)
            } else {
                driver.launch(self.0, dims, pointers)
            }
        }
    }
}

/// Grid and block dimensions, dynamic shared memory and stream of one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchDims {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    pub stream: usize,
}

impl Driver {
    /// Launches `function` in the current context.
    ///
    /// # Safety
    /// `params` must point to one pointer per kernel parameter, each to a value of that
    /// parameter's size, and every device pointer among them must be valid for the kernel.
    #[inline]
    pub unsafe fn launch(
        &self,
        function: CUfunction,
        dims: &LaunchDims,
        params: *mut *mut c_void,
    ) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let code = unsafe {
            (self.api.launch_kernel)(
                function,
                dims.grid[0],
                dims.grid[1],
                dims.grid[2],
                dims.block[0],
                dims.block[1],
                dims.block[2],
                dims.shared_mem_bytes,
                dims.stream as sys::CUstream,
                params,
                ptr::null_mut(),
            )
        };
        self.check(code, "launching a kernel")
    }

    /// Launches with attributes: cooperative, and/or a thread block cluster shape.
    ///
    /// # Safety
    /// As for [`Driver::launch`].
    pub unsafe fn launch_ex(
        &self,
        function: CUfunction,
        dims: &LaunchDims,
        params: *mut *mut c_void,
        cooperative: bool,
        cluster: Option<[u32; 3]>,
    ) -> Result<()> {
        let mut attrs: [CUlaunchAttribute; 2] = [CUlaunchAttribute::with_u32s(0, &[]); 2];
        let mut count = 0;
        if cooperative {
            attrs[count] = CUlaunchAttribute::with_u32s(sys::CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &[1]);
            count += 1;
        }
        if let Some(shape) = cluster {
            attrs[count] =
                CUlaunchAttribute::with_u32s(sys::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &shape);
            count += 1;
        }
        let config = CUlaunchConfig {
            grid_dim_x: dims.grid[0],
            grid_dim_y: dims.grid[1],
            grid_dim_z: dims.grid[2],
            block_dim_x: dims.block[0],
            block_dim_y: dims.block[1],
            block_dim_z: dims.block[2],
            shared_mem_bytes: dims.shared_mem_bytes,
            h_stream: dims.stream as sys::CUstream,
            attrs: attrs.as_mut_ptr(),
            num_attrs: count as u32,
        };
        // SAFETY: `config` and `attrs` outlive the call; the rest is guaranteed by the caller.
        let code =
            unsafe { (self.api.launch_kernel_ex)(&config, function, params, ptr::null_mut()) };
        self.check(code, "launching a kernel")
    }
}

/// The error for parameters changed since they were prepared (a caller's bug).
#[cold]
#[inline(never)]
pub(crate) fn unprepared() -> Error {
    Error::Invalid("kernel parameters changed since they were prepared".into())
}
