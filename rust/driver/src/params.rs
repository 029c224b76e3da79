//! Kernel parameter buffers in the layout `cuLaunchKernel` takes: one pointer per
//! flattened parameter, each to that parameter's value.
//!
//! Every flattened numba parameter is at most 8 bytes (complex numbers and arrays are
//! split into several), so each value gets its own 8-byte slot and is written at the
//! start of it; the driver reads only the parameter's own width. The buffer is reused
//! across launches: after the first, filling it allocates nothing.

use std::ffi::c_void;

#[derive(Default)]
pub struct ParamBuffer {
    slots: Vec<u64>,
    pointers: Vec<*mut c_void>,
}

// SAFETY: the pointers point into `slots`, owned by the same buffer; they are rebuilt by
// `as_params` / `prepare` before every use, so moving the buffer to another thread is sound.
unsafe impl Send for ParamBuffer {}
// SAFETY: shared access only reads the slots and the pointer array; both are written only
// through `&mut self`.
unsafe impl Sync for ParamBuffer {}

impl ParamBuffer {
    pub fn with_capacity(params: usize) -> ParamBuffer {
        ParamBuffer {
            slots: Vec::with_capacity(params),
            pointers: Vec::with_capacity(params),
        }
    }

    /// A buffer holding a copy of `slots` (pointers not yet prepared). Not through
    /// `extend_u64`: the launch path's constant-length calls of it stay specialised.
    pub fn from_slots(slots: &[u64]) -> ParamBuffer {
        ParamBuffer {
            slots: slots.to_vec(),
            pointers: Vec::with_capacity(slots.len()),
        }
    }

    /// Forgets the values, keeping the memory.
    #[inline]
    pub fn clear(&mut self) {
        self.slots.clear();
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The raw 8-byte slots, for tests that compare against numba's packing.
    pub fn slots(&self) -> &[u64] {
        &self.slots
    }

    /// The slots, to overwrite values in place (a bound argument replaced): the pointers
    /// stay valid, since the slots neither move nor change in number.
    pub fn slots_mut(&mut self) -> &mut [u64] {
        &mut self.slots
    }

    /// Builds the pointer array for the values pushed so far (see [`ParamBuffer::as_params`]):
    /// a launch through [`crate::Function::launch`] reads it.
    #[inline]
    pub fn prepare(&mut self) {
        self.as_params();
    }

    /// The pointer array, if [`ParamBuffer::prepare`] built it for the current slots.
    #[inline]
    pub fn prepared(&self) -> Option<*mut *mut c_void> {
        let current = self.pointers.len() >= self.slots.len()
            && self
                .pointers
                .first()
                .is_none_or(|&first| first == self.slots.as_ptr().cast_mut().cast::<c_void>());
        current.then(|| self.pointers.as_ptr().cast_mut())
    }

    #[inline]
    pub fn push_u64(&mut self, value: u64) {
        self.slots.push(value);
    }

    #[inline]
    pub fn push_i64(&mut self, value: i64) {
        self.slots.push(value as u64);
    }

    #[inline]
    pub fn extend_u64(&mut self, values: &[u64]) {
        self.slots.extend_from_slice(values);
    }

    #[inline]
    pub fn extend_i64(&mut self, values: &[i64]) {
        self.slots.extend(values.iter().map(|&value| value as u64));
    }

    /// A value of at most 8 bytes, stored little-endian at the start of its slot.
    #[inline]
    pub fn push_bytes<const N: usize>(&mut self, bytes: [u8; N]) {
        const { assert!(N <= 8) };
        let mut slot = [0u8; 8];
        slot[..N].copy_from_slice(&bytes);
        self.slots.push(u64::from_le_bytes(slot));
    }

    #[inline]
    pub fn push_f32(&mut self, value: f32) {
        self.push_bytes(value.to_le_bytes());
    }

    #[inline]
    pub fn push_f64(&mut self, value: f64) {
        self.slots.push(value.to_bits());
    }

    /// The `void**` for the driver: valid until the buffer is next changed. Pointer `i` is
    /// `slots + i` and the slots are reused between launches, so the pointers are rebuilt
    /// only when the slots moved (they grew) and written only past those built before.
    #[inline]
    pub fn as_params(&mut self) -> *mut *mut c_void {
        let base = self.slots.as_mut_ptr();
        if self
            .pointers
            .first()
            .is_some_and(|&first| first != base.cast::<c_void>())
        {
            self.pointers.clear();
        }
        let built = self.pointers.len();
        // `wrapping_add` stays inside the slots allocation for every index below len; the
        // pointers built before, past len, are inside it too (the allocation never shrinks).
        self.pointers
            .extend((built..self.slots.len()).map(|i| base.wrapping_add(i).cast::<c_void>()));
        self.pointers.as_mut_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_sit_at_the_start_of_their_slot() {
        let mut buffer = ParamBuffer::default();
        buffer.push_bytes(7i32.to_le_bytes());
        buffer.push_f32(1.5);
        buffer.push_f64(-2.0);
        buffer.push_bytes([1u8]);
        assert_eq!(buffer.slots()[0], 7);
        assert_eq!(buffer.slots()[1], u64::from(1.5f32.to_bits()));
        assert_eq!(buffer.slots()[2], (-2.0f64).to_bits());
        assert_eq!(buffer.slots()[3], 1);
    }

    #[test]
    fn params_point_at_each_slot() {
        let mut buffer = ParamBuffer::default();
        for i in 0..40u64 {
            buffer.push_u64(i * 3);
        }
        let params = buffer.as_params();
        for i in 0..40 {
            // SAFETY: 40 pointers, each to a live u64 slot.
            let value = unsafe { *(*params.add(i)).cast::<u64>() };
            assert_eq!(value, i as u64 * 3);
        }
    }

    #[test]
    fn params_follow_the_slots_when_they_grow_and_move() {
        let mut buffer = ParamBuffer::with_capacity(1);
        for round in 1..200u64 {
            buffer.clear();
            for i in 0..round {
                buffer.push_u64(i + round);
            }
            let params = buffer.as_params();
            for i in 0..round as usize {
                // SAFETY: `round` pointers, each to a live u64 slot.
                let value = unsafe { *(*params.add(i)).cast::<u64>() };
                assert_eq!(value, i as u64 + round);
            }
        }
    }

    #[test]
    fn prepared_pointers_follow_the_slots() {
        let mut buffer = ParamBuffer::default();
        assert!(buffer.prepared().is_some()); // nothing to point at
        buffer.push_u64(1);
        assert!(buffer.prepared().is_none());
        buffer.prepare();
        let params = buffer.prepared().expect("prepared");
        // SAFETY: one pointer, to a live u64 slot.
        assert_eq!(unsafe { *(*params).cast::<u64>() }, 1);
        buffer.slots_mut()[0] = 5;
        assert!(buffer.prepared().is_some());
    }

    #[test]
    fn clearing_keeps_capacity() {
        let mut buffer = ParamBuffer::with_capacity(4);
        buffer.push_u64(1);
        buffer.clear();
        assert!(buffer.is_empty());
        buffer.push_u64(2);
        assert_eq!(buffer.slots(), &[2]);
    }
}
