//! Bound launches: `kernel[...].bind(*args)` resolves and packs the arguments once;
//! calling the result submits again with no classification or packing.

use std::sync::Arc;

use fastlaunch_driver::{self as driver, LaunchDims};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use crate::devices::{compute_capability_code, driver};
use crate::errors::{Error, Result};
use crate::launch::code::CompiledCode;
use crate::launch::limits;
use crate::launch::overloads::{Kernel, Target};
use crate::launch::packed::PackedArgs;
use crate::launch::{check_argument_count, resolve, LaunchConfig};
use crate::scratch::Scratch;

/// A launch whose arguments are classified and packed once: `kernel[...].bind(*args)`.
/// Calling it submits again with no classification or packing.
#[pyclass(module = "fastlaunch._core")]
pub struct BoundLaunch {
    kernel: Py<Kernel>,
    /// The stream object as given, kept alive so that its handle stays valid.
    _stream: Py<PyAny>,
    code: Arc<CompiledCode>,
    dims: LaunchDims,
    cluster: Option<[u32; 3]>,
    context: driver::Context,
    ordinal: usize,
    packed: PackedArgs,
}

/// `kernel[...].bind(*args)`: resolves and packs `args` once, for `config`.
pub(crate) fn bind(
    py: Python<'_>,
    kernel_object: &Bound<'_, Kernel>,
    config: &LaunchConfig,
    args: &Bound<'_, PyTuple>,
) -> Result<BoundLaunch> {
    let names = kernel_object.get().names();
    check_argument_count(names, args.len())?;
    let driver = driver()?;
    let context = driver.launch_context()?;
    let compute_capability = compute_capability_code(driver, context.ordinal)?;
    let mut scratch = Scratch::for_stream(config.dims.stream);
    let configuration = (&config.dims, &config.stream);
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
    code.prepare_cluster(driver, context.ordinal, compute_capability, config.cluster)?;
    Ok(BoundLaunch {
        kernel: kernel_object.clone().unbind(),
        _stream: config.stream.clone_ref(py),
        code: code.clone(),
        dims: config.dims,
        cluster: config.cluster,
        context: context.context,
        ordinal: context.ordinal,
        packed: PackedArgs::new(plan, &scratch, names, args)?,
    })
}

#[pymethods]
impl BoundLaunch {
    /// What it keeps alive, shown to the cycle collector: an argument that refers back to
    /// its bound launch is then collected (none of these is dropped before the launch is).
    fn __traverse__(&self, visit: PyVisit<'_>) -> std::result::Result<(), PyTraverseError> {
        visit.call(&self.kernel)?;
        visit.call(&self._stream)?;
        self.packed.traverse(&visit)
    }

    /// Submits the launch again, as bound.
    #[inline]
    fn __call__(&self, py: Python<'_>) -> Result<()> {
        let driver = driver()?;
        let current = driver.launch_context()?;
        if current.context != self.context {
            return Err(Error::Value(
                "this launch was bound in another CUDA context; bind it again in this one".into(),
            ));
        }
        // SAFETY: the slots were packed by the overload's plan for these arguments, which
        // the packed arguments keep alive; the driver only reads them.
        unsafe {
            self.code.submit(
                py,
                driver,
                &current,
                &self.dims,
                self.cluster,
                self.packed.params(),
            )
        }
    }

    /// For benchmarks: submits the launch `times` times from one Rust loop, with no Python
    /// between launches (a floor measured inside the calling process, beside the launches it
    /// makes from Python).
    fn _submit_repeatedly(&self, py: Python<'_>, times: usize) -> Result<()> {
        for _ in 0..times {
            self.__call__(py)?;
        }
        Ok(())
    }

    /// Replaces every argument (same types as bound), repacking them all.
    #[pyo3(signature = (*args))]
    fn set_args(&mut self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> Result<()> {
        let kernel = self.kernel.clone_ref(py);
        let names = kernel.bind(py).get().names();
        self.packed.set_args(names, Some(self.ordinal), args)
    }

    /// Replaces argument `index` by `value` of the same type, repacking only its slots.
    fn set_arg(&mut self, py: Python<'_>, index: usize, value: &Bound<'_, PyAny>) -> Result<()> {
        let kernel = self.kernel.clone_ref(py);
        let names = kernel.bind(py).get().names();
        self.packed.set_arg(names, Some(self.ordinal), index, value)
    }

    /// The parameter slots as the driver reads them (8 bytes each), as `_core.pack` gives
    /// them: for tests.
    #[getter]
    fn packed<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let bytes: Vec<u8> = self
            .packed
            .params()
            .slots()
            .iter()
            .flat_map(|slot| slot.to_ne_bytes())
            .collect();
        PyBytes::new(py, &bytes)
    }
}
