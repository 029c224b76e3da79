//! Records around a launch: copied to the device on the launch's stream before it (their
//! device addresses are what the kernel gets), and back after it, as numba-cuda's `InOut`
//! default for records does.

use fastlaunch_driver as driver;
use pyo3::prelude::*;

use crate::errors::{Error, Result};
use crate::graphs;
use crate::scratch::{ArgValue, Scratch};

/// Copies the records among the arguments to the device on the launch's stream and puts
/// their device addresses in the values to pack (numba-cuda passes a record as a pointer to
/// a device copy). Not while capturing a graph: copies from pageable host memory cannot be
/// captured.
#[cold]
pub(crate) fn stage(
    py: Python<'_>,
    driver: &'static driver::Driver,
    stream: usize,
    scratch: &mut Scratch,
) -> Result<()> {
    if graphs::is_capturing(stream) {
        return Err(Error::Type(
            "records cannot be launched while capturing a graph (each launch copies a record \
             from host memory, which a graph cannot capture)"
                .into(),
        ));
    }
    for index in 0..scratch.records.copies.len() {
        let record = scratch.records.copies[index];
        // SAFETY: the record's buffer exported `len` readable bytes at `host`, which the
        // argument object keeps in place for the launch (see `RecordCopy`).
        let staged =
            unsafe { driver.stage_on_stream(record.host as *const u8, record.len, stream) };
        match staged {
            Ok(staged) => {
                scratch.records.staged.push(staged);
                scratch.values[record.value] = ArgValue::Record {
                    device: staged.device,
                };
            }
            Err(error) => {
                let _ = unstage(py, driver, stream, scratch, false);
                return Err(error.into());
            }
        }
    }
    Ok(())
}

/// After the launch: copies each staged record back into its host bytes when the launch
/// was submitted and the record is writable (numba-cuda's `InOut` default for records: the
/// launch then waits for the kernel, without the GIL), and frees its device copy in stream
/// order.
#[cold]
pub(crate) fn unstage(
    py: Python<'_>,
    driver: &'static driver::Driver,
    stream: usize,
    scratch: &mut Scratch,
    copy_back: bool,
) -> Result<()> {
    // `stage` staged the records in order, stopping at the first failure.
    let copies = scratch.records.staged.iter().zip(&scratch.records.copies);
    let outcome = py.detach(|| {
        let mut outcome = Ok(());
        for (&copy, record) in copies {
            // SAFETY: the host bytes are the record argument's own, alive and in place for
            // the launch (see `RecordCopy`), and written only when its array is writable.
            let result =
                unsafe { driver.unstage_on_stream(copy, stream, copy_back && record.writable) };
            if outcome.is_ok() {
                outcome = result;
            }
        }
        outcome
    });
    scratch.records.staged.clear();
    Ok(outcome?)
}
