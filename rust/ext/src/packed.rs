//! Arguments classified and packed once, for launches that submit them again: bound
//! launches (`bound.rs`) and captured graph nodes (`graphs.rs`). One argument can be
//! replaced in place by another of the same type, repacking only its slots.

use fastlaunch_driver::ParamBuffer;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::classify::fingerprint::split_arguments;
use crate::classify::{read_arg, Position};
use crate::devices::driver;
use crate::errors::{Error, Result};
use crate::limits;
use crate::plan::Plan;
use crate::scratch::Scratch;

/// Arguments packed once, with what replacing one of them in place needs: each argument's
/// fingerprint bytes, its values (several for a tuple) and its parameter slots. Bound
/// launches and graph nodes hold one.
pub(crate) struct PackedArgs {
    plan: Plan,
    /// The packed values, their pointer array prepared.
    params: ParamBuffer,
    arg_fingerprints: Vec<Box<[u8]>>,
    /// The first of each argument's values in the plan (tuples are flattened).
    arg_first_value: Vec<usize>,
    arg_slots: Vec<std::ops::Range<usize>>,
    /// The arguments, kept alive while they are packed here.
    args: Vec<Py<PyAny>>,
    launch_stream: usize,
}

impl PackedArgs {
    /// The arguments packed here, in order.
    pub(crate) fn args(&self) -> &[Py<PyAny>] {
        &self.args
    }

    /// Packs the arguments classified in `scratch` (its `params` are overwritten).
    pub(crate) fn new(
        plan: &Plan,
        scratch: &mut Scratch,
        names: &[String],
        args: &Bound<'_, PyTuple>,
    ) -> Result<PackedArgs> {
        if !scratch.records.copies.is_empty() {
            return Err(Error::Type(
                "bound launches and graph argument updates take no records (each launch \
                 copies a record to the device and back)"
                    .into(),
            ));
        }
        scratch.params.clear();
        let (arg_fingerprints, value_counts) = split_arguments(&scratch.fingerprint);
        let mut arg_first_value = Vec::with_capacity(value_counts.len());
        let mut arg_slots = Vec::with_capacity(value_counts.len());
        let mut values = scratch.values.iter().enumerate();
        for count in value_counts {
            arg_first_value.push(values.clone().next().map_or(0, |(index, _)| index));
            let start = scratch.params.len();
            for (index, value) in values.by_ref().take(count) {
                plan.pack_one(index, value, &scratch.dims, names, &mut scratch.params)?;
            }
            arg_slots.push(start..scratch.params.len());
        }
        let mut params = ParamBuffer::from_slots(scratch.params.slots());
        params.prepare();
        Ok(PackedArgs {
            plan: plan.clone(),
            params,
            arg_fingerprints,
            arg_first_value,
            arg_slots,
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
        let (Some(expected), Some(&first_value), Some(slots)) = (
            self.arg_fingerprints.get(index),
            self.arg_first_value.get(index),
            self.arg_slots.get(index).cloned(),
        ) else {
            return Err(Error::Index(format!("argument index {index} out of range")));
        };
        let mut scratch = Scratch::for_stream(self.launch_stream);
        let at = Position {
            index,
            name: names.get(index).map_or("", String::as_str),
        };
        read_arg(value, at, &mut scratch)?;
        if *scratch.fingerprint != **expected {
            return Err(at.error(
                "a bound argument can only be replaced by one of the same type, ndim and layout",
            ));
        }
        if let Some(ordinal) = ordinal {
            limits::check_devices(driver()?, ordinal, &scratch, names)?;
        }
        for (offset, member) in scratch.values.iter().enumerate() {
            self.plan.pack_one(
                first_value + offset,
                member,
                &scratch.dims,
                names,
                &mut scratch.params,
            )?;
        }
        self.params.slots_mut()[slots].copy_from_slice(scratch.params.slots());
        self.args[index] = value.clone().unbind();
        Ok(())
    }
}
