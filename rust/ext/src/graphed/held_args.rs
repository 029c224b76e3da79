//! The arguments of one `fastlaunch.graphed` call, kept with what each tensor among them
//! (torch's, or any producer of the DLPack C exchange API) described then: its memory,
//! dtype, shape, strides and device. A torch tensor can change all of these under the same
//! identity (`set_()`, `resize_()`, `as_strided_()`, `.data = ...`), so identity alone does
//! not say that a later call has the same form, nor that a graph pinned to the tensor still
//! reads and writes the tensor's memory. A CuPy array can change its shape (`a.shape = ...`).
//! [`HeldArgs::holds`] says both in one call: the very same objects, the same current
//! device, every tensor reads as it did and every CuPy array has the shape it had.
//!
//! Built by `step_form` (`step_form.rs`) only when every other argument keeps its form for
//! as long as it lives (scalars, plain values, streams, numba arrays).

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::classify::HeldCupyShape;
use crate::errors::Error;
use crate::interop::dlpack::ExchangeApi;
use crate::interop::held_tensor::HeldTensor;
use fastlaunch_driver as driver;

/// A call's arguments and what its tensors described; see the module documentation.
#[pyclass(frozen, module = "fastlaunch._core")]
pub(crate) struct HeldArgs {
    args: Py<PyTuple>,
    device: i64,
    /// The tensors among them: their index in the call, what they described.
    tensors: Vec<(usize, HeldTensor)>,
    /// The CuPy arrays among them: their index in the call, their shape.
    cupy_arrays: Vec<(usize, HeldCupyShape)>,
}

impl HeldArgs {
    /// Starts holding `args` (called with `device` current).
    pub(crate) fn new(args: &Bound<'_, PyTuple>, device: i64) -> HeldArgs {
        HeldArgs {
            args: args.clone().unbind(),
            device,
            tensors: Vec::new(),
            cupy_arrays: Vec::new(),
        }
    }

    /// Adds argument `index`, `arg`, a tensor read through `api`; false when it cannot be
    /// held.
    pub(crate) fn hold_tensor(
        &mut self,
        arg: &Bound<'_, PyAny>,
        index: usize,
        api: ExchangeApi,
    ) -> bool {
        match HeldTensor::read(arg, api) {
            Some(tensor) => {
                self.tensors.push((index, tensor));
                true
            }
            None => false,
        }
    }

    /// Adds argument `index`, `arg`, when it is a CuPy array (its shape kept); false when it
    /// is not.
    pub(crate) fn hold_cupy_array(&mut self, arg: &Bound<'_, PyAny>, index: usize) -> bool {
        match HeldCupyShape::read(arg) {
            Some(shape) => {
                self.cupy_arrays.push((index, shape));
                true
            }
            None => false,
        }
    }

    /// Whether `args` are the very objects held, in order, the current device is the one
    /// they were held on, every tensor among them reads as it did then and every CuPy array
    /// has the shape it had.
    pub(crate) fn holds_args(&self, args: &Bound<'_, PyTuple>) -> bool {
        let held = self.args.bind(args.py());
        let same = held.len() == args.len()
            && held
                .iter_borrowed()
                .zip(args.iter_borrowed())
                .all(|(x, y)| x.as_ptr() == y.as_ptr());
        same && current_device() == Some(self.device)
            && self.tensors.iter().all(|(index, tensor)| {
                held.get_borrowed_item(*index)
                    .is_ok_and(|arg| tensor.still(&arg))
            })
            && self.cupy_arrays.iter().all(|(index, shape)| {
                held.get_borrowed_item(*index)
                    .is_ok_and(|arg| shape.still(&arg))
            })
    }
}

#[pymethods]
impl HeldArgs {
    /// `holds(args)`: see [`HeldArgs::holds_args`].
    fn holds(&self, args: &Bound<'_, PyTuple>) -> bool {
        self.holds_args(args)
    }

    /// The arguments held.
    #[getter]
    fn args(&self, py: Python<'_>) -> Py<PyTuple> {
        self.args.clone_ref(py)
    }

    /// How many of them are tensors whose description is checked.
    #[getter]
    fn tensor_count(&self) -> usize {
        self.tensors.len()
    }
}

/// The current device as `graphed.py`'s `_device()` counts it (0 without CUDA or without a
/// current context); None when asking fails otherwise (the caller's slower path says why).
fn current_device() -> Option<i64> {
    match crate::devices::current_device() {
        Ok(device) => Some(device.map_or(0, |d| d as i64)),
        Err(Error::Driver(driver::Error::Unavailable(_))) => Some(0),
        Err(_) => None,
    }
}
