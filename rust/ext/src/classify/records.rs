//! Records: structured NumPy scalars (`np.void`, `np.record`), passed as a pointer to a
//! device copy that the launch stages (see `HostCopy`).

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;

use super::arrays::{dtype_element, ElementType};
use super::{fingerprint, ArgValue, HostCopy, Position, Scratch};
use crate::errors::Result;

/// A structured NumPy scalar (`np.void`, `np.record`): its dtype in the fingerprint (by the
/// id its arrays have too, `arrays::dtype_element`), its bytes staged for the launch to
/// copy. Unstructured void scalars (raw bytes) go to numba-cuda, which refuses them as
/// numba-cuda does.
pub(super) fn read(arg: &Bound<'_, PyAny>, at: Position<'_>, scratch: &mut Scratch) -> Result<()> {
    let py = arg.py();
    let dtype = arg.getattr(intern!(py, "dtype"))?;
    let Some((id, len)) = dtype_element(&dtype, at)?.and_then(ElementType::record) else {
        scratch.needs_numba = true;
        return Ok(());
    };
    let mut view = std::mem::MaybeUninit::<ffi::Py_buffer>::uninit();
    // SAFETY: a valid object and an out-struct; on success the view is released below.
    if unsafe { ffi::PyObject_GetBuffer(arg.as_ptr(), view.as_mut_ptr(), ffi::PyBUF_SIMPLE) } != 0 {
        let cause = PyErr::fetch(py);
        return Err(at.error(format!("record bytes could not be read: {cause}")));
    }
    // SAFETY: initialised by the successful call above.
    let mut view = unsafe { view.assume_init() };
    let (host, exported) = (view.buf as usize, usize::try_from(view.len).unwrap_or(0));
    // The address stays valid after the release: a NumPy scalar's bytes live as long as the
    // scalar (or the array it views, which it holds), and the argument outlives the launch.
    // SAFETY: releasing the view obtained above, once.
    unsafe { ffi::PyBuffer_Release(&mut view) };
    if exported != len {
        return Err(at.error(format!(
            "record exports {exported} bytes but its dtype has {len}"
        )));
    }
    let writable = arg
        .getattr(intern!(py, "flags"))?
        .getattr(intern!(py, "writeable"))?
        .is_truthy()?;
    fingerprint::push_record(&mut scratch.fingerprint, id);
    scratch.staging.copies.push(HostCopy {
        value: scratch.values.len(),
        host,
        len,
        copy_in: true,
        copy_back: writable,
    });
    scratch.values.push(ArgValue::Record { device: 0 });
    Ok(())
}
