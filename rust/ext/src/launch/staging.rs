//! Host bytes around a launch (records and host NumPy arrays, see `HostCopy`): copied to the
//! device on the launch's stream before it (their device addresses are what the kernel
//! gets), and back after it, as numba-cuda's launch does (`InOut` by default; `cuda.In` is
//! not copied back, `cuda.Out` not copied in). The device copies come from the context's
//! stream-ordered pool and the bytes go through the context's pinned staging ring, as the
//! memory API's copies do (`crate::memory`): a launch on stream 0 returns with the bytes
//! copied back, as numba-cuda's does.

use fastlaunch_driver::{self as driver, Capture, LaunchContext};
use pyo3::prelude::*;

use crate::errors::{Error, Result};
use crate::launch::graph;
use crate::memory::{context_memory, fetch_to_host, stage_to_device};
use crate::scratch::{ArgValue, Scratch};

/// Copies the host bytes among the arguments to the device on the launch's stream and puts
/// their device addresses in the values to pack. Not while the stream is being captured into
/// a graph, by fastlaunch or any other library: copies from pageable host memory cannot be
/// captured, and a staging slot's event recorded in a capture would never be done.
#[cold]
pub(crate) fn stage(
    py: Python<'_>,
    driver: &'static driver::Driver,
    context: &LaunchContext,
    stream: usize,
    scratch: &mut Scratch,
) -> Result<()> {
    if graph::is_capturing(stream) || driver.capture_state(stream)? != Capture::None {
        return Err(Error::Type(
            "records and host arrays cannot be launched while capturing a graph (each launch \
             copies them from host memory, which a graph cannot capture); copy them to the \
             device first"
                .into(),
        ));
    }
    let memory = context_memory(driver, context)?;
    for index in 0..scratch.staging.copies.len() {
        let copy = scratch.staging.copies[index];
        let staged = driver
            .alloc_from_pool_async(memory.pool, copy.len, stream)
            .map_err(Error::from)
            .and_then(|device| {
                scratch.staging.staged.push(device);
                if copy.copy_in {
                    // SAFETY: the argument's buffer exported `len` readable bytes at `host`,
                    // which the argument object keeps in place for the launch (see
                    // `HostCopy`); `device` was just allocated with `len` bytes on this stream.
                    unsafe {
                        let host = std::slice::from_raw_parts(copy.host as *const u8, copy.len);
                        stage_to_device(py, driver, &memory, device, host, stream, false)?;
                    }
                }
                Ok(device)
            });
        match staged {
            Ok(device) => match &mut scratch.values[copy.value] {
                ArgValue::Record { device: value } => *value = device,
                ArgValue::Array(array) => array.data = device,
                ArgValue::Scalar(_) => {} // host copies are only made for the two above
            },
            Err(error) => {
                let _ = unstage(py, driver, context, stream, scratch, false);
                return Err(error);
            }
        }
    }
    Ok(())
}

/// After the launch: copies each staged argument back into its host bytes when the launch
/// was submitted and the argument is copied back (the launch then waits for the kernel,
/// without the GIL), and frees its device copy in stream order.
#[cold]
pub(crate) fn unstage(
    py: Python<'_>,
    driver: &'static driver::Driver,
    context: &LaunchContext,
    stream: usize,
    scratch: &mut Scratch,
    launched: bool,
) -> Result<()> {
    // `stage` staged the copies in order, stopping at the first failure.
    let copies = scratch.staging.staged.iter().zip(&scratch.staging.copies);
    let memory = context_memory(driver, context)?;
    let outcome = py.detach(|| {
        let mut outcome = Ok(());
        for (&device, copy) in copies {
            if launched && copy.copy_back && outcome.is_ok() {
                // SAFETY: the host bytes are the argument's own, alive, in place and writable
                // for the launch (see `HostCopy`).
                let host =
                    unsafe { std::slice::from_raw_parts_mut(copy.host as *mut u8, copy.len) };
                // SAFETY: `device` holds `len` bytes until it is freed below.
                outcome = unsafe { fetch_to_host(driver, &memory, host, device, stream) };
            }
            let freed = driver.free_async(device, stream);
            if outcome.is_ok() {
                outcome = freed;
            }
        }
        outcome
    });
    scratch.staging.staged.clear();
    Ok(outcome?)
}
