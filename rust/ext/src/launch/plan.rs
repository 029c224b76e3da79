//! Packing plans: how each argument of one overload becomes kernel parameters, in
//! numba's data model. An N-d array is `5 + 2N` 8-byte values (meminfo = 0,
//! parent = 0, nitems, itemsize, data, `shape[N]`, `strides_in_bytes[N]`); a scalar is
//! its target type's value (complex: real then imaginary); a record is the address of its
//! device copy. Plans are built from numba's parameter types in `numba_types.rs`.

use fastlaunch_driver::ParamBuffer;

use crate::classify::fingerprint::{argument_of_value, Item, Walker};
use crate::classify::Position;
use crate::errors::{Error, Result};
use crate::scalar::Scalar;
use crate::scratch::ArgValue;

#[cfg(test)]
#[path = "plan_proptests.rs"]
mod plan_proptests;

/// Where an array's data pointer is among its slots (after meminfo, parent, nitems and
/// itemsize).
pub(crate) const ARRAY_DATA_SLOT: usize = 4;

/// How many slots an array of `ndim` dimensions is packed into.
pub(crate) const fn array_slot_count(ndim: usize) -> usize {
    5 + 2 * ndim
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Param {
    Array {
        ndim: usize,
    },
    Scalar(Scalar),
    /// A pointer to the record's device copy.
    Record,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    params: Box<[Param]>,
}

impl Plan {
    /// The plan packing these kernel parameters, in order (built from an overload's numba
    /// parameter types by `numba_types::plan_of_types`).
    pub(crate) fn new(params: Vec<Param>) -> Plan {
        Plan {
            params: params.into(),
        }
    }

    /// Parameter `index` (a flattened value's), if the plan has it.
    pub(crate) fn param(&self, index: usize) -> Option<Param> {
        self.params.get(index).copied()
    }

    /// Checks that arguments with this fingerprint can be packed by this plan: same
    /// count, arrays where arrays are expected with the same ndim (of any element type:
    /// the array's itemsize is in its value), scalars for scalars
    /// (enum members and datetimes are scalars; tuple headers stand for no parameter).
    pub(crate) fn check_fingerprint(&self, fingerprint: &[u8]) -> Result<()> {
        let mut walker = Walker::new(fingerprint);
        let mut params = self.params.iter().enumerate();
        while !walker.is_done() {
            let item = walker.item().map_err(|_| {
                Error::Value(format!(
                    "plan has {} parameters, the arguments a different number",
                    self.params.len()
                ))
            })?;
            if let Item::Tuple { .. } = item {
                continue;
            }
            let (index, param) = params
                .next()
                .ok_or_else(|| Error::Value("arguments outnumber the plan's parameters".into()))?;
            let fits = match (param, item) {
                (Param::Array { ndim }, Item::Array { ndim: given, .. }) => {
                    usize::from(given) == *ndim
                }
                (Param::Scalar(_), Item::Scalar(_) | Item::Enum(_) | Item::Datetime { .. }) => true,
                (Param::Record, Item::Record(_)) => true,
                _ => false,
            };
            if !fits {
                return Err(Error::Value(format!(
                    "plan entry {index} ({param:?}) does not fit the argument's kind"
                )));
            }
        }
        if params.next().is_some() {
            return Err(Error::Value(format!(
                "plan has {} parameters, the arguments a different number",
                self.params.len()
            )));
        }
        Ok(())
    }

    /// Packs the classified arguments into `out`. `fingerprint` names the argument of a
    /// value that cannot be packed (tuples hold several values).
    #[inline]
    pub(crate) fn pack(
        &self,
        values: &[ArgValue],
        dims: &[i64],
        names: &[String],
        fingerprint: &[u8],
        out: &mut ParamBuffer,
    ) -> Result<()> {
        for (index, value) in values.iter().enumerate() {
            if let Err(error) = self.pack_one(index, value, dims, &[], out) {
                return Err(rename_argument(error, fingerprint, names));
            }
        }
        Ok(())
    }

    /// Packs argument `index` (classified as `value`) into `out`.
    #[inline]
    pub(crate) fn pack_one(
        &self,
        index: usize,
        value: &ArgValue,
        dims: &[i64],
        names: &[String],
        out: &mut ParamBuffer,
    ) -> Result<()> {
        match (self.params.get(index), value) {
            (Some(Param::Array { ndim }), ArgValue::Array(array)) if array.ndim == *ndim => {
                let extents_and_strides = array
                    .ndim
                    .checked_mul(2)
                    .and_then(|len| dims.get(array.dims_at..)?.get(..len))
                    .ok_or_else(|| {
                        Error::Value(format!("argument {index}: array dimensions out of range"))
                    })?;
                // meminfo, parent, nitems, itemsize, data, then shape and strides
                out.extend_u64(&[0, 0, array.nitems, array.itemsize, array.data]);
                out.extend_i64(extents_and_strides);
            }
            (Some(Param::Record), ArgValue::Record { device }) => out.push_u64(*device),
            (Some(Param::Scalar(target)), ArgValue::Scalar(value)) => {
                let slots = value.convert(*target).map_err(|message| {
                    Position {
                        index,
                        name: names.get(index).map_or("", String::as_str),
                    }
                    .error(message)
                })?;
                out.push_u64(slots[0]);
                if target.is_complex() {
                    out.push_u64(slots[1]);
                }
            }
            _ => {
                return Err(Error::Value(format!(
                    "argument {index} does not match its packing plan"
                )))
            }
        }
        Ok(())
    }
}

/// Points an error about value `position` at the argument holding it, by name.
#[cold]
fn rename_argument(error: Error, fingerprint: &[u8], names: &[String]) -> Error {
    match error {
        Error::Argument {
            position, message, ..
        } => {
            let argument = argument_of_value(fingerprint, position);
            Error::Argument {
                position: argument,
                name: names.get(argument).cloned().unwrap_or_default(),
                message,
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::fingerprint::{ARRAY_TAG, DATETIME_TAG, RECORD_TAG};
    use crate::scalar::Value;
    use crate::scratch::ArrayArg;

    #[test]
    fn arrays_pack_in_numbas_data_model() {
        let plan = Plan::new(vec![Param::Array { ndim: 2 }, Param::Scalar(Scalar::F32)]);
        let dims = [3, 4, 16, 4];
        let values = [
            ArgValue::Array(ArrayArg {
                data: 0xdead_0000,
                itemsize: 4,
                nitems: 12,
                ndim: 2,
                dims_at: 0,
            }),
            ArgValue::Scalar(Value::Float(1.5)),
        ];
        let mut out = ParamBuffer::default();
        plan.pack(&values, &dims, &[], &[], &mut out).unwrap();
        assert_eq!(
            out.slots(),
            &[
                0,
                0,
                12,
                4,
                0xdead_0000,
                3,
                4,
                16,
                4,
                u64::from(1.5f32.to_bits())
            ]
        );
        assert_eq!(out.slots()[ARRAY_DATA_SLOT], 0xdead_0000);
        assert_eq!(out.len(), array_slot_count(2) + 1);
    }

    #[test]
    fn plans_are_checked_against_fingerprints() {
        let plan = Plan::new(vec![Param::Array { ndim: 1 }, Param::Scalar(Scalar::I32)]);
        assert!(plan
            .check_fingerprint(&[ARRAY_TAG, 11, 1, 0, Scalar::I64 as u8])
            .is_ok());
        assert!(plan
            .check_fingerprint(&[ARRAY_TAG, 11, 2, 0, Scalar::I64 as u8])
            .is_err());
        assert!(plan.check_fingerprint(&[ARRAY_TAG, 11, 1, 0]).is_err());
        assert!(plan
            .check_fingerprint(&[Scalar::I64 as u8, Scalar::I64 as u8])
            .is_err());
        assert!(Plan::new(vec![Param::Record])
            .check_fingerprint(&[Scalar::I64 as u8])
            .is_err());
        // Arrays of records and datetimes are arrays; a record is no array.
        let record_array = [ARRAY_TAG, RECORD_TAG, 3, 0, 1, 0];
        let datetime_array = [ARRAY_TAG, DATETIME_TAG, 0, 10, 1, 0];
        let arrays = Plan::new(vec![Param::Array { ndim: 1 }]);
        assert!(arrays.check_fingerprint(&record_array).is_ok());
        assert!(arrays.check_fingerprint(&datetime_array).is_ok());
        assert!(arrays.check_fingerprint(&[RECORD_TAG, 3, 0]).is_err());
        assert!(Plan::new(vec![Param::Record])
            .check_fingerprint(&record_array)
            .is_err());
    }
}
