//! fastlaunch's CUDA driver layer: pure Rust, no Python.
//!
//! The driver library is opened at run time, so building and loading this crate
//! needs no GPU, driver or toolkit; every entry point returns [`Error`] instead
//! of panicking when CUDA is missing. [`Driver::get`] is the one process-wide
//! handle; everything else hangs off it:
//!
//! - [`context`]: devices, primary contexts and the per-thread current context;
//! - [`library`]: cubin images loaded with the library API, kernels and their attributes;
//! - [`stream`]: streams and events;
//! - [`memory`]: device allocations and copies (tests, host-array transfers);
//! - [`launch`]: `cuLaunchKernel` / `cuLaunchKernelEx`.

pub mod context;
pub mod error;
pub mod launch;
pub mod library;
pub mod memory;
pub mod params;
pub mod stream;
pub mod sys;

use std::ffi::{c_char, CStr};
use std::sync::OnceLock;

pub use context::{Context, DeviceSlot, LaunchContext};
pub use error::{Error, Result};
pub use launch::LaunchDims;
pub use library::{Kernel, KernelAttribute, Library};
pub use memory::DeviceBuffer;
pub use params::ParamBuffer;
pub use stream::{Event, Stream};

use sys::{Api, CUresult, CUDA_ERROR_NO_DEVICE, CUDA_SUCCESS};

/// Library names tried in order, unless `FASTLAUNCH_CUDA_DRIVER` names one.
const DRIVER_LIBRARY_NAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];

/// The loaded driver and the device list, initialised once per process.
pub struct Driver {
    pub(crate) api: Api,
    pub(crate) devices: Vec<DeviceSlot>,
    version: i32,
}

static DRIVER: OnceLock<Result<Driver>> = OnceLock::new();

impl Driver {
    /// The process-wide driver, loaded and initialised on first use.
    pub fn get() -> Result<&'static Driver> {
        DRIVER
            .get_or_init(|| {
                let configured = std::env::var("FASTLAUNCH_CUDA_DRIVER").ok();
                match configured.as_deref() {
                    Some(path) => Driver::load_from(&[path]),
                    None => Driver::load_from(DRIVER_LIBRARY_NAMES),
                }
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
                Ok(library) => return Driver::initialise(Api::load(library, path)?),
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
        // SAFETY: valid out-pointer.
        driver.check(
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
        let lookup = |f: unsafe extern "C" fn(CUresult, *mut *const c_char) -> CUresult| {
            let mut text: *const c_char = std::ptr::null();
            // SAFETY: the driver writes a pointer to a static C string or leaves it null.
            let found = unsafe { f(code, &mut text) } == CUDA_SUCCESS && !text.is_null();
            // SAFETY: non-null results point to NUL-terminated static strings.
            found.then(|| {
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
    fn get_never_panics() {
        // Without a GPU this is an error; with one it is the driver. Either is fine.
        let _ = Driver::get();
    }
}
