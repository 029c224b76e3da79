//! Devices and contexts for Python: thin functions over the driver layer.

use std::sync::OnceLock;

use fastlaunch_driver::context::attribute;
use fastlaunch_driver::{Driver, Error as DriverError};
use pyo3::prelude::*;

use crate::errors::{Error, Result};

/// The driver, or the reason there is none.
#[inline]
pub(crate) fn driver() -> Result<&'static Driver> {
    Driver::get().map_err(Error::from)
}

/// Compute capability of each device as `major * 10 + minor`, read once.
pub(crate) fn compute_capability_code(driver: &'static Driver, ordinal: usize) -> Result<u32> {
    static CODES: OnceLock<std::result::Result<Vec<u32>, DriverError>> = OnceLock::new();
    let codes = CODES
        .get_or_init(|| {
            (0..driver.device_count())
                .map(|i| {
                    driver
                        .compute_capability(i)
                        .map(|(major, minor)| (major * 10 + minor) as u32)
                })
                .collect()
        })
        .as_ref()
        .map_err(|e| Error::Driver(e.clone()))?;
    codes
        .get(ordinal)
        .copied()
        .ok_or_else(|| Error::Index(format!("no device {ordinal}")))
}

fn checked_ordinal(driver: &Driver, ordinal: i64) -> Result<usize> {
    Ok(driver.checked_ordinal(ordinal)?)
}

/// The device index `ordinal` names (negative ordinals count from the end); `IndexError`
/// when there is no such device.
#[pyfunction]
pub(crate) fn device_index(ordinal: i64) -> Result<usize> {
    Ok(driver()?.device_index(ordinal)?)
}

/// Whether a CUDA driver and at least one device are usable.
#[pyfunction]
pub(crate) fn is_available() -> bool {
    Driver::get().is_ok()
}

/// Why CUDA is unusable, or `None` when it is usable.
#[pyfunction]
pub(crate) fn unavailable_reason() -> Option<String> {
    Driver::get().err().map(|e| e.to_string())
}

/// The driver's CUDA version as `(major, minor)`.
#[pyfunction]
pub(crate) fn driver_version() -> Result<(i32, i32)> {
    let version = driver()?.version();
    Ok((version / 1000, (version % 1000) / 10))
}

/// Marks this process as a child forked after numba-cuda's driver initialised CUDA in its
/// parent (`fastlaunch/_fork.py`): every call needing the driver raises from now on.
#[pyfunction]
pub(crate) fn _mark_forked_child() {
    fastlaunch_driver::Driver::mark_forked_child();
}

#[pyfunction]
pub(crate) fn device_count() -> Result<usize> {
    Ok(driver()?.device_count())
}

#[pyfunction]
pub(crate) fn device_name(ordinal: i64) -> Result<String> {
    let driver = driver()?;
    Ok(driver.device_name(checked_ordinal(driver, ordinal)?)?)
}

/// The device UUID in the `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` form nvidia-smi prints.
#[pyfunction]
pub(crate) fn device_uuid(ordinal: i64) -> Result<String> {
    let driver = driver()?;
    let bytes = driver.device_uuid(checked_ordinal(driver, ordinal)?)?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}

#[pyfunction]
pub(crate) fn device_pci_bus_id(ordinal: i64) -> Result<String> {
    let driver = driver()?;
    Ok(driver.device_pci_bus_id(checked_ordinal(driver, ordinal)?)?)
}

#[pyfunction]
pub(crate) fn device_total_memory(ordinal: i64) -> Result<usize> {
    let driver = driver()?;
    Ok(driver.device_total_memory(checked_ordinal(driver, ordinal)?)?)
}

/// A `CU_DEVICE_ATTRIBUTE_*` value by name (case-insensitive, prefix optional).
#[pyfunction]
pub(crate) fn device_attribute(ordinal: i64, name: &str) -> Result<i32> {
    let number = attribute::by_name(name).ok_or_else(|| {
        pyo3::exceptions::PyAttributeError::new_err(format!("unknown device attribute {name:?}"))
    })?;
    let driver = driver()?;
    Ok(driver.device_attribute(checked_ordinal(driver, ordinal)?, number)?)
}

/// The names `device_attribute` accepts.
#[pyfunction]
pub(crate) fn device_attribute_names() -> Vec<&'static str> {
    attribute::BY_NAME.iter().map(|(name, _)| *name).collect()
}

#[pyfunction]
pub(crate) fn compute_capability(ordinal: i64) -> Result<(i32, i32)> {
    let driver = driver()?;
    Ok(driver.compute_capability(checked_ordinal(driver, ordinal)?)?)
}

/// Makes device `ordinal`'s primary context current on this thread.
#[pyfunction]
pub(crate) fn select_device(ordinal: i64) -> Result<()> {
    let driver = driver()?;
    driver.select_device(checked_ordinal(driver, ordinal)?)?;
    Ok(())
}

/// The device of this thread's current context, or `None` when it has none.
#[pyfunction]
pub(crate) fn current_device() -> Result<Option<usize>> {
    Ok(driver()?.current_device()?)
}

/// The thread's current context handle as an int, or `None`.
#[pyfunction]
pub(crate) fn current_context() -> Result<Option<usize>> {
    Ok(driver()?.current_context()?.map(|c| c.address()))
}

/// The primary context handle of device `ordinal`, retained on first use.
#[pyfunction]
pub(crate) fn primary_context(ordinal: i64) -> Result<usize> {
    let driver = driver()?;
    Ok(driver
        .primary_context(checked_ordinal(driver, ordinal)?)?
        .address())
}

/// Pushes device `ordinal`'s primary context on this thread's stack.
#[pyfunction]
pub(crate) fn push_device(ordinal: i64) -> Result<()> {
    let driver = driver()?;
    let context = driver.primary_context(checked_ordinal(driver, ordinal)?)?;
    driver.push_context(context)?;
    Ok(())
}

/// Pops this thread's current context; returns its device, or `None` if the stack was empty.
#[pyfunction]
pub(crate) fn pop_device() -> Result<Option<usize>> {
    let driver = driver()?;
    let before = driver.current_device()?;
    driver.pop_context()?;
    Ok(before)
}

/// Waits for all work in the thread's current context (device 0's if none).
#[pyfunction]
pub(crate) fn synchronize(py: Python<'_>) -> Result<()> {
    let driver = driver()?;
    driver.launch_context()?;
    py.detach(|| driver.synchronize())?;
    Ok(())
}

/// `(free, total)` bytes of the current context's device.
#[pyfunction]
pub(crate) fn memory_info() -> Result<(usize, usize)> {
    let driver = driver()?;
    driver.launch_context()?;
    Ok(driver.memory_info()?)
}

/// Code images this process has loaded and not unloaded (each kernel overload loads one per
/// compute capability; it is unloaded when its last kernel object goes).
#[pyfunction]
pub(crate) fn loaded_image_count() -> usize {
    fastlaunch_driver::loaded_count()
}

/// The device that owns a device pointer, or `None` if the driver does not know it.
#[pyfunction]
pub(crate) fn pointer_device(pointer: u64) -> Result<Option<usize>> {
    Ok(driver()?.pointer_device(pointer))
}
