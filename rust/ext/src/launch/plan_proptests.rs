//! Property tests for the packer (issue 7): `Plan::check_fingerprint` and `Plan::pack` /
//! `pack_one` never panic on any input, and pack exactly the slots the plan describes
//! whenever they succeed; the scalar names the plan builder reads from numba types map
//! back to their scalars. A child module of `plan`, so it can build plans directly and
//! read their parameters.

use fastlaunch_driver::ParamBuffer;
use proptest::collection::vec;
use proptest::prelude::*;

use super::{Param, Plan};
use crate::classify::fingerprint::{
    push_array, Element, ARRAY_TAG, DATETIME_TAG, DATETIME_UNITS, ENUM_TAG, READONLY_FLAG,
    RECORD_TAG,
};
use crate::classify::MAX_NDIM;
use crate::scalar::{Scalar, Value, ALL_SCALARS};
use crate::scratch::{ArgValue, ArrayArg};

/// Slots one plan entry packs: an N-d array is 5 + 2N, complex two, other scalars and
/// records one.
fn slots_of(param: &Param) -> usize {
    match param {
        Param::Array { ndim } => 5 + 2 * ndim,
        Param::Record => 1,
        Param::Scalar(s) if s.is_complex() => 2,
        Param::Scalar(_) => 1,
    }
}

fn plan_slots(plan: &Plan) -> usize {
    plan.params.iter().map(slots_of).sum()
}

fn scalar() -> impl Strategy<Value = Scalar> {
    proptest::sample::select(ALL_SCALARS.to_vec())
}

/// Any array element type: a scalar, a record of any dtype id, a datetime or timedelta of any
/// unit.
fn element() -> impl Strategy<Value = Element> {
    prop_oneof![
        scalar().prop_map(Element::Scalar),
        any::<u16>().prop_map(Element::Record),
        (0u8..2, 0..DATETIME_UNITS.len() as u8)
            .prop_map(|(kind, unit)| Element::Datetime { kind, unit }),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        any::<i128>().prop_map(Value::Int),
        any::<i64>().prop_map(|i| Value::Int(i.into())),
        any::<f64>().prop_map(Value::Float),
        any::<u16>().prop_map(Value::Half),
        (any::<f64>(), any::<f64>()).prop_map(|(re, im)| Value::Complex(re, im)),
    ]
}

/// Small dimension counts mostly, and now and then any usize (overflow of `2 * ndim`).
fn any_ndim() -> impl Strategy<Value = usize> {
    prop_oneof![
        8 => 0..=MAX_NDIM + 4,
        1 => (1usize..4, 0usize..8).prop_map(|(k, n)| 256 * k + n), // same low byte
        1 => any::<usize>(),
    ]
}

fn param() -> impl Strategy<Value = Param> {
    prop_oneof![
        any_ndim().prop_map(|ndim| Param::Array { ndim }),
        scalar().prop_map(Param::Scalar),
        Just(Param::Record),
    ]
}

fn plan() -> impl Strategy<Value = Plan> {
    vec(param(), 0..12).prop_map(|params| Plan {
        params: params.into(),
    })
}

/// A plan that real arrays can match (ndim within the fingerprint's one byte and NumPy's
/// limit).
fn valid_plan() -> impl Strategy<Value = Plan> {
    vec(
        prop_oneof![
            (0..=MAX_NDIM).prop_map(|ndim| Param::Array { ndim }),
            scalar().prop_map(Param::Scalar),
            Just(Param::Record),
        ],
        0..12,
    )
    .prop_map(|params| Plan {
        params: params.into(),
    })
}

/// Any argument value, consistent or not with any dims buffer.
fn arg_value() -> impl Strategy<Value = ArgValue> {
    prop_oneof![
        value().prop_map(ArgValue::Scalar),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any_ndim(),
            prop_oneof![4 => 0usize..80, 1 => any::<usize>()],
        )
            .prop_map(|(data, itemsize, nitems, ndim, dims_at)| {
                ArgValue::Array(ArrayArg {
                    data,
                    itemsize,
                    nitems,
                    ndim,
                    dims_at,
                })
            }),
    ]
}

/// Scalar type names: numba's and NumPy's (the builder maps numba types by `.name`), and
/// noise.
fn type_name() -> impl Strategy<Value = String> {
    prop_oneof![
        scalar().prop_map(|s| s.numba_name().to_owned()),
        scalar().prop_map(|s| s.numpy_name().to_owned()),
        "(u?int|float|complex)[0-9]{0,3}",
        ".{0,16}",
        any::<String>(),
    ]
}

/// The bytes `classify` writes for an argument matching `param`.
fn fingerprint_of(param: &Param, element: Element, flags: u8, scalar_code: Scalar) -> Vec<u8> {
    match param {
        Param::Array { ndim } => {
            let mut bytes = Vec::new();
            let readonly = flags & READONLY_FLAG != 0;
            push_array(&mut bytes, element, *ndim, flags & 3, readonly);
            bytes
        }
        Param::Scalar(_) => vec![scalar_code as u8],
        Param::Record => vec![RECORD_TAG, flags, flags],
    }
}

/// The slots numba's data model gives `value` for `param`, or None if it cannot be packed.
fn expected_slots(param: &Param, value: &ArgValue, dims: &[i64]) -> Option<Vec<u64>> {
    match (param, value) {
        (Param::Array { ndim }, ArgValue::Array(a)) if a.ndim == *ndim => {
            let end = a.dims_at.checked_add(a.ndim.checked_mul(2)?)?;
            let mut slots = vec![0, 0, a.nitems, a.itemsize, a.data];
            slots.extend(dims.get(a.dims_at..end)?.iter().map(|&d| d as u64));
            Some(slots)
        }
        (Param::Scalar(target), ArgValue::Scalar(v)) => {
            let converted = v.convert(*target).ok()?;
            Some(converted[..if target.is_complex() { 2 } else { 1 }].to_vec())
        }
        (Param::Record, ArgValue::Record { device }) => Some(vec![*device]),
        _ => None,
    }
}

/// A plan with arguments that fit it, as `classify` would produce them: arrays of the
/// plan's ndim whose shape and strides sit one after another in `dims`, and scalars of
/// any value (some do not convert to their parameter's type).
fn plan_with_args() -> impl Strategy<Value = (Plan, Vec<ArgValue>, Vec<i64>)> {
    valid_plan().prop_flat_map(|plan| {
        let args: Vec<_> = plan
            .params
            .iter()
            .map(|param| match *param {
                Param::Array { ndim } => (
                    any::<u64>(),
                    any::<u64>(),
                    any::<u64>(),
                    vec(any::<i64>(), 2 * ndim),
                )
                    .prop_map(move |(data, itemsize, nitems, dims)| {
                        (
                            ArgValue::Array(ArrayArg {
                                data,
                                itemsize,
                                nitems,
                                ndim,
                                dims_at: 0,
                            }),
                            dims,
                        )
                    })
                    .boxed(),
                Param::Scalar(_) => value()
                    .prop_map(|v| (ArgValue::Scalar(v), Vec::new()))
                    .boxed(),
                Param::Record => any::<u64>()
                    .prop_map(|device| (ArgValue::Record { device }, Vec::new()))
                    .boxed(),
            })
            .collect();
        (Just(plan), args).prop_map(|(plan, args)| {
            let mut dims = Vec::new();
            let values = args
                .into_iter()
                .map(|(value, own_dims)| match value {
                    ArgValue::Array(array) => {
                        let dims_at = dims.len();
                        dims.extend(own_dims);
                        ArgValue::Array(ArrayArg { dims_at, ..array })
                    }
                    scalar => scalar,
                })
                .collect();
            (plan, values, dims)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every numba scalar name (what `numba_types` reads from `Integer`, `Float` and
    /// `Complex` types) names its own scalar; any other name names a scalar only if it is
    /// that scalar's NumPy name.
    #[test]
    fn scalar_names_map_to_their_scalars(scalar in scalar(), name in type_name()) {
        prop_assert_eq!(Scalar::from_name(scalar.numba_name()), Some(scalar));
        if let Some(named) = Scalar::from_name(&name) {
            prop_assert!(named.numba_name() == name || named.numpy_name() == name);
        }
    }

    /// A plan holds the parameters it was built from, in order.
    #[test]
    fn plans_keep_their_parameters(params in vec(param(), 0..12)) {
        let plan = Plan::new(params.clone());
        prop_assert_eq!(&plan.params[..], &params[..]);
    }

    #[test]
    fn check_fingerprint_never_panics(plan in plan(), bytes in vec(any::<u8>(), 0..64)) {
        let _ = plan.check_fingerprint(&bytes);
    }

    /// Whatever bytes it accepts, they decode into exactly the plan's parameters: one
    /// scalar byte (or a 3-byte enum or datetime entry) per scalar, an array entry of the
    /// same ndim per array (4 bytes, 6 with a record or datetime element), a 3-byte record
    /// entry per record.
    #[test]
    fn accepted_fingerprints_fit_the_plan(
        plan in plan(),
        bytes in vec(
            prop_oneof![
                Just(ARRAY_TAG),
                Just(RECORD_TAG),
                Just(DATETIME_TAG),
                0u8..=16,
                any::<u8>(),
            ],
            0..48,
        ),
    ) {
        if plan.check_fingerprint(&bytes).is_ok() {
            let mut i = 0;
            for param in plan.params.iter() {
                match param {
                    Param::Array { ndim } => {
                        prop_assert_eq!(bytes[i], ARRAY_TAG);
                        let element = if matches!(bytes[i + 1], RECORD_TAG | DATETIME_TAG) {
                            3
                        } else {
                            1
                        };
                        prop_assert_eq!(usize::from(bytes[i + 1 + element]), *ndim);
                        i += 3 + element;
                    }
                    Param::Scalar(_) => {
                        prop_assert!(bytes[i] != ARRAY_TAG && bytes[i] != RECORD_TAG);
                        i += if matches!(bytes[i], ENUM_TAG | DATETIME_TAG) { 3 } else { 1 };
                    }
                    Param::Record => {
                        prop_assert_eq!(bytes[i], RECORD_TAG);
                        i += 3;
                    }
                }
            }
            prop_assert_eq!(i, bytes.len());
        }
    }

    #[test]
    fn fingerprints_of_fitting_arguments_are_accepted(
        plan in valid_plan(),
        element in element(),
        flags in any::<u8>(),
        code in scalar(),
    ) {
        let bytes: Vec<u8> = plan
            .params
            .iter()
            .flat_map(|p| fingerprint_of(p, element, flags, code))
            .collect();
        prop_assert!(plan.check_fingerprint(&bytes).is_ok());
        // One byte fewer or more is refused.
        if !bytes.is_empty() {
            prop_assert!(plan.check_fingerprint(&bytes[..bytes.len() - 1]).is_err());
        }
        let mut longer = bytes.clone();
        longer.push(code as u8);
        prop_assert!(plan.check_fingerprint(&longer).is_err());
    }

    /// A plan whose array ndim differs from the argument's is refused, even where the two
    /// agree in their low byte (the fingerprint holds ndim in one byte).
    #[test]
    fn fingerprints_of_another_ndim_are_refused(
        plan in valid_plan(),
        which in any::<proptest::sample::Index>(),
        other in prop_oneof![
            (1usize..4).prop_map(|k| 256 * k),
            1usize..=MAX_NDIM,
        ],
        element in element(),
    ) {
        let arrays: Vec<usize> = (0..plan.params.len())
            .filter(|&i| matches!(plan.params[i], Param::Array { .. }))
            .collect();
        prop_assume!(!arrays.is_empty());
        let bytes: Vec<u8> = plan
            .params
            .iter()
            .flat_map(|p| fingerprint_of(p, element, 0, Scalar::I64))
            .collect();
        let mut params = plan.params.to_vec();
        let at = arrays[which.index(arrays.len())];
        let Param::Array { ndim } = params[at] else { unreachable!() };
        params[at] = Param::Array { ndim: ndim + other };
        let changed = Plan { params: params.into() };
        prop_assert!(changed.check_fingerprint(&bytes).is_err());
    }

    /// Any plan, any values, any dims: packing returns Ok or Err (no panic, no slice
    /// past `dims`), and on Ok it wrote exactly the slots numba's data model gives.
    #[test]
    fn pack_never_panics_and_packs_what_the_plan_says(
        plan in plan(),
        values in vec(arg_value(), 0..12),
        dims in vec(any::<i64>(), 0..96),
        names in vec(".{0,4}", 0..4),
    ) {
        let mut out = ParamBuffer::default();
        let packed = plan.pack(&values, &dims, &names, &[], &mut out);
        let expected: Option<Vec<u64>> = values
            .iter()
            .enumerate()
            .map(|(i, v)| expected_slots(plan.params.get(i)?, v, &dims))
            .collect::<Option<Vec<_>>>()
            .map(|parts| parts.concat());
        match (packed, expected) {
            (Ok(()), Some(expected)) => prop_assert_eq!(out.slots(), &expected[..]),
            (Err(_), None) => {}
            (Ok(()), None) => prop_assert!(false, "packed arguments that do not fit the plan"),
            (Err(e), Some(_)) => prop_assert!(false, "refused fitting arguments: {e:?}"),
        }
    }

    /// Arguments as classify produces them: packing succeeds unless a scalar does not
    /// convert, and the buffer then holds exactly the plan's slot count, in the data
    /// model's layout; packing one argument at a time gives the same slots.
    #[test]
    fn fitting_arguments_pack_to_the_plans_slot_count((plan, values, dims) in plan_with_args()) {
        let converts = plan.params.iter().zip(&values).all(|(p, v)| match (p, v) {
            (Param::Scalar(t), ArgValue::Scalar(v)) => v.convert(*t).is_ok(),
            _ => true,
        });
        let mut out = ParamBuffer::default();
        let packed = plan.pack(&values, &dims, &[], &[], &mut out);
        prop_assert_eq!(packed.is_ok(), converts);
        if converts {
            prop_assert_eq!(out.len(), plan_slots(&plan));
            let expected: Vec<u64> = plan
                .params
                .iter()
                .zip(&values)
                .flat_map(|(p, v)| expected_slots(p, v, &dims).unwrap())
                .collect();
            prop_assert_eq!(out.slots(), &expected[..]);
            let mut one_by_one = ParamBuffer::default();
            for (index, value) in values.iter().enumerate() {
                let before = one_by_one.len();
                plan.pack_one(index, value, &dims, &[], &mut one_by_one).unwrap();
                prop_assert_eq!(one_by_one.len() - before, slots_of(&plan.params[index]));
            }
            prop_assert_eq!(one_by_one.slots(), out.slots());
        }
        // An index past the plan is refused.
        let extra = ArgValue::Scalar(Value::Int(0));
        prop_assert!(plan.pack_one(plan.params.len(), &extra, &dims, &[], &mut out).is_err());
    }
}
