//! Inspection for tests and debugging, off the launch path: what classification, the
//! fingerprint and the packer (with the plan built from numba types) make of given
//! arguments, with no GPU needed.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::classify::fingerprint::describe as describe_fingerprint;
use crate::classify::{read_arg, Position};
use crate::errors::{Error, Result};
use crate::launch::numba_types::plan_of_types;
use crate::scratch::Scratch;

/// Classifies one object as a kernel argument: its descriptor, as `_on_miss` sees it.
#[pyfunction]
pub(crate) fn classify<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    let mut scratch = Scratch::default();
    read_arg(obj, Position { index: 0, name: "" }, &mut scratch)?;
    refuse_numba_only(&scratch)?;
    let mut described = describe_fingerprint(py, &scratch.fingerprint)?;
    Ok(described.remove(0))
}

/// Describes a fingerprint as the per-argument descriptors `_on_miss` turns into numba types.
#[pyfunction]
pub(crate) fn describe<'py>(
    py: Python<'py>,
    fingerprint: &[u8],
) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    describe_fingerprint(py, fingerprint)
}

/// Packs `args` exactly as a launch of an overload with numba parameter types
/// `param_types` would, returning the parameter slots (8 bytes each) as bytes. Needs no
/// GPU: for tests against numba's data model. A parameter type fastlaunch does not pack
/// raises `TypeError` (numba-cuda launches such overloads).
#[pyfunction]
pub(crate) fn pack<'py>(
    py: Python<'py>,
    param_types: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
) -> Result<Bound<'py, PyBytes>> {
    let plan = plan_of_types(param_types, &[])??;
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
pub(crate) fn fingerprint<'py>(
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
             fastlaunch (host arrays that are not C- or F-contiguous or are ndarray \
             subclasses, arrays of unstructured void or datetime multiples such as [10s], \
             cuda.In/Out/InOut and tuples holding those)"
                .into(),
        ));
    }
    Ok(())
}
