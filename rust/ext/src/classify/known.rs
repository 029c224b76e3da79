//! Objects read before on this thread, by address: what a source learnt from an argument, to
//! reuse when the same object comes back. A weak reference proves that the address still
//! holds that object (a dead object's reference is dead, so a new object at a reused address
//! misses) without keeping it, or its device memory, alive. Each source decides what it may
//! keep and what it must check again on every launch (`numba.rs`, `cupy.rs`, `dlpack.rs`).
//!
//! [`KnownArray`] is what array sources keep: the fingerprint bytes, value and dims pushed.
//!
//! [`HeldObjects`] is the other kind of table: values worked out once per object that the
//! table keeps alive (types, dtypes), so that its address is never another object's.

use std::cell::RefCell;
use std::thread::LocalKey;

use pyo3::ffi;
use pyo3::prelude::*;
use smallvec::SmallVec;

use super::fingerprint::MAX_ARRAY_BYTES;
use super::Scratch;
use crate::errors::Result;
use crate::scratch::{ArgValue, ArrayArg};

/// Slots in a table, hashed by address into buckets of `WAYS`.
const SLOTS: usize = 512;
const WAYS: usize = 4;

/// An object known by its address and a weak reference to it: the reference proves that the
/// address still holds that object (a dead object's reference is dead, so a new object at a
/// reused address is another), without keeping it alive.
pub(super) struct Identity {
    address: usize,
    weak: Py<PyAny>,
}

impl Identity {
    /// `arg`'s identity; `None` when its type takes no weak references.
    pub(super) fn of(arg: &Bound<'_, PyAny>) -> Option<Identity> {
        // SAFETY: `arg` is a valid object; NewRef returns a new reference, or null with an
        // exception set (types without weak reference support), which is cleared.
        let weak = unsafe { ffi::PyWeakref_NewRef(arg.as_ptr(), std::ptr::null_mut()) };
        if weak.is_null() {
            // SAFETY: clearing the exception NewRef just set.
            unsafe { ffi::PyErr_Clear() };
            return None;
        }
        Some(Identity {
            address: arg.as_ptr() as usize,
            // SAFETY: a new, owned reference.
            weak: unsafe { Bound::from_owned_ptr(arg.py(), weak) }.unbind(),
        })
    }

    /// Whether `arg` is the object known.
    #[inline]
    pub(super) fn is(&self, arg: &Bound<'_, PyAny>) -> bool {
        if arg.as_ptr() as usize != self.address {
            return false;
        }
        // SAFETY: `weak` is a live weak reference object; GetObject returns a borrowed
        // reference to the referent, or None once it has died.
        let target = unsafe { ffi::PyWeakref_GetObject(self.weak.as_ptr()) };
        target as usize == self.address
    }
}

struct Entry<T> {
    identity: Identity,
    value: T,
}

/// A per-thread table of objects seen before (hold it in a `thread_local!` `RefCell`).
pub(super) struct KnownObjects<T> {
    slots: Vec<Option<Entry<T>>>,
}

/// The first slot of an address's bucket (Fibonacci hashing of the address).
fn bucket_of(address: usize) -> usize {
    let hash = ((address >> 4) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (hash >> 55) as usize & (SLOTS - WAYS) // 512 slots, 4-aligned
}

impl<T> KnownObjects<T> {
    pub(super) const fn new() -> Self {
        KnownObjects { slots: Vec::new() }
    }

    /// What was remembered of `arg`, if `arg` is that same object.
    #[inline]
    pub(super) fn find(&self, arg: &Bound<'_, PyAny>) -> Option<&T> {
        let address = arg.as_ptr() as usize;
        let bucket = bucket_of(address);
        let entry = self
            .slots
            .get(bucket..bucket + WAYS)?
            .iter()
            .flatten()
            .find(|entry| entry.identity.address == address)?;
        entry.identity.is(arg).then_some(&entry.value)
    }

    /// Remembers `value` for `arg`, if its type takes weak references (else nothing).
    pub(super) fn remember(&mut self, arg: &Bound<'_, PyAny>, value: T) {
        let Some(identity) = Identity::of(arg) else {
            return;
        };
        if self.slots.is_empty() {
            self.slots.resize_with(SLOTS, || None);
        }
        let address = arg.as_ptr() as usize;
        let bucket = bucket_of(address);
        let ways = &mut self.slots[bucket..bucket + WAYS];
        // This address's entry, else a free slot, else one by address; the entry replaced is
        // dropped here, with the GIL held.
        let slot = ways
            .iter()
            .position(|e| e.as_ref().is_some_and(|e| e.identity.address == address))
            .or_else(|| ways.iter().position(Option::is_none))
            .unwrap_or((address >> 4) % WAYS);
        ways[slot] = Some(Entry { identity, value });
    }
}

/// Values worked out once per object, by the object's address; each object is held for the
/// table's life (a thread's), so its address stays its own. For the few objects a thread
/// meets (types, dtypes): a list searched in order.
pub(crate) struct HeldObjects<T> {
    entries: Vec<(usize, T, Py<PyAny>)>,
}

impl<T: Copy> HeldObjects<T> {
    pub(crate) const fn new() -> Self {
        HeldObjects {
            entries: Vec::new(),
        }
    }

    /// The value worked out for the object at `address`, if any.
    #[inline]
    pub(crate) fn get(&self, address: usize) -> Option<T> {
        self.entries
            .iter()
            .find(|(held, _, _)| *held == address)
            .map(|&(_, value, _)| value)
    }

    /// Keeps `value` for `object`, holding the object.
    pub(crate) fn insert(&mut self, object: &Bound<'_, PyAny>, value: T) {
        self.entries
            .push((object.as_ptr() as usize, value, object.clone().unbind()));
    }
}

/// An array as a source pushed it: fingerprint bytes, value and dims (shape, then strides).
pub(super) struct KnownArray {
    fingerprint: SmallVec<[u8; MAX_ARRAY_BYTES]>,
    array: ArrayArg,
    dims: SmallVec<[i64; 8]>,
}

impl KnownArray {
    /// The array the scratch got last, its fingerprint bytes from `fingerprint_at` on.
    pub(super) fn last_pushed(scratch: &Scratch, fingerprint_at: usize) -> Option<KnownArray> {
        let Some(ArgValue::Array(array)) = scratch.values.last() else {
            return None;
        };
        let fingerprint = scratch.fingerprint.get(fingerprint_at..)?;
        if fingerprint.len() > MAX_ARRAY_BYTES {
            return None;
        }
        Some(KnownArray {
            fingerprint: fingerprint.into(),
            array: *array,
            dims: scratch
                .dims
                .get(array.dims_at..array.dims_at + 2 * array.ndim)?
                .into(),
        })
    }

    /// The array's shape.
    pub(super) fn shape(&self) -> &[i64] {
        &self.dims[..self.array.ndim]
    }

    /// The address of the array's first element.
    pub(super) fn data(&self) -> u64 {
        self.array.data
    }

    /// Whether the array has no elements.
    pub(super) fn is_empty(&self) -> bool {
        self.array.nitems == 0
    }

    /// Pushes the array again.
    #[inline]
    pub(super) fn push(&self, scratch: &mut Scratch) {
        self.push_over(self.array.data, scratch);
    }

    /// Pushes an array of the same layout over `data` (an array's layout read once, for
    /// arrays at many addresses).
    #[inline]
    pub(super) fn push_over(&self, data: u64, scratch: &mut Scratch) {
        scratch.fingerprint.extend_from_slice(&self.fingerprint);
        let dims_at = scratch.dims.len();
        scratch.dims.extend_from_slice(&self.dims);
        scratch.values.push(ArgValue::Array(ArrayArg {
            data,
            dims_at,
            ..self.array
        }));
    }
}

/// A thread's table of arrays read before (declared with `thread_local!` by its source).
pub(super) type KnownArrays = LocalKey<RefCell<KnownObjects<KnownArray>>>;

/// Pushes `arg` from `table` when it is there and `unchanged` says it still is as it was read
/// (and says so in `Scratch::read_was_known`); else reads it with `read` and remembers what
/// that pushed (nothing, when the source left it to numba-cuda, or the scratch says
/// `forget_reads`).
#[inline]
pub(super) fn push_known_or_read(
    table: &'static KnownArrays,
    arg: &Bound<'_, PyAny>,
    scratch: &mut Scratch,
    unchanged: impl FnOnce(&KnownArray) -> PyResult<bool>,
    read: impl FnOnce(&mut Scratch) -> Result<()>,
) -> Result<()> {
    let pushed = table.with(|known| -> PyResult<bool> {
        let Ok(known) = known.try_borrow() else {
            return Ok(false); // a launch from within a read: read it instead
        };
        match known.find(arg) {
            Some(array) if unchanged(array)? => {
                array.push(scratch);
                scratch.read_was_known = true;
                Ok(true)
            }
            _ => Ok(false),
        }
    })?;
    if pushed {
        return Ok(());
    }
    let (values_before, fingerprint_before) = (scratch.values.len(), scratch.fingerprint.len());
    read(scratch)?;
    if scratch.values.len() > values_before && !scratch.forget_reads {
        if let Some(array) = KnownArray::last_pushed(scratch, fingerprint_before) {
            table.with(|known| {
                if let Ok(mut known) = known.try_borrow_mut() {
                    known.remember(arg, array);
                }
            });
        }
    }
    Ok(())
}
