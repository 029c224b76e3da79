//! Tuples, named tuples and enum members. Tuples are flattened: each member is read as an
//! argument of its own and pushes its own value, as numba passes them. Enum members pass
//! their `value`. The classes whose identity is part of a numba type get an id
//! (`classes.rs`), which the fingerprint carries.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyTuple};

use super::classes::class_id;
use super::fingerprint::{self, MAX_TUPLE_DEPTH};
use super::{has_attribute, read_arg, Position, Scratch, Strategy};
use crate::errors::Result;

/// How members of an enum class whose values are all numbers are read (`is_enum`: `arg`
/// is an `Enum` member).
pub(super) fn enum_strategy(class: &Bound<'_, PyAny>, is_enum: bool) -> Option<Strategy> {
    if is_enum && enum_values_are_numbers(class) {
        return class_id(class).map(Strategy::Enum);
    }
    None
}

/// How `arg` is read if it is a tuple or a named tuple.
pub(super) fn tuple_strategy(arg: &Bound<'_, PyAny>, class: &Bound<'_, PyAny>) -> Option<Strategy> {
    let py = arg.py();
    if arg.is_instance_of::<PyTuple>() {
        if arg.get_type().is(py.get_type::<PyTuple>()) {
            return Some(Strategy::Tuple(None));
        }
        if has_attribute(class, "_fields") {
            if let Some(id) = class_id(class) {
                return Some(Strategy::Tuple(Some(id)));
            }
        }
    }
    None
}

/// Whether every member of an enum class has an int, float or bool value (numba types
/// such enums; others go to its own launch path).
fn enum_values_are_numbers(class: &Bound<'_, PyAny>) -> bool {
    let py = class.py();
    let Ok(members) = class.getattr(intern!(py, "__members__")) else {
        return false;
    };
    let Ok(values) = members.call_method0(intern!(py, "values")) else {
        return false;
    };
    let Ok(values) = values.try_iter() else {
        return false;
    };
    let mut any = false;
    for member in values {
        let Ok(value) = member.and_then(|m| m.getattr(intern!(py, "value"))) else {
            return false;
        };
        let exact = value.get_type();
        let number = exact.is(py.get_type::<PyInt>())
            || exact.is(py.get_type::<PyFloat>())
            || exact.is(py.get_type::<PyBool>());
        if !number {
            return false;
        }
        any = true;
    }
    any
}

/// A tuple: its header, then each member read as an argument of its own.
pub(super) fn read_tuple(
    arg: &Bound<'_, PyAny>,
    class: Option<u16>,
    at: Position<'_>,
    scratch: &mut Scratch,
) -> Result<()> {
    let tuple = arg.cast::<PyTuple>().map_err(PyErr::from)?;
    let Ok(count) = u8::try_from(tuple.len()) else {
        scratch.needs_numba = true; // numba-cuda passes long tuples itself
        return Ok(());
    };
    if scratch.tuple_depth >= MAX_TUPLE_DEPTH {
        scratch.needs_numba = true;
        return Ok(());
    }
    fingerprint::push_tuple(&mut scratch.fingerprint, class, count);
    scratch.tuple_depth += 1;
    let members = tuple
        .iter()
        .try_for_each(|member| read_arg(&member, at, scratch));
    scratch.tuple_depth -= 1;
    members
}

/// An `Enum` / `IntEnum` member: numba passes its `value`.
pub(super) fn read_enum(
    arg: &Bound<'_, PyAny>,
    class: u16,
    at: Position<'_>,
    scratch: &mut Scratch,
) -> Result<()> {
    let value = arg.getattr(intern!(arg.py(), "value"))?;
    fingerprint::push_enum(&mut scratch.fingerprint, class);
    // The value is an exact int, float or bool (`enum_values_are_numbers`): read it as
    // such an argument, then drop its type byte, which the enum class already fixes.
    let class_end = scratch.fingerprint.len();
    read_arg(&value, at, scratch)?;
    scratch.fingerprint.truncate(class_end);
    Ok(())
}
