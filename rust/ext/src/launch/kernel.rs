//! The Python face of a kernel (`fastlaunch.Kernel` subclasses it): registering overloads
//! (tests and tools; launches register what `_on_miss` returns), and
//! `kernel[griddim, blockdim, stream, sharedmem]` / `configure(...)`, which build a
//! [`Launcher`] (`kernel[...]` through the cache in `configurations.rs`). The overload table
//! itself is in `overloads.rs`.

use std::sync::atomic::Ordering;

use pyo3::exceptions::PyRuntimeError;
use pyo3::gc::{PyTraverseError, PyVisit};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::errors::Result;
use crate::launch::configurations::{Recent, StreamKey, Written, WrittenStream};
use crate::launch::launcher::Launcher;
use crate::launch::numba_types::plan_of_types;
use crate::launch::overloads::Kernel;
use crate::streams::parse_stream;

#[pymethods]
impl Kernel {
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Kernel {
        Kernel::empty()
    }

    /// Sets the parameter names (once), used to check argument counts and in errors.
    fn _set_parameter_names(&self, names: Vec<String>) -> PyResult<()> {
        self.parameter_names
            .set(names.into())
            .map_err(|_| PyRuntimeError::new_err("parameter names are already set"))
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
        self.count()
    }

    /// Registers an overload: arguments with `fingerprint` on a device of compute
    /// capability `compute_capability` launch `target` (a `CompiledKernel`, or a Python
    /// callable `(args, griddim, blockdim, stream, sharedmem)`), packed by the plan built
    /// from `param_types` (numba types, one per argument; None: the callable gets the
    /// objects). For tests and tools: launches register through `_on_miss`'s result.
    fn _register(
        &self,
        fingerprint: &[u8],
        compute_capability: u32,
        param_types: Option<&Bound<'_, PyAny>>,
        target: &Bound<'_, PyAny>,
    ) -> Result<()> {
        let plan = match param_types {
            Some(types) => Some(plan_of_types(types, self.names())??),
            None => None,
        };
        self.register_checked(fingerprint, compute_capability, plan, target)
    }

    /// Drops every overload (their images unload once no launch holds them).
    fn _clear_overloads(&self) {
        self.clear();
    }

    /// `kernel[griddim, blockdim]`, `[..., stream]`, `[..., stream, sharedmem]`: the same
    /// launcher each time for the same configuration, as numba-cuda's cached `configure`
    /// (`configurations.rs`).
    fn __getitem__<'py>(
        slf: &Bound<'py, Self>,
        config: &Bound<'py, PyAny>,
    ) -> Result<Bound<'py, PyAny>> {
        configured(slf, config)
    }

    /// Configurations cached by `kernel[...]`.
    #[getter]
    fn _configuration_count(&self) -> usize {
        self.configurations.len()
    }

    /// Configurations `kernel[...]` parsed in full (the others came from the cache).
    #[getter]
    fn _configuration_parses(&self) -> u64 {
        self.configurations.parses()
    }

    /// The cached launchers hold the kernel: the cycle collector sees them through here.
    fn __traverse__(&self, visit: PyVisit<'_>) -> std::result::Result<(), PyTraverseError> {
        self.configurations.traverse(&visit)
    }

    fn __clear__(&self) {
        self.configurations.clear();
    }

    /// Drops the cached configurations (their launchers stay valid where held).
    fn _clear_configurations(&self) {
        self.configurations.clear();
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
    ) -> Result<Launcher> {
        Launcher::configure(slf, griddim, blockdim, stream, sharedmem, cluster)
    }

    /// Rebuilds an unpickled [`Launcher`] (what its `__reduce__` returns).
    fn _configured(
        slf: &Bound<'_, Self>,
        griddim: &Bound<'_, PyAny>,
        blockdim: &Bound<'_, PyAny>,
        stream: &Bound<'_, PyAny>,
        sharedmem: &Bound<'_, PyAny>,
        cluster: &Bound<'_, PyAny>,
    ) -> Result<Launcher> {
        Launcher::configure(
            slf,
            griddim,
            blockdim,
            Some(stream),
            Some(sharedmem),
            Some(cluster),
        )
    }
}

/// The launcher for `kernel[config]`: cached, or made (and cached when `config` is plain);
/// see `configurations.rs`.
fn configured<'py>(
    kernel: &Bound<'py, Kernel>,
    config: &Bound<'py, PyAny>,
) -> Result<Bound<'py, PyAny>> {
    let py = kernel.py();
    let cache = &kernel.get().configurations;
    let Some(written) = Written::of(config) else {
        return parse(kernel, config);
    };
    let stream = match written.stream {
        WrittenStream::Key(stream) => {
            let key = written.key(stream);
            let found = cache.find(&key);
            if let Some(launcher) = found.as_ref().and_then(|e| e.launcher.as_ref()) {
                return Ok(launcher.bind(py).clone());
            }
            let launcher = parse(kernel, config)?;
            cache.insert(key, Some(launcher.clone().unbind()));
            return Ok(launcher);
        }
        WrittenStream::Object(stream) => stream,
    };
    if let Some(launcher) = cache.find_recent(py, &written, stream.as_ptr() as usize) {
        return Ok(launcher);
    }
    let stream = stream.to_owned();
    let Ok(handle) = parse_stream(&stream) else {
        return parse(kernel, config); // raises what the full parse raises
    };
    let key = written.key(StreamKey::Object(handle as u64));
    let launcher = if cache.find(&key).is_some() {
        Bound::new(py, Launcher::on_stream(kernel, key.dims(), stream.clone()))?
    } else {
        let launcher = parse_launcher(kernel, config)?;
        // keyed by the handle the launcher holds (read from the object again by the parse)
        let handle = launcher.get().dims().stream as u64;
        cache.insert(written.key(StreamKey::Object(handle)), None);
        launcher
    };
    cache.remember_recent(
        py,
        Recent {
            key: written.key(StreamKey::Default),
            stream: stream.as_ptr() as usize,
            launcher: launcher.clone().into_any().unbind(),
        },
    );
    Ok(launcher.into_any())
}

/// The full parse of `kernel[config]` (numba-cuda's errors for bad values).
fn parse<'py>(
    kernel: &Bound<'py, Kernel>,
    config: &Bound<'py, PyAny>,
) -> Result<Bound<'py, PyAny>> {
    Ok(parse_launcher(kernel, config)?.into_any())
}

fn parse_launcher<'py>(
    kernel: &Bound<'py, Kernel>,
    config: &Bound<'py, PyAny>,
) -> Result<Bound<'py, Launcher>> {
    kernel.get().configurations.note_parse();
    let launcher = Launcher::from_subscript(kernel, config)?;
    Ok(Bound::new(kernel.py(), launcher)?)
}
