//! Host bytes around a launch (records and host NumPy arrays, see `HostCopy`): copied to the
//! device on the launch's stream before it (their device addresses are what the kernel
//! gets), and back after it, as numba-cuda's launch does (`InOut` by default; `cuda.In` is
//! not copied back, `cuda.Out` not copied in).

use fastlaunch_driver as driver;
use pyo3::prelude::*;

use crate::errors::{Error, Result};
use crate::graphs;
use crate::scratch::{ArgValue, Scratch};

/// Copies the host bytes among the arguments to the device on the launch's stream (from the
/// driver's stream-ordered pool) and puts their device addresses in the values to pack. Not
/// while capturing a graph: copies from pageable host memory cannot be captured.
#[cold]
pub(crate) fn stage(
    py: Python<'_>,
    driver: &'static driver::Driver,
    stream: usize,
    scratch: &mut Scratch,
) -> Result<()> {
    if graphs::is_capturing(stream) {
        return Err(Error::Type(
            "records and host arrays cannot be launched while capturing a graph (each launch \
             copies them from host memory, which a graph cannot capture); copy them to the \
             device first"
                .into(),
        ));
    }
    for index in 0..scratch.staging.copies.len() {
        let copy = scratch.staging.copies[index];
        // SAFETY: the argument's buffer exported `len` readable bytes at `host`, which the
        // argument object keeps in place for the launch (see `HostCopy`).
        let staged = unsafe {
            driver.stage_on_stream_as(copy.host as *const u8, copy.len, stream, copy.copy_in)
        };
        match staged {
            Ok(staged) => {
                scratch.staging.staged.push(staged);
                match &mut scratch.values[copy.value] {
                    ArgValue::Record { device } => *device = staged.device,
                    ArgValue::Array(array) => array.data = staged.device,
                    ArgValue::Scalar(_) => {} // host copies are only made for the two above
                }
            }
            Err(error) => {
                let _ = unstage(py, driver, stream, scratch, false);
                return Err(error.into());
            }
        }
    }
    Ok(())
}

/// After the launch: copies each staged argument back into its host bytes when the launch
/// was submitted and the argument is copied back (the launch then waits for the kernel,
/// without the GIL: a copy into pageable memory returns once it is done), and frees its
/// device copy in stream order.
#[cold]
pub(crate) fn unstage(
    py: Python<'_>,
    driver: &'static driver::Driver,
    stream: usize,
    scratch: &mut Scratch,
    launched: bool,
) -> Result<()> {
    // `stage` staged the copies in order, stopping at the first failure.
    let copies = scratch.staging.staged.iter().zip(&scratch.staging.copies);
    let outcome = py.detach(|| {
        let mut outcome = Ok(());
        for (&staged, copy) in copies {
            // SAFETY: the host bytes are the argument's own, alive and in place for the
            // launch (see `HostCopy`), and written only when they may be.
            let result =
                unsafe { driver.unstage_on_stream(staged, stream, launched && copy.copy_back) };
            if outcome.is_ok() {
                outcome = result;
            }
        }
        outcome
    });
    scratch.staging.staged.clear();
    Ok(outcome?)
}
