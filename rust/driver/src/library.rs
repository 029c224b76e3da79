//! Code loaded with the library API (`cuLibraryLoadData`): one context-independent
//! library per image, whose kernels launch in whatever context is current.

use std::ffi::{c_int, CString};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, Result};
use crate::launch::Function;
use crate::sys::{CUfunction, CUkernel, CUlibrary};
use crate::Driver;

/// How many [`Library`] values are loaded in this process (tests check that images are
/// unloaded, whatever else uses the GPU).
static LOADED: AtomicUsize = AtomicUsize::new(0);

/// The number of code images this process has loaded and not yet unloaded.
pub fn loaded_count() -> usize {
    LOADED.load(Ordering::Relaxed)
}

/// A loaded cubin/fatbin/PTX image; unloaded on drop.
pub struct Library {
    driver: &'static Driver,
    handle: CUlibrary,
}

// SAFETY: a CUlibrary handle may be used from any thread (the driver locks internally).
unsafe impl Send for Library {}
// SAFETY: as above; `Library` exposes no interior mutability.
unsafe impl Sync for Library {}

/// A kernel of a loaded library. Valid while its [`Library`] lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel {
    handle: CUkernel,
}

// SAFETY: a CUkernel handle is context-independent and usable from any thread.
unsafe impl Send for Kernel {}
// SAFETY: as above.
unsafe impl Sync for Kernel {}

/// `CUfunction_attribute` values read or set per kernel and device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum KernelAttribute {
    MaxThreadsPerBlock = 0,
    SharedSizeBytes = 1,
    ConstSizeBytes = 2,
    LocalSizeBytes = 3,
    NumRegs = 4,
    PtxVersion = 5,
    BinaryVersion = 6,
    MaxDynamicSharedSizeBytes = 8,
    PreferredSharedMemoryCarveout = 9,
    NonPortableClusterSizeAllowed = 14,
}

impl Library {
    /// Loads an image (cubin, fatbin or NUL-terminated PTX) held in memory.
    pub fn load(driver: &'static Driver, image: &[u8]) -> Result<Library> {
        if image.is_empty() {
            return Err(Error::Invalid("cannot load an empty code image".into()));
        }
        let mut handle: CUlibrary = ptr::null_mut();
        // SAFETY: `image` is a readable buffer for the duration of the call (the driver
        // copies it); no JIT or library options are passed.
        let code = unsafe {
            (driver.api.library_load_data)(
                &mut handle,
                image.as_ptr().cast(),
                ptr::null_mut(),
                ptr::null_mut(),
                0,
                ptr::null_mut(),
                ptr::null_mut(),
                0,
            )
        };
        driver.check(code, "loading a code image (cuLibraryLoadData)")?;
        LOADED.fetch_add(1, Ordering::Relaxed);
        Ok(Library { driver, handle })
    }

    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        let symbol = CString::new(name)
            .map_err(|_| Error::Invalid(format!("kernel name {name:?} contains a NUL byte")))?;
        let mut handle: CUkernel = ptr::null_mut();
        // SAFETY: valid out-pointer, live library, NUL-terminated name.
        let code = unsafe {
            (self.driver.api.library_get_kernel)(&mut handle, self.handle, symbol.as_ptr())
        };
        self.driver
            .check(code, &format!("finding kernel {name} in its library"))?;
        Ok(Kernel { handle })
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: the handle came from cuLibraryLoadData and is unloaded once.
        // A failure (e.g. at process teardown) leaves nothing to clean up.
        let _ = unsafe { (self.driver.api.library_unload)(self.handle) };
        LOADED.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Kernel {
    /// The handle `cuLaunchKernel` takes: since CUDA 12 a `CUkernel` stands in
    /// for a `CUfunction` and resolves in the current context.
    #[inline]
    pub fn as_function(&self) -> CUfunction {
        self.handle
    }

    /// The kernel's function in the current context (loading it there if needed).
    pub fn function_in_current_context(&self, driver: &Driver) -> Result<CUfunction> {
        self.function_here(driver).map(|function| function.0)
    }

    /// The kernel as a [`Function`] that resolves in whatever context is current.
    #[inline]
    pub fn function(&self) -> Function {
        Function(self.handle)
    }

    /// The kernel's [`Function`] in the current context (loading it there if needed).
    pub fn function_here(&self, driver: &Driver) -> Result<Function> {
        let mut function: CUfunction = ptr::null_mut();
        driver.check(
            // SAFETY: valid out-pointer and kernel handle.
            unsafe { (driver.api.kernel_get_function)(&mut function, self.handle) },
            "getting a kernel's function in the current context",
        )?;
        Ok(Function(function))
    }

    pub fn attribute(
        &self,
        driver: &Driver,
        attribute: KernelAttribute,
        ordinal: usize,
    ) -> Result<i32> {
        let mut value: c_int = 0;
        driver.check(
            // SAFETY: valid out-pointer, kernel and device handles.
            unsafe {
                (driver.api.kernel_get_attribute)(
                    &mut value,
                    attribute as c_int,
                    self.handle,
                    driver.device_handle(ordinal)?,
                )
            },
            "reading a kernel attribute",
        )?;
        Ok(value)
    }

    pub fn set_attribute(
        &self,
        driver: &Driver,
        attribute: KernelAttribute,
        value: i32,
        ordinal: usize,
    ) -> Result<()> {
        // SAFETY: kernel and device handles from the driver.
        driver.check(
            unsafe {
                (driver.api.kernel_set_attribute)(
                    attribute as c_int,
                    value,
                    self.handle,
                    driver.device_handle(ordinal)?,
                )
            },
            "setting a kernel attribute",
        )
    }

    /// Blocks of `block_size` threads that fit on one multiprocessor at once.
    pub fn max_active_blocks_per_multiprocessor(
        &self,
        driver: &Driver,
        block_size: u32,
        dynamic_shared_bytes: usize,
    ) -> Result<i32> {
        let function = self.function_in_current_context(driver)?;
        let mut blocks: c_int = 0;
        driver.check(
            // SAFETY: valid out-pointer and function handle.
            unsafe {
                (driver.api.occupancy_max_active_blocks)(
                    &mut blocks,
                    function,
                    block_size as c_int,
                    dynamic_shared_bytes,
                )
            },
            "computing occupancy",
        )?;
        Ok(blocks)
    }
}
