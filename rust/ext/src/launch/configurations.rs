//! A kernel's configurations as numba-cuda caches them: `kernel[grid, block, stream, shmem]`
//! written on every call returns the same launcher for the same configuration (numba-cuda's
//! `configure` is `lru_cache`d), so the inline spelling costs a lookup instead of a parse and
//! a new object.
//!
//! Only the plain spellings are keyed: dimensions as positive ints (or tuples of 1 to 3 of
//! them), the stream as None, an int handle or a stream object, the shared memory as None or
//! an int. Anything else (and every invalid value) takes the full parse in `launcher.rs`,
//! which raises numba-cuda's errors.
//!
//! A stream object is keyed by the handle it gives, which is all a launch reads of it (its
//! capture state is asked of the handle at each launch, its flags too where fastlaunch did
//! not make it: `made_streams.rs`): a new stream
//! object over a handle seen before (numba-cuda's `cuda.stream()` under install hands out
//! pooled streams) reuses the configuration without a parse, in a new launcher over the
//! object given. The entries of stream objects hold no launcher, so they keep no stream
//! alive. The launchers made last over stream objects, `RECENT` of them, are held in a ring
//! and found by the stream object's address (which a held launcher's stream keeps): the
//! inline spelling on a reused stream, or on a few streams in turn, gets its launcher back
//! without reading the stream. The ring keeps at most `RECENT` streams alive per kernel, and
//! none that only its launcher holds once the next stream object is remembered: a new pooled
//! stream per call then rotates over two pooled handles, whose configurations hit.
//!
//! Entries are read lock-free (`ArcSwap`); a miss inserts under a lock, evicting the oldest
//! entry once `CAPACITY` are held. The entries and the ring hold their launchers, which hold
//! the kernel: the kernel reports them to Python's cycle collector (`Kernel.__traverse__`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use fastlaunch_driver::LaunchDims;
use pyo3::ffi;
use pyo3::gc::{PyTraverseError, PyVisit};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use smallvec::SmallVec;

/// Configurations kept per kernel (numba-cuda keeps 128 across all kernels).
const CAPACITY: usize = 16;
/// Launchers over stream objects held per kernel, the last made first.
const RECENT: usize = 4;

/// A launch stream as written.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum StreamKey {
    /// Absent or None.
    Default,
    /// An int handle.
    Handle(u64),
    /// A stream object, by the handle it gave.
    Object(u64),
}

/// A configuration's key: what the launcher it makes depends on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct ConfigKey {
    grid: [u32; 3],
    block: [u32; 3],
    stream: StreamKey,
    shared_mem_bytes: u32,
}

/// `kernel[config]` read without a Python call: a stream object's handle is not read yet.
pub(crate) struct Written<'a, 'py> {
    grid: [u32; 3],
    block: [u32; 3],
    pub(crate) stream: WrittenStream<'a, 'py>,
    shared_mem_bytes: u32,
}

/// The stream of `kernel[config]` as written: a key, or an object whose handle is not read yet.
pub(crate) enum WrittenStream<'a, 'py> {
    Key(StreamKey),
    Object(Borrowed<'a, 'py, PyAny>),
}

impl<'a, 'py> Written<'a, 'py> {
    /// `config` when every item has a plain spelling, else None.
    #[inline]
    pub(crate) fn of(config: &'a Bound<'py, PyAny>) -> Option<Written<'a, 'py>> {
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
            Some(stream) => stream_key(stream)?,
            None => WrittenStream::Key(StreamKey::Default),
        };
        let shared_mem_bytes = match item(3) {
            Some(bytes) if !bytes.is_none() => exact_u32(&bytes)?,
            _ => 0,
        };
        Some(Written {
            grid,
            block,
            stream,
            shared_mem_bytes,
        })
    }

    pub(crate) fn key(&self, stream: StreamKey) -> ConfigKey {
        ConfigKey {
            grid: self.grid,
            block: self.block,
            stream,
            shared_mem_bytes: self.shared_mem_bytes,
        }
    }
}

impl ConfigKey {
    /// The dimensions a launcher of this key launches with (a stream object's handle among
    /// them).
    pub(crate) fn dims(&self) -> LaunchDims {
        let stream = match self.stream {
            StreamKey::Default => 0,
            StreamKey::Handle(handle) | StreamKey::Object(handle) => handle as usize,
        };
        LaunchDims {
            grid: self.grid,
            block: self.block,
            shared_mem_bytes: self.shared_mem_bytes,
            stream,
        }
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
fn stream_key<'a, 'py>(stream: Borrowed<'a, 'py, PyAny>) -> Option<WrittenStream<'a, 'py>> {
    if stream.is_none() {
        return Some(WrittenStream::Key(StreamKey::Default));
    }
    // SAFETY: PyLong_Check only reads the object's type.
    if unsafe { ffi::PyLong_Check(stream.as_ptr()) } != 0 {
        return exact_u64(&stream).map(|handle| WrittenStream::Key(StreamKey::Handle(handle)));
    }
    Some(WrittenStream::Object(stream))
}

pub(crate) struct Entry {
    key: ConfigKey,
    /// The launcher; None for a stream object's (made per object, see `Recent`).
    pub(crate) launcher: Option<Py<PyAny>>,
}

/// A launcher made over a stream object, found by the object's address (its launcher holds
/// it, so no other object has that address while this lives).
pub(crate) struct Recent {
    pub(crate) key: ConfigKey,
    pub(crate) stream: usize,
    pub(crate) launcher: Py<PyAny>,
}

impl Recent {
    /// Whether only this entry holds its launcher, and only the launcher its stream object:
    /// no one can launch with either again but through the ring, which finds the stream by
    /// an object no one holds.
    fn unreachable(&self, _py: Python<'_>) -> bool {
        // SAFETY: reference counts read under the GIL, of the launcher this entry holds and of
        // the stream object at `stream`, which that launcher holds (alive while this entry is).
        unsafe {
            ffi::Py_REFCNT(self.launcher.as_ptr()) == 1
                && ffi::Py_REFCNT(self.stream as *mut ffi::PyObject) == 1
        }
    }
}

/// A kernel's cached configurations.
pub(crate) struct Configurations {
    entries: ArcSwap<Vec<Arc<Entry>>>,
    last_hit: AtomicUsize,
    /// The launchers made last over stream objects, the last made first: a few, each read
    /// and replaced under the lock (a new stream object each call replaces one per call,
    /// which a copied list would pay an allocation for).
    recent: Mutex<SmallVec<[Recent; RECENT]>>,
    insert_lock: Mutex<()>,
    /// Configurations parsed in full by `kernel[...]` (for tests).
    parses: AtomicU64,
}

impl Configurations {
    pub(crate) fn new() -> Configurations {
        Configurations {
            entries: ArcSwap::from_pointee(Vec::new()),
            last_hit: AtomicUsize::new(0),
            recent: Mutex::new(SmallVec::new()),
            insert_lock: Mutex::new(()),
            parses: AtomicU64::new(0),
        }
    }

    /// Counts a full parse of `kernel[...]` (for tests).
    pub(crate) fn note_parse(&self) {
        self.parses.fetch_add(1, Ordering::Relaxed);
    }

    /// The entry for `key`, if it is cached (last hit first).
    #[inline]
    pub(crate) fn find(&self, key: &ConfigKey) -> Option<Arc<Entry>> {
        let entries = self.entries.load();
        let last = self.last_hit.load(Ordering::Relaxed);
        if let Some(entry) = entries.get(last).filter(|e| e.key == *key) {
            return Some(entry.clone());
        }
        let (index, entry) = entries.iter().enumerate().find(|(_, e)| e.key == *key)?;
        self.last_hit.store(index, Ordering::Relaxed);
        Some(entry.clone())
    }

    /// A launcher of the ring made for `written` over the stream object at `stream`.
    #[inline]
    pub(crate) fn find_recent<'py>(
        &self,
        py: Python<'py>,
        written: &Written<'_, '_>,
        stream: usize,
    ) -> Option<Bound<'py, PyAny>> {
        let key = written.key(StreamKey::Default);
        let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let found = recent.iter().find(|r| r.stream == stream && r.key == key)?;
        Some(found.launcher.bind(py).clone())
    }

    /// Puts `recent` first in the ring, dropping the oldest past `RECENT` and every launcher
    /// no one else can reach any more (held by the ring alone, over a stream object held by
    /// the launcher alone): a stream made per call is then collected now, not `RECENT` calls
    /// later, and a pooled one is back in its pool for the next call. Dropped after the lock
    /// is released (see [`Configurations::insert`]).
    pub(crate) fn remember_recent(&self, py: Python<'_>, recent: Recent) {
        let mut dropped = SmallVec::<[Recent; RECENT]>::new();
        {
            let mut ring = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            let mut index = 0;
            while index < ring.len() {
                if ring[index].unreachable(py) {
                    dropped.push(ring.remove(index));
                } else {
                    index += 1;
                }
            }
            if ring.len() == RECENT {
                dropped.extend(ring.pop());
            }
            ring.insert(0, recent);
        }
        drop(dropped);
    }

    /// Caches `launcher` for `key` (unless another thread did first), evicting the oldest
    /// entry when full. An evicted launcher is dropped after the lock is released: dropping
    /// it can run Python code (a stream's finalizer) that lets the GIL go, and a thread
    /// holding the GIL may be waiting for this lock.
    pub(crate) fn insert(&self, key: ConfigKey, launcher: Option<Py<PyAny>>) {
        let replaced = {
            let _guard = self.insert_lock.lock().unwrap_or_else(|p| p.into_inner());
            let current = self.entries.load_full();
            if current.iter().any(|e| e.key == key) {
                return;
            }
            let keep = current.len().saturating_sub(CAPACITY - 1);
            let mut next: Vec<Arc<Entry>> = current[keep..].to_vec();
            next.push(Arc::new(Entry { key, launcher }));
            self.entries.swap(Arc::new(next))
        };
        drop(replaced);
    }

    /// How many configurations are cached.
    pub(crate) fn len(&self) -> usize {
        self.entries.load().len()
    }

    /// How many configurations `kernel[...]` parsed in full.
    pub(crate) fn parses(&self) -> u64 {
        self.parses.load(Ordering::Relaxed)
    }

    /// Reports the cached launchers, and the ring's, to the cycle collector.
    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> std::result::Result<(), PyTraverseError> {
        for entry in self.entries.load().iter() {
            if let Some(launcher) = &entry.launcher {
                visit.call(launcher)?;
            }
        }
        let ring = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        for recent in ring.iter() {
            visit.call(&recent.launcher)?;
        }
        Ok(())
    }

    /// Drops every cached launcher (the cycle collector breaking a cycle, or a reset), after
    /// the lock is released (see [`Configurations::insert`]).
    pub(crate) fn clear(&self) {
        let cleared = {
            let _guard = self.insert_lock.lock().unwrap_or_else(|p| p.into_inner());
            self.last_hit.store(0, Ordering::Relaxed);
            let recent =
                std::mem::take(&mut *self.recent.lock().unwrap_or_else(|p| p.into_inner()));
            (self.entries.swap(Arc::new(Vec::new())), recent)
        };
        drop(cleared);
    }
}
