//! CUDA graphs from stream capture: `with fastlaunch.graph() as g:` records the launches
//! made on its stream, `g.replay()` submits them all in one driver call, and each
//! fastlaunch launch in it can get new arguments in place (`g.launches[i].set_args(...)`)
//! without instantiating the graph again.
//!
//! While a thread captures, launches given no stream go to the capture stream, and each
//! fastlaunch launch on it is recorded with its kernel node and packed arguments. The
//! launch path pays one thread-local read for this.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use fastlaunch_driver::{self as driver, CaptureMode, Driver, GraphNode, KernelNodeParams};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use crate::devices::driver;
use crate::errors::{Error, Result};
use crate::launch::code::CompiledCode;
use crate::launch::overloads::Kernel;
use crate::launch::packed::PackedArgs;
use crate::streams::parse_stream;

thread_local! {
    /// The stream this thread is capturing into with `fastlaunch.graph`, or 0.
    static CAPTURE_STREAM: Cell<usize> = const { Cell::new(0) };
    /// The fastlaunch launches captured so far on this thread.
    static RECORDED: RefCell<Vec<Recorded>> = const { RefCell::new(Vec::new()) };
    /// Arguments of launches captured through numba-cuda's path: the graph holds them.
    static HELD: RefCell<Vec<Py<PyAny>>> = const { RefCell::new(Vec::new()) };
}

/// One captured fastlaunch launch: its node and what updating its arguments needs.
struct Recorded {
    kernel: Py<Kernel>,
    code: Arc<CompiledCode>,
    node: GraphNode,
    params: KernelNodeParams,
    packed: PackedArgs,
}

/// The stream launches with no stream go to: this thread's capture stream, if any.
#[inline]
pub(crate) fn capture_stream() -> Option<usize> {
    let stream = CAPTURE_STREAM.with(Cell::get);
    (stream != 0).then_some(stream)
}

/// Where launches given no stream go: this thread's `fastlaunch.graph()` capture stream, or
/// else the stream of a capture this thread follows (`followed_capture.rs`).
#[inline]
pub(crate) fn no_stream_target() -> Option<usize> {
    capture_stream().or_else(crate::launch::followed_capture::followed_capture_stream)
}

/// Whether a launch on `stream` is captured by this thread's `fastlaunch.graph`.
#[inline]
pub(crate) fn is_capturing(stream: usize) -> bool {
    capture_stream() == Some(stream)
}

/// Records the launch just submitted to the capture stream.
#[cold]
pub(crate) fn record(
    driver: &Driver,
    kernel: &Bound<'_, Kernel>,
    code: &Arc<CompiledCode>,
    stream: usize,
    packed: PackedArgs,
) -> Result<()> {
    let Some(node) = driver.last_captured_node(stream)? else {
        return Ok(()); // the capture was invalidated; ending it reports that
    };
    let params = driver.kernel_node_params(node)?;
    RECORDED.with(|recorded| {
        recorded.borrow_mut().push(Recorded {
            kernel: kernel.clone().unbind(),
            code: code.clone(),
            node,
            params,
            packed,
        })
    });
    Ok(())
}

/// Keeps the arguments of a launch on `stream` that fastlaunch did not pack itself (numba-cuda
/// launched it) alive with the graph being captured there, if any.
#[cold]
pub(crate) fn hold_if_capturing(stream: usize, args: &Bound<'_, PyTuple>) {
    if is_capturing(stream) {
        HELD.with(|held| held.borrow_mut().push(args.clone().into_any().unbind()));
    }
}

fn capture_mode(mode: &str) -> Result<CaptureMode> {
    match mode {
        "global" => Ok(CaptureMode::Global),
        "thread_local" => Ok(CaptureMode::ThreadLocal),
        "relaxed" => Ok(CaptureMode::Relaxed),
        _ => Err(Error::Value(format!(
            "capture mode is 'global', 'thread_local' or 'relaxed', not {mode:?}"
        ))),
    }
}

/// A CUDA graph captured from a stream; a context manager while capturing.
#[pyclass(module = "fastlaunch._core")]
pub struct Graph {
    /// The stream object captured (kept alive) and its handle.
    stream: Py<PyAny>,
    handle: usize,
    mode: CaptureMode,
    context: Option<driver::Context>,
    ordinal: usize,
    graph: Option<Arc<driver::Graph>>,
    launches: Vec<Py<GraphLaunch>>,
    /// Arguments of captured launches that numba-cuda made (not in `launches`).
    held: Vec<Py<PyAny>>,
    /// Whether `__enter__` ran and `__exit__` has not.
    capturing: bool,
}

#[pymethods]
impl Graph {
    /// What it keeps alive, shown to the cycle collector: an argument that refers back to
    /// its graph is then collected (none of these is dropped before the graph is).
    fn __traverse__(&self, visit: PyVisit<'_>) -> std::result::Result<(), PyTraverseError> {
        visit.call(&self.stream)?;
        self.launches
            .iter()
            .try_for_each(|launch| visit.call(launch))?;
        self.held.iter().try_for_each(|arg| visit.call(arg))
    }

    /// A graph to capture from `stream` (a stream object or handle, not a default stream).
    #[new]
    #[pyo3(signature = (stream, mode = "global"))]
    fn new(stream: &Bound<'_, PyAny>, mode: &str) -> Result<Graph> {
        let handle = parse_stream(stream)?;
        if handle <= driver::PER_THREAD_STREAM {
            return Err(Error::Value(
                "a default stream cannot be captured; capture on a stream of its own \
                 (fastlaunch.graph() makes one)"
                    .into(),
            ));
        }
        Ok(Graph {
            stream: stream.clone().unbind(),
            handle,
            mode: capture_mode(mode)?,
            context: None,
            ordinal: 0,
            graph: None,
            launches: Vec::new(),
            held: Vec::new(),
            capturing: false,
        })
    }

    fn __enter__(mut slf: PyRefMut<'_, Self>) -> Result<PyRefMut<'_, Self>> {
        if slf.graph.is_some() || slf.capturing {
            return Err(Error::Value(
                "this graph was already captured; make a new one".into(),
            ));
        }
        if capture_stream().is_some() {
            return Err(Error::Value(
                "this thread is already capturing a fastlaunch graph; graphs do not nest".into(),
            ));
        }
        let driver = driver()?;
        let context = driver.launch_context()?;
        driver.begin_capture(slf.handle, slf.mode)?;
        CAPTURE_STREAM.with(|s| s.set(slf.handle));
        RECORDED.with(|r| r.borrow_mut().clear());
        HELD.with(|h| h.borrow_mut().clear());
        slf.context = Some(context.context);
        slf.ordinal = context.ordinal;
        slf.capturing = true;
        Ok(slf)
    }

    /// Ends the capture and instantiates the graph; after an exception, discards it.
    #[pyo3(signature = (exc_type = None, _exc_value = None, _traceback = None))]
    fn __exit__(
        &mut self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> Result<bool> {
        if !self.capturing {
            return Ok(false);
        }
        self.capturing = false;
        CAPTURE_STREAM.with(|s| s.set(0));
        let recorded = RECORDED.with(|r| std::mem::take(&mut *r.borrow_mut()));
        let held = HELD.with(|h| std::mem::take(&mut *h.borrow_mut()));
        let driver = driver()?;
        let ended = driver.end_capture(self.handle);
        if exc_type.is_some_and(|t| !t.is_none()) {
            return Ok(false); // the body's exception wins; the graph (if any) is dropped
        }
        let graph = Arc::new(ended?);
        self.launches = recorded
            .into_iter()
            .map(|r| {
                Py::new(
                    py,
                    GraphLaunch {
                        graph: graph.clone(),
                        kernel: r.kernel,
                        _code: r.code,
                        node: r.node,
                        params: r.params,
                        packed: r.packed,
                        ordinal: self.ordinal,
                    },
                )
            })
            .collect::<PyResult<_>>()?;
        self.held = held;
        self.graph = Some(graph);
        Ok(false)
    }

    /// Runs every captured operation again, on `stream` (default: the capture stream).
    #[pyo3(signature = (stream = None))]
    fn replay(&self, stream: Option<&Bound<'_, PyAny>>) -> Result<()> {
        let handle = match stream {
            Some(s) if !s.is_none() => parse_stream(s)?,
            _ => self.handle,
        };
        self.replay_on(handle)
    }

    /// The fastlaunch launches captured, in order; each can take new arguments.
    #[getter]
    fn launches<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.launches.iter().map(|l| l.clone_ref(py)))
    }

    /// Nodes in the graph: the captured launches and anything else run on the stream.
    #[getter]
    fn node_count(&self) -> Result<usize> {
        Ok(self.instantiated()?.node_count()?)
    }

    #[getter]
    fn stream(&self, py: Python<'_>) -> Py<PyAny> {
        self.stream.clone_ref(py)
    }

    #[getter]
    fn captured(&self) -> bool {
        self.graph.is_some()
    }

    fn __repr__(&self) -> String {
        match &self.graph {
            Some(_) => format!(
                "<fastlaunch.Graph of {} fastlaunch launches on stream {:#x}>",
                self.launches.len(),
                self.handle
            ),
            None if self.capturing => {
                format!("<fastlaunch.Graph capturing stream {:#x}>", self.handle)
            }
            None => format!("<fastlaunch.Graph not captured, stream {:#x}>", self.handle),
        }
    }
}

impl Graph {
    /// Runs every captured operation again, on the stream `handle`, in the context it was
    /// captured in.
    pub(crate) fn replay_on(&self, handle: usize) -> Result<()> {
        let graph = self.instantiated()?;
        let driver = driver()?;
        let current = driver.launch_context()?;
        if Some(current.context) != self.context {
            return Err(Error::Value(
                "this graph was captured in another CUDA context; replay it there".into(),
            ));
        }
        let followed = crate::memory::before_launch(driver, &current, handle)?;
        graph.launch(handle)?;
        if followed {
            crate::memory::after_launch(driver, &current, handle)?;
        }
        Ok(())
    }

    fn instantiated(&self) -> Result<&Arc<driver::Graph>> {
        self.graph.as_ref().ok_or_else(|| {
            Error::Value(if self.capturing {
                "the graph is still capturing; replay it after the `with` block".into()
            } else {
                "nothing was captured yet: use `with graph:` first".into()
            })
        })
    }
}

/// One fastlaunch launch inside a captured graph.
#[pyclass(module = "fastlaunch._core")]
pub struct GraphLaunch {
    graph: Arc<driver::Graph>,
    kernel: Py<Kernel>,
    /// Keeps the kernel's code loaded while the graph can run it.
    _code: Arc<CompiledCode>,
    node: GraphNode,
    params: KernelNodeParams,
    packed: PackedArgs,
    /// The device the graph was captured on, for checking new arrays.
    ordinal: usize,
}

#[pymethods]
impl GraphLaunch {
    /// What it keeps alive, shown to the cycle collector (see `Graph.__traverse__`).
    fn __traverse__(&self, visit: PyVisit<'_>) -> std::result::Result<(), PyTraverseError> {
        visit.call(&self.kernel)?;
        self.packed.traverse(&visit)
    }

    /// Replaces every argument (same types as captured); later replays use them.
    #[pyo3(signature = (*args))]
    fn set_args(&mut self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> Result<()> {
        let kernel = self.kernel.clone_ref(py);
        let names = kernel.bind(py).get().names();
        self.packed.set_args(names, Some(self.ordinal), args)?;
        self.update()
    }

    /// Replaces argument `index` (same type); later replays use it.
    fn set_arg(&mut self, py: Python<'_>, index: usize, value: &Bound<'_, PyAny>) -> Result<()> {
        let kernel = self.kernel.clone_ref(py);
        let names = kernel.bind(py).get().names();
        self.packed
            .set_arg(names, Some(self.ordinal), index, value)?;
        self.update()
    }

    #[getter]
    fn kernel(&self, py: Python<'_>) -> Py<Kernel> {
        self.kernel.clone_ref(py)
    }

    /// The arguments the node runs with now: those captured, or the last set.
    #[getter]
    fn args<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.packed.args().iter().map(|a| a.clone_ref(py)))
    }
}

impl GraphLaunch {
    fn update(&self) -> Result<()> {
        // SAFETY: the packed slots hold one value per parameter of this node's kernel, packed
        // by its plan; the driver copies them during the call.
        unsafe {
            self.graph
                .set_kernel_node(self.node, &self.params, self.packed.params())
        }?;
        Ok(())
    }
}
