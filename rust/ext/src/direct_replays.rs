//! The way back into a `fastlaunch.graphed` step called again with the very objects of one
//! of its last calls: one Rust call proves the arguments held (`HeldArgs::holds_args`) and
//! replays the graph that call replayed, with nothing computed in Python. `graphed.py`
//! remembers a call here once it has replayed a graph that holds exactly its arguments, and
//! forgets every remembered call before it changes any graph (re-points one, captures,
//! evicts, clears), so a graph remembered here always holds what its call passed.
//!
//! Calls are made with the GIL held; replaying a fastlaunch graph keeps it, so a replay is
//! never interleaved with `graphed.py` changing that graph, nor with another replay. torch's
//! replay (and CuPy's) lets the GIL go: it runs holding the step's lock (taken without waiting; when
//! another thread holds it, the call takes `graphed.py`'s path, which waits for it). A graph
//! torch or CuPy captured is pinned to its arrays and never changed, only dropped; it stays alive
//! while a replay runs (the slot's references are taken out first).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::errors::{Error, Result};
use crate::graphs::{no_stream_target, Graph};
use crate::held_args::HeldArgs;

/// Calls remembered per step: the last two (a loop passing two buffers by turns).
const SLOTS: usize = 2;

/// `last_stream` when the last replay was torch's or CuPy's, on that framework's current
/// stream.
const FRAMEWORK_CURRENT_STREAM: usize = usize::MAX;

/// One step's remembered calls; see the module documentation.
#[pyclass(frozen, module = "fastlaunch._core")]
pub(crate) struct DirectReplays {
    /// What a call returns when no remembered call holds its arguments.
    missed: Py<PyAny>,
    /// Most recent first; at most [`SLOTS`].
    slots: Mutex<Vec<Slot>>,
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
    hits: Arc<AtomicU64>,
}

enum Target {
    /// A fastlaunch graph, replayed on a stream the call's form fixes.
    Graph { graph: Py<Graph>, handle: usize },
    /// A graph torch or CuPy captured, replayed (`replay()`: torch's `CUDAGraph.replay`,
    /// CuPy's `Graph.launch` on its current stream) holding `lock` (the step's).
    Framework { replay: Py<PyAny>, lock: Py<PyAny> },
}

impl Target {
    fn clone_ref(&self, py: Python<'_>) -> Target {
        match self {
            Target::Graph { graph, handle } => Target::Graph {
                graph: graph.clone_ref(py),
                handle: *handle,
            },
            Target::Framework { replay, lock } => Target::Framework {
                replay: replay.clone_ref(py),
                lock: lock.clone_ref(py),
            },
        }
    }

    /// Replays; the stream it replayed on, or None when the step's lock is taken (by a
    /// thread changing or replaying the step's graphs).
    fn replay(&self, py: Python<'_>) -> Result<Option<usize>> {
        match self {
            Target::Graph { graph, handle } => {
                graph
                    .bind(py)
                    .try_borrow()
                    .map_err(PyErr::from)?
                    .replay_on(*handle)?;
                Ok(Some(*handle))
            }
            Target::Framework { replay, lock } => {
                let lock = lock.bind(py);
                if !lock
                    .call_method1(intern!(py, "acquire"), (false,))?
                    .is_truthy()?
                {
                    return Ok(None);
                }
                let replayed = replay.call0(py);
                lock.call_method0(intern!(py, "release"))?;
                replayed?;
                Ok(Some(FRAMEWORK_CURRENT_STREAM))
            }
        }
    }
}

impl DirectReplays {
    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        // No Python code runs while the lock is held, so it cannot be poisoned by a panic
        // there; a poisoned lock still holds consistent slots.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn remember(&self, slot: Slot) {
        let mut slots = self.slots();
        slots.retain(|s| !s.held.is(&slot.held));
        slots.insert(0, slot);
        slots.truncate(SLOTS);
    }
}

#[pymethods]
impl DirectReplays {
    #[new]
    fn new(missed: Py<PyAny>) -> DirectReplays {
        DirectReplays {
            missed,
            slots: Mutex::new(Vec::with_capacity(SLOTS)),
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
        let found = {
            let mut slots = self.slots();
            slots
                .iter_mut()
                .find(|slot| slot.held.get().holds_args(args))
                .map(|slot| {
                    (
                        slot.target.clone_ref(py),
                        slot.fill.clone_ref(py),
                        slot.leaves.clone_ref(py),
                        slot.hits.clone(),
                    )
                })
        };
        let Some((target, fill, leaves, hits)) = found else {
            return Ok(self.missed.clone_ref(py));
        };
        let Some(stream) = target.replay(py)? else {
            return Ok(self.missed.clone_ref(py));
        };
        hits.fetch_add(1, Ordering::Relaxed);
        self.last_stream.store(stream, Ordering::Relaxed);
        Ok(fill.call1(py, (leaves,))?)
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
            hits: Arc::default(),
        });
    }

    /// Remembers a call that replayed a graph torch or CuPy captured, through `replay()`, to be replayed holding `lock` (the step's; see the module
    /// documentation).
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
            hits: Arc::default(),
        });
        Ok(())
    }

    /// The keys of the graphs replayed here since the last call, with how many times each
    /// was (`forget=True`: and forgets every call remembered).
    #[pyo3(signature = (forget = false))]
    fn take_hits(&self, py: Python<'_>, forget: bool) -> Vec<(Py<PyAny>, u64)> {
        let mut slots = self.slots();
        let hits = slots
            .iter()
            .map(|slot| (slot.key.clone_ref(py), slot.hits.swap(0, Ordering::Relaxed)))
            .filter(|(_, hits)| *hits > 0)
            .collect();
        if forget {
            slots.clear();
        }
        hits
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
}
