//! Page-locked host memory (`cuMemHostAlloc`, portable: usable from every context), which
//! the GPU reads and writes directly, so copies from and to it are asynchronous.

use std::ffi::c_void;
use std::ptr;

use crate::error::Result;
use crate::sys;
use crate::Driver;

/// A page-locked host allocation; freed on drop.
pub struct PinnedBuffer {
    driver: &'static Driver,
    pointer: *mut c_void,
    len: usize,
}

// SAFETY: the allocation is plain memory, owned by this value; access is by `&mut self` or
// through raw pointers whose use the caller orders.
unsafe impl Send for PinnedBuffer {}

impl PinnedBuffer {
    pub fn alloc(driver: &'static Driver, len: usize) -> Result<PinnedBuffer> {
        let mut pointer: *mut c_void = ptr::null_mut();
        driver.check(
            // SAFETY: valid out-pointer.
            unsafe {
                (driver.api.mem_host_alloc)(&mut pointer, len.max(1), sys::CU_MEMHOSTALLOC_PORTABLE)
            },
            "allocating pinned host memory (cuMemHostAlloc)",
        )?;
        Ok(PinnedBuffer {
            driver,
            pointer,
            len,
        })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.pointer.cast()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Gives up ownership: the caller frees it with [`Driver::free_pinned`].
    pub fn into_raw(self) -> *mut u8 {
        let pointer = self.pointer;
        std::mem::forget(self);
        pointer.cast()
    }
}

impl Driver {
    /// Frees pinned memory given up by [`PinnedBuffer::into_raw`].
    ///
    /// # Safety
    /// `pointer` came from `into_raw` and is freed once, with nothing using it any more.
    pub unsafe fn free_pinned(&self, pointer: *mut u8) -> Result<()> {
        self.check(
            // SAFETY: per the caller.
            unsafe { (self.api.mem_free_host)(pointer.cast()) },
            "freeing pinned host memory (cuMemFreeHost)",
        )
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if Driver::exiting() {
            return;
        }
        // SAFETY: allocated by cuMemHostAlloc and freed once.
        let _ = unsafe { (self.driver.api.mem_free_host)(self.pointer) };
    }
}
