//! Device memory: the driver's stream-ordered pool (`pool`), pinned host memory (`pinned`),
//! staged copies between pageable host memory and the device (`staging`); plain allocations
//! for tests.

mod pinned;
mod pool;
mod staging;

pub use pinned::PinnedBuffer;
pub use pool::{MemoryPool, PoolUsage};
pub use staging::{Claim, Previous, StagingRing, SLOTS, SLOT_BYTES};

use std::ffi::c_int;

use crate::error::{Error, Result};
use crate::sys::{self, CUdeviceptr};
use crate::Driver;

/// A device allocation in the current context; freed on drop.
pub struct DeviceBuffer {
    driver: &'static Driver,
    ptr: CUdeviceptr,
    len: usize,
}

impl DeviceBuffer {
    pub fn alloc(driver: &'static Driver, len: usize) -> Result<DeviceBuffer> {
        let mut ptr: CUdeviceptr = 0;
        if len > 0 {
            driver.check(
                // SAFETY: valid out-pointer.
                unsafe { (driver.api.mem_alloc)(&mut ptr, len) },
                "allocating device memory",
            )?;
        }
        Ok(DeviceBuffer { driver, ptr, len })
    }

    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn copy_from_host(&self, host: &[u8]) -> Result<()> {
        self.check_len(host.len())?;
        // SAFETY: both ranges are `host.len()` bytes long and valid.
        self.driver.check(
            unsafe { (self.driver.api.memcpy_htod)(self.ptr, host.as_ptr().cast(), host.len()) },
            "copying host to device",
        )
    }

    pub fn copy_to_host(&self, host: &mut [u8]) -> Result<()> {
        self.check_len(host.len())?;
        // SAFETY: both ranges are `host.len()` bytes long and valid.
        self.driver.check(
            unsafe {
                (self.driver.api.memcpy_dtoh)(host.as_mut_ptr().cast(), self.ptr, host.len())
            },
            "copying device to host",
        )
    }

    pub fn fill(&self, byte: u8) -> Result<()> {
        // SAFETY: the whole allocation.
        self.driver.check(
            unsafe { (self.driver.api.memset_d8)(self.ptr, byte, self.len) },
            "filling device memory",
        )
    }

    fn check_len(&self, len: usize) -> Result<()> {
        if len > self.len {
            return Err(Error::Invalid(format!(
                "a copy of {len} bytes does not fit a device buffer of {} bytes",
                self.len
            )));
        }
        Ok(())
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ptr != 0 && !Driver::exiting() {
            // SAFETY: allocated by cuMemAlloc and freed once.
            let _ = unsafe { (self.driver.api.mem_free)(self.ptr) };
        }
    }
}

/// What the driver knows about a pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointerLocation {
    /// Device memory of this device ordinal.
    Device(usize),
    /// Pinned host or managed memory: usable from every device.
    Anywhere,
    /// Not memory the driver knows (pageable host memory, or a foreign pointer).
    Unknown,
}

impl Driver {
    /// The device ordinal that owns `ptr`, or `None` for memory the driver does
    /// not know (host memory, or a foreign pointer).
    pub fn pointer_device(&self, ptr: CUdeviceptr) -> Option<usize> {
        let mut ordinal: c_int = -1;
        // SAFETY: the attribute is an int written to a valid out-pointer; unknown
        // pointers return an error code.
        let code = unsafe {
            (self.api.pointer_get_attribute)(
                (&mut ordinal as *mut c_int).cast(),
                sys::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                ptr,
            )
        };
        (code == sys::CUDA_SUCCESS && ordinal >= 0).then_some(ordinal as usize)
    }

    /// Where `ptr` lives, for checking that a kernel argument is usable on a device.
    pub fn pointer_location(&self, ptr: CUdeviceptr) -> PointerLocation {
        let Some(ordinal) = self.pointer_device(ptr) else {
            return PointerLocation::Unknown;
        };
        let read = |attribute: c_int| {
            let mut value: u32 = 0;
            // SAFETY: both attributes are 32-bit values written to a valid out-pointer.
            let code = unsafe {
                (self.api.pointer_get_attribute)((&mut value as *mut u32).cast(), attribute, ptr)
            };
            (code == sys::CUDA_SUCCESS).then_some(value)
        };
        if read(sys::CU_POINTER_ATTRIBUTE_MEMORY_TYPE) == Some(sys::CU_MEMORYTYPE_HOST)
            || read(sys::CU_POINTER_ATTRIBUTE_IS_MANAGED).is_some_and(|managed| managed != 0)
        {
            return PointerLocation::Anywhere;
        }
        PointerLocation::Device(ordinal)
    }

    /// Copies `host` to `device` in `stream`'s order, straight from `host` (no staging: what a
    /// stream capture records, as numba-cuda's own copies do).
    ///
    /// # Safety
    /// `device` must be valid device memory of `host.len()` bytes until the copy has run.
    pub unsafe fn copy_host_to_device_async(
        &self,
        device: CUdeviceptr,
        host: &[u8],
        stream: usize,
    ) -> Result<()> {
        self.check(
            // SAFETY: per the caller for `device`; `host` is readable for its length.
            unsafe {
                (self.api.memcpy_htod_async)(
                    device,
                    host.as_ptr().cast(),
                    host.len(),
                    stream as sys::CUstream,
                )
            },
            "copying host memory to the device (cuMemcpyHtoDAsync)",
        )
    }

    /// Copies `device` into `host` in `stream`'s order, straight into `host` (no staging).
    ///
    /// # Safety
    /// `device` must be valid device memory of `host.len()` bytes.
    pub unsafe fn copy_device_to_host_async(
        &self,
        host: &mut [u8],
        device: CUdeviceptr,
        stream: usize,
    ) -> Result<()> {
        self.check(
            // SAFETY: per the caller for `device`; `host` is writable for its length.
            unsafe {
                (self.api.memcpy_dtoh_async)(
                    host.as_mut_ptr().cast(),
                    device,
                    host.len(),
                    stream as sys::CUstream,
                )
            },
            "copying device memory to the host (cuMemcpyDtoHAsync)",
        )
    }

    /// Copies `host` to `device` without staging, as numba-cuda copies: on stream 0 (no stream
    /// given) synchronously (`cuMemcpyHtoD`: from page-locked memory it returns once the copy
    /// ran, from pageable memory once the driver took the bytes), on any other stream in its
    /// order (`cuMemcpyHtoDAsync`: from page-locked memory it may return before the copy ran,
    /// as numba-cuda's own does; the caller keeps the bytes until the stream gets there). May
    /// wait for the GPU: call without the GIL.
    ///
    /// # Safety
    /// `device` must be valid device memory of `host.len()` bytes until the copy has run.
    pub unsafe fn copy_host_to_device_unstaged(
        &self,
        device: CUdeviceptr,
        host: &[u8],
        stream: usize,
    ) -> Result<()> {
        if stream != 0 {
            // SAFETY: per the caller.
            return unsafe { self.copy_host_to_device_async(device, host, stream) };
        }
        self.check(
            // SAFETY: per the caller for `device`; `host` is readable for its length.
            unsafe { (self.api.memcpy_htod)(device, host.as_ptr().cast(), host.len()) },
            "copying host memory to the device (cuMemcpyHtoD)",
        )
    }

    /// Copies `device` into `host` without staging, as numba-cuda copies: on stream 0
    /// synchronously (`cuMemcpyDtoH`), on any other stream in its order (into pageable memory
    /// it returns once the bytes are there; into page-locked memory it may return before, as
    /// numba-cuda's does). May wait for the GPU: call without the GIL.
    ///
    /// # Safety
    /// `device` must be valid device memory of `host.len()` bytes.
    pub unsafe fn copy_device_to_host_unstaged(
        &self,
        host: &mut [u8],
        device: CUdeviceptr,
        stream: usize,
    ) -> Result<()> {
        if stream != 0 {
            // SAFETY: per the caller.
            return unsafe { self.copy_device_to_host_async(host, device, stream) };
        }
        self.check(
            // SAFETY: per the caller for `device`; `host` is writable for its length.
            unsafe { (self.api.memcpy_dtoh)(host.as_mut_ptr().cast(), device, host.len()) },
            "copying device memory to the host (cuMemcpyDtoH)",
        )
    }

    /// Copies `len` bytes between device allocations in `stream`'s order.
    ///
    /// # Safety
    /// Both ranges must be valid device memory of `len` bytes until the copy has run.
    pub unsafe fn copy_device_async(
        &self,
        dst: CUdeviceptr,
        src: CUdeviceptr,
        len: usize,
        stream: usize,
    ) -> Result<()> {
        self.check(
            // SAFETY: per the caller.
            unsafe { (self.api.memcpy_dtod_async)(dst, src, len, stream as sys::CUstream) },
            "copying device to device (cuMemcpyDtoDAsync)",
        )
    }

    /// Sets `len` bytes at `pointer` to `value` in `stream`'s order.
    ///
    /// # Safety
    /// The range must be valid device memory of `len` bytes until the copy has run.
    pub unsafe fn memset_async(
        &self,
        pointer: CUdeviceptr,
        value: u8,
        len: usize,
        stream: usize,
    ) -> Result<()> {
        self.check(
            // SAFETY: per the caller.
            unsafe { (self.api.memset_d8_async)(pointer, value, len, stream as sys::CUstream) },
            "setting device memory (cuMemsetD8Async)",
        )
    }

    /// Copies between device allocations (same or peer devices under UVA).
    pub fn copy_device_to_device(
        &self,
        dst: CUdeviceptr,
        src: CUdeviceptr,
        len: usize,
    ) -> Result<()> {
        // SAFETY: the caller owns both ranges of `len` bytes; the driver checks the handles.
        self.check(
            unsafe { (self.api.memcpy_dtod)(dst, src, len) },
            "copying device to device",
        )
    }
}
