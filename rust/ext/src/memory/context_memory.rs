//! What the memory API keeps for one context ([`ContextMemory`]), and the registry of them.
//!
//! The registry holds each context's state until numba-cuda resets the context
//! (`cuda.close()`: [`forget_context`]); a thread reaches its context's state through a
//! thread-local weak reference, locking the registry only on its first call in a context.
//! State dropped after its context was destroyed, or while the process exits, leaves its
//! driver objects alone: they went with the context (or go with the process), and freeing
//! them again would touch freed driver state.

use std::cell::RefCell;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use fastlaunch_driver::{self as driver, Context, LaunchContext, MemoryPool, StagingRing};
use pyo3::prelude::*;

use super::freed_blocks::FreedBlocks;
use super::stream_ordering::StreamOrdering;
use crate::devices::driver;

/// What the memory API keeps for one context.
pub(crate) struct ContextMemory {
    /// `LaunchContext::key`: the context's unique id.
    pub(crate) key: u64,
    /// Its handle, to make it current for work from another context's thread.
    pub(crate) context: Context,
    pub(crate) ordinal: usize,
    pub(crate) ring: ManuallyDrop<StagingRing>,
    /// fastlaunch's own pool on the context's device; `None`: the device's current pool
    /// (a driver without `cuMemPoolCreate`).
    pub(crate) pool: Option<MemoryPool>,
    /// The events ordering this context's work with non-blocking streams (`ordering.rs`).
    pub(crate) ordering: ManuallyDrop<Mutex<StreamOrdering>>,
    /// The newest of the ordering's marks known done: it and every mark before it.
    pub(crate) done_mark: AtomicU64,
    /// Pool frees a stream capture refused: made at the next call that may make them.
    deferred_frees: Pointers,
    /// Frees of blocks another library read (`exports.rs`), held until a synchronization of
    /// the context lets them go to the pool (`pool::free_exported_after_synchronize`).
    exported_frees: Pointers,
    /// Allocations made with `cuMemAlloc` while a capture refused the pool's (freed with
    /// `cuMemFree`).
    plain_allocations: Pointers,
    /// Freed pool blocks kept for reuse (`freed_blocks.rs`).
    pub(crate) freed_blocks: FreedBlocks,
}

/// Device pointers kept aside, usually none: their count, kept under the lock, lets the
/// calls that find none skip the lock.
#[derive(Default)]
struct Pointers {
    list: Mutex<Vec<u64>>,
    count: AtomicUsize,
}

impl Pointers {
    fn list(&self) -> Option<std::sync::MutexGuard<'_, Vec<u64>>> {
        (self.count.load(Ordering::Acquire) != 0)
            .then(|| self.list.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn push(&self, pointer: u64) {
        let mut list = self.list.lock().unwrap_or_else(|p| p.into_inner());
        list.push(pointer);
        self.count.store(list.len(), Ordering::Release);
    }

    fn take_all(&self) -> Vec<u64> {
        let Some(mut list) = self.list() else {
            return Vec::new();
        };
        self.count.store(0, Ordering::Release);
        std::mem::take(&mut *list)
    }

    /// Whether `pointer` was kept; it is not any more.
    fn remove(&self, pointer: u64) -> bool {
        let Some(mut list) = self.list() else {
            return false;
        };
        let Some(index) = list.iter().position(|&p| p == pointer) else {
            return false;
        };
        list.swap_remove(index);
        self.count.store(list.len(), Ordering::Release);
        true
    }
}

/// Set at interpreter exit ([`at_exit`]): from then on nothing is given back to the driver.
static EXITING: AtomicBool = AtomicBool::new(false);
static CONTEXTS: Mutex<Vec<Arc<ContextMemory>>> = Mutex::new(Vec::new());
thread_local! {
    static LAST: RefCell<Weak<ContextMemory>> = const { RefCell::new(Weak::new()) };
}

/// The memory state of `context` (made on first use).
pub(crate) fn context_memory(
    driver: &'static driver::Driver,
    context: &LaunchContext,
) -> driver::Result<Arc<ContextMemory>> {
    let key = context.key();
    if let Some(memory) = LAST.with(|last| last.borrow().upgrade()) {
        if memory.key == key {
            return Ok(memory);
        }
    }
    let memory = {
        let mut contexts = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
        match contexts.iter().find(|m| m.key == key) {
            Some(memory) => memory.clone(),
            None => {
                let memory = Arc::new(ContextMemory::new(driver, context)?);
                contexts.push(memory.clone());
                memory
            }
        }
    };
    LAST.with(|last| *last.borrow_mut() = Arc::downgrade(&memory));
    Ok(memory)
}

/// The memory state of the context whose key is `key`, if this process used it here and it
/// was not forgotten since: the thread's last one when it is that context (no lock).
pub(crate) fn memory_of(key: u64) -> Option<Arc<ContextMemory>> {
    if let Some(memory) = LAST.with(|last| last.borrow().upgrade()) {
        if memory.key == key {
            return Some(memory);
        }
    }
    known_context_memory(key)
}

/// Every context's memory state, for work that visits them all.
pub(crate) fn all_context_memory() -> Vec<Arc<ContextMemory>> {
    CONTEXTS.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The memory state of the context whose key is `key`, if this process used it here and
/// it was not forgotten since.
pub(crate) fn known_context_memory(key: u64) -> Option<Arc<ContextMemory>> {
    let contexts = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
    contexts.iter().find(|m| m.key == key).cloned()
}

/// Forgets the memory state of the context whose key is `key` (numba-cuda resets it:
/// `cuda.close()`), releasing its staging ring, events and pool while the context lives:
/// without the GIL, as the ring's `cuMemFreeHost` waits for the device.
#[pyfunction]
pub(crate) fn forget_context(py: Python<'_>, key: u64) {
    let forgotten = {
        let mut contexts = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
        let (gone, kept) = contexts.drain(..).partition(|m| m.key == key);
        *contexts = kept;
        gone
    };
    py.detach(move || drop::<Vec<Arc<ContextMemory>>>(forgotten));
}

/// Called at interpreter exit: from then on driver objects are left to the process's end.
#[pyfunction]
pub(crate) fn at_exit() {
    EXITING.store(true, Ordering::Relaxed);
    driver::Driver::begin_exit();
}

impl ContextMemory {
    fn new(driver: &'static driver::Driver, context: &LaunchContext) -> driver::Result<Self> {
        // a driver that cannot make a pool (or refuses to) leaves the device's current one
        let pool = MemoryPool::create(driver, context.ordinal).unwrap_or(None);
        let release_threshold = match pool {
            Some(pool) => pool.release_threshold(driver),
            None => driver
                .memory_pool(context.ordinal)
                .and_then(|pool| pool.release_threshold(driver)),
        };
        Ok(ContextMemory {
            key: context.key(),
            context: context.context,
            ordinal: context.ordinal,
            ring: ManuallyDrop::new(StagingRing::new(driver)),
            pool,
            ordering: ManuallyDrop::new(Mutex::new(StreamOrdering::new())),
            done_mark: AtomicU64::new(0),
            deferred_frees: Pointers::default(),
            exported_frees: Pointers::default(),
            plain_allocations: Pointers::default(),
            freed_blocks: FreedBlocks::new(release_threshold.unwrap_or(0)),
        })
    }

    /// Whether the context is still the one this state was made for.
    pub(crate) fn is_alive(&self, driver: &driver::Driver) -> bool {
        match driver.context_id(self.context) {
            Some(id) => id == self.key,
            None => self.context.address() as u64 == self.key,
        }
    }

    pub(crate) fn ordering(&self) -> std::sync::MutexGuard<'_, StreamOrdering> {
        self.ordering.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps a pool free that a capture refused, for [`ContextMemory::take_deferred_frees`].
    pub(crate) fn defer_free(&self, pointer: u64) {
        self.deferred_frees.push(pointer);
    }

    /// The frees deferred so far (none: no lock taken).
    pub(crate) fn take_deferred_frees(&self) -> Vec<u64> {
        self.deferred_frees.take_all()
    }

    /// Holds the free of an exported block ([`ContextMemory::take_exported_frees`]).
    pub(crate) fn hold_exported_free(&self, pointer: u64) {
        self.exported_frees.push(pointer);
    }

    /// How many exported frees are held.
    pub(crate) fn exported_frees_held(&self) -> usize {
        self.exported_frees.count.load(Ordering::Acquire)
    }

    /// The exported frees held so far (none: no lock taken).
    pub(crate) fn take_exported_frees(&self) -> Vec<u64> {
        self.exported_frees.take_all()
    }

    pub(crate) fn note_plain_allocation(&self, pointer: u64) {
        self.plain_allocations.push(pointer);
    }

    /// Whether `pointer` was a plain allocation ([`ContextMemory::note_plain_allocation`]);
    /// it is forgotten (it is being freed).
    pub(crate) fn take_plain_allocation(&self, pointer: u64) -> bool {
        self.plain_allocations.remove(pointer)
    }
}

impl Drop for ContextMemory {
    fn drop(&mut self) {
        let Ok(driver) = driver() else { return };
        if EXITING.load(Ordering::Relaxed) || !self.is_alive(driver) {
            return; // the ring's pinned memory, the events and the pool went with the context
        }
        // kept blocks go back to the pool before it goes (the device's pool, else, keeps them)
        let _ = self.freed_blocks.release_all(driver, self.context);
        // SAFETY: dropped once, here, and never used again.
        unsafe {
            ManuallyDrop::drop(&mut self.ring);
            ManuallyDrop::drop(&mut self.ordering);
        }
        if let Some(pool) = self.pool.take() {
            let _ = pool.destroy(driver);
        }
    }
}
