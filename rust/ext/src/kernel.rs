//! Kernels, their overload tables, launch configurations, and the launch hot path.
//!
//! `kernel[grid, block, stream, shmem]` builds a frozen [`Launcher`]; calling it
//! classifies the arguments, finds the overload by fingerprint (last hit first, in a
//! lock-free table), finds the thread's context, packs the parameters into a reused
//! per-thread buffer, and calls `cuLaunchKernel`. Python runs only on a miss: the
//! Python subclass's `_on_miss` types the arguments with numba, compiles, and calls
//! `_register`.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;
use fastlaunch_driver::sys::CUfunction;
use fastlaunch_driver::{self as driver, KernelAttribute, LaunchContext, LaunchDims, Library};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use pyo3::{ffi, intern};

use crate::classify::{describe as describe_fingerprint, read_arg, ArgValue, Position, Scratch};
use crate::devices::{compute_capability_code, driver};
use crate::errors::{Error, Result};
use crate::graphs;
use crate::limits::{self, ClusterOptIn, SharedMemoryOptIn, DEFAULT_DYNAMIC_SHARED_BYTES};
use crate::plan::Plan;
use crate::streams;

/// A compiled kernel image, loaded once with the library API (context-independent).
pub struct CompiledCode {
    _library: Library,
    kernel: driver::Kernel,
    /// Unique in the process (never reused): keys this image's functions per context.
    id: u64,
    cooperative: bool,
    entry: String,
    shared_memory: SharedMemoryOptIn,
    clusters: ClusterOptIn,
}

/// Python's handle to a loaded kernel image, shared by every overload it serves.
#[pyclass(frozen, module = "fastlaunch._core")]
pub struct CompiledKernel {
    code: Arc<CompiledCode>,
}

#[pymethods]
impl CompiledKernel {
    /// Loads `image` (a linked cubin) and finds `entry` in it.
    #[new]
    #[pyo3(signature = (image, entry, cooperative = false))]
    fn new(
        py: Python<'_>,
        image: &[u8],
        entry: &str,
        cooperative: bool,
    ) -> PyResult<CompiledKernel> {
        let driver = driver()?;
        let library = py
            .detach(|| Library::load(driver, image))
            .map_err(Error::from)?;
        let kernel = library.kernel(entry).map_err(Error::from)?;
        Ok(CompiledKernel {
            code: Arc::new(CompiledCode {
                _library: library,
                kernel,
                id: NEXT_CODE_ID.fetch_add(1, Ordering::Relaxed),
                cooperative,
                entry: entry.to_owned(),
                shared_memory: SharedMemoryOptIn::default(),
                clusters: ClusterOptIn::default(),
            }),
        })
    }

    #[getter]
    fn entry(&self) -> &str {
        &self.code.entry
    }

    #[getter]
    fn cooperative(&self) -> bool {
        self.code.cooperative
    }

    /// A `CUfunction_attribute` by name for device `device`: `max_threads_per_block`,
    /// `shared_size_bytes`, `const_size_bytes`, `local_size_bytes`, `num_regs`,
    /// `ptx_version`, `binary_version`, `max_dynamic_shared_size_bytes`,
    /// `preferred_shared_memory_carveout`.
    #[pyo3(signature = (name, device = 0))]
    fn attribute(&self, name: &str, device: usize) -> PyResult<i32> {
        let driver = driver()?;
        Ok(self
            .code
            .kernel
            .attribute(driver, kernel_attribute(name)?, device)
            .map_err(Error::from)?)
    }

    /// Sets a `CUfunction_attribute` (named as for `attribute`) for device `device`.
    #[pyo3(signature = (name, value, device = 0))]
    fn set_attribute(&self, name: &str, value: i32, device: usize) -> PyResult<()> {
        let driver = driver()?;
        Ok(self
            .code
            .kernel
            .set_attribute(driver, kernel_attribute(name)?, value, device)
            .map_err(Error::from)?)
    }

    /// Blocks per multiprocessor that can be co-resident (in the current context).
    fn max_active_blocks_per_multiprocessor(
        &self,
        block_size: u32,
        dynamic_shared_bytes: usize,
    ) -> PyResult<i32> {
        let driver = driver()?;
        driver.launch_context().map_err(Error::from)?;
        Ok(self
            .code
            .kernel
            .max_active_blocks_per_multiprocessor(driver, block_size, dynamic_shared_bytes)
            .map_err(Error::from)?)
    }
}

fn kernel_attribute(name: &str) -> PyResult<KernelAttribute> {
    Ok(match name {
        "max_threads_per_block" => KernelAttribute::MaxThreadsPerBlock,
        "shared_size_bytes" => KernelAttribute::SharedSizeBytes,
        "const_size_bytes" => KernelAttribute::ConstSizeBytes,
        "local_size_bytes" => KernelAttribute::LocalSizeBytes,
        "num_regs" => KernelAttribute::NumRegs,
        "ptx_version" => KernelAttribute::PtxVersion,
        "binary_version" => KernelAttribute::BinaryVersion,
        "max_dynamic_shared_size_bytes" => KernelAttribute::MaxDynamicSharedSizeBytes,
        "preferred_shared_memory_carveout" => KernelAttribute::PreferredSharedMemoryCarveout,
        _ => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "unknown kernel attribute {name:?}"
            )))
        }
    })
}

/// What an overload launches: a loaded image, or (for kernels needing numba's own
/// launch path, such as `debug=True`) a Python callable.
enum Target {
    Compiled(Arc<CompiledCode>),
    Python(Py<PyAny>),
}

struct Overload {
    fingerprint: Box<[u8]>,
    compute_capability: u32,
    /// How Rust packs the arguments; `None` for Python targets, which get the objects.
    plan: Option<Plan>,
    target: Target,
}

impl Overload {
    #[inline]
    fn matches(&self, fingerprint: &[u8], compute_capability: u32) -> bool {
        self.compute_capability == compute_capability && same_bytes(&self.fingerprint, fingerprint)
    }
}

/// Byte-slice equality without a call into libc's `memcmp`: fingerprints are a few bytes,
/// where the call costs more than the comparison (measured: 8% of an empty launch).
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |differ, (x, y)| differ | (x ^ y)) == 0
}

/// A kernel: its overload table and launch statistics. `fastlaunch.Kernel` subclasses it.
#[pyclass(subclass, frozen, module = "fastlaunch._core")]
pub struct Kernel {
    overloads: ArcSwap<Vec<Arc<Overload>>>,
    last_hit: AtomicUsize,
    misses: AtomicU64,
    /// Serialises registrations (misses only); launches never take it.
    register_lock: Mutex<()>,
    parameter_names: OnceLock<Box<[String]>>,
    /// Every launch goes through numba-cuda's own path (kernels with `extensions`).
    always_numba: AtomicBool,
    /// The low-occupancy warning was considered once (numba-cuda warns per launch; once
    /// per kernel keeps the warning without its cost on every launch).
    low_occupancy_settled: AtomicBool,
}

#[pymethods]
impl Kernel {
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, pyo3::types::PyDict>>) -> Kernel {
        Kernel {
            overloads: ArcSwap::from_pointee(Vec::new()),
            last_hit: AtomicUsize::new(0),
            misses: AtomicU64::new(0),
            register_lock: Mutex::new(()),
            parameter_names: OnceLock::new(),
            always_numba: AtomicBool::new(false),
            low_occupancy_settled: AtomicBool::new(false),
        }
    }

    /// Sets the parameter names (once), used to check argument counts and in errors.
    fn _set_parameter_names(&self, names: Vec<String>) -> PyResult<()> {
        self.parameter_names.set(names.into()).map_err(|_| {
            pyo3::exceptions::PyRuntimeError::new_err("parameter names are already set")
        })
    }

    /// Sends every launch through numba-cuda's own path (`_launch_with_numba`).
    fn _set_always_numba(&self, always: bool) {
        self.always_numba.store(always, Ordering::Relaxed);
    }

    /// Launches that did not find an overload in the Rust table (and entered Python).
    #[getter]
    fn miss_count(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    /// Overloads registered: one per argument-type fingerprint and compute capability.
    #[getter]
    fn overload_count(&self) -> usize {
        self.overloads.load().len()
    }

    /// Registers an overload: arguments with `fingerprint` on a device of compute
    /// capability `compute_capability` launch `target` (a `CompiledKernel`, or a Python
    /// callable `(args, griddim, blockdim, stream, sharedmem)`), packed by `plan`.
    fn _register(
        &self,
        fingerprint: &[u8],
        compute_capability: u32,
        plan: Option<Vec<String>>,
        target: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let plan = plan.map(|plan| Plan::parse(&plan)).transpose()?;
        if let Some(plan) = &plan {
            plan.check_fingerprint(fingerprint)?;
        }
        let target = match target.cast::<CompiledKernel>() {
            Ok(_) if plan.is_none() => {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "a CompiledKernel target needs a packing plan",
                ))
            }
            Ok(compiled) => Target::Compiled(compiled.get().code.clone()),
            Err(_) if target.is_callable() => Target::Python(target.clone().unbind()),
            Err(_) => {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "an overload's target must be a CompiledKernel or a callable",
                ))
            }
        };
        let _guard = self.register_lock.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.overloads.load();
        if current
            .iter()
            .any(|o| o.matches(fingerprint, compute_capability))
        {
            return Ok(()); // another thread registered it first
        }
        let mut next: Vec<Arc<Overload>> = current.iter().cloned().collect();
        next.push(Arc::new(Overload {
            fingerprint: fingerprint.into(),
            compute_capability,
            plan,
            target,
        }));
        self.overloads.store(Arc::new(next));
        Ok(())
    }

    /// Drops every overload (their images unload once no launch holds them).
    fn _clear_overloads(&self) {
        let _guard = self.register_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.overloads.store(Arc::new(Vec::new()));
        self.last_hit.store(0, Ordering::Relaxed);
    }

    /// `kernel[griddim, blockdim]`, `[..., stream]`, `[..., stream, sharedmem]`.
    fn __getitem__(slf: &Bound<'_, Self>, config: &Bound<'_, PyAny>) -> PyResult<Launcher> {
        let items = config
            .cast::<PyTuple>()
            .ok()
            .filter(|t| (2..=4).contains(&t.len()))
            .ok_or_else(|| {
                pyo3::exceptions::PyValueError::new_err(
                    "must specify at least the griddim and blockdim",
                )
            })?;
        let get = |i: usize| items.get_item(i).ok();
        Ok(Launcher::new(
            slf,
            &items.get_item(0)?,
            &items.get_item(1)?,
            get(2).as_ref(),
            get(3).as_ref(),
        )?)
    }

    /// The launch configuration object for `kernel[griddim, blockdim, stream, sharedmem]`;
    /// `cluster` (1 to 3 ints) launches thread block clusters of that shape (Hopper and newer).
    #[pyo3(signature = (griddim, blockdim, stream = None, sharedmem = None, *, cluster = None))]
    fn configure(
        slf: &Bound<'_, Self>,
        griddim: &Bound<'_, PyAny>,
        blockdim: &Bound<'_, PyAny>,
        stream: Option<&Bound<'_, PyAny>>,
        sharedmem: Option<&Bound<'_, PyAny>>,
        cluster: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Launcher> {
        let mut launcher = Launcher::new(slf, griddim, blockdim, stream, sharedmem)?;
        if let Some(cluster) = cluster.filter(|c| !c.is_none()) {
            let shape = parse_dims(cluster, "cluster")?;
            limits::check_cluster(launcher.dims.grid, shape)?;
            launcher.cluster = Some(shape);
        }
        Ok(launcher)
    }
}

impl Kernel {
    #[inline]
    fn find(&self, fingerprint: &[u8], compute_capability: u32) -> Option<Arc<Overload>> {
        let table = self.overloads.load();
        let last = self.last_hit.load(Ordering::Relaxed);
        if let Some(hit) = table.get(last) {
            if hit.matches(fingerprint, compute_capability) {
                return Some(hit.clone());
            }
        }
        let (index, hit) = table
            .iter()
            .enumerate()
            .find(|(_, o)| o.matches(fingerprint, compute_capability))?;
        self.last_hit.store(index, Ordering::Relaxed);
        Some(hit.clone())
    }

    pub(crate) fn names(&self) -> &[String] {
        self.parameter_names.get().map_or(&[], |names| names)
    }

    /// Asks the Python subclass's `_warn_low_occupancy` once per kernel (it follows numba's
    /// `CUDA_LOW_OCCUPANCY_WARNINGS`).
    #[cold]
    fn warn_low_occupancy(&self, kernel_object: &Bound<'_, Kernel>, grid: [u32; 3]) -> Result<()> {
        if self.low_occupancy_settled.swap(true, Ordering::Relaxed) {
            return Ok(());
        }
        let py = kernel_object.py();
        if let Ok(warn) = kernel_object.getattr(intern!(py, "_warn_low_occupancy")) {
            if let Err(raised) = warn.call1((grid.iter().product::<u32>(),)) {
                // Warnings turned into errors raise each time, as numba-cuda's do.
                self.low_occupancy_settled.store(false, Ordering::Relaxed);
                return Err(raised.into());
            }
        }
        Ok(())
    }
}

/// A configured launch: `kernel[grid, block, stream, shmem]`. Calling it launches.
#[pyclass(frozen, module = "fastlaunch._core")]
pub struct Launcher {
    kernel: Py<Kernel>,
    dims: LaunchDims,
    /// Thread block cluster shape (`configure(..., cluster=...)`).
    cluster: Option<[u32; 3]>,
    /// The stream object as given, kept alive while this configuration is.
    stream: Py<PyAny>,
}

const MISSING_CONFIG_HINT: &str =
    "kernel_function[blockspergrid, threadsperblock](arg0, arg1, ..., argn)";

fn parse_dims(value: &Bound<'_, PyAny>, name: &str) -> Result<[u32; 3]> {
    if value.is_none() {
        return Err(Error::Value(format!(
            "Kernel launch configuration was not specified. Use the syntax:\n\n{MISSING_CONFIG_HINT}"
        )));
    }
    let items: Vec<Bound<'_, PyAny>> =
        if value.is_instance_of::<PyTuple>() || value.is_instance_of::<PyList>() {
            value.try_iter()?.collect::<PyResult<_>>()?
        } else {
            vec![value.clone()]
        };
    let shown = || value.repr().map(|r| r.to_string()).unwrap_or_default();
    if items.is_empty() || items.len() > 3 {
        return Err(Error::Value(format!(
            "{name} must be a sequence of 1, 2 or 3 integers, got {}",
            shown()
        )));
    }
    let mut dims = [1u32; 3];
    for (slot, item) in dims.iter_mut().zip(&items) {
        // SAFETY: PyIndex_Check only inspects the type's slots.
        let is_index = unsafe { ffi::PyIndex_Check(item.as_ptr()) } != 0
            && !item.is_instance_of::<pyo3::types::PyFloat>();
        if !is_index {
            return Err(Error::Type(format!(
                "{name} must be a sequence of integers, got {}",
                shown()
            )));
        }
        let v: Option<i64> = item
            .call_method0(intern!(item.py(), "__index__"))?
            .extract()
            .ok();
        *slot = v
            .and_then(|v| u32::try_from(v).ok())
            .filter(|&v| v > 0)
            .ok_or_else(|| {
                Error::Value(format!(
                    "{name} values must be positive and below 2**32, got {}",
                    shown()
                ))
            })?;
    }
    Ok(dims)
}

/// A stream handle from 0/None, an int handle, or any object with `__cuda_stream__`
/// (numba, torch, CuPy and cuda.core streams).
pub(crate) fn parse_stream(stream: &Bound<'_, PyAny>) -> Result<usize> {
    if stream.is_none() {
        return Ok(0);
    }
    if stream.is_instance_of::<pyo3::types::PyInt>() {
        return stream.extract::<usize>().map_err(|_| {
            Error::Value(if stream.lt(0).unwrap_or(false) {
                format!("a stream handle cannot be negative, got {stream}")
            } else {
                format!("a stream handle must fit in 64 bits, got {stream}")
            })
        });
    }
    if let Ok(protocol) = stream.getattr(intern!(stream.py(), "__cuda_stream__")) {
        let (_version, handle): (i64, usize) = protocol.call0()?.extract().map_err(|_| {
            Error::Type("__cuda_stream__() must return (version, handle) ints".into())
        })?;
        return Ok(handle);
    }
    Err(Error::Type(format!(
        "stream must be 0 or None, an int handle, or an object with __cuda_stream__ \
         (numba, torch, CuPy, cuda.core streams); got {}",
        stream
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default()
    )))
}

impl Launcher {
    fn new(
        kernel: &Bound<'_, Kernel>,
        griddim: &Bound<'_, PyAny>,
        blockdim: &Bound<'_, PyAny>,
        stream: Option<&Bound<'_, PyAny>>,
        sharedmem: Option<&Bound<'_, PyAny>>,
    ) -> Result<Launcher> {
        let py = kernel.py();
        let grid = parse_dims(griddim, "griddim")?;
        let block = parse_dims(blockdim, "blockdim")?;
        let stream = stream.cloned().unwrap_or_else(|| py.None().into_bound(py));
        let handle = parse_stream(&stream)?;
        let shared_mem_bytes = match sharedmem {
            None => 0,
            Some(s) if s.is_none() => 0,
            Some(s) => {
                // SAFETY: PyNumber_Index returns a new reference, or null with an exception set.
                let index = unsafe {
                    Bound::from_owned_ptr_or_err(s.py(), ffi::PyNumber_Index(s.as_ptr()))
                }
                .map_err(|_| Error::Type(format!("sharedmem must be an int, got {s}")))?;
                index.extract::<u32>().map_err(|_| {
                    Error::Value(format!("sharedmem must be between 0 and 2**32, got {s}"))
                })?
            }
        };
        if grid.iter().product::<u32>() < LOW_OCCUPANCY_BLOCKS {
            kernel.get().warn_low_occupancy(kernel, grid)?;
        }
        Ok(Launcher {
            kernel: kernel.clone().unbind(),
            dims: LaunchDims {
                grid,
                block,
                shared_mem_bytes,
                stream: handle,
            },
            cluster: None,
            stream: stream.unbind(),
        })
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Runs `f` with this thread's scratch, or a fresh one if a launch re-entered
/// (from Python code run during classification or a miss).
#[inline]
fn with_scratch<T>(f: impl FnOnce(&mut Scratch) -> T) -> T {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => f(&mut scratch),
        Err(_) => f(&mut Scratch::default()),
    })
}

#[pymethods]
impl Launcher {
    #[pyo3(signature = (*args))]
    fn __call__(&self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyResult<()> {
        Ok(launch(
            py,
            self.kernel.bind(py),
            &self.dims,
            self.cluster,
            &self.stream,
            args,
        )?)
    }

    /// Classifies and packs `args` once: calling the result launches with no per-launch work.
    #[pyo3(signature = (*args))]
    fn bind(&self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyResult<BoundLaunch> {
        Ok(self.bind_args(py, args)?)
    }

    #[getter]
    fn griddim(&self) -> (u32, u32, u32) {
        let [x, y, z] = self.dims.grid;
        (x, y, z)
    }

    #[getter]
    fn blockdim(&self) -> (u32, u32, u32) {
        let [x, y, z] = self.dims.block;
        (x, y, z)
    }

    #[getter]
    fn stream(&self, py: Python<'_>) -> Py<PyAny> {
        self.stream.clone_ref(py)
    }

    #[getter]
    fn stream_handle(&self) -> usize {
        self.dims.stream
    }

    #[getter]
    fn sharedmem(&self) -> u32 {
        self.dims.shared_mem_bytes
    }

    #[getter]
    fn cluster(&self) -> Option<(u32, u32, u32)> {
        self.cluster.map(|[x, y, z]| (x, y, z))
    }

    /// The arguments of the launch compiling on this thread, as numba-cuda's
    /// `_LaunchConfiguration.args` (None outside a launch-triggered compile).
    #[getter]
    fn args(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self
            .kernel
            .bind(py)
            .call_method0(intern!(py, "_current_launch_args"))?
            .unbind())
    }
}

fn check_argument_count(names: &[String], given: usize) -> Result<()> {
    if !names.is_empty() && given != names.len() {
        return Err(Error::Type(format!(
            "kernel takes {} positional arguments ({}) but {} were given",
            names.len(),
            names.join(", "),
            given
        )));
    }
    Ok(())
}

/// Classifies `args` into `scratch` and finds their overload, entering Python (to type and
/// compile) only when the table has none. `None`: an argument only numba-cuda can pass.
/// A miss gets the launch configuration too: numba-cuda compiles with it current
/// (`numba.cuda.launchconfig`), and launch-config-sensitive kernels depend on it.
#[inline]
fn resolve(
    py: Python<'_>,
    kernel_object: &Bound<'_, Kernel>,
    args: &Bound<'_, PyTuple>,
    (dims, stream): (&LaunchDims, &Py<PyAny>),
    compute_capability: u32,
    scratch: &mut Scratch,
) -> Result<Option<Arc<Overload>>> {
    let kernel = kernel_object.get();
    let names = kernel.names();
    // Borrowed items: the tuple holds them, so reading takes no references.
    for (index, arg) in args.iter_borrowed().enumerate() {
        let at = Position {
            index,
            name: names.get(index).map_or("", String::as_str),
        };
        read_arg(&arg, at, scratch)?;
    }
    if scratch.needs_numba {
        return Ok(None);
    }
    if let Some(overload) = kernel.find(&scratch.fingerprint, compute_capability) {
        return Ok(Some(overload));
    }
    kernel.misses.fetch_add(1, Ordering::Relaxed);
    let fingerprint = PyBytes::new(py, &scratch.fingerprint);
    let (_, griddim, blockdim, stream, sharedmem) = launch_arguments(py, args, dims, stream);
    kernel_object.call_method1(
        intern!(py, "_on_miss"),
        (
            args,
            fingerprint,
            compute_capability,
            (griddim, blockdim, stream, sharedmem),
        ),
    )?;
    kernel
        .find(&scratch.fingerprint, compute_capability)
        .map(Some)
        .ok_or_else(|| Error::Value("the kernel registered no overload for these arguments".into()))
}

fn launch(
    py: Python<'_>,
    kernel_object: &Bound<'_, Kernel>,
    dims: &LaunchDims,
    cluster: Option<[u32; 3]>,
    stream: &Py<PyAny>,
    args: &Bound<'_, PyTuple>,
) -> Result<()> {
    let kernel = kernel_object.get();
    let names = kernel.names();
    check_argument_count(names, args.len())?;
    // Inside `with fastlaunch.graph():`, launches given no stream go to the capture stream.
    let redirected;
    let dims = match graphs::capture_stream() {
        Some(capture) if dims.stream == 0 => {
            redirected = LaunchDims {
                stream: capture,
                ..*dims
            };
            &redirected
        }
        _ => dims,
    };
    if kernel.always_numba.load(Ordering::Relaxed) {
        return launch_with_numba(py, kernel_object, dims, stream, args);
    }
    let driver = driver()?;
    let context = driver.launch_context()?;
    let compute_capability = compute_capability_code(driver, context.ordinal)?;
    with_scratch(|scratch| {
        scratch.reset();
        scratch.launch_stream = dims.stream;
        let configuration = (dims, stream);
        let Some(overload) = resolve(
            py,
            kernel_object,
            args,
            configuration,
            compute_capability,
            scratch,
        )?
        else {
            return launch_with_numba(py, kernel_object, dims, stream, args);
        };
        if !scratch.claimed_devices.is_empty()
            || !scratch.unverified_pointers.is_empty()
            || driver.device_count() > 1
        {
            limits::check_devices(driver, context.ordinal, scratch, names)?;
        }
        let dims = &order_inputs(py, context.context, dims, scratch)?;
        match (&overload.target, &overload.plan) {
            (Target::Compiled(code), Some(plan)) => {
                limits::prepare_cluster(
                    driver,
                    &code.kernel,
                    &code.clusters,
                    context.ordinal,
                    compute_capability,
                    cluster,
                )?;
                if !scratch.records.is_empty() {
                    stage_records(py, driver, dims.stream, scratch)?;
                }
                let mut launched = plan.pack(
                    &scratch.values,
                    &scratch.dims,
                    names,
                    &scratch.fingerprint,
                    &mut scratch.params,
                );
                if launched.is_ok() {
                    let params = scratch.params.as_params();
                    // SAFETY: the plan was checked against this fingerprint at registration
                    // and packs one 8-byte slot per flattened parameter of the compiled
                    // entry, as numba's data model lays them out; the argument objects (and
                    // any DLPack capsules in the scratch) are alive until the launch is
                    // submitted.
                    launched = unsafe { code.launch(py, driver, &context, dims, cluster, params) };
                }
                if !scratch.staged.is_empty() {
                    let unstaged =
                        unstage_records(py, driver, dims.stream, scratch, launched.is_ok());
                    launched = launched.and(unstaged);
                }
                launched?;
                if graphs::is_capturing(dims.stream) && !scratch.has_tuple {
                    let packed = PackedArgs::new(plan, scratch, names, args)?;
                    graphs::record(driver, kernel_object, code, dims.stream, packed)?;
                }
                Ok(())
            }
            (Target::Python(callable), _) => {
                callable.call1(py, launch_arguments(py, args, dims, stream))?;
                Ok(())
            }
            (Target::Compiled(_), None) => Err(Error::Value(
                "a compiled overload was registered without a packing plan".into(),
            )),
        }
    })
}

/// Copies the records among the arguments to the device on the launch's stream and puts
/// their device addresses in the values to pack (numba-cuda passes a record as a pointer to
/// a device copy). Not while capturing a graph: copies from pageable host memory cannot be
/// captured.
#[cold]
fn stage_records(
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
    for index in 0..scratch.records.len() {
        let record = scratch.records[index];
        // SAFETY: the record's buffer exported `len` readable bytes at `host`, which the
        // argument object keeps in place for the launch (see `RecordCopy`).
        let staged =
            unsafe { driver.stage_on_stream(record.host as *const u8, record.len, stream) };
        match staged {
            Ok(staged) => {
                scratch.staged.push(staged);
                scratch.values[record.value] = ArgValue::Record {
                    device: staged.device,
                };
            }
            Err(error) => {
                let _ = unstage_records(py, driver, stream, scratch, false);
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
fn unstage_records(
    py: Python<'_>,
    driver: &'static driver::Driver,
    stream: usize,
    scratch: &mut Scratch,
    copy_back: bool,
) -> Result<()> {
    // `stage_records` staged the records in order, stopping at the first failure.
    let copies = scratch.staged.iter().zip(&scratch.records);
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
    scratch.staged.clear();
    Ok(outcome?)
}

/// `(args, griddim, blockdim, stream, sharedmem)`: how launches made in Python get them.
type PythonLaunchArguments<'py> = (
    Bound<'py, PyTuple>,
    (u32, u32, u32),
    (u32, u32, u32),
    Py<PyAny>,
    u32,
);

fn launch_arguments<'py>(
    py: Python<'py>,
    args: &Bound<'py, PyTuple>,
    dims: &LaunchDims,
    stream: &Py<PyAny>,
) -> PythonLaunchArguments<'py> {
    (
        args.clone(),
        (dims.grid[0], dims.grid[1], dims.grid[2]),
        (dims.block[0], dims.block[1], dims.block[2]),
        stream.clone_ref(py),
        dims.shared_mem_bytes,
    )
}

/// Launches through numba-cuda's own path, for arguments fastlaunch does not pack.
#[cold]
fn launch_with_numba(
    py: Python<'_>,
    kernel_object: &Bound<'_, Kernel>,
    dims: &LaunchDims,
    stream: &Py<PyAny>,
    args: &Bound<'_, PyTuple>,
) -> Result<()> {
    kernel_object.call_method1(
        intern!(py, "_launch_with_numba"),
        launch_arguments(py, args, dims, stream),
    )?;
    Ok(())
}

/// The next [`CompiledCode::id`]; 0 is never an id (it marks empty [`FUNCTIONS`] slots).
static NEXT_CODE_ID: AtomicU64 = AtomicU64::new(1);

/// Slots in each thread's cache of kernel functions (a power of two).
const FUNCTION_SLOTS: usize = 64;

thread_local! {
    /// The functions this thread launched, as (image id, context id, `CUfunction`), direct
    /// mapped by the two ids: a hit costs two compares, a miss one `cuKernelGetFunction`.
    static FUNCTIONS: [Cell<(u64, u64, usize)>; FUNCTION_SLOTS] =
        const { [const { Cell::new((0, 0, 0)) }; FUNCTION_SLOTS] };
}

impl CompiledCode {
    /// What to launch in `context` (current on this thread): the kernel's own function in
    /// that context. Launching the library's `CUkernel` handle instead makes the driver
    /// spend more per launch on numba's images: on an H200, 26 arrays cost 5.7 µs against
    /// 4.1 through the function (`benchmarks/environment_probe.py`). The cache is keyed by
    /// the context's unique id, so a context re-created by a reset misses; drivers without
    /// `cuCtxGetId` get the `CUkernel` handle.
    #[inline]
    fn function_in(&self, driver: &driver::Driver, context: driver::Context) -> Result<CUfunction> {
        let Some(context_id) = driver.context_id(context) else {
            return Ok(self.kernel.as_function());
        };
        let mixed = (self.id ^ context_id.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let slot = (mixed >> 58) as usize % FUNCTION_SLOTS;
        FUNCTIONS.with(|slots| {
            let (code_id, known_context, function) = slots[slot].get();
            if code_id == self.id && known_context == context_id {
                return Ok(function as CUfunction);
            }
            let function = self.kernel.function_in_current_context(driver)?;
            slots[slot].set((self.id, context_id, function as usize));
            Ok(function)
        })
    }

    /// Launches on device `launch.ordinal` in `launch.context` (current on this thread),
    /// opting in to dynamic shared memory above 48 KiB, and explains a refused launch by
    /// the limit it broke.
    ///
    /// # Safety
    /// `params` must hold one pointer per flattened kernel parameter (see [`Plan`]).
    #[inline]
    unsafe fn launch(
        &self,
        py: Python<'_>,
        driver: &driver::Driver,
        launch: &LaunchContext,
        dims: &LaunchDims,
        cluster: Option<[u32; 3]>,
        params: *mut *mut std::ffi::c_void,
    ) -> Result<()> {
        let ordinal = launch.ordinal;
        if dims.shared_mem_bytes > DEFAULT_DYNAMIC_SHARED_BYTES {
            self.shared_memory
                .allow(driver, &self.kernel, ordinal, dims.shared_mem_bytes)?;
        }
        let function = FunctionHandle(self.function_in(driver, launch.context)?);
        let params = ParamPointers(params);
        let submit = move || {
            let (params, function) = (params, function);
            let function = function.0;
            // SAFETY: guaranteed by the caller.
            unsafe {
                if self.cooperative || cluster.is_some() {
                    driver.launch_ex(function, dims, params.0, self.cooperative, cluster)
                } else {
                    driver.launch(function, dims, params.0)
                }
            }
        };
        let submitted = if RELEASE_GIL.load(Ordering::Relaxed) {
            py.detach(submit)
        } else {
            submit()
        };
        submitted.map_err(|refused| {
            limits::explain_launch_failure(
                driver,
                &self.kernel,
                ordinal,
                dims,
                self.cooperative,
                refused,
            )
        })
    }
}

/// Below this many blocks numba-cuda warns of low occupancy (`NumbaPerformanceWarning`).
const LOW_OCCUPANCY_BLOCKS: u32 = 128;

/// A kernel function handle, sent into a GIL-released launch.
#[derive(Clone, Copy)]
struct FunctionHandle(CUfunction);

// SAFETY: a function handle is an opaque token the driver accepts from any thread.
unsafe impl Send for FunctionHandle {}

/// The parameter pointer array, sent into a GIL-released launch.
#[derive(Clone, Copy)]
struct ParamPointers(*mut *mut std::ffi::c_void);

// SAFETY: the array and the values it points to belong to the launching thread, which
// waits (inside `Python::detach`) until the driver has copied them.
unsafe impl Send for ParamPointers {}

/// Whether launches release the GIL around the driver call (see `set_release_gil`).
static RELEASE_GIL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Releases the GIL around each `cuLaunchKernel`, so that other Python threads run
/// meanwhile (costs a GIL hand-off per launch; see the thread-scaling benchmark).
#[pyfunction]
pub fn set_release_gil(release: bool) {
    RELEASE_GIL.store(release, Ordering::Relaxed);
}

#[pyfunction]
pub fn releases_gil() -> bool {
    RELEASE_GIL.load(Ordering::Relaxed)
}

/// Parameter values and the pointer array `cuLaunchKernel` reads, built once.
struct PackedParams {
    slots: Box<[u64]>,
    pointers: Box<[*mut std::ffi::c_void]>,
}

// SAFETY: the pointers point into `slots`, a heap allocation owned by the same struct that
// never moves or resizes; the struct is only mutated through `&mut`.
unsafe impl Send for PackedParams {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for PackedParams {}

impl PackedParams {
    fn new(slots: &[u64]) -> PackedParams {
        let mut slots: Box<[u64]> = slots.into();
        let base = slots.as_mut_ptr();
        let pointers = (0..slots.len())
            .map(|i| base.wrapping_add(i).cast::<std::ffi::c_void>())
            .collect();
        PackedParams { slots, pointers }
    }
}

/// Arguments packed once, with what replacing one of them in place needs: each argument's
/// fingerprint bytes and parameter slots. Bound launches and graph nodes hold one.
pub(crate) struct PackedArgs {
    plan: Plan,
    params: PackedParams,
    arg_fingerprints: Vec<Box<[u8]>>,
    arg_slots: Vec<std::ops::Range<usize>>,
    /// The arguments, kept alive while they are packed here.
    args: Vec<Py<PyAny>>,
    launch_stream: usize,
}

impl PackedArgs {
    /// Packs the arguments classified in `scratch` (its `params` are overwritten).
    /// Tuple arguments are refused: their members are not arguments of their own.
    pub(crate) fn new(
        plan: &Plan,
        scratch: &mut Scratch,
        names: &[String],
        args: &Bound<'_, PyTuple>,
    ) -> Result<PackedArgs> {
        if scratch.has_tuple {
            return Err(Error::Type(
                "bound launches and graph argument updates take no tuple arguments".into(),
            ));
        }
        if !scratch.records.is_empty() {
            return Err(Error::Type(
                "bound launches and graph argument updates take no records (each launch \
                 copies a record to the device and back)"
                    .into(),
            ));
        }
        scratch.params.clear();
        let mut arg_slots = Vec::with_capacity(scratch.values.len());
        for (index, value) in scratch.values.iter().enumerate() {
            let start = scratch.params.len();
            plan.pack_one(index, value, &scratch.dims, names, &mut scratch.params)?;
            arg_slots.push(start..scratch.params.len());
        }
        Ok(PackedArgs {
            plan: plan.clone(),
            params: PackedParams::new(scratch.params.slots()),
            arg_fingerprints: split_fingerprint(&scratch.fingerprint),
            arg_slots,
            args: args.iter().map(Bound::unbind).collect(),
            launch_stream: scratch.launch_stream,
        })
    }

    /// The arguments packed here, in order.
    pub(crate) fn args(&self) -> &[Py<PyAny>] {
        &self.args
    }

    /// The pointer array the driver reads: one per parameter slot.
    pub(crate) fn pointers(&self) -> *mut *mut std::ffi::c_void {
        self.params.pointers.as_ptr() as *mut _
    }

    /// Replaces every argument (same types as packed), repacking them all.
    pub(crate) fn set_args(
        &mut self,
        names: &[String],
        ordinal: Option<usize>,
        args: &Bound<'_, PyTuple>,
    ) -> Result<()> {
        if args.len() != self.args.len() {
            return Err(Error::Type(format!(
                "set_args() takes the {} bound arguments, got {}",
                self.args.len(),
                args.len()
            )));
        }
        for (index, arg) in args.iter().enumerate() {
            self.set_arg(names, ordinal, index, &arg)?;
        }
        Ok(())
    }

    /// Replaces argument `index` by `value` of the same type, repacking only its slots.
    /// With `ordinal`, the array is checked to be reachable from that device.
    pub(crate) fn set_arg(
        &mut self,
        names: &[String],
        ordinal: Option<usize>,
        index: usize,
        value: &Bound<'_, PyAny>,
    ) -> Result<()> {
        let (Some(expected), Some(slots)) = (
            self.arg_fingerprints.get(index),
            self.arg_slots.get(index).cloned(),
        ) else {
            return Err(Error::Index(format!("argument index {index} out of range")));
        };
        let mut scratch = Scratch {
            launch_stream: self.launch_stream,
            ..Scratch::default()
        };
        let at = Position {
            index,
            name: names.get(index).map_or("", String::as_str),
        };
        read_arg(value, at, &mut scratch)?;
        if *scratch.fingerprint != **expected {
            return Err(at.error(
                "a bound argument can only be replaced by one of the same type, ndim and layout",
            ));
        }
        if let Some(ordinal) = ordinal {
            limits::check_devices(driver()?, ordinal, &scratch, names)?;
        }
        self.plan.pack_one(
            index,
            &scratch.values[0],
            &scratch.dims,
            names,
            &mut scratch.params,
        )?;
        self.params.slots[slots].copy_from_slice(scratch.params.slots());
        self.args[index] = value.clone().unbind();
        Ok(())
    }
}

/// A launch whose arguments are classified and packed once: `kernel[...].bind(*args)`.
/// Calling it submits again with no classification or packing.
#[pyclass(module = "fastlaunch._core")]
pub struct BoundLaunch {
    kernel: Py<Kernel>,
    code: Arc<CompiledCode>,
    dims: LaunchDims,
    cluster: Option<[u32; 3]>,
    context: driver::Context,
    ordinal: usize,
    packed: PackedArgs,
}

/// The fingerprint bytes each argument contributed, in order.
fn split_fingerprint(fingerprint: &[u8]) -> Vec<Box<[u8]>> {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < fingerprint.len() {
        let start = i;
        crate::classify::skip_argument(fingerprint, &mut i);
        parts.push(fingerprint[start..i.min(fingerprint.len())].into());
    }
    parts
}

impl Launcher {
    fn bind_args(&self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> Result<BoundLaunch> {
        let kernel_object = self.kernel.bind(py);
        let names = kernel_object.get().names();
        check_argument_count(names, args.len())?;
        let driver = driver()?;
        let context = driver.launch_context()?;
        let compute_capability = compute_capability_code(driver, context.ordinal)?;
        let mut scratch = Scratch {
            launch_stream: self.dims.stream,
            ..Scratch::default()
        };
        let configuration = (&self.dims, &self.stream);
        let overload = resolve(
            py,
            kernel_object,
            args,
            configuration,
            compute_capability,
            &mut scratch,
        )?;
        let Some((Target::Compiled(code), Some(plan))) =
            overload.as_ref().map(|o| (&o.target, &o.plan))
        else {
            return Err(Error::Type(
                "bind() needs arguments and a kernel that fastlaunch launches itself (device \
                 arrays and scalars; not debug=True or extensions)"
                    .into(),
            ));
        };
        limits::check_devices(driver, context.ordinal, &scratch, names)?;
        limits::prepare_cluster(
            driver,
            &code.kernel,
            &code.clusters,
            context.ordinal,
            compute_capability,
            self.cluster,
        )?;
        Ok(BoundLaunch {
            kernel: self.kernel.clone_ref(py),
            code: code.clone(),
            dims: self.dims,
            cluster: self.cluster,
            context: context.context,
            ordinal: context.ordinal,
            packed: PackedArgs::new(plan, &mut scratch, names, args)?,
        })
    }
}

#[pymethods]
impl BoundLaunch {
    /// Submits the launch again, as bound.
    #[inline]
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        let driver = driver()?;
        let current = driver.launch_context().map_err(Error::from)?;
        if current.context != self.context {
            return Err(Error::Value(
                "this launch was bound in another CUDA context; bind it again in this one".into(),
            )
            .into());
        }
        // SAFETY: the slots were packed by the overload's plan for these arguments, which
        // the packed arguments keep alive; the pointer array points into them and the driver
        // only reads through it.
        unsafe {
            self.code
                .launch(
                    py,
                    driver,
                    &current,
                    &self.dims,
                    self.cluster,
                    self.packed.pointers(),
                )
                .map_err(PyErr::from)
        }
    }

    /// Replaces every argument (same types as bound), repacking them all.
    #[pyo3(signature = (*args))]
    fn set_args(&mut self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyResult<()> {
        let kernel = self.kernel.clone_ref(py);
        let names = kernel.bind(py).get().names();
        Ok(self.packed.set_args(names, Some(self.ordinal), args)?)
    }

    /// Replaces argument `index` by `value` of the same type, repacking only its slots.
    fn set_arg(&mut self, py: Python<'_>, index: usize, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let kernel = self.kernel.clone_ref(py);
        let names = kernel.bind(py).get().names();
        Ok(self
            .packed
            .set_arg(names, Some(self.ordinal), index, value)?)
    }
}

/// Chooses the launch stream and orders it after the inputs' producer streams (see
/// `streams`): returns the dimensions to launch with.
#[inline]
fn order_inputs(
    py: Python<'_>,
    context: driver::Context,
    dims: &LaunchDims,
    scratch: &mut Scratch,
) -> Result<LaunchDims> {
    if !streams::ordering_enabled() && !streams::follows_current_stream() {
        return Ok(*dims);
    }
    let mut exchange_stream = None;
    if let Some((query, device_type, device_id)) = scratch.exchange_stream {
        let mut stream: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: the producer's own function, called with a valid out-pointer under the GIL.
        if unsafe { query(device_type, device_id, &mut stream) } != 0 {
            return Err(PyErr::fetch(py).into());
        }
        exchange_stream = Some(stream as usize);
    }
    let cupy_stream = if scratch.has_cupy {
        Some(cupy_current_stream(py)?)
    } else {
        None
    };
    scratch.producers.extend(exchange_stream);
    scratch.producers.extend(cupy_stream);
    let current_stream = exchange_stream.or(cupy_stream);
    if scratch.producers.is_empty() {
        return Ok(*dims);
    }
    let mut dims = *dims;
    if dims.stream == 0 && streams::follows_current_stream() {
        if let Some(stream) = current_stream {
            dims.stream = stream;
        }
    }
    streams::order_after_producers(context, dims.stream, &scratch.producers)?;
    Ok(dims)
}

/// `cupy.cuda.get_current_stream().ptr`.
fn cupy_current_stream(py: Python<'_>) -> Result<usize> {
    static GET_CURRENT_STREAM: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    let get = GET_CURRENT_STREAM.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py
            .import("cupy.cuda")?
            .getattr("get_current_stream")?
            .unbind())
    })?;
    Ok(get
        .bind(py)
        .call0()?
        .getattr(intern!(py, "ptr"))?
        .extract()?)
}

/// Classifies one object as a kernel argument: its descriptor, as `_on_miss` sees it.
#[pyfunction]
pub fn classify<'py>(py: Python<'py>, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
    let mut scratch = Scratch::default();
    read_arg(obj, Position { index: 0, name: "" }, &mut scratch)?;
    refuse_numba_only(&scratch)?;
    let mut described = describe_fingerprint(py, &scratch.fingerprint)?;
    Ok(described.remove(0))
}

/// Describes a fingerprint as the per-argument descriptors `_on_miss` turns into numba types.
#[pyfunction]
pub fn describe<'py>(py: Python<'py>, fingerprint: &[u8]) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    describe_fingerprint(py, fingerprint)
}

/// Packs `args` by `plan` exactly as a launch would, returning the parameter slots
/// (8 bytes each) as bytes. Needs no GPU: for tests against numba's data model.
#[pyfunction]
pub fn pack<'py>(
    py: Python<'py>,
    plan: Vec<String>,
    args: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyBytes>> {
    let plan = Plan::parse(&plan)?;
    let mut scratch = Scratch::default();
    for (index, arg) in args.iter().enumerate() {
        read_arg(&arg, Position { index, name: "" }, &mut scratch)?;
    }
    refuse_numba_only(&scratch)?;
    plan.check_fingerprint(&scratch.fingerprint)?;
    plan.pack(
        &scratch.values,
        &scratch.dims,
        &[],
        &scratch.fingerprint,
        &mut scratch.params,
    )?;
    let bytes: Vec<u8> = scratch
        .params
        .slots()
        .iter()
        .flat_map(|s| s.to_le_bytes())
        .collect();
    Ok(PyBytes::new(py, &bytes))
}

/// The fingerprint of `args`, as the launch path computes it.
#[pyfunction]
pub fn fingerprint<'py>(
    py: Python<'py>,
    args: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut scratch = Scratch::default();
    for (index, arg) in args.iter().enumerate() {
        read_arg(&arg, Position { index, name: "" }, &mut scratch)?;
    }
    refuse_numba_only(&scratch)?;
    Ok(PyBytes::new(py, &scratch.fingerprint))
}

fn refuse_numba_only(scratch: &Scratch) -> Result<()> {
    if scratch.needs_numba {
        return Err(Error::Type(
            "these arguments are passed by numba-cuda's own launch path, not classified by \
             fastlaunch (host arrays, cuda.In/Out/InOut, datetime arrays, record arrays on \
             the host, tuples holding those)"
                .into(),
        ));
    }
    Ok(())
}
