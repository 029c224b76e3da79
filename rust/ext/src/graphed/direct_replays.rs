//! The way back into a `fastlaunch.graphed` step called again with the very objects of one
//! of its last calls: one Rust call proves the arguments held (`HeldArgs::holds_args`) and
//! replays the graph that call replayed, with nothing computed in Python. `graphed.py`
//! remembers a call here once it has replayed a graph that holds exactly its arguments, and
//! forgets every remembered call before it changes any graph (re-points one, captures,
//! evicts, clears), so a graph remembered here holds what its call passed.
//!
//! Forgetting moves an epoch on. A call reads the epoch first and replays only if it is
//! unchanged just before the replay, so a graph changed while the call proved its arguments
//! is never replayed for it. (The proofs of the arguments that fastlaunch graphs are
//! remembered with, numba arrays, scalars and other objects by identity, run no Python code,
//! so no other thread can run meanwhile; a CuPy array's proof reads an attribute, but CuPy's
//! graphs are never changed, only dropped. The epoch keeps this true whatever a proof
//! reads.) Between that check and the replay no Python code runs: a fastlaunch graph is
//! replayed without letting the GIL go. torch's replay (and CuPy's) does let it go, so it
//! runs holding the step's lock, which `graphed.py` holds while it changes graphs (taken
//! without waiting; when another thread holds it, the call takes `graphed.py`'s path, which
//! waits). A slot's objects stay alive while it is replayed, even if forgotten meanwhile.
//!
//! No Python code runs while the slots' lock is held either: slots are taken out under it
//! and dropped (which can run `__del__`) after it is released.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::PyTraverseError;
use smallvec::SmallVec;

use crate::errors::{Error, Result};
use crate::graphed::held_args::HeldArgs;
use crate::launch::graph::{no_stream_target, Graph};

/// Calls remembered per step: the last two (a loop passing two buffers by turns).
const SLOTS: usize = 2;

/// `last_stream` when the last replay was torch's or CuPy's, on that framework's current
/// stream.
const FRAMEWORK_CURRENT_STREAM: usize = usize::MAX;

type Slots = SmallVec<[Arc<Slot>; SLOTS]>;

/// One step's remembered calls; see the module documentation.
#[pyclass(frozen, module = "fastlaunch._core")]
pub(crate) struct DirectReplays {
    /// What a call returns when no remembered call holds its arguments.
    missed: Py<PyAny>,
    /// Most recent first; at most [`SLOTS`].
    slots: Mutex<Slots>,
    /// Moved on each time the remembered calls are forgotten.
    epoch: AtomicU64,
    /// The stream of the step's last replay (this path's or `graphed.py`'s), for
    /// `GraphedStep.synchronize`.
    last_stream: AtomicUsize,
}

/// A remembered call: its arguments, the graph it replayed, and its return value.
struct Slot {
    held: Py<HeldArgs>,
    target: Target,
    /// `fill(leaves)` is the step's return value (`graphed.py`'s `_Entry.fill`).
    fill: Py<PyAny>,
    leaves: Py<PyAny>,
    /// The graph's key in the step's cache, and replays since `graphed.py` last asked
    /// (it counts them and keeps its cache's order by them).
    key: Py<PyAny>,
    hits: AtomicU64,
}

enum Target {
    /// A fastlaunch graph, replayed on a stream the call's form fixes.
    Graph { graph: Py<Graph>, handle: usize },
    /// A graph torch or CuPy captured, replayed (`replay()`: torch's `CUDAGraph.replay`,
    /// CuPy's `Graph.launch` on its current stream) holding `lock` (the step's).
    Framework { replay: Py<PyAny>, lock: Py<PyAny> },
}

impl Slot {
    fn traverse(&self, visit: &PyVisit<'_>) -> std::result::Result<(), PyTraverseError> {
        visit.call(&self.held)?;
        match &self.target {
            Target::Graph { graph, .. } => visit.call(graph)?,
            Target::Framework { replay, lock } => {
                visit.call(replay)?;
                visit.call(lock)?;
            }
        }
        visit.call(&self.fill)?;
        visit.call(&self.leaves)?;
        visit.call(&self.key)
    }
}

impl Target {
    /// Replays if `unchanged()` (the remembered calls were not forgotten) just before; the
    /// stream it replayed on, or None when it did not (forgotten, or the step's lock taken).
    fn replay(&self, py: Python<'_>, unchanged: impl Fn() -> bool) -> Result<Option<usize>> {
        match self {
            Target::Graph { graph, handle } => {
                let graph = graph.bind(py).try_borrow().map_err(PyErr::from)?;
                if !unchanged() {
                    return Ok(None);
                }
                graph.replay_on(*handle)?;
                Ok(Some(*handle))
            }
            Target::Framework { replay, lock } => {
                let lock = lock.bind(py);
                let taken = lock.call_method1(intern!(py, "acquire"), (false,))?;
                if !taken.is_truthy()? {
                    return Ok(None);
                }
                let replayed = if unchanged() {
                    replay.call0(py).map(|_| Some(FRAMEWORK_CURRENT_STREAM))
                } else {
                    Ok(None)
                };
                lock.call_method0(intern!(py, "release"))?;
                Ok(replayed?)
            }
        }
    }
}

impl DirectReplays {
    fn slots(&self) -> MutexGuard<'_, Slots> {
        // No Python code runs while the lock is held (see the module documentation), so it is
        // never poisoned by a Python error; a poisoned lock still holds consistent slots.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn remember(&self, slot: Slot) {
        let slot = Arc::new(slot);
        let dropped: Slots = {
            let mut slots = self.slots();
            let mut kept: Slots = SmallVec::new();
            let mut dropped: Slots = SmallVec::new();
            kept.push(slot.clone());
            for old in slots.drain(..) {
                if old.held.is(&slot.held) || kept.len() == SLOTS {
                    dropped.push(old);
                } else {
                    kept.push(old);
                }
            }
            *slots = kept;
            dropped
        };
        drop(dropped); // with the lock released: dropping may run Python code
    }

    /// Forgets every remembered call; returns them, to be dropped with the lock released.
    fn forget(&self) -> Slots {
        let forgotten = std::mem::take(&mut *self.slots());
        self.epoch.fetch_add(1, Ordering::AcqRel);
        forgotten
    }
}

#[pymethods]
impl DirectReplays {
    #[new]
    fn new(missed: Py<PyAny>) -> DirectReplays {
        DirectReplays {
            missed,
            slots: Mutex::new(SmallVec::new()),
            epoch: AtomicU64::new(0),
            last_stream: AtomicUsize::new(0),
        }
    }

    /// `direct(args)`: replays the graph of the remembered call whose arguments `args` are
    /// and returns that call's return value; returns `missed` when none is (or when this
    /// thread is capturing: the step then runs inline, into that capture).
    fn __call__(&self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> Result<Py<PyAny>> {
        if no_stream_target().is_some() {
            return Ok(self.missed.clone_ref(py));
        }
        let epoch = self.epoch.load(Ordering::Acquire);
        let candidates: Slots = self.slots().clone();
        let Some(slot) = candidates
            .into_iter()
            .find(|slot| slot.held.get().holds_args(args))
        else {
            return Ok(self.missed.clone_ref(py));
        };
        let unchanged = || self.epoch.load(Ordering::Acquire) == epoch;
        let Some(stream) = slot.target.replay(py, unchanged)? else {
            return Ok(self.missed.clone_ref(py));
        };
        slot.hits.fetch_add(1, Ordering::Relaxed);
        self.last_stream.store(stream, Ordering::Relaxed);
        Ok(slot.fill.call1(py, (slot.leaves.clone_ref(py),))?)
    }

    /// Remembers a call that replayed `graph` on stream `handle`.
    fn remember_graph(
        &self,
        held: Py<HeldArgs>,
        graph: Py<Graph>,
        handle: usize,
        fill: Py<PyAny>,
        leaves: Py<PyAny>,
        key: Py<PyAny>,
    ) {
        self.remember(Slot {
            held,
            target: Target::Graph { graph, handle },
            fill,
            leaves,
            key,
            hits: AtomicU64::new(0),
        });
    }

    /// Remembers a call that replayed a graph torch or CuPy captured, through `replay()`, to
    /// be replayed holding `lock` (the step's; see the module documentation).
    fn remember_framework(
        &self,
        held: Py<HeldArgs>,
        replay: &Bound<'_, PyAny>,
        fill: Py<PyAny>,
        leaves: Py<PyAny>,
        key: Py<PyAny>,
        lock: Py<PyAny>,
    ) -> Result<()> {
        if !replay.is_callable() {
            return Err(Error::Type("replay must be callable".into()));
        }
        let replay = replay.clone().unbind();
        self.remember(Slot {
            held,
            target: Target::Framework { replay, lock },
            fill,
            leaves,
            key,
            hits: AtomicU64::new(0),
        });
        Ok(())
    }

    /// The keys of the graphs replayed here since the last call, with how many times each
    /// was (`forget=True`: and forgets every call remembered).
    #[pyo3(signature = (forget = false))]
    fn take_hits(&self, py: Python<'_>, forget: bool) -> Vec<(Py<PyAny>, u64)> {
        let slots: Slots = if forget {
            self.forget()
        } else {
            self.slots().clone()
        };
        slots
            .iter()
            .map(|slot| (slot.key.clone_ref(py), slot.hits.swap(0, Ordering::Relaxed)))
            .filter(|(_, hits)| *hits > 0)
            .collect()
    }

    /// Calls remembered now.
    fn __len__(&self) -> usize {
        self.slots().len()
    }

    /// The stream of the step's last replay: a handle, or None for torch's or CuPy's current
    /// stream.
    #[getter]
    fn get_last_stream(&self) -> Option<usize> {
        let stream = self.last_stream.load(Ordering::Relaxed);
        (stream != FRAMEWORK_CURRENT_STREAM).then_some(stream)
    }

    #[setter]
    fn set_last_stream(&self, stream: Option<usize>) {
        self.last_stream.store(
            stream.unwrap_or(FRAMEWORK_CURRENT_STREAM),
            Ordering::Relaxed,
        );
    }

    /// The remembered calls hold the step's arguments, which may hold the step.
    fn __traverse__(&self, visit: PyVisit<'_>) -> std::result::Result<(), PyTraverseError> {
        visit.call(&self.missed)?;
        // Never waits: held only by this object's own methods, which run no Python code
        // (and so no collection) while they hold it.
        if let Ok(slots) = self.slots.try_lock() {
            for slot in slots.iter() {
                slot.traverse(&visit)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        drop(self.forget());
    }
}
