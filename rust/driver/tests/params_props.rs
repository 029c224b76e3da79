//! Property tests for `ParamBuffer` (issue 7): any sequence of pushes and clears leaves
//! exactly the slots a plain model predicts, each value little-endian at the start of its
//! own 8-byte slot, and `as_params` points at every slot in order. No GPU needed.

use fastlaunch_driver::ParamBuffer;
use proptest::collection::vec;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bytes1([u8; 1]),
    Bytes2([u8; 2]),
    Bytes4([u8; 4]),
    Bytes8([u8; 8]),
    Clear,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u64>().prop_map(Op::U64),
        4 => any::<i64>().prop_map(Op::I64),
        2 => any::<f32>().prop_map(Op::F32),
        2 => any::<f64>().prop_map(Op::F64),
        1 => any::<[u8; 1]>().prop_map(Op::Bytes1),
        1 => any::<[u8; 2]>().prop_map(Op::Bytes2),
        1 => any::<[u8; 4]>().prop_map(Op::Bytes4),
        1 => any::<[u8; 8]>().prop_map(Op::Bytes8),
        1 => Just(Op::Clear),
    ]
}

/// The slot a value of at most 8 bytes occupies: its bytes, then zeros.
fn slot_of(bytes: &[u8]) -> u64 {
    let mut slot = [0u8; 8];
    slot[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(slot)
}

fn apply(buffer: &mut ParamBuffer, model: &mut Vec<u64>, op: &Op) {
    match op {
        Op::U64(v) => {
            buffer.push_u64(*v);
            model.push(*v);
        }
        Op::I64(v) => {
            buffer.push_i64(*v);
            model.push(*v as u64);
        }
        Op::F32(v) => {
            buffer.push_f32(*v);
            model.push(slot_of(&v.to_le_bytes()));
        }
        Op::F64(v) => {
            buffer.push_f64(*v);
            model.push(v.to_bits());
        }
        Op::Bytes1(b) => {
            buffer.push_bytes(*b);
            model.push(slot_of(b));
        }
        Op::Bytes2(b) => {
            buffer.push_bytes(*b);
            model.push(slot_of(b));
        }
        Op::Bytes4(b) => {
            buffer.push_bytes(*b);
            model.push(slot_of(b));
        }
        Op::Bytes8(b) => {
            buffer.push_bytes(*b);
            model.push(slot_of(b));
        }
        Op::Clear => {
            buffer.clear();
            model.clear();
        }
    }
}

/// Reads every parameter through the `void**` the driver would get.
fn read_through_params(buffer: &mut ParamBuffer) -> Vec<u64> {
    let len = buffer.len();
    let params = buffer.as_params();
    (0..len)
        .map(|i| {
            // SAFETY: `as_params` returned `len` pointers, each to a live 8-byte slot of
            // the buffer, which is not changed while they are read.
            unsafe { (*params.add(i)).cast::<u64>().read() }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn slots_follow_the_model(ops in vec(op(), 0..200), capacity in 0usize..64) {
        let mut buffer = if capacity == 0 {
            ParamBuffer::default()
        } else {
            ParamBuffer::with_capacity(capacity)
        };
        let mut model = Vec::new();
        for op in &ops {
            apply(&mut buffer, &mut model, op);
            prop_assert_eq!(buffer.len(), model.len());
            prop_assert_eq!(buffer.is_empty(), model.is_empty());
        }
        prop_assert_eq!(buffer.slots(), &model[..]);
        prop_assert_eq!(read_through_params(&mut buffer), model);
    }

    /// Narrow values sit at the start of their slot: the driver reads only the
    /// parameter's own width, so the bytes it reads are exactly the value's.
    #[test]
    fn narrow_values_are_read_back_at_their_own_width(
        a in any::<i32>(), b in any::<f32>(), c in any::<u16>(), d in any::<bool>(),
    ) {
        let mut buffer = ParamBuffer::default();
        buffer.push_bytes(a.to_le_bytes());
        buffer.push_f32(b);
        buffer.push_bytes(c.to_le_bytes());
        buffer.push_bytes([u8::from(d)]);
        let params = buffer.as_params();
        // SAFETY: four pointers, each to a live 8-byte slot; each read is within it.
        unsafe {
            prop_assert_eq!((*params.add(0)).cast::<i32>().read(), a);
            prop_assert_eq!((*params.add(1)).cast::<f32>().read().to_bits(), b.to_bits());
            prop_assert_eq!((*params.add(2)).cast::<u16>().read(), c);
            prop_assert_eq!((*params.add(3)).cast::<u8>().read(), u8::from(d));
        }
    }

    /// Refilling after a clear (what every launch does) rebuilds the pointers for the
    /// new contents, however the length changed.
    #[test]
    fn refills_after_clear_point_at_the_new_slots(
        first in vec(any::<u64>(), 0..80),
        second in vec(any::<u64>(), 0..80),
    ) {
        let mut buffer = ParamBuffer::default();
        for &v in &first {
            buffer.push_u64(v);
        }
        prop_assert_eq!(read_through_params(&mut buffer), first);
        buffer.clear();
        for &v in &second {
            buffer.push_u64(v);
        }
        prop_assert_eq!(read_through_params(&mut buffer), second);
    }
}
