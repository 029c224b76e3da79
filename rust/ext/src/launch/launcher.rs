//! `kernel[griddim, blockdim, stream, sharedmem]` and `kernel.configure(...)`: a frozen
//! [`Launcher`], parsed once here for both spellings. Calling it launches (`launch.rs`);
//! `bind(*args)` classifies and packs once (`bound.rs`). Like numba-cuda's
//! `_LaunchConfiguration`, it has `pre_launch_callbacks` and pickles (as its kernel and
//! configuration, the stream as its handle).
//!
//! numba-cuda caches configurations (`kernel[2, 32]` is the same object each time), so
//! callbacks added to one apply to every later launch with that configuration. A `Launcher`
//! is made per `kernel[...]` (caching would cost every launch a lookup), so the lists live on
//! the kernel, keyed by the configuration (`Kernel._pre_launch_callbacks`), and a launch asks
//! for its list only once the kernel has one.

use std::sync::atomic::Ordering;

use fastlaunch_driver::LaunchDims;
use pyo3::gc::{PyTraverseError, PyVisit};
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyList, PyTuple};
use pyo3::{ffi, intern};

use crate::errors::{Error, Result};
use crate::launch::bound::{self, BoundLaunch};
use crate::launch::limits;
use crate::launch::overloads::Kernel;
use crate::launch::{self, LaunchConfig};
use crate::streams::parse_stream;

/// Below this many blocks numba-cuda warns of low occupancy (`NumbaPerformanceWarning`).
const LOW_OCCUPANCY_BLOCKS: u64 = 128;

/// A configured launch: `kernel[grid, block, stream, shmem]`. Calling it launches.
#[pyclass(frozen, weakref, module = "fastlaunch._core")]
pub struct Launcher {
    kernel: Py<Kernel>,
    config: LaunchConfig,
}

impl Launcher {
    /// Parses a launch configuration: `griddim` and `blockdim` (1 to 3 positive ints),
    /// `stream` (see [`parse_stream`]), `sharedmem` (bytes) and `cluster` (1 to 3 ints).
    pub(crate) fn configure(
        kernel: &Bound<'_, Kernel>,
        griddim: &Bound<'_, PyAny>,
        blockdim: &Bound<'_, PyAny>,
        stream: Option<&Bound<'_, PyAny>>,
        sharedmem: Option<&Bound<'_, PyAny>>,
        cluster: Option<&Bound<'_, PyAny>>,
    ) -> Result<Launcher> {
        let py = kernel.py();
        let grid = parse_dims(griddim, "griddim")?;
        let block = parse_dims(blockdim, "blockdim")?;
        let stream = stream.cloned().unwrap_or_else(|| py.None().into_bound(py));
        let handle = parse_stream(&stream)?;
        let shared_mem_bytes = match sharedmem {
            Some(s) if !s.is_none() => parse_sharedmem(s)?,
            _ => 0,
        };
        // As u64: a valid grid (131072 × 32768) overflows u32.
        if grid.iter().map(|&g| u64::from(g)).product::<u64>() < LOW_OCCUPANCY_BLOCKS {
            kernel.get().warn_low_occupancy(kernel, grid)?;
        }
        let cluster = match cluster.filter(|c| !c.is_none()) {
            Some(cluster) => {
                let shape = parse_dims(cluster, "cluster")?;
                limits::check_cluster(grid, shape)?;
                Some(shape)
            }
            None => None,
        };
        Ok(Launcher {
            kernel: kernel.clone().unbind(),
            config: LaunchConfig {
                dims: LaunchDims {
                    grid,
                    block,
                    shared_mem_bytes,
                    stream: handle,
                },
                cluster,
                stream: stream.unbind(),
            },
        })
    }

    /// A launcher of `dims` (a configuration parsed before) over `stream`, the stream object
    /// that gave `dims.stream`.
    pub(crate) fn on_stream(
        kernel: &Bound<'_, Kernel>,
        dims: LaunchDims,
        stream: Bound<'_, PyAny>,
    ) -> Launcher {
        Launcher {
            kernel: kernel.clone().unbind(),
            config: LaunchConfig {
                dims,
                cluster: None,
                stream: stream.unbind(),
            },
        }
    }

    /// What it launches with.
    pub(crate) fn dims(&self) -> &LaunchDims {
        &self.config.dims
    }

    /// Parses `kernel[config]`: `(griddim, blockdim[, stream[, sharedmem]])`.
    pub(crate) fn from_subscript(
        kernel: &Bound<'_, Kernel>,
        config: &Bound<'_, PyAny>,
    ) -> Result<Launcher> {
        let items = config
            .cast::<PyTuple>()
            .ok()
            .filter(|t| (2..=4).contains(&t.len()))
            .ok_or_else(|| Error::Value("must specify at least the griddim and blockdim".into()))?;
        let get = |i: usize| items.get_item(i).ok();
        Launcher::configure(
            kernel,
            &items.get_item(0)?,
            &items.get_item(1)?,
            get(2).as_ref(),
            get(3).as_ref(),
            None,
        )
    }
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
    // numba-cuda's messages show the dimensions as the list it checked.
    let shown = || {
        PyList::new(value.py(), &items)
            .and_then(|list| list.repr())
            .map(|r| r.to_string())
            .unwrap_or_default()
    };
    // An empty sequence is 1 x 1 x 1, as numba-cuda pads it.
    if items.len() > 3 {
        return Err(Error::Value(format!(
            "{name} must be a sequence of 1, 2 or 3 integers, got {}",
            shown()
        )));
    }
    let mut values = [Some(1i64); 3];
    for (slot, item) in values.iter_mut().zip(&items) {
        // SAFETY: PyIndex_Check only inspects the type's slots.
        let is_index =
            unsafe { ffi::PyIndex_Check(item.as_ptr()) } != 0 && !item.is_instance_of::<PyFloat>();
        if !is_index {
            return Err(Error::Type(format!(
                "{name} must be a sequence of integers, got {}",
                shown()
            )));
        }
        *slot = item
            .call_method0(intern!(item.py(), "__index__"))?
            .extract()
            .ok();
    }
    let which = match name {
        "griddim" => Some("grid"),
        "blockdim" => Some("block"),
        _ => None,
    };
    if let Some(which) = which.filter(|_| values.iter().any(|v| v.is_some_and(|v| v < 1))) {
        // numba-cuda 0.30's message (cuda.core's LaunchConfig), over the padded dimensions
        let padded: Vec<String> = values
            .iter()
            .zip(items.iter().map(Some).chain(std::iter::repeat(None)))
            .map(|(value, item)| match (value, item) {
                (Some(value), _) => value.to_string(),
                (None, Some(item)) => item.to_string(),
                (None, None) => "1".to_string(),
            })
            .collect();
        return Err(Error::Value(format!(
            "LaunchConfig.{which} values must be >= 1 (got ({}))",
            padded.join(", ")
        )));
    }
    let mut dims = [1u32; 3];
    for (slot, value) in dims.iter_mut().zip(values) {
        *slot = value
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

/// Dynamic shared memory bytes: any object with `__index__`, below 2**32.
fn parse_sharedmem(value: &Bound<'_, PyAny>) -> Result<u32> {
    // SAFETY: PyNumber_Index returns a new reference, or null with an exception set.
    let index =
        unsafe { Bound::from_owned_ptr_or_err(value.py(), ffi::PyNumber_Index(value.as_ptr())) }
            .map_err(|_| Error::Type(format!("sharedmem must be an int, got {value}")))?;
    index.extract::<u32>().map_err(|_| {
        Error::Value(format!(
            "sharedmem must be between 0 and 2**32, got {value}"
        ))
    })
}

impl Launcher {
    /// Whether the kernel has ever handed out a callback list (one atomic load).
    fn may_have_pre_launch_callbacks(&self, py: Python<'_>) -> bool {
        self.kernel
            .bind(py)
            .get()
            .may_have_pre_launch_callbacks
            .load(Ordering::Relaxed)
    }
}

#[pymethods]
impl Launcher {
    /// Part of a cycle when cached (kernel → its configurations → launcher → kernel).
    fn __traverse__(&self, visit: PyVisit<'_>) -> std::result::Result<(), PyTraverseError> {
        visit.call(&self.kernel)?;
        visit.call(&self.config.stream)
    }
    #[pyo3(signature = (*args))]
    fn __call__(slf: &Bound<'_, Self>, args: &Bound<'_, PyTuple>) -> Result<()> {
        let py = slf.py();
        let launcher = slf.get();
        let kernel = launcher.kernel.bind(py);
        if launcher.may_have_pre_launch_callbacks(py) {
            // As numba-cuda does: the callbacks see the overload these arguments launch.
            kernel.call_method1(intern!(py, "_run_pre_launch_callbacks"), (slf, args))?;
        }
        launch::launch(py, kernel, &launcher.config, args)
    }

    /// numba-cuda's `pre_launch_callbacks`: each `callback(kernel, launch_config)` runs
    /// before every launch of this configuration (`kernel` is numba-cuda's compiled
    /// overload). Launches with callbacks type their arguments in Python first.
    #[getter]
    fn pre_launch_callbacks<'py>(slf: &Bound<'py, Self>) -> Result<Bound<'py, PyList>> {
        let py = slf.py();
        let kernel = slf.get().kernel.bind(py);
        kernel
            .get()
            .may_have_pre_launch_callbacks
            .store(true, Ordering::Relaxed);
        let callbacks = kernel.call_method1(intern!(py, "_pre_launch_callbacks"), (slf,))?;
        Ok(callbacks.cast_into::<PyList>().map_err(PyErr::from)?)
    }

    /// The kernel this configures (numba-cuda's `launch_config.dispatcher`).
    #[getter]
    fn dispatcher(&self, py: Python<'_>) -> Py<Kernel> {
        self.kernel.clone_ref(py)
    }

    /// Pickles as numba-cuda's configured launches do: the kernel and the configuration,
    /// the stream as its handle; refused while callbacks are set.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> Result<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let this = slf.get();
        if this.may_have_pre_launch_callbacks(py) && !Self::pre_launch_callbacks(slf)?.is_empty() {
            return Err(Error::Pickling(
                "Cannot pickle configured launches with pre-launch callbacks".into(),
            ));
        }
        let configure = this.kernel.bind(py).getattr(intern!(py, "_configured"))?;
        let state = (
            this.griddim(),
            this.blockdim(),
            this.config.dims.stream,
            this.config.dims.shared_mem_bytes,
            this.cluster(),
        );
        Ok((configure, state.into_pyobject(py)?))
    }

    /// Classifies and packs `args` once: calling the result launches with no per-launch work.
    #[pyo3(signature = (*args))]
    fn bind(&self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> Result<BoundLaunch> {
        bound::bind(py, self.kernel.bind(py), &self.config, args)
    }

    #[getter]
    fn griddim(&self) -> (u32, u32, u32) {
        let [x, y, z] = self.config.dims.grid;
        (x, y, z)
    }

    #[getter]
    fn blockdim(&self) -> (u32, u32, u32) {
        let [x, y, z] = self.config.dims.block;
        (x, y, z)
    }

    #[getter]
    fn stream(&self, py: Python<'_>) -> Py<PyAny> {
        self.config.stream.clone_ref(py)
    }

    #[getter]
    fn stream_handle(&self) -> usize {
        self.config.dims.stream
    }

    #[getter]
    fn sharedmem(&self) -> u32 {
        self.config.dims.shared_mem_bytes
    }

    #[getter]
    fn cluster(&self) -> Option<(u32, u32, u32)> {
        self.config.cluster.map(|[x, y, z]| (x, y, z))
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
