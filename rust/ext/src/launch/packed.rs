//! Arguments classified and packed once, for launches that submit them again: bound
//! launches (`bound.rs`) and captured graph nodes (`graphs.rs`). One argument can be
//! replaced in place by another of the same type, repacking only its slots; launches like
//! the last (`repeat.rs`) repack theirs with the same pieces.

use std::ops::Range;

use fastlaunch_driver::ParamBuffer;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::{PyTraverseError, PyVisit};

use crate::classify::fingerprint::split_arguments;
use crate::classify::{read_arg, Position};
use crate::devices::driver;
use crate::errors::{Error, Result};
use crate::launch::limits;
use crate::launch::plan::Plan;
use crate::scratch::Scratch;

/// Where one argument is in a launch packed argument by argument ([`pack_by_argument`]).
#[derive(Clone, Debug)]
pub(crate) struct PackedArgument {
    /// Its bytes in the launch's fingerprint.
    pub fingerprint: Range<usize>,
    /// Its first value in the plan (a tuple's values are flattened).
    pub first_value: usize,
    /// Its parameter slots.
    pub slots: Range<usize>,
}

/// Packs the arguments classified in `scratch` with `plan` into `out`, argument by argument:
/// where each one's fingerprint bytes, values and slots are.
pub(crate) fn pack_by_argument(
    plan: &Plan,
    scratch: &Scratch,
    names: &[String],
    out: &mut ParamBuffer,
) -> Result<Vec<PackedArgument>> {
    let (parts, value_counts) = split_arguments(&scratch.fingerprint);
    let mut arguments = Vec::with_capacity(parts.len());
    let (mut first_value, mut fingerprint_at) = (0, 0);
    for (part, count) in parts.iter().zip(value_counts) {
        let slots_start = out.len();
        let values = scratch
            .values
            .get(first_value..first_value + count)
            .ok_or_else(|| Error::Value("the arguments' values do not match their types".into()))?;
        for (offset, value) in values.iter().enumerate() {
            plan.pack_one(first_value + offset, value, &scratch.dims, names, out)?;
        }
        arguments.push(PackedArgument {
            fingerprint: fingerprint_at..fingerprint_at + part.len(),
            first_value,
            slots: slots_start..out.len(),
        });
        first_value += count;
        fingerprint_at += part.len();
    }
    Ok(arguments)
}

/// Reads `arg` into `scratch`, after what it holds: whether its fingerprint bytes are
/// `expected` (the type, ndim and layout it replaces).
pub(crate) fn read_argument(
    arg: &Bound<'_, PyAny>,
    at: Position<'_>,
    expected: &[u8],
    scratch: &mut Scratch,
) -> Result<bool> {
    let fingerprint_start = scratch.fingerprint.len();
    read_arg(arg, at, scratch)?;
    Ok(scratch.fingerprint.get(fingerprint_start..) == Some(expected))
}

/// Packs the values `scratch` holds from `values_start` (one argument, read by
/// [`read_argument`]) as the plan's values from `first_value`, into `scratch.params`
/// (cleared first): the argument's slots.
pub(crate) fn pack_argument<'s>(
    plan: &Plan,
    first_value: usize,
    values_start: usize,
    names: &[String],
    scratch: &'s mut Scratch,
) -> Result<&'s [u64]> {
    scratch.params.clear();
    for (offset, value) in scratch.values[values_start..].iter().enumerate() {
        plan.pack_one(
            first_value + offset,
            value,
            &scratch.dims,
            names,
            &mut scratch.params,
        )?;
    }
    Ok(scratch.params.slots())
}

/// Arguments packed once, with what replacing one of them in place needs: the fingerprint
/// and where each argument is in it, in the plan and in the slots. Bound launches and graph
/// nodes hold one.
pub(crate) struct PackedArgs {
    plan: Plan,
    /// The packed values, their pointer array prepared.
    params: ParamBuffer,
    fingerprint: Box<[u8]>,
    arguments: Vec<PackedArgument>,
    /// The arguments, kept alive while they are packed here.
    args: Vec<Py<PyAny>>,
    launch_stream: usize,
}

impl PackedArgs {
    /// The arguments packed here, in order.
    pub(crate) fn args(&self) -> &[Py<PyAny>] {
        &self.args
    }

    /// Shows the arguments kept alive here to the cycle collector.
    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> std::result::Result<(), PyTraverseError> {
        self.args.iter().try_for_each(|arg| visit.call(arg))
    }

    /// Packs the arguments classified in `scratch`.
    pub(crate) fn new(
        plan: &Plan,
        scratch: &Scratch,
        names: &[String],
        args: &Bound<'_, PyTuple>,
    ) -> Result<PackedArgs> {
        if !scratch.staging.copies.is_empty() {
            return Err(Error::Type(
                "bound launches and graph argument updates take no records or host arrays \
                 (each launch copies them to the device and back); pass device arrays"
                    .into(),
            ));
        }
        let mut params = ParamBuffer::with_capacity(scratch.params.len());
        let arguments = pack_by_argument(plan, scratch, names, &mut params)?;
        params.prepare();
        Ok(PackedArgs {
            plan: plan.clone(),
            params,
            fingerprint: scratch.fingerprint.as_slice().into(),
            arguments,
            args: args.iter().map(Bound::unbind).collect(),
            launch_stream: scratch.streams.launch_stream,
        })
    }

    /// The packed values, prepared: what the driver reads.
    pub(crate) fn params(&self) -> &ParamBuffer {
        &self.params
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
        let Some(argument) = self.arguments.get(index).cloned() else {
            return Err(Error::Index(format!("argument index {index} out of range")));
        };
        let mut scratch = Scratch::for_stream(self.launch_stream);
        let at = Position {
            index,
            name: names.get(index).map_or("", String::as_str),
        };
        let expected = &self.fingerprint[argument.fingerprint];
        if !read_argument(value, at, expected, &mut scratch)? {
            return Err(at.error(
                "a bound argument can only be replaced by one of the same type, ndim and layout",
            ));
        }
        if let Some(ordinal) = ordinal {
            limits::check_devices(driver()?, ordinal, &scratch, names)?;
        }
        let packed = pack_argument(&self.plan, argument.first_value, 0, names, &mut scratch)?;
        self.params.slots_mut()[argument.slots].copy_from_slice(packed);
        self.args[index] = value.clone().unbind();
        Ok(())
    }
}
