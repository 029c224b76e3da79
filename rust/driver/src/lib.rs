//! fastlaunch's CUDA driver layer: pure Rust, no Python.
//!
//! The driver library is opened at run time, so building and loading this crate
//! needs no GPU, driver or toolkit; every entry point returns [`Error`] instead
//! of panicking when CUDA is missing. [`Driver::get`] is the one process-wide
//! handle; everything else hangs off it:
//!
//! - [`context`]: devices, primary contexts and the per-thread current context;
//! - [`library`]: cubin images loaded with the library API, kernels and their attributes;
//! - [`stream`]: streams and events, owned or by raw handle;
//! - [`memory`]: device allocations and copies (tests, host-array transfers);
//! - [`launch`]: `cuLaunchKernel` / `cuLaunchKernelEx`;
//! - [`graph`]: CUDA graphs made by stream capture, replayed and updated.

pub mod context;
pub mod error;
pub mod graph;
pub mod launch;
pub mod library;
pub mod memory;
pub mod params;
pub mod stream;
pub mod sys;

use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

pub use context::{Context, DeviceSlot, LaunchContext};
pub use error::{Error, Result};
pub use graph::{CaptureMode, Graph, GraphNode, KernelNodeParams};
pub use launch::{Function, LaunchDims, LaunchOptions};
pub use library::{loaded_count, Kernel, KernelAttribute, Library};
pub use memory::{
    Claim, DeviceBuffer, MemoryPool, PinnedBuffer, PointerLocation, PoolUsage, Previous,
    StagingRing,
};
pub use params::ParamBuffer;
pub use stream::{
    is_default_stream, is_legacy_stream, Capture, Event, Stream, LEGACY_STREAM, PER_THREAD_STREAM,
    STREAM_NON_BLOCKING,
};
pub use sys::{CUresult, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT};

use sys::{Api, CUDA_ERROR_NO_DEVICE, CUDA_SUCCESS};

/// Library names tried in order, unless `FASTLAUNCH_CUDA_DRIVER` names one.
const DRIVER_LIBRARY_NAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];

/// The loaded driver and the device list, initialised once per process.
pub struct Driver {
    pub(crate) api: Api,
    pub(crate) devices: Vec<DeviceSlot>,
    version: i32,
}

static DRIVER: OnceLock<Result<Driver>> = OnceLock::new();

/// Set in a child forked after this process initialised CUDA: the driver's state does not
/// survive `fork`, and calls into it there fail or hang.
static FORKED_AFTER_INIT: AtomicBool = AtomicBool::new(false);
/// Set when the process exits ([`Driver::begin_exit`]): what is dropped from then on leaves
/// its driver object to the process's end (the driver may be shutting down, and contexts
/// may be gone with what they held).
static EXITING: AtomicBool = AtomicBool::new(false);

extern "C" fn mark_forked_child() {
    FORKED_AFTER_INIT.store(true, Ordering::Relaxed);
}

extern "C" {
    fn pthread_atfork(
        prepare: Option<extern "C" fn()>,
        parent: Option<extern "C" fn()>,
        child: Option<extern "C" fn()>,
    ) -> c_int;
}

impl Driver {
    /// The process is exiting: drops from now on give nothing back to the driver.
    pub fn begin_exit() {
        EXITING.store(true, Ordering::Relaxed);
    }

    /// Whether [`Driver::begin_exit`] was called.
    pub fn exiting() -> bool {
        EXITING.load(Ordering::Relaxed)
    }

    /// Marks this process as a child forked after its parent initialised CUDA through
    /// another library (numba-cuda's driver): [`Driver::get`] refuses from now on.
    pub fn mark_forked_child() {
        mark_forked_child();
    }

    /// The process-wide driver, loaded and initialised on first use.
    #[inline]
    pub fn get() -> Result<&'static Driver> {
        if FORKED_AFTER_INIT.load(Ordering::Relaxed) {
            return Err(Error::Forked);
        }
        DRIVER
            .get_or_init(|| {
                let configured = std::env::var("FASTLAUNCH_CUDA_DRIVER").ok();
                let driver = match configured.as_deref() {
                    Some(path) => Driver::load_from(&[path]),
                    None => Driver::load_from(DRIVER_LIBRARY_NAMES),
                };
                if driver.is_ok() {
                    // SAFETY: registers a handler that only stores to an atomic.
                    unsafe { pthread_atfork(None, None, Some(mark_forked_child)) };
                }
                driver
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Opens the first library of `candidates` that loads, resolves every entry
    /// point, calls `cuInit` and enumerates the devices.
    pub fn load_from(candidates: &[&str]) -> Result<Driver> {
        let mut failures = Vec::new();
        for &path in candidates {
            // SAFETY: loading the CUDA driver runs only its own initialisers.
            match unsafe { libloading::Library::new(path) } {
                Ok(library) => {
                    let api = Api::load(library).map_err(|missing| {
                        Error::Unavailable(format!(
                            "the CUDA driver {path} lacks {}: {} (fastlaunch needs a driver \
                             for CUDA 12.0 or newer: NVIDIA 525 or later)",
                            missing.symbol, missing.reason
                        ))
                    })?;
                    return Driver::initialise(api);
                }
                Err(e) => failures.push(format!(
                    "{path}: {}",
                    std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string())
                )),
            }
        }
        Err(Error::Unavailable(format!(
            "no CUDA driver library could be loaded ({})",
            failures.join("; ")
        )))
    }

    fn initialise(api: Api) -> Result<Driver> {
        // SAFETY: plain driver calls with valid out-pointers.
        let code = unsafe { (api.init)(0) };
        if code == CUDA_ERROR_NO_DEVICE {
            return Err(Error::Unavailable(
                "the CUDA driver reports no device".into(),
            ));
        }
        let mut driver = Driver {
            api,
            devices: Vec::new(),
            version: 0,
        };
        driver.check(code, "initialising the CUDA driver (cuInit)")?;
        let mut version = 0;
        driver.check(
            // SAFETY: valid out-pointer.
            unsafe { (driver.api.driver_get_version)(&mut version) },
            "reading the driver version",
        )?;
        driver.version = version;
        driver.devices = context::enumerate_devices(&driver)?;
        if driver.devices.is_empty() {
            return Err(Error::Unavailable(
                "the CUDA driver reports no device".into(),
            ));
        }
        Ok(driver)
    }

    /// The driver's CUDA version as `major * 1000 + minor * 10` (13000 for 13.0).
    pub fn version(&self) -> i32 {
        self.version
    }

    /// Turns a `CUresult` into `Ok(())` or an [`Error::Driver`] that names it.
    #[inline]
    pub fn check(&self, code: CUresult, during: &str) -> Result<()> {
        if code == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(self.error(code, during))
        }
    }

    #[cold]
    pub fn error(&self, code: CUresult, during: &str) -> Error {
        let mut error = self.describe_error(code, during);
        if let Error::Driver { message, .. } = &mut error {
            if error::is_sticky(code) {
                message.push_str(
                    "; the CUDA context is now unusable: every later CUDA call in this process \
                     fails, so restart the process",
                );
            }
        }
        error
    }

    fn describe_error(&self, code: CUresult, during: &str) -> Error {
        let lookup = |f: unsafe extern "C" fn(CUresult, *mut *const c_char) -> CUresult| {
            let mut text: *const c_char = std::ptr::null();
            // SAFETY: the driver writes a pointer to a static C string or leaves it null.
            let found = unsafe { f(code, &mut text) } == CUDA_SUCCESS && !text.is_null();
            found.then(|| {
                // SAFETY: non-null results point to NUL-terminated static strings.
                unsafe { CStr::from_ptr(text) }
                    .to_string_lossy()
                    .into_owned()
            })
        };
        Error::Driver {
            code,
            name: lookup(self.api.get_error_name)
                .unwrap_or_else(|| error::fallback_error_name(code).to_owned()),
            message: lookup(self.api.get_error_string)
                .unwrap_or_else(|| format!("CUDA error {code}")),
            during: during.to_owned(),
        }
    }

    /// Waits for all work in the thread's current context.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: no arguments.
        self.check(
            unsafe { (self.api.ctx_synchronize)() },
            "synchronizing the context",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_unavailable_not_a_panic() {
        let err = Driver::load_from(&["/nonexistent/libcuda.so.1"])
            .err()
            .expect("must fail");
        match err {
            Error::Unavailable(why) => assert!(why.contains("/nonexistent/libcuda.so.1"), "{why}"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_library_without_the_driver_symbols_is_unavailable() {
        let err = Driver::load_from(&["libc.so.6"]).err().expect("must fail");
        match err {
            Error::Unavailable(why) => assert!(why.contains("lacks cuInit"), "{why}"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn get_returns_a_usable_driver_or_says_why_not() {
        // Without a GPU this is an error naming the cause; with one, a driver with devices.
        match Driver::get() {
            Ok(driver) => {
                assert!(driver.device_count() > 0);
                assert!(driver.version() > 0);
            }
            Err(error @ (Error::Unavailable(_) | Error::Driver { .. })) => {
                assert!(!error.to_string().is_empty());
            }
            Err(other) => panic!("loading the driver failed oddly: {other:?}"),
        }
        // Asking again gives the same outcome (loaded once per process).
        assert_eq!(Driver::get().is_ok(), Driver::get().is_ok());
    }
}
