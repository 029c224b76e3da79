//! The driver's stream-ordered memory pools: one of fastlaunch's own per context
//! (`cuMemPoolCreate`, [`MemoryPool::create`]), so that its settings leave the device's current
//! pool (which CuPy's and torch's stream-ordered allocators share) alone, or each device's
//! current pool (`cuDeviceGetMemPool`) where the driver cannot make one.
//! The pool caches freed memory and hands it out again only once the free's stream position
//! is reached (or is known to be ordered before the new allocation), so a free ordered after
//! every use of the memory (a wait on an event recorded after each use on another stream) is
//! what keeps it from being reused too early.
//! Memory goes back to the driver when the pool holds more than its release threshold at a
//! synchronization (`cuStreamSynchronize`, `cuCtxSynchronize`, `cuEventSynchronize`).

use std::ffi::c_void;
use std::ptr;

use crate::error::Result;
use crate::sys::{self, CUdeviceptr, CUmemoryPool};
use crate::Driver;

/// A device's current memory pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryPool {
    handle: CUmemoryPool,
}

// SAFETY: pool handles may be used from any thread.
unsafe impl Send for MemoryPool {}
// SAFETY: as above; no interior mutability.
unsafe impl Sync for MemoryPool {}

/// What a pool holds: bytes handed out, and bytes reserved from the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolUsage {
    pub used: u64,
    pub reserved: u64,
}

impl MemoryPool {
    /// A new pool of device memory on device `ordinal`; `None` where the driver lacks
    /// `cuMemPoolCreate`. Destroy it with [`MemoryPool::destroy`].
    pub fn create(driver: &Driver, ordinal: usize) -> Result<Option<MemoryPool>> {
        let Some(create) = driver.api.mem_pool_create else {
            return Ok(None);
        };
        let properties = sys::CUmemPoolProps {
            alloc_type: sys::CU_MEM_ALLOCATION_TYPE_PINNED,
            handle_types: 0,
            location_type: sys::CU_MEM_LOCATION_TYPE_DEVICE,
            location_id: ordinal as std::ffi::c_int,
            win32_security_attributes: ptr::null_mut(),
            reserved: [0; 64],
        };
        let mut handle: CUmemoryPool = ptr::null_mut();
        driver.check(
            // SAFETY: valid out-pointer and properties, zeroed where unset.
            unsafe { create(&mut handle, &properties) },
            "creating a memory pool (cuMemPoolCreate)",
        )?;
        Ok(Some(MemoryPool { handle }))
    }

    /// Destroys a pool from [`MemoryPool::create`]; memory still allocated from it is released
    /// once it is freed (the driver's rule).
    pub fn destroy(self, driver: &Driver) -> Result<()> {
        let Some(destroy) = driver.api.mem_pool_destroy else {
            return Ok(());
        };
        driver.check(
            // SAFETY: a pool made by `create`, destroyed once (this consumes it).
            unsafe { destroy(self.handle) },
            "destroying a memory pool (cuMemPoolDestroy)",
        )
    }
}

impl Driver {
    /// The current memory pool of device `ordinal`.
    pub fn memory_pool(&self, ordinal: usize) -> Result<MemoryPool> {
        let device = self.device_handle(ordinal)?;
        let mut handle: CUmemoryPool = ptr::null_mut();
        self.check(
            // SAFETY: valid out-pointer and device handle.
            unsafe { (self.api.device_get_mem_pool)(&mut handle, device) },
            "reading the device's memory pool (cuDeviceGetMemPool)",
        )?;
        Ok(MemoryPool { handle })
    }

    /// `len` bytes from the current device's pool, ordered on `stream` (a null pointer for
    /// 0 bytes, as numba-cuda's `memalloc(0)` gives).
    pub fn alloc_async(&self, len: usize, stream: usize) -> Result<CUdeviceptr> {
        if len == 0 {
            return Ok(0);
        }
        let mut pointer: CUdeviceptr = 0;
        self.check(
            // SAFETY: valid out-pointer; the stream handle is the caller's.
            unsafe { (self.api.mem_alloc_async)(&mut pointer, len, stream as sys::CUstream) },
            "allocating from the memory pool (cuMemAllocAsync)",
        )?;
        Ok(pointer)
    }

    /// `len` bytes from `pool` (the current device's pool when `None`), ordered on `stream`;
    /// a null pointer for 0 bytes.
    pub fn alloc_from_pool_async(
        &self,
        pool: Option<MemoryPool>,
        len: usize,
        stream: usize,
    ) -> Result<CUdeviceptr> {
        let (Some(pool), Some(alloc)) = (pool, self.api.mem_alloc_from_pool_async) else {
            return self.alloc_async(len, stream);
        };
        if len == 0 {
            return Ok(0);
        }
        let mut pointer: CUdeviceptr = 0;
        self.check(
            // SAFETY: valid out-pointer and pool; the stream handle is the caller's.
            unsafe { alloc(&mut pointer, len, pool.handle, stream as sys::CUstream) },
            "allocating from the memory pool (cuMemAllocFromPoolAsync)",
        )?;
        Ok(pointer)
    }

    /// `len` bytes of ordinary device memory (`cuMemAlloc`, numba-cuda's own allocation),
    /// freed with [`Driver::free_now`]; a null pointer for 0 bytes.
    pub fn alloc_now(&self, len: usize) -> Result<CUdeviceptr> {
        let mut pointer: CUdeviceptr = 0;
        if len > 0 {
            self.check(
                // SAFETY: valid out-pointer.
                unsafe { (self.api.mem_alloc)(&mut pointer, len) },
                "allocating device memory (cuMemAlloc)",
            )?;
        }
        Ok(pointer)
    }

    /// Frees memory from [`Driver::alloc_now`] (`cuMemFree`, which may wait for the GPU: call
    /// without the GIL).
    pub fn free_now(&self, pointer: CUdeviceptr) -> Result<()> {
        if pointer == 0 {
            return Ok(());
        }
        self.check(
            // SAFETY: an allocation of `alloc_now`, freed once.
            unsafe { (self.api.mem_free)(pointer) },
            "freeing device memory (cuMemFree)",
        )
    }

    /// Frees `pointer` (from [`Driver::alloc_async`]) in `stream`'s order: after the work
    /// enqueued there (and whatever that waits for), nothing else.
    pub fn free_async(&self, pointer: CUdeviceptr, stream: usize) -> Result<()> {
        if pointer == 0 {
            return Ok(());
        }
        self.check(
            // SAFETY: a pool allocation, freed once; the stream handle is the caller's.
            unsafe { (self.api.mem_free_async)(pointer, stream as sys::CUstream) },
            "freeing to the memory pool (cuMemFreeAsync)",
        )
    }
}

impl MemoryPool {
    /// Bytes the pool keeps reserved at a synchronization instead of releasing them.
    pub fn release_threshold(&self, driver: &Driver) -> Result<u64> {
        self.read(driver, sys::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
    }

    pub fn set_release_threshold(&self, driver: &Driver, bytes: u64) -> Result<()> {
        let mut value = bytes;
        driver.check(
            // SAFETY: the release threshold is a cuuint64_t read from a valid pointer.
            unsafe {
                (driver.api.mem_pool_set_attribute)(
                    self.handle,
                    sys::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                    (&mut value as *mut u64).cast::<c_void>(),
                )
            },
            "setting the memory pool's release threshold (cuMemPoolSetAttribute)",
        )
    }

    pub fn usage(&self, driver: &Driver) -> Result<PoolUsage> {
        Ok(PoolUsage {
            used: self.read(driver, sys::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
            reserved: self.read(driver, sys::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
        })
    }

    /// Releases reserved memory the pool does not use, down to `keep` bytes.
    pub fn trim_to(&self, driver: &Driver, keep: usize) -> Result<()> {
        driver.check(
            // SAFETY: a valid pool handle.
            unsafe { (driver.api.mem_pool_trim_to)(self.handle, keep) },
            "trimming the memory pool (cuMemPoolTrimTo)",
        )
    }

    fn read(&self, driver: &Driver, attribute: std::ffi::c_int) -> Result<u64> {
        let mut value = 0u64;
        driver.check(
            // SAFETY: these attributes are cuuint64_t values written to a valid pointer.
            unsafe {
                (driver.api.mem_pool_get_attribute)(
                    self.handle,
                    attribute,
                    (&mut value as *mut u64).cast::<c_void>(),
                )
            },
            "reading a memory pool attribute (cuMemPoolGetAttribute)",
        )?;
        Ok(value)
    }
}
