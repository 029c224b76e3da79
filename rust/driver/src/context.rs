//! Devices, primary contexts and the per-thread current context.
//!
//! The truth is the CUDA driver's own per-thread context stack, so torch, CuPy
//! and numba (which all use primary contexts) interoperate with us. Each device
//! slot retains its primary context once, behind that slot's own lock; after
//! that, reads are a single atomic load. Mapping the current context to its
//! device is cached per thread, so the launch path takes no lock at all.

use std::cell::Cell;
use std::ffi::{c_char, c_int, CStr};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::sys::{self, CUcontext, CUdevice};
use crate::Driver;

/// One device: its handle, and its primary context once retained.
pub struct DeviceSlot {
    pub ordinal: usize,
    handle: CUdevice,
    /// Null until the primary context is retained; then fixed for the process.
    primary: AtomicPtr<std::ffi::c_void>,
    retain_lock: Mutex<()>,
}

/// A CUDA context handle. Only the driver dereferences it, and it validates it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Context(CUcontext);

// SAFETY: a context handle is an opaque token the driver accepts from any thread.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    pub(crate) fn from_raw(context: CUcontext) -> Context {
        Context(context)
    }

    /// The handle as an integer, as torch and CuPy print it.
    pub fn address(&self) -> usize {
        self.0 as usize
    }
}

/// The context a launch runs in, the device it belongs to, and its unique id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchContext {
    pub context: Context,
    pub ordinal: usize,
    /// `cuCtxGetId` (see [`Driver::context_id`]): `None` where the driver has no ids.
    pub id: Option<u64>,
}

impl LaunchContext {
    /// What per-context state is keyed by: the unique id, or the handle where the driver
    /// has no ids. A primary context re-created by a reset (`cuda.close()`) may get its old
    /// handle back, never its old id.
    #[inline]
    pub fn key(&self) -> u64 {
        self.id.unwrap_or(self.context.address() as u64)
    }
}

thread_local! {
    /// The last (context, device ordinal) pair this thread resolved.
    static LAST_CONTEXT: Cell<(CUcontext, usize)> = const { Cell::new((ptr::null_mut(), 0)) };
}

pub(crate) fn enumerate_devices(driver: &Driver) -> Result<Vec<DeviceSlot>> {
    let mut count: c_int = 0;
    driver.check(
        // SAFETY: valid out-pointer.
        unsafe { (driver.api.device_get_count)(&mut count) },
        "counting devices",
    )?;
    (0..count)
        .map(|ordinal| {
            let mut handle: CUdevice = 0;
            driver.check(
                // SAFETY: valid out-pointer, ordinal below the count.
                unsafe { (driver.api.device_get)(&mut handle, ordinal) },
                "getting a device",
            )?;
            Ok(DeviceSlot {
                ordinal: ordinal as usize,
                handle,
                primary: AtomicPtr::new(ptr::null_mut()),
                retain_lock: Mutex::new(()),
            })
        })
        .collect()
}

impl Driver {
    pub fn device_count(&self) -> usize {
        self.devices.len()
    }

    pub fn device(&self, ordinal: usize) -> Result<&DeviceSlot> {
        self.devices
            .get(ordinal)
            .ok_or_else(|| self.no_such_device(i64::try_from(ordinal).unwrap_or(i64::MAX)))
    }

    /// `ordinal` as a device index, if such a device exists. Negative ordinals count from
    /// the end (`-1` is the last device), as Python sequences do.
    pub fn device_index(&self, ordinal: i64) -> Result<usize> {
        let count = self.devices.len();
        let index = if ordinal < 0 {
            i64::try_from(count).ok().map(|count| ordinal + count)
        } else {
            Some(ordinal)
        };
        index
            .and_then(|index| usize::try_from(index).ok())
            .filter(|&index| index < count)
            .ok_or_else(|| self.no_such_device(ordinal))
    }

    /// Device `ordinal` as an index, refusing negative ordinals.
    pub fn checked_ordinal(&self, ordinal: i64) -> Result<usize> {
        if ordinal < 0 {
            return Err(self.no_such_device(ordinal));
        }
        self.device_index(ordinal)
    }

    fn no_such_device(&self, ordinal: i64) -> Error {
        Error::NoSuchDevice {
            ordinal,
            count: self.devices.len(),
        }
    }

    pub(crate) fn device_handle(&self, ordinal: usize) -> Result<CUdevice> {
        Ok(self.device(ordinal)?.handle)
    }

    pub fn device_name(&self, ordinal: usize) -> Result<String> {
        let mut buf = [0 as c_char; 256];
        self.check(
            // SAFETY: the buffer length is passed; the driver NUL-terminates.
            unsafe {
                (self.api.device_get_name)(
                    buf.as_mut_ptr(),
                    buf.len() as c_int,
                    self.device_handle(ordinal)?,
                )
            },
            "reading the device name",
        )?;
        // SAFETY: NUL-terminated by the driver within the buffer.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    pub fn device_uuid(&self, ordinal: usize) -> Result<[u8; 16]> {
        let mut uuid = [0u8; 16];
        self.check(
            // SAFETY: CUuuid is 16 bytes.
            unsafe { (self.api.device_get_uuid)(&mut uuid, self.device_handle(ordinal)?) },
            "reading the device UUID",
        )?;
        Ok(uuid)
    }

    pub fn device_pci_bus_id(&self, ordinal: usize) -> Result<String> {
        let mut buf = [0 as c_char; 64];
        self.check(
            // SAFETY: the buffer length is passed; the driver NUL-terminates.
            unsafe {
                (self.api.device_get_pci_bus_id)(
                    buf.as_mut_ptr(),
                    buf.len() as c_int,
                    self.device_handle(ordinal)?,
                )
            },
            "reading the PCI bus id",
        )?;
        // SAFETY: NUL-terminated by the driver within the buffer.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    pub fn device_total_memory(&self, ordinal: usize) -> Result<usize> {
        let mut bytes = 0usize;
        self.check(
            // SAFETY: valid out-pointer.
            unsafe { (self.api.device_total_mem)(&mut bytes, self.device_handle(ordinal)?) },
            "reading the device memory size",
        )?;
        Ok(bytes)
    }

    /// A `CU_DEVICE_ATTRIBUTE_*` value by its number.
    pub fn device_attribute(&self, ordinal: usize, attribute: i32) -> Result<i32> {
        let mut value: c_int = 0;
        self.check(
            // SAFETY: valid out-pointer; an unknown attribute is an error code, not UB.
            unsafe {
                (self.api.device_get_attribute)(&mut value, attribute, self.device_handle(ordinal)?)
            },
            "reading a device attribute",
        )?;
        Ok(value)
    }

    pub fn compute_capability(&self, ordinal: usize) -> Result<(i32, i32)> {
        Ok((
            self.device_attribute(ordinal, crate::context::attribute::COMPUTE_CAPABILITY_MAJOR)?,
            self.device_attribute(ordinal, crate::context::attribute::COMPUTE_CAPABILITY_MINOR)?,
        ))
    }

    /// Device `ordinal`'s primary context, retained on first use (once per process).
    pub fn primary_context(&self, ordinal: usize) -> Result<Context> {
        let slot = self.device(ordinal)?;
        let known = slot.primary.load(Ordering::Acquire);
        if !known.is_null() {
            return Ok(Context(known));
        }
        let _guard = slot.retain_lock.lock().unwrap_or_else(|p| p.into_inner());
        let known = slot.primary.load(Ordering::Acquire);
        if !known.is_null() {
            return Ok(Context(known));
        }
        let mut context: CUcontext = ptr::null_mut();
        self.check(
            // SAFETY: valid out-pointer and device handle.
            unsafe { (self.api.primary_ctx_retain)(&mut context, slot.handle) },
            "retaining the primary context",
        )?;
        slot.primary.store(context, Ordering::Release);
        Ok(Context(context))
    }

    /// The thread's current context, or `None` when the thread has none.
    pub fn current_context(&self) -> Result<Option<Context>> {
        let mut context: CUcontext = ptr::null_mut();
        self.check(
            // SAFETY: valid out-pointer.
            unsafe { (self.api.ctx_get_current)(&mut context) },
            "reading the current context",
        )?;
        Ok((!context.is_null()).then_some(Context(context)))
    }

    /// The device of the thread's current context, or `None` without one.
    pub fn current_device(&self) -> Result<Option<usize>> {
        match self.current_context()? {
            Some(context) => Ok(Some(self.device_of(context.0)?)),
            None => Ok(None),
        }
    }

    pub fn push_context(&self, context: Context) -> Result<()> {
        // SAFETY: the driver validates the handle.
        self.check(
            unsafe { (self.api.ctx_push_current)(context.0) },
            "pushing a context",
        )
    }

    /// Pops the thread's current context; `None` when the stack was empty.
    pub fn pop_context(&self) -> Result<Option<Context>> {
        let mut context: CUcontext = ptr::null_mut();
        self.check(
            // SAFETY: valid out-pointer.
            unsafe { (self.api.ctx_pop_current)(&mut context) },
            "popping the current context",
        )?;
        Ok((!context.is_null()).then_some(Context(context)))
    }

    pub fn set_current_context(&self, context: Context) -> Result<()> {
        // SAFETY: the driver validates the handle.
        self.check(
            unsafe { (self.api.ctx_set_current)(context.0) },
            "setting the current context",
        )
    }

    /// Makes device `ordinal`'s primary context current on this thread (replacing the top of
    /// the stack, so repeated calls do not grow it).
    pub fn select_device(&self, ordinal: usize) -> Result<Context> {
        let context = self.primary_context(ordinal)?;
        self.set_current_context(context)?;
        Ok(context)
    }

    /// The context a launch on this thread uses: the current one, or, when the
    /// thread has none, device 0's primary context made current (as numba does).
    #[inline]
    pub fn launch_context(&self) -> Result<LaunchContext> {
        if let Some(current) = self.current_launch_context()? {
            return Ok(current);
        }
        let context = self.select_device(0)?.0;
        self.launch_context_of(context)
    }

    /// The thread's current context as [`Driver::launch_context`] gives it; `None` when the
    /// thread has none (none is made current).
    #[inline]
    pub fn current_launch_context(&self) -> Result<Option<LaunchContext>> {
        let mut context: CUcontext = ptr::null_mut();
        // SAFETY: valid out-pointer.
        let code = unsafe { (self.api.ctx_get_current)(&mut context) };
        self.check(code, "reading the current context")?;
        if context.is_null() {
            return Ok(None);
        }
        self.launch_context_of(context).map(Some)
    }

    #[inline]
    fn launch_context_of(&self, context: CUcontext) -> Result<LaunchContext> {
        // The id is asked on every call: a reset may give a new context the old handle.
        let id = self.context_id(Context(context));
        let (last_context, last_ordinal) = LAST_CONTEXT.with(Cell::get);
        if context == last_context {
            return Ok(LaunchContext {
                context: Context(context),
                ordinal: last_ordinal,
                id,
            });
        }
        let ordinal = self.device_of(context)?;
        LAST_CONTEXT.with(|last| last.set((context, ordinal)));
        Ok(LaunchContext {
            context: Context(context),
            ordinal,
            id,
        })
    }

    /// The context's unique id (`cuCtxGetId`): never reused within a process, so unlike the
    /// handle it tells a primary context re-created after a reset from the one before.
    /// `None` when the driver lacks the call (before CUDA 12.0) or refuses it.
    #[inline]
    pub fn context_id(&self, context: Context) -> Option<u64> {
        let get_id = self.api.ctx_get_id?;
        let mut id = 0u64;
        // SAFETY: a valid out-pointer; the driver validates the handle.
        let code = unsafe { get_id(context.0, &mut id) };
        (code == sys::CUDA_SUCCESS).then_some(id)
    }

    /// The device a context belongs to: a primary context is recognised without
    /// a driver call; any other asks the driver (the context must be current).
    fn device_of(&self, context: CUcontext) -> Result<usize> {
        if let Some(slot) = self
            .devices
            .iter()
            .find(|slot| slot.primary.load(Ordering::Acquire) == context)
        {
            return Ok(slot.ordinal);
        }
        let mut device: CUdevice = 0;
        self.check(
            // SAFETY: valid out-pointer.
            unsafe { (self.api.ctx_get_device)(&mut device) },
            "reading the current context's device",
        )?;
        self.devices
            .iter()
            .find(|slot| slot.handle == device)
            .map(|slot| slot.ordinal)
            .ok_or_else(|| {
                Error::Invalid(format!("the current context's device {device} is unknown"))
            })
    }

    /// Whether kernels on device `from` can read and write device `to`'s memory.
    pub fn can_access_peer(&self, from: usize, to: usize) -> Result<bool> {
        let mut can: c_int = 0;
        self.check(
            // SAFETY: valid out-pointer and device handles.
            unsafe {
                (self.api.device_can_access_peer)(
                    &mut can,
                    self.device_handle(from)?,
                    self.device_handle(to)?,
                )
            },
            "asking whether a device can access a peer's memory",
        )?;
        Ok(can != 0)
    }

    /// Lets kernels in the current context access device `peer`'s memory (idempotent).
    pub fn enable_peer_access(&self, peer: usize) -> Result<()> {
        let peer_context = self.primary_context(peer)?;
        // SAFETY: a live primary context handle; flags must be 0.
        let code = unsafe { (self.api.ctx_enable_peer_access)(peer_context.0, 0) };
        if code == sys::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            return Ok(());
        }
        self.check(code, "enabling peer access between devices")
    }

    /// Free and total memory of the current context's device, in bytes.
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        let (mut free, mut total) = (0usize, 0usize);
        self.check(
            // SAFETY: valid out-pointers.
            unsafe { (self.api.mem_get_info)(&mut free, &mut total) },
            "reading memory information",
        )?;
        Ok((free, total))
    }
}

/// `CU_DEVICE_ATTRIBUTE_*` numbers, by the names numba and cuda.h use (without prefix).
pub mod attribute {
    pub const COMPUTE_CAPABILITY_MAJOR: i32 = 75;
    pub const COMPUTE_CAPABILITY_MINOR: i32 = 76;
    pub const MULTIPROCESSOR_COUNT: i32 = 16;

    /// Every attribute that can be read by name.
    pub const BY_NAME: &[(&str, i32)] = &[
        ("MAX_THREADS_PER_BLOCK", 1),
        ("MAX_BLOCK_DIM_X", 2),
        ("MAX_BLOCK_DIM_Y", 3),
        ("MAX_BLOCK_DIM_Z", 4),
        ("MAX_GRID_DIM_X", 5),
        ("MAX_GRID_DIM_Y", 6),
        ("MAX_GRID_DIM_Z", 7),
        ("MAX_SHARED_MEMORY_PER_BLOCK", 8),
        ("TOTAL_CONSTANT_MEMORY", 9),
        ("WARP_SIZE", 10),
        ("MAX_PITCH", 11),
        ("MAX_REGISTERS_PER_BLOCK", 12),
        ("CLOCK_RATE", 13),
        ("TEXTURE_ALIGNMENT", 14),
        ("GPU_OVERLAP", 15),
        ("MULTIPROCESSOR_COUNT", 16),
        ("KERNEL_EXEC_TIMEOUT", 17),
        ("INTEGRATED", 18),
        ("CAN_MAP_HOST_MEMORY", 19),
        ("COMPUTE_MODE", 20),
        ("SURFACE_ALIGNMENT", 30),
        ("CONCURRENT_KERNELS", 31),
        ("ECC_ENABLED", 32),
        ("PCI_BUS_ID", 33),
        ("PCI_DEVICE_ID", 34),
        ("TCC_DRIVER", 35),
        ("MEMORY_CLOCK_RATE", 36),
        ("GLOBAL_MEMORY_BUS_WIDTH", 37),
        ("L2_CACHE_SIZE", 38),
        ("MAX_THREADS_PER_MULTIPROCESSOR", 39),
        ("ASYNC_ENGINE_COUNT", 40),
        ("UNIFIED_ADDRESSING", 41),
        ("PCI_DOMAIN_ID", 50),
        ("COMPUTE_CAPABILITY_MAJOR", 75),
        ("COMPUTE_CAPABILITY_MINOR", 76),
        ("STREAM_PRIORITIES_SUPPORTED", 78),
        ("GLOBAL_L1_CACHE_SUPPORTED", 79),
        ("LOCAL_L1_CACHE_SUPPORTED", 80),
        ("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", 81),
        ("MAX_REGISTERS_PER_MULTIPROCESSOR", 82),
        ("MANAGED_MEMORY", 83),
        ("MULTI_GPU_BOARD", 84),
        ("MULTI_GPU_BOARD_GROUP_ID", 85),
        ("HOST_NATIVE_ATOMIC_SUPPORTED", 86),
        ("SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO", 87),
        ("PAGEABLE_MEMORY_ACCESS", 88),
        ("CONCURRENT_MANAGED_ACCESS", 89),
        ("COMPUTE_PREEMPTION_SUPPORTED", 90),
        ("CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM", 91),
        ("COOPERATIVE_LAUNCH", 95),
        ("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", 97),
        ("CAN_FLUSH_REMOTE_WRITES", 98),
        ("HOST_REGISTER_SUPPORTED", 99),
        ("PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES", 100),
        ("DIRECT_MANAGED_MEM_ACCESS_FROM_HOST", 101),
        ("VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED", 102),
        ("MAX_BLOCKS_PER_MULTIPROCESSOR", 106),
        ("RESERVED_SHARED_MEMORY_PER_BLOCK", 111),
        ("CLUSTER_LAUNCH", 120),
    ];

    /// The attribute number for `name` (case-insensitive, with or without the
    /// `CU_DEVICE_ATTRIBUTE_` prefix).
    pub fn by_name(name: &str) -> Option<i32> {
        let upper = name.to_ascii_uppercase();
        let bare = upper.strip_prefix("CU_DEVICE_ATTRIBUTE_").unwrap_or(&upper);
        BY_NAME.iter().find(|(n, _)| *n == bare).map(|&(_, v)| v)
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn names_resolve_with_or_without_prefix() {
            assert_eq!(super::by_name("multiprocessor_count"), Some(16));
            assert_eq!(super::by_name("CU_DEVICE_ATTRIBUTE_WARP_SIZE"), Some(10));
            assert_eq!(super::by_name("NOT_AN_ATTRIBUTE"), None);
        }

        #[test]
        fn names_and_numbers_are_unique() {
            let mut names: Vec<_> = super::BY_NAME.iter().map(|(n, _)| *n).collect();
            let mut numbers: Vec<_> = super::BY_NAME.iter().map(|(_, v)| *v).collect();
            names.sort_unstable();
            numbers.sort_unstable();
            names.dedup();
            numbers.dedup();
            assert_eq!(names.len(), super::BY_NAME.len());
            assert_eq!(numbers.len(), super::BY_NAME.len());
        }
    }
}
