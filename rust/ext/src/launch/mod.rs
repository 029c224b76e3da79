//! One launch, the hot path: **resolve** (classify the arguments and find their overload;
//! Python only on a miss) → **prepare** (check devices, order streams, stage records, pack)
//! → **submit** (the driver call, in `code.rs`) → **finish** (copy records back, record a
//! graph node). A hit allocates nothing, creates no Python object and takes no lock: the
//! arguments go into this thread's reused [`Scratch`].
//!
//! The launch path's parts, one file each: the kernel and its overloads (`overloads`,
//! `kernel`, `code`), configurations and launchers (`launcher`, `configurations`, `limits`),
//! argument packing (`plan`, `numba_types`, `staging`), launches like
//! the last (`repeat`), launches following a torch or CuPy capture (`followed_capture`),
//! arguments packed once (`packed`) for bound launches (`bound`) and
//! graph capture and replay (`graph`), and what tests read of a submission (`submitted`).
pub(crate) mod bound;
pub(crate) mod code;
pub(crate) mod configurations;
pub(crate) mod followed_capture;
pub(crate) mod graph;
pub(crate) mod kernel;
pub(crate) mod launcher;
pub(crate) mod limits;
pub(crate) mod numba_types;
pub(crate) mod overloads;
pub(crate) mod packed;
pub(crate) mod plan;
pub(crate) mod repeat;
pub(crate) mod staging;
pub(crate) mod submitted;

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fastlaunch_driver::{self as driver, LaunchContext, LaunchDims};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::classify::fingerprint::describe;
use crate::classify::{read_arg, Position};
use crate::devices::{compute_capability_code, driver};
use crate::errors::{Error, Result};
use crate::launch::packed::PackedArgs;
use crate::scratch::Scratch;
use crate::streams::order_inputs;
use code::CompiledCode;
use overloads::{Kernel, Overload, Target};
use plan::Plan;
use repeat::LastLaunch;

/// What `kernel[grid, block, stream, shmem]` (or `configure`) fixed for its launches.
pub(crate) struct LaunchConfig {
    pub(crate) dims: LaunchDims,
    /// Thread block cluster shape (`configure(..., cluster=...)`).
    pub(crate) cluster: Option<[u32; 3]>,
    /// The stream object as given, kept alive while the configuration is.
    pub(crate) stream: Py<PyAny>,
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

/// Launches `kernel_object` with `args` as `config` says.
pub(crate) fn launch(
    py: Python<'_>,
    kernel_object: &Bound<'_, Kernel>,
    config: &LaunchConfig,
    args: &Bound<'_, PyTuple>,
) -> Result<()> {
    let kernel = kernel_object.get();
    let names = kernel.names();
    check_argument_count(names, args.len())?;
    // Inside `with fastlaunch.graph():` (or a followed torch / CuPy capture), launches given
    // no stream go to the capture stream.
    let redirected;
    let dims = match graph::no_stream_target() {
        Some(capture) if config.dims.stream == 0 => {
            redirected = LaunchDims {
                stream: capture,
                ..config.dims
            };
            &redirected
        }
        _ => &config.dims,
    };
    if kernel.always_numba.load(Ordering::Relaxed) {
        return launch_with_numba(py, kernel_object, dims, &config.stream, args);
    }
    let driver = driver()?;
    let context = driver.launch_context()?;
    let compute_capability = compute_capability_code(driver, context.ordinal)?;
    with_scratch(|scratch| {
        scratch.reset();
        scratch.streams.launch_stream = dims.stream;
        // A launch like one of the last two (not while this thread records a graph, whose
        // nodes need every argument classified; without arguments there is nothing to save).
        let table_id = kernel.table_id();
        let remembering = !args.is_empty() && graph::capture_stream().is_none();
        if remembering {
            if let Some((last, overload)) =
                repeat::find(table_id, context.key(), args, names, scratch)
            {
                let launched = launch_again(
                    py,
                    driver,
                    &context,
                    compute_capability,
                    dims,
                    config,
                    names,
                    (&last, &overload),
                    scratch,
                );
                repeat::keep(last);
                return launched;
            }
        }
        let Some(overload) = resolve(
            py,
            kernel_object,
            args,
            (dims, &config.stream),
            compute_capability,
            scratch,
        )?
        else {
            return launch_with_numba(py, kernel_object, dims, &config.stream, args);
        };
        let dims = &check_and_order(py, driver, &context, dims, names, scratch)?;
        match (&overload.target, &overload.plan) {
            (Target::Compiled(code), Some(plan)) => {
                let launch = Compiled {
                    code,
                    plan,
                    context: &context,
                    compute_capability,
                    dims,
                    cluster: config.cluster,
                };
                launch.run(py, driver, kernel_object, names, args, scratch)?;
                if remembering {
                    repeat::remember(table_id, context.key(), &overload, args, names, scratch);
                }
                Ok(())
            }
            (Target::Python(callable), _) => {
                graph::hold_if_capturing(dims.stream, args);
                callable.call1(py, launch_arguments(py, args, dims, &config.stream))?;
                Ok(())
            }
            (Target::Compiled(_), None) => Err(Error::Value(
                "a compiled overload was registered without a packing plan".into(),
            )),
        }
    })
}

pub(crate) fn check_argument_count(names: &[String], given: usize) -> Result<()> {
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

/// **Resolve.** Classifies `args` into `scratch` and finds their overload, entering Python
/// (to type and compile) only when the table has none. `None`: an argument only numba-cuda
/// can pass. A miss gets the launch configuration too: numba-cuda compiles with it current
/// (`numba.cuda.launchconfig`), and launch-config-sensitive kernels depend on it.
#[inline]
pub(crate) fn resolve(
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
    miss(
        py,
        kernel_object,
        args,
        (dims, stream),
        compute_capability,
        scratch,
    )
}

/// A miss: Python's `_on_miss` gets the arguments' descriptors (the fingerprint decoded
/// once, here), types them with numba and compiles; it returns the overload's numba
/// parameter types and its target, and the overload is registered here
/// (`Kernel::register_miss` builds the plan from the numba types).
#[cold]
fn miss(
    py: Python<'_>,
    kernel_object: &Bound<'_, Kernel>,
    args: &Bound<'_, PyTuple>,
    (dims, stream): (&LaunchDims, &Py<PyAny>),
    compute_capability: u32,
    scratch: &mut Scratch,
) -> Result<Option<Arc<Overload>>> {
    let kernel = kernel_object.get();
    kernel.misses.fetch_add(1, Ordering::Relaxed);
    let fingerprint = PyBytes::new(py, &scratch.fingerprint);
    let descriptors = describe(py, &scratch.fingerprint)?;
    let (_, griddim, blockdim, stream, sharedmem) = launch_arguments(py, args, dims, stream);
    let returned = kernel_object.call_method1(
        intern!(py, "_on_miss"),
        (
            args,
            fingerprint,
            descriptors,
            compute_capability,
            (griddim, blockdim, stream, sharedmem),
        ),
    )?;
    kernel.register_miss(&scratch.fingerprint, compute_capability, &returned)?;
    kernel
        .find(&scratch.fingerprint, compute_capability)
        .map(Some)
        .ok_or_else(|| Error::Value("the kernel registered no overload for these arguments".into()))
}

/// A launch like a remembered one: its overload and packed parameters, with the slots of
/// the arguments that may differ rewritten (`repeat.rs`); then prepare and submit as
/// [`Compiled::run`] does (no records, no graph being recorded: not remembered otherwise).
#[allow(clippy::too_many_arguments)]
fn launch_again(
    py: Python<'_>,
    driver: &'static driver::Driver,
    context: &LaunchContext,
    compute_capability: u32,
    dims: &LaunchDims,
    config: &LaunchConfig,
    names: &[String],
    (last, overload): (&LastLaunch, &Overload),
    scratch: &mut Scratch,
) -> Result<()> {
    let Target::Compiled(code) = &overload.target else {
        return Err(Error::Value(
            "a remembered launch has no compiled code".into(),
        ));
    };
    let dims = &check_and_order(py, driver, context, dims, names, scratch)?;
    code.prepare_cluster(driver, context.ordinal, compute_capability, config.cluster)?;
    // SAFETY: the parameters were packed by this overload's plan for arguments of these
    // fingerprints, and those that may differ were packed again for these arguments (see
    // `repeat.rs`); the argument objects (and any DLPack capsules in the scratch) are alive
    // until the launch is submitted.
    unsafe { code.submit(py, driver, context, dims, config.cluster, &last.params) }
}

/// **Prepare**, the part every target needs: the arrays' devices checked against the
/// launch's, and the launch stream ordered after the inputs' producers. Returns the
/// dimensions to launch with (the stream may follow the producers' current stream).
#[inline]
fn check_and_order(
    py: Python<'_>,
    driver: &driver::Driver,
    context: &LaunchContext,
    dims: &LaunchDims,
    names: &[String],
    scratch: &mut Scratch,
) -> Result<LaunchDims> {
    if !scratch.devices.is_empty() || driver.device_count() > 1 {
        limits::check_devices(driver, context.ordinal, scratch, names)?;
    }
    order_inputs(py, context.key(), dims, scratch)
}

/// A launch of compiled code, resolved and checked.
struct Compiled<'a> {
    code: &'a Arc<CompiledCode>,
    plan: &'a Plan,
    context: &'a LaunchContext,
    compute_capability: u32,
    dims: &'a LaunchDims,
    cluster: Option<[u32; 3]>,
}

impl Compiled<'_> {
    /// Prepare (clusters, records, packing) → submit → finish.
    #[inline]
    fn run(
        &self,
        py: Python<'_>,
        driver: &'static driver::Driver,
        kernel_object: &Bound<'_, Kernel>,
        names: &[String],
        args: &Bound<'_, PyTuple>,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let (code, dims) = (self.code, self.dims);
        code.prepare_cluster(
            driver,
            self.context.ordinal,
            self.compute_capability,
            self.cluster,
        )?;
        if !scratch.staging.copies.is_empty() {
            if scratch.staging.implicit {
                // numba-cuda's warning, from the Python kernel class (warnings as errors raise)
                if let Ok(warn) = kernel_object.getattr(intern!(py, "_warn_implicit_copy")) {
                    warn.call0()?;
                }
            }
            staging::stage(py, driver, self.context, dims.stream, scratch)?;
        }
        let mut launched = self.plan.pack(
            &scratch.values,
            &scratch.dims,
            names,
            &scratch.fingerprint,
            &mut scratch.params,
        );
        if launched.is_ok() {
            scratch.params.prepare();
            // SAFETY: the plan was checked against this fingerprint at registration and
            // packs one slot per flattened parameter of the compiled entry, as numba's data
            // model lays them out; the argument objects (and any DLPack capsules in the
            // scratch) are alive until the launch is submitted.
            launched = unsafe {
                code.submit(
                    py,
                    driver,
                    self.context,
                    dims,
                    self.cluster,
                    &scratch.params,
                )
            };
        }
        self.finish(py, driver, kernel_object, names, args, scratch, launched)
    }

    /// **Finish.** Copies records back (and frees their device copies), and records the
    /// launch as a graph node when its stream is being captured.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        py: Python<'_>,
        driver: &'static driver::Driver,
        kernel_object: &Bound<'_, Kernel>,
        names: &[String],
        args: &Bound<'_, PyTuple>,
        scratch: &mut Scratch,
        mut launched: Result<()>,
    ) -> Result<()> {
        let stream = self.dims.stream;
        if !scratch.staging.staged.is_empty() {
            let unstaged =
                staging::unstage(py, driver, self.context, stream, scratch, launched.is_ok());
            launched = launched.and(unstaged);
        }
        launched?;
        if graph::is_capturing(stream) {
            let packed = PackedArgs::new(self.plan, scratch, names, args)?;
            graph::record(driver, kernel_object, self.code, stream, packed)?;
        }
        Ok(())
    }
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
    graph::hold_if_capturing(dims.stream, args);
    let followed = if crate::memory::in_use() {
        let driver = driver()?;
        let context = driver.launch_context()?;
        crate::memory::before_launch(driver, &context, dims.stream)?.then_some((driver, context))
    } else {
        None
    };
    kernel_object.call_method1(
        intern!(py, "_launch_with_numba"),
        launch_arguments(py, args, dims, stream),
    )?;
    if let Some((driver, context)) = followed {
        crate::memory::after_launch(driver, &context, dims.stream)?;
    }
    Ok(())
}
