//! Compiled kernel images: loaded once with the library API, their functions cached per
//! thread and context, and the submission of one launch to the driver.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use fastlaunch_driver::{
    self as driver, Function, KernelAttribute, LaunchContext, LaunchDims, LaunchOptions, Library,
    ParamBuffer,
};
use pyo3::prelude::*;

use crate::devices::driver;
use crate::errors::{Error, Result};
use crate::launch::limits::{self, ClusterOptIn, SharedMemoryOptIn, DEFAULT_DYNAMIC_SHARED_BYTES};

/// A compiled kernel image, loaded once with the library API (context-independent).
pub(crate) struct CompiledCode {
    _library: Library,
    pub(crate) kernel: driver::Kernel,
    /// Unique in the process (never reused): keys this image's functions per context.
    id: u64,
    cooperative: bool,
    entry: String,
    shared_memory: SharedMemoryOptIn,
    clusters: ClusterOptIn,
}

/// Python's handle to a loaded kernel image, shared by every overload it serves.
#[pyclass(frozen, module = "fastlaunch._core")]
pub struct CompiledKernel {
    pub(crate) code: Arc<CompiledCode>,
}

#[pymethods]
impl CompiledKernel {
    /// Loads `image` (a linked cubin) and finds `entry` in it.
    #[new]
    #[pyo3(signature = (image, entry, cooperative = false))]
    fn new(py: Python<'_>, image: &[u8], entry: &str, cooperative: bool) -> Result<CompiledKernel> {
        let driver = driver()?;
        let library = py.detach(|| Library::load(driver, image))?;
        let kernel = library.kernel(entry)?;
        Ok(CompiledKernel {
            code: Arc::new(CompiledCode {
                _library: library,
                kernel,
                id: NEXT_CODE_ID.fetch_add(1, Ordering::Relaxed),
                cooperative,
                entry: entry.to_owned(),
                shared_memory: SharedMemoryOptIn::default(),
                clusters: ClusterOptIn::default(),
            }),
        })
    }

    #[getter]
    fn entry(&self) -> &str {
        &self.code.entry
    }

    #[getter]
    fn cooperative(&self) -> bool {
        self.code.cooperative
    }

    /// A `CUfunction_attribute` by name for device `device`: `max_threads_per_block`,
    /// `shared_size_bytes`, `const_size_bytes`, `local_size_bytes`, `num_regs`,
    /// `ptx_version`, `binary_version`, `max_dynamic_shared_size_bytes`,
    /// `preferred_shared_memory_carveout`.
    #[pyo3(signature = (name, device = 0))]
    fn attribute(&self, name: &str, device: usize) -> Result<i32> {
        let driver = driver()?;
        Ok(self
            .code
            .kernel
            .attribute(driver, kernel_attribute(name)?, device)?)
    }

    /// Sets a `CUfunction_attribute` (named as for `attribute`) for device `device`.
    #[pyo3(signature = (name, value, device = 0))]
    fn set_attribute(&self, name: &str, value: i32, device: usize) -> Result<()> {
        let driver = driver()?;
        Ok(self
            .code
            .kernel
            .set_attribute(driver, kernel_attribute(name)?, value, device)?)
    }

    /// Blocks per multiprocessor that can be co-resident (in the current context).
    fn max_active_blocks_per_multiprocessor(
        &self,
        block_size: u32,
        dynamic_shared_bytes: usize,
    ) -> Result<i32> {
        let driver = driver()?;
        driver.launch_context()?;
        Ok(self.code.kernel.max_active_blocks_per_multiprocessor(
            driver,
            block_size,
            dynamic_shared_bytes,
        )?)
    }
}

fn kernel_attribute(name: &str) -> Result<KernelAttribute> {
    Ok(match name {
        "max_threads_per_block" => KernelAttribute::MaxThreadsPerBlock,
        "shared_size_bytes" => KernelAttribute::SharedSizeBytes,
        "const_size_bytes" => KernelAttribute::ConstSizeBytes,
        "local_size_bytes" => KernelAttribute::LocalSizeBytes,
        "num_regs" => KernelAttribute::NumRegs,
        "ptx_version" => KernelAttribute::PtxVersion,
        "binary_version" => KernelAttribute::BinaryVersion,
        "max_dynamic_shared_size_bytes" => KernelAttribute::MaxDynamicSharedSizeBytes,
        "preferred_shared_memory_carveout" => KernelAttribute::PreferredSharedMemoryCarveout,
        _ => return Err(Error::Value(format!("unknown kernel attribute {name:?}"))),
    })
}

/// The next [`CompiledCode::id`]; 0 is never an id (it marks empty [`FUNCTIONS`] slots).
static NEXT_CODE_ID: AtomicU64 = AtomicU64::new(1);

/// Slots in each thread's cache of kernel functions (a power of two).
const FUNCTION_SLOTS: usize = 64;

thread_local! {
    /// The functions this thread launched, as (image id, context id, `CUfunction`), direct
    /// mapped by the two ids: a hit costs two compares, a miss one `cuKernelGetFunction`.
    static FUNCTIONS: [Cell<(u64, u64, Option<Function>)>; FUNCTION_SLOTS] =
        const { [const { Cell::new((0, 0, None)) }; FUNCTION_SLOTS] };
}

impl CompiledCode {
    /// Checks that device `ordinal` runs clusters of shape `cluster` (if any), opting this
    /// kernel in to non-portable sizes once per device (`limits::prepare_cluster`).
    pub(crate) fn prepare_cluster(
        &self,
        driver: &driver::Driver,
        ordinal: usize,
        compute_capability: u32,
        cluster: Option<[u32; 3]>,
    ) -> Result<()> {
        limits::prepare_cluster(
            driver,
            &self.kernel,
            &self.clusters,
            ordinal,
            compute_capability,
            cluster,
        )
    }

    /// What to launch in `launch.context` (current on this thread): the kernel's own function in
    /// that context. Launching the library's `CUkernel` handle instead makes the driver
    /// spend more per launch on numba's images: on an H200, 26 arrays cost 5.7 µs against
    /// 4.1 through the function (`benchmarks/environment_probe.py`). The cache is keyed by
    /// the context's unique id, so a context re-created by a reset misses; drivers without
    /// `cuCtxGetId` get the `CUkernel` handle.
    #[inline]
    fn function_in(&self, driver: &driver::Driver, launch: &LaunchContext) -> Result<Function> {
        let Some(context_id) = launch.id else {
            return Ok(self.kernel.function());
        };
        let mixed = (self.id ^ context_id.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let slot = (mixed >> 58) as usize % FUNCTION_SLOTS;
        FUNCTIONS.with(|slots| {
            if let (code_id, known_context, Some(function)) = slots[slot].get() {
                if code_id == self.id && known_context == context_id {
                    return Ok(function);
                }
            }
            let function = self.kernel.function_here(driver)?;
            slots[slot].set((self.id, context_id, Some(function)));
            Ok(function)
        })
    }

    /// Submits a launch on device `launch.ordinal` in `launch.context` (current on this
    /// thread), opting in to dynamic shared memory above 48 KiB, and explains a refused
    /// launch by the limit it broke. `params` must have been prepared.
    ///
    /// # Safety
    /// `params` must hold one value per flattened kernel parameter (see [`crate::launch::plan::Plan`]),
    /// packed for this kernel from arguments that stay alive until this returns.
    #[inline]
    pub(crate) unsafe fn submit(
        &self,
        py: Python<'_>,
        driver: &'static driver::Driver,
        launch: &LaunchContext,
        dims: &LaunchDims,
        cluster: Option<[u32; 3]>,
        params: &ParamBuffer,
    ) -> Result<()> {
        let ordinal = launch.ordinal;
        if dims.shared_mem_bytes > DEFAULT_DYNAMIC_SHARED_BYTES {
            self.shared_memory
                .allow(driver, &self.kernel, ordinal, dims.shared_mem_bytes)?;
        }
        let function = self.function_in(driver, launch)?;
        let followed = crate::memory::before_launch(driver, launch, dims.stream)?;
        crate::launch::submitted::note(params);
        let options = LaunchOptions {
            cooperative: self.cooperative,
            cluster,
        };
        // SAFETY: guaranteed by the caller.
        let submit = || unsafe { function.launch(driver, dims, params, options) };
        let submitted = if RELEASE_GIL.load(Ordering::Relaxed) {
            py.detach(submit)
        } else {
            submit()
        };
        if followed && submitted.is_ok() {
            crate::memory::after_launch(driver, launch, dims.stream)?;
        }
        submitted.map_err(|refused| {
            limits::explain_launch_failure(
                driver,
                &self.kernel,
                ordinal,
                dims,
                self.cooperative,
                refused,
            )
        })
    }
}

/// Whether launches release the GIL around the driver call (see `set_release_gil`).
static RELEASE_GIL: AtomicBool = AtomicBool::new(false);

/// Releases the GIL around each `cuLaunchKernel`, so that other Python threads run
/// meanwhile (costs a GIL hand-off per launch; see the thread-scaling benchmark).
#[pyfunction]
pub(crate) fn set_release_gil(release: bool) {
    RELEASE_GIL.store(release, Ordering::Relaxed);
}

#[pyfunction]
pub(crate) fn releases_gil() -> bool {
    RELEASE_GIL.load(Ordering::Relaxed)
}
