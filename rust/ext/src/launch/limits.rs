//! What a launch may ask of the device, and why the driver refused one.
//!
//! Nothing here runs on the common path: dynamic shared memory is checked only above the
//! 48 KiB every kernel may use, clusters when configured, and a refused launch is explained
//! after the driver refused it, so that a correct launch pays for none of it.

use std::sync::atomic::{AtomicU32, Ordering};

use fastlaunch_driver::context::attribute;
use fastlaunch_driver::{self as driver, Driver, KernelAttribute, LaunchDims, PointerLocation};

use crate::classify::Position;
use crate::errors::{Error, Result};
use crate::scratch::{ArgValue, Scratch, ValueAt};

/// Dynamic shared memory any kernel may use without opting in.
pub(crate) const DEFAULT_DYNAMIC_SHARED_BYTES: u32 = 48 * 1024;

/// Devices whose opt-in state is remembered per kernel; others ask the driver every time.
const TRACKED_DEVICES: usize = 16;

/// The dynamic shared memory a kernel has been opted in to, per device.
pub(crate) struct SharedMemoryOptIn([AtomicU32; TRACKED_DEVICES]);

impl Default for SharedMemoryOptIn {
    fn default() -> SharedMemoryOptIn {
        SharedMemoryOptIn(std::array::from_fn(|_| {
            AtomicU32::new(DEFAULT_DYNAMIC_SHARED_BYTES)
        }))
    }
}

/// Whether a kernel has been opted in to non-portable cluster sizes, per device: set once,
/// then the launch only reads a flag.
#[derive(Default)]
pub(crate) struct ClusterOptIn([std::sync::atomic::AtomicBool; TRACKED_DEVICES]);

impl ClusterOptIn {
    fn allow_non_portable(
        &self,
        driver: &Driver,
        kernel: &driver::Kernel,
        ordinal: usize,
    ) -> Result<()> {
        let slot = self.0.get(ordinal);
        if slot.is_some_and(|done| done.load(Ordering::Relaxed)) {
            return Ok(());
        }
        kernel.set_attribute(
            driver,
            KernelAttribute::NonPortableClusterSizeAllowed,
            1,
            ordinal,
        )?;
        if let Some(done) = slot {
            done.store(true, Ordering::Relaxed);
        }
        Ok(())
    }
}

fn device_limit(driver: &Driver, ordinal: usize, name: &str) -> Result<i64> {
    let code = attribute::by_name(name).expect("a device attribute fastlaunch lists");
    Ok(i64::from(driver.device_attribute(ordinal, code)?))
}

fn kernel_limit(
    driver: &Driver,
    kernel: &driver::Kernel,
    ordinal: usize,
    attribute: KernelAttribute,
) -> Result<i64> {
    Ok(i64::from(kernel.attribute(driver, attribute, ordinal)?))
}

impl SharedMemoryOptIn {
    /// Lets `kernel` use `bytes` of dynamic shared memory on device `ordinal` (above 48 KiB
    /// a kernel must opt in, up to the device's per-block limit less its static shared memory).
    #[inline]
    pub(crate) fn allow(
        &self,
        driver: &Driver,
        kernel: &driver::Kernel,
        ordinal: usize,
        bytes: u32,
    ) -> Result<()> {
        match self.0.get(ordinal) {
            Some(allowed) if bytes <= allowed.load(Ordering::Relaxed) => Ok(()),
            slot => self.opt_in(driver, kernel, ordinal, bytes, slot),
        }
    }

    #[cold]
    fn opt_in(
        &self,
        driver: &Driver,
        kernel: &driver::Kernel,
        ordinal: usize,
        bytes: u32,
        slot: Option<&AtomicU32>,
    ) -> Result<()> {
        let device_max = device_limit(driver, ordinal, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")?;
        let static_bytes = kernel_limit(driver, kernel, ordinal, KernelAttribute::SharedSizeBytes)?;
        let available = device_max - static_bytes;
        if i64::from(bytes) > available {
            return Err(Error::LaunchConfiguration(format!(
                "sharedmem={bytes} bytes of dynamic shared memory is more than device \
                 {ordinal} allows this kernel: {available} bytes (the device's opt-in limit of \
                 {device_max} bytes per block, less the kernel's {static_bytes} bytes of static \
                 shared memory)"
            )));
        }
        kernel.set_attribute(
            driver,
            KernelAttribute::MaxDynamicSharedSizeBytes,
            bytes as i32,
            ordinal,
        )?;
        if let Some(slot) = slot {
            slot.fetch_max(bytes, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// `(x, y, z)`, as Python shows dimensions.
fn shown(dims: [u32; 3]) -> String {
    format!("({}, {}, {})", dims[0], dims[1], dims[2])
}

/// Checks a cluster shape against the grid (each grid dimension a multiple of the cluster's).
pub(crate) fn check_cluster(grid: [u32; 3], cluster: [u32; 3]) -> Result<()> {
    for (axis, (g, c)) in ["x", "y", "z"].iter().zip(grid.iter().zip(cluster)) {
        if g % c != 0 {
            return Err(Error::LaunchConfiguration(format!(
                "griddim {} is not a multiple of cluster {} in {axis}: a grid is made of whole \
                 clusters",
                shown(grid),
                shown(cluster)
            )));
        }
    }
    Ok(())
}

/// Portable cluster size limit; Hopper allows up to 16 blocks once a kernel opts in.
const PORTABLE_CLUSTER_BLOCKS: u64 = 8;
const MAX_CLUSTER_BLOCKS: u64 = 16;

/// Checks that device `ordinal` runs clusters of this shape (if any), opting `kernel` in to
/// non-portable sizes (9 to 16 blocks) once per device.
pub(crate) fn prepare_cluster(
    driver: &Driver,
    kernel: &driver::Kernel,
    opted_in: &ClusterOptIn,
    ordinal: usize,
    compute_capability: u32,
    cluster: Option<[u32; 3]>,
) -> Result<()> {
    let Some(cluster) = cluster else {
        return Ok(());
    };
    if compute_capability < 90 {
        return Err(Error::LaunchConfiguration(format!(
            "thread block clusters need compute capability 9.0 or newer; device {ordinal} has {}.{}",
            compute_capability / 10,
            compute_capability % 10
        )));
    }
    let blocks: u64 = cluster.iter().map(|&c| u64::from(c)).product();
    if blocks > MAX_CLUSTER_BLOCKS {
        return Err(Error::LaunchConfiguration(format!(
            "cluster {} has {blocks} blocks; at most {MAX_CLUSTER_BLOCKS} blocks make a \
             cluster ({PORTABLE_CLUSTER_BLOCKS} portably)",
            shown(cluster)
        )));
    }
    if blocks > PORTABLE_CLUSTER_BLOCKS {
        opted_in.allow_non_portable(driver, kernel, ordinal)?;
    }
    Ok(())
}

/// Turns a refused launch into an error naming the limit it broke, when one is found.
#[cold]
pub(crate) fn explain_launch_failure(
    driver: &Driver,
    kernel: &driver::Kernel,
    ordinal: usize,
    dims: &LaunchDims,
    cooperative: bool,
    refused: driver::Error,
) -> Error {
    let driver::Error::Driver {
        code,
        ref name,
        ref during,
        ..
    } = refused
    else {
        return refused.into();
    };
    match find_broken_limit(driver, kernel, ordinal, dims, cooperative) {
        Ok(Some(explanation)) => Error::LaunchRefused {
            explanation,
            code,
            name: name.clone(),
            during: during.clone(),
        },
        _ => refused.into(),
    }
}

fn find_broken_limit(
    driver: &Driver,
    kernel: &driver::Kernel,
    ordinal: usize,
    dims: &LaunchDims,
    cooperative: bool,
) -> Result<Option<String>> {
    let device = |name: &str| device_limit(driver, ordinal, name);
    let of_kernel = |attribute| kernel_limit(driver, kernel, ordinal, attribute);
    let threads: i64 = dims.block.iter().map(|&b| i64::from(b)).product();
    let device_threads = device("MAX_THREADS_PER_BLOCK")?;
    if threads > device_threads {
        return Ok(Some(format!(
            "blockdim {} is {threads} threads per block; device {ordinal} runs at most \
             {device_threads} (MAX_THREADS_PER_BLOCK)",
            shown(dims.block)
        )));
    }
    let axes = [
        ("blockdim", dims.block, "threads", "MAX_BLOCK_DIM_"),
        ("griddim", dims.grid, "blocks", "MAX_GRID_DIM_"),
    ];
    for (what, shape, unit, limit_prefix) in axes {
        for (axis, value) in ["X", "Y", "Z"].into_iter().zip(shape.map(i64::from)) {
            let limit_name = format!("{limit_prefix}{axis}");
            let limit = device(&limit_name)?;
            if value > limit {
                return Ok(Some(format!(
                    "{what} {} has {value} {unit} in {}; device {ordinal} allows at most \
                     {limit} ({limit_name})",
                    shown(shape),
                    axis.to_ascii_lowercase()
                )));
            }
        }
    }
    let [gx, gy, gz] = dims.grid.map(i64::from);
    let kernel_threads = of_kernel(KernelAttribute::MaxThreadsPerBlock)?;
    let registers = of_kernel(KernelAttribute::NumRegs)?;
    if threads > kernel_threads {
        return Ok(Some(format!(
            "blockdim {} is {threads} threads per block; this kernel runs at most \
             {kernel_threads} (its max_threads_per_block: {registers} registers per thread, \
             or its launch bounds)",
            shown(dims.block)
        )));
    }
    let register_file = device("MAX_REGISTERS_PER_BLOCK")?;
    if registers * threads > register_file {
        return Ok(Some(format!(
            "this kernel needs {registers} registers per thread x {threads} threads = {} \
             registers per block; device {ordinal} has {register_file} (lower max_registers \
             or the block size)",
            registers * threads
        )));
    }
    let static_bytes = of_kernel(KernelAttribute::SharedSizeBytes)?;
    let shared_limit = device("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")?;
    let shared = static_bytes + i64::from(dims.shared_mem_bytes);
    if shared > shared_limit {
        return Ok(Some(format!(
            "this launch needs {shared} bytes of shared memory per block ({static_bytes} static \
             + sharedmem={}); device {ordinal} allows at most {shared_limit} \
             (MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)",
            dims.shared_mem_bytes
        )));
    }
    if cooperative {
        let per_multiprocessor = kernel
            .max_active_blocks_per_multiprocessor(
                driver,
                dims.block.iter().product(),
                dims.shared_mem_bytes as usize,
            )
            .map(i64::from)?;
        let most = per_multiprocessor * device("MULTIPROCESSOR_COUNT")?;
        let blocks = gx * gy * gz;
        if blocks > most {
            return Ok(Some(format!(
                "a cooperative launch of griddim {} has {blocks} blocks, more than can be \
                 resident at once on device {ordinal}: max_cooperative_grid_blocks is {most} for \
                 blockdim {} and sharedmem={}",
                shown(dims.grid),
                shown(dims.block),
                dims.shared_mem_bytes
            )));
        }
    }
    Ok(None)
}

/// Checks that every array argument can be reached from device `ordinal`. Arrays whose
/// source names their device (DLPack, cuda.core) are checked always, and so are the pointers
/// of generic CUDA Array Interface objects (which may be anything); with several devices,
/// every other array's pointer is asked of the driver. Peers the driver allows are enabled.
pub(crate) fn check_devices(
    driver: &Driver,
    ordinal: usize,
    scratch: &Scratch,
    names: &[String],
) -> Result<()> {
    let at = |found: ValueAt| Position {
        index: found.argument,
        name: names.get(found.argument).map_or("", String::as_str),
    };
    for &(found, device) in &scratch.devices.claimed {
        if device != ordinal && !reachable_anywhere(driver, scratch, found) {
            reach_peer(
                driver,
                ordinal,
                device,
                at(found),
                "the device its source names",
            )?;
        }
    }
    for &found in &scratch.devices.unverified_pointers {
        let Some(ArgValue::Array(array)) = scratch.values.get(found.value) else {
            continue;
        };
        match driver.pointer_location(array.data) {
            PointerLocation::Device(device) if device != ordinal => {
                reach_peer(
                    driver,
                    ordinal,
                    device,
                    at(found),
                    "cuPointerGetAttribute says so",
                )?;
            }
            PointerLocation::Unknown if !pageable_memory_reachable(driver, ordinal)? => {
                return Err(at(found).error(format!(
                    "__cuda_array_interface__ data pointer {:#x} is not CUDA memory (the driver \
                     does not know it: host memory, or a freed or foreign pointer)",
                    array.data
                )));
            }
            _ => {}
        }
    }
    if driver.device_count() < 2 {
        return Ok(());
    }
    let checked = |value: usize| {
        scratch
            .devices
            .claimed
            .iter()
            .any(|(v, _)| v.value == value)
            || scratch
                .devices
                .unverified_pointers
                .iter()
                .any(|v| v.value == value)
    };
    // Every other array: numba and CuPy arrays (one argument each, in order).
    for (value, arg) in scratch.values.iter().enumerate() {
        let ArgValue::Array(array) = arg else {
            continue;
        };
        if array.nitems == 0 || checked(value) {
            continue;
        }
        if let PointerLocation::Device(device) = driver.pointer_location(array.data) {
            if device != ordinal {
                let found = ValueAt {
                    value,
                    argument: crate::classify::fingerprint::argument_of_value(
                        &scratch.fingerprint,
                        value,
                    ),
                };
                reach_peer(
                    driver,
                    ordinal,
                    device,
                    at(found),
                    "cuPointerGetAttribute says so",
                )?;
            }
        }
    }
    Ok(())
}

/// Whether the driver calls a claimed array's memory pinned or managed, which every device
/// reaches although its source names a device (a cuda.core managed buffer names its preferred
/// one). Asked only when the claim is of another device.
#[cold]
fn reachable_anywhere(driver: &Driver, scratch: &Scratch, found: ValueAt) -> bool {
    matches!(
        scratch.values.get(found.value),
        Some(ArgValue::Array(array))
            if driver.pointer_location(array.data) == PointerLocation::Anywhere
    )
}

/// Whether kernels on device `ordinal` may read pageable host memory (HMM, ATS).
fn pageable_memory_reachable(driver: &Driver, ordinal: usize) -> Result<bool> {
    Ok(device_limit(driver, ordinal, "PAGEABLE_MEMORY_ACCESS")? != 0)
}

#[cold]
fn reach_peer(
    driver: &Driver,
    ordinal: usize,
    device: usize,
    at: Position<'_>,
    source: &str,
) -> Result<()> {
    let peer = device < driver.device_count() && driver.can_access_peer(ordinal, device)?;
    if !peer {
        return Err(at.error(format!(
            "its memory is on device {device} ({source}) but the launch is on device \
             {ordinal}, which cannot access that device's memory; copy it to device {ordinal} \
             or launch inside `with fastlaunch.gpus[{device}]:`"
        )));
    }
    driver.enable_peer_access(device)?;
    Ok(())
}
