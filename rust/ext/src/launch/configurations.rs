//! A kernel's configurations as numba-cuda caches them: `kernel[grid, block, stream, shmem]`
//! written on every call returns the same launcher for the same configuration (numba-cuda's
//! `configure` is `lru_cache`d), so the inline spelling costs a lookup instead of a parse and
//! a new object.
//!
//! Only the plain spellings are keyed: dimensions as positive ints (or tuples of 1 to 3 of
//! them), the stream as None, an int handle or a stream object, the shared memory as None or
//! an int. Anything else (and every invalid value) takes the full parse in `launcher.rs`,
//! which raises numba-cuda's errors. A stream object is keyed by identity: the cached
//! launcher holds it, so no other object can take its address while the entry lives, and its
//! handle is read once, when the configuration is first made (as for a reused launcher).
//!
//! Entries are read lock-free (`ArcSwap`); a miss inserts under a lock, evicting the oldest
//! entry once `CAPACITY` are held. The entries hold their launchers, which hold the kernel: the
//! kernel reports them to Python's cycle collector (`Kernel.__traverse__`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use pyo3::ffi;
use pyo3::gc::{PyTraverseError, PyVisit};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// Configurations kept per kernel (numba-cuda keeps 128 across all kernels).
const CAPACITY: usize = 16;

/// A launch stream as written.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum StreamKey {
    /// Absent or None.
    Default,
    /// An int handle.
    Handle(u64),
    /// A stream object, by address (held by the cached launcher).
    Object(usize),
}

/// A configuration's key: what the launcher it makes depends on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct ConfigKey {
    grid: [u32; 3],
    block: [u32; 3],
    stream: StreamKey,
    shared_mem_bytes: u32,
}

impl ConfigKey {
    /// The key of `kernel[config]` when every item has a plain spelling, else None.
    #[inline]
    pub(crate) fn of(config: &Bound<'_, PyAny>) -> Option<ConfigKey> {
        let items = config.cast_exact::<PyTuple>().ok()?;
        let len = items.len();
        if !(2..=4).contains(&len) {
            return None;
        }
        // Indices are checked first: an out-of-range read would build an IndexError.
        let item = |i: usize| (i < len).then(|| items.get_borrowed_item(i).ok()).flatten();
        let grid = dims_key(&*item(0)?)?;
        let block = dims_key(&*item(1)?)?;
        let stream = match item(2) {
            Some(stream) => stream_key(&stream)?,
            None => StreamKey::Default,
        };
        let shared_mem_bytes = match item(3) {
            Some(bytes) if !bytes.is_none() => exact_u32(&bytes)?,
            _ => 0,
        };
        Some(ConfigKey {
            grid,
            block,
            stream,
            shared_mem_bytes,
        })
    }
}

/// Dimensions as one positive int or a tuple of 1 to 3 of them.
#[inline]
fn dims_key(value: &Bound<'_, PyAny>) -> Option<[u32; 3]> {
    let mut dims = [1u32; 3];
    if let Ok(tuple) = value.cast_exact::<PyTuple>() {
        if tuple.is_empty() || tuple.len() > 3 {
            return None;
        }
        for (slot, item) in dims.iter_mut().zip(tuple.iter_borrowed()) {
            *slot = exact_u32(&item).filter(|&v| v > 0)?;
        }
        return Some(dims);
    }
    dims[0] = exact_u32(value).filter(|&v| v > 0)?;
    Some(dims)
}

/// An exact `int` below 2**32 (not a bool, not a subclass), without a Python call.
#[inline]
fn exact_u32(value: &Bound<'_, PyAny>) -> Option<u32> {
    u32::try_from(exact_u64(value)?).ok()
}

#[inline]
fn exact_u64(value: &Bound<'_, PyAny>) -> Option<u64> {
    // SAFETY: PyLong_CheckExact only reads the object's type.
    if unsafe { ffi::PyLong_CheckExact(value.as_ptr()) } == 0 {
        return None;
    }
    // SAFETY: `value` is an exact int; on overflow or a negative value the call sets an
    // exception, which is cleared here (the full parse raises its own error).
    let v = unsafe { ffi::PyLong_AsUnsignedLongLong(value.as_ptr()) };
    if v == u64::MAX {
        // SAFETY: reading and clearing this thread's error indicator, GIL held.
        unsafe {
            if !ffi::PyErr_Occurred().is_null() {
                ffi::PyErr_Clear();
                return None;
            }
        }
    }
    Some(v)
}

#[inline]
fn stream_key(stream: &Bound<'_, PyAny>) -> Option<StreamKey> {
    if stream.is_none() {
        return Some(StreamKey::Default);
    }
    // SAFETY: PyLong_Check only reads the object's type.
    if unsafe { ffi::PyLong_Check(stream.as_ptr()) } != 0 {
        return exact_u64(stream).map(StreamKey::Handle);
    }
    Some(StreamKey::Object(stream.as_ptr() as usize))
}

struct Entry {
    key: ConfigKey,
    launcher: Py<PyAny>,
}

/// A kernel's cached configurations.
pub(crate) struct Configurations {
    entries: ArcSwap<Vec<Arc<Entry>>>,
    last_hit: AtomicUsize,
    insert_lock: Mutex<()>,
}

impl Configurations {
    pub(crate) fn new() -> Configurations {
        Configurations {
            entries: ArcSwap::from_pointee(Vec::new()),
            last_hit: AtomicUsize::new(0),
            insert_lock: Mutex::new(()),
        }
    }

    /// The launcher made for `key`, if it is cached (last hit first).
    #[inline]
    pub(crate) fn find(&self, py: Python<'_>, key: &ConfigKey) -> Option<Py<PyAny>> {
        let entries = self.entries.load();
        let last = self.last_hit.load(Ordering::Relaxed);
        if let Some(entry) = entries.get(last).filter(|e| e.key == *key) {
            return Some(entry.launcher.clone_ref(py));
        }
        let (index, entry) = entries.iter().enumerate().find(|(_, e)| e.key == *key)?;
        self.last_hit.store(index, Ordering::Relaxed);
        Some(entry.launcher.clone_ref(py))
    }

    /// Caches `launcher` for `key` (unless another thread did first), evicting the oldest
    /// entry when full. An evicted launcher is dropped after the lock is released: dropping
    /// it can run Python code (a stream's finalizer) that lets the GIL go, and a thread
    /// holding the GIL may be waiting for this lock.
    pub(crate) fn insert(&self, py: Python<'_>, key: ConfigKey, launcher: &Py<PyAny>) {
        let replaced = {
            let _guard = self.insert_lock.lock().unwrap_or_else(|p| p.into_inner());
            let current = self.entries.load_full();
            if current.iter().any(|e| e.key == key) {
                return;
            }
            let keep = current.len().saturating_sub(CAPACITY - 1);
            let mut next: Vec<Arc<Entry>> = current[keep..].to_vec();
            next.push(Arc::new(Entry {
                key,
                launcher: launcher.clone_ref(py),
            }));
            self.entries.swap(Arc::new(next))
        };
        drop(replaced);
    }

    /// How many configurations are cached.
    pub(crate) fn len(&self) -> usize {
        self.entries.load().len()
    }

    /// Reports the cached launchers to the cycle collector.
    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        for entry in self.entries.load().iter() {
            visit.call(&entry.launcher)?;
        }
        Ok(())
    }

    /// Drops every cached launcher (the cycle collector breaking a cycle, or a reset), after
    /// the lock is released (see [`Configurations::insert`]).
    pub(crate) fn clear(&self) {
        let cleared = {
            let _guard = self.insert_lock.lock().unwrap_or_else(|p| p.into_inner());
            self.last_hit.store(0, Ordering::Relaxed);
            self.entries.swap(Arc::new(Vec::new()))
        };
        drop(cleared);
    }
}
