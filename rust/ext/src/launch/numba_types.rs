//! The packing plan of a compiled overload, built from its numba parameter types
//! (`kernel.signature.args`). Misses only: the hot path never reads a numba type.
//!
//! Each parameter becomes the kernel parameters numba passes for it: an array its
//! descriptor, a record a pointer to its device copy, a boolean / integer / float / complex
//! its value, a datetime or timedelta its int64 count, an enum member its value (of the
//! member's `dtype`), and a tuple its members, flattened. Any other type is not packed by
//! fastlaunch: numba-cuda launches such overloads.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use crate::errors::{Error, Result};
use crate::launch::plan::{Param, Plan};
use crate::scalar::Scalar;

/// numba's type classes, imported once (from `numba.cuda.types`, as `dispatcher.py` does).
struct Classes {
    array: Py<PyType>,
    record: Py<PyType>,
    boolean: Py<PyType>,
    numbers: [Py<PyType>; 3],
    datetimes: [Py<PyType>; 2],
    enum_member: Py<PyType>,
    base_tuple: Py<PyType>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

fn classes(py: Python<'_>) -> PyResult<&Classes> {
    CLASSES.get_or_try_init(py, || {
        let types = py.import("numba.cuda.types")?;
        let class = |name: &str| -> PyResult<Py<PyType>> {
            Ok(types.getattr(name)?.cast_into::<PyType>()?.unbind())
        };
        Ok(Classes {
            array: class("Array")?,
            record: class("Record")?,
            boolean: class("Boolean")?,
            numbers: [class("Integer")?, class("Float")?, class("Complex")?],
            datetimes: [class("NPDatetime")?, class("NPTimedelta")?],
            enum_member: class("EnumMember")?,
            base_tuple: class("BaseTuple")?,
        })
    })
}

/// A parameter type fastlaunch does not pack (numba-cuda launches the overload); the
/// message names the parameter and its type.
#[derive(Debug)]
pub(crate) struct Unpacked(pub(crate) String);

/// Where a plan is required (tests and tools), an unpacked type is a `TypeError`.
impl From<Unpacked> for Error {
    fn from(Unpacked(message): Unpacked) -> Error {
        Error::Type(message)
    }
}

/// The plan packing arguments for parameters of numba types `param_types` (one per
/// argument), or the first parameter fastlaunch does not pack. `names` name the parameters
/// in that message (`arg<i>` past their end). `Err` only for a type whose scalar name is not
/// a fastlaunch scalar, or a Python error reading the types.
pub(crate) fn plan_of_types(
    param_types: &Bound<'_, PyAny>,
    names: &[String],
) -> Result<std::result::Result<Plan, Unpacked>> {
    let classes = classes(param_types.py())?;
    let mut params = Vec::new();
    for (position, param_type) in param_types.try_iter()?.enumerate() {
        if let Some(unpacked) = push_params(classes, &param_type?, &mut params)? {
            let name = names
                .get(position)
                .cloned()
                .unwrap_or_else(|| format!("arg{position}"));
            return Ok(Err(Unpacked(format!(
                "argument {position} ({name}): fastlaunch does not pack parameters of type \
                 {}",
                unpacked.str()?
            ))));
        }
    }
    Ok(Ok(Plan::new(params)))
}

/// Appends the kernel parameters of one numba type; or returns the type (it, or a member of
/// it) that fastlaunch does not pack.
fn push_params<'py>(
    classes: &Classes,
    param_type: &Bound<'py, PyAny>,
    params: &mut Vec<Param>,
) -> Result<Option<Bound<'py, PyAny>>> {
    let py = param_type.py();
    let is = |class: &Py<PyType>| param_type.is_instance(class.bind(py));
    if is(&classes.array)? {
        params.push(Param::Array {
            ndim: param_type.getattr("ndim")?.extract()?,
        });
    } else if is(&classes.record)? {
        params.push(Param::Record);
    } else if is(&classes.boolean)? {
        params.push(Param::Scalar(Scalar::Bool));
    } else if any_of(&classes.numbers, &is)? {
        let name: String = param_type.getattr("name")?.extract()?;
        let scalar = Scalar::from_name(&name)
            .ok_or_else(|| Error::Value(format!("unsupported parameter type {name:?}")))?;
        params.push(Param::Scalar(scalar));
    } else if any_of(&classes.datetimes, &is)? {
        params.push(Param::Scalar(Scalar::I64));
    } else if is(&classes.enum_member)? {
        return push_params(classes, &param_type.getattr("dtype")?, params);
    } else if is(&classes.base_tuple)? {
        for member in param_type.try_iter()? {
            if let Some(unpacked) = push_params(classes, &member?, params)? {
                return Ok(Some(unpacked));
            }
        }
    } else {
        return Ok(Some(param_type.clone()));
    }
    Ok(None)
}

fn any_of(classes: &[Py<PyType>], is: &impl Fn(&Py<PyType>) -> PyResult<bool>) -> PyResult<bool> {
    for class in classes {
        if is(class)? {
            return Ok(true);
        }
    }
    Ok(false)
}
