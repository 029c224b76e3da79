//! Kernel launches: `cuLaunchKernel`, and `cuLaunchKernelEx` when attributes
//! (cooperative, thread block clusters) are needed.

use std::ffi::c_void;
use std::ptr;

use crate::error::Result;
use crate::sys::{self, CUfunction, CUlaunchAttribute, CUlaunchConfig};
use crate::Driver;

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
