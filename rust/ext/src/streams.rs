//! Streams, events, and the ordering of launches after the work that produced their
//! inputs.
//!
//! Ordering rules (see docs/streams.md): an input whose producer stream is known (a CUDA
//! Array Interface v3 `stream`, torch's current stream read through the DLPack C
//! exchange API, CuPy's current stream) and differs from the launch stream makes the
//! launch stream wait on an event recorded on the producer's stream: ordered on the GPU,
//! never by blocking the host. Generic `__dlpack__` producers get the launch stream
//! and order themselves. Nothing is done while the launch stream is being captured
//! into a graph (capture records dependencies itself), or when ordering is turned off.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use fastlaunch_driver::{self as driver, LaunchDims};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;

use crate::devices::driver;
use crate::errors::{Error, Result};
use crate::made_streams;
use crate::numba_stream_class;
use crate::scratch::Scratch;

static ORDERING: AtomicBool = AtomicBool::new(true);
static FOLLOW_CURRENT_STREAM: AtomicU8 = AtomicU8::new(0);

/// Turns producer-stream ordering on or off (numba-cuda's `NUMBA_CUDA_ARRAY_INTERFACE_SYNC`).
#[pyfunction]
pub(crate) fn set_ordering(enabled: bool) {
    ORDERING.store(enabled, Ordering::Relaxed);
}

#[pyfunction]
pub(crate) fn ordering_enabled() -> bool {
    ORDERING.load(Ordering::Relaxed)
}

/// Where launches with no stream (0 or None) go: `"legacy"` (numba-cuda's rule: the legacy
/// default stream) or `"follow"` (the current stream of torch or CuPy when their arrays
/// are arguments).
#[pyfunction]
pub(crate) fn set_default_stream_policy(policy: &str) -> Result<()> {
    let code = match policy {
        "legacy" => 0,
        "follow" => 1,
        _ => {
            return Err(Error::Value(format!(
                "the default stream policy is 'legacy' or 'follow', not {policy:?}"
            )))
        }
    };
    FOLLOW_CURRENT_STREAM.store(code, Ordering::Relaxed);
    Ok(())
}

#[pyfunction]
pub(crate) fn default_stream_policy() -> &'static str {
    if follows_current_stream() {
        "follow"
    } else {
        "legacy"
    }
}

#[inline]
pub(crate) fn follows_current_stream() -> bool {
    FOLLOW_CURRENT_STREAM.load(Ordering::Relaxed) != 0
}

/// 0 and `CU_STREAM_LEGACY` (1) name the same stream.
#[inline]
pub(crate) fn same_stream(a: usize, b: usize) -> bool {
    a == b || (driver::is_legacy_stream(a) && driver::is_legacy_stream(b))
}

thread_local! {
    /// One reusable ordering event per context (events belong to a context), by the
    /// context's key (`LaunchContext::key`: a context re-created by a reset may reuse the old
    /// handle, whose event died with it). Reusing an event right after `cuStreamWaitEvent` is
    /// safe: the wait captures the event's state.
    static ORDERING_EVENTS: RefCell<Vec<(u64, driver::Event)>> = const { RefCell::new(Vec::new()) };
}

/// Makes `stream` wait for every producer stream in `producers` that differs from it.
pub(crate) fn order_after_producers(
    context: u64,
    stream: usize,
    producers: &[usize],
) -> Result<()> {
    if !ordering_enabled() || producers.iter().all(|&p| same_stream(p, stream)) {
        return Ok(());
    }
    let driver = driver()?;
    if driver.stream_is_capturing(stream)? {
        return Ok(());
    }
    ORDERING_EVENTS.with(|events| {
        let mut events = events.borrow_mut();
        let index = match events.iter().position(|(c, _)| *c == context) {
            Some(index) => index,
            None => {
                events.push((context, driver::Event::create(driver, false)?));
                events.len() - 1
            }
        };
        let event = &events[index].1;
        let mut done: smallvec::SmallVec<[usize; 4]> = smallvec::SmallVec::new();
        for &producer in producers {
            if same_stream(producer, stream) || done.iter().any(|&d| same_stream(d, producer)) {
                continue;
            }
            driver.order_after(stream, producer, event)?;
            done.push(producer);
        }
        Ok(())
    })
}

/// A CUDA stream: created here (`fastlaunch.stream()`), or wrapping a handle
/// (`external_stream`, and the default streams).
#[pyclass(frozen, module = "fastlaunch._core")]
pub struct Stream {
    inner: driver::Stream,
    /// Made by `create` (entered in `made_streams`), not wrapping a handle.
    made_here: bool,
    /// The context `create` made it in (`None`: wrapping a handle).
    made_in: Option<driver::LaunchContext>,
    /// numba-cuda's handle object over it (a `CUstream`), made once: each `cuda.stream()`
    /// object over this pooled stream holds it (`memory/numba_streams.rs`).
    numba_handle: PyOnceLock<Py<PyAny>>,
}

impl Stream {
    /// numba-cuda's handle object over this stream (`class`, its `CUstream`), made once.
    pub(crate) fn numba_handle<'py>(
        &self,
        class: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = class.py();
        let handle = self.numba_handle.get_or_try_init(py, || {
            Ok::<_, PyErr>(class.call1((self.inner.handle(),))?.unbind())
        })?;
        Ok(handle.bind(py).clone())
    }

    /// Whether this stream, made by `create`, may be handed to another user (a pool's): its
    /// context still lives and it is not being captured. A stream whose capture is open (or
    /// invalidated and not ended), or whose state the driver does not give, is not: a user
    /// given it would find their work captured into another's graph.
    pub(crate) fn reusable(&self) -> bool {
        let Some(made_in) = self.made_in else {
            return false;
        };
        let Ok(driver) = driver() else {
            return false;
        };
        let lives = match driver.context_id(made_in.context) {
            Some(id) => Some(id) == made_in.id,
            None => made_in.id.is_none(), // (a driver without ids: as far as can be told)
        };
        lives && matches!(driver.stream_is_capturing(self.inner.handle()), Ok(false))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.made_here {
            // out of the table before `inner`'s drop destroys the stream
            made_streams::note_destroyed(self.inner.handle());
        }
    }
}

#[pymethods]
impl Stream {
    /// A new stream in the current context (device 0's primary if none is current).
    #[staticmethod]
    #[pyo3(signature = (non_blocking = false))]
    pub(crate) fn create(non_blocking: bool) -> Result<Stream> {
        let driver = driver()?;
        let context = driver.launch_context()?;
        let inner = driver::Stream::create(driver, non_blocking)?;
        made_streams::note_made(inner.handle(), context.id, non_blocking);
        Ok(Stream {
            inner,
            made_here: true,
            made_in: Some(context),
            numba_handle: PyOnceLock::new(),
        })
    }

    /// Wraps a stream handle owned elsewhere (0: legacy default, 1: legacy, 2: per-thread).
    #[staticmethod]
    fn external(handle: usize) -> Result<Stream> {
        Ok(Stream {
            inner: driver::Stream::external(driver()?, handle),
            made_here: false,
            made_in: None,
            numba_handle: PyOnceLock::new(),
        })
    }

    #[getter]
    pub(crate) fn handle(&self) -> usize {
        self.inner.handle()
    }

    fn __cuda_stream__(&self) -> (i32, usize) {
        (0, self.inner.handle())
    }

    fn __int__(&self) -> usize {
        self.inner.handle()
    }

    /// Waits until all work submitted to the stream has finished.
    fn synchronize(&self, py: Python<'_>) -> Result<()> {
        Ok(py.detach(|| self.inner.synchronize())?)
    }

    /// Whether all work submitted to the stream has finished.
    fn query(&self) -> Result<bool> {
        Ok(self.inner.query()?)
    }

    /// Makes future work on this stream wait for `event` (on the GPU; the host continues).
    fn wait_event(&self, event: &Event) -> Result<()> {
        Ok(self.inner.wait_event(&event.inner)?)
    }

    fn __repr__(&self) -> String {
        match self.inner.handle() {
            0 => "<fastlaunch.Stream default (legacy)>".into(),
            1 => "<fastlaunch.Stream legacy default>".into(),
            2 => "<fastlaunch.Stream per-thread default>".into(),
            h => format!("<fastlaunch.Stream {h:#x}>"),
        }
    }
}

/// A CUDA event, for ordering between streams and for timing.
#[pyclass(frozen, module = "fastlaunch._core")]
pub struct Event {
    inner: driver::Event,
}

#[pymethods]
impl Event {
    #[new]
    #[pyo3(signature = (timing = true))]
    fn new(timing: bool) -> Result<Event> {
        let driver = driver()?;
        driver.launch_context()?;
        let inner = driver::Event::create(driver, timing)?;
        Ok(Event { inner })
    }

    /// Records the event on `stream` (0/None: the legacy default stream).
    #[pyo3(signature = (stream = None))]
    fn record(&self, stream: Option<&Bound<'_, PyAny>>) -> Result<()> {
        let handle = stream_argument(stream)?;
        Ok(self.inner.record(handle)?)
    }

    /// Makes future work on `stream` wait for this event.
    #[pyo3(signature = (stream = None))]
    fn wait(&self, stream: Option<&Bound<'_, PyAny>>) -> Result<()> {
        let handle = stream_argument(stream)?;
        let driver = driver()?;
        Ok(driver::Stream::external(driver, handle).wait_event(&self.inner)?)
    }

    fn synchronize(&self, py: Python<'_>) -> Result<()> {
        Ok(py.detach(|| self.inner.synchronize())?)
    }

    fn query(&self) -> Result<bool> {
        Ok(self.inner.query()?)
    }

    /// Milliseconds from this event to `end` (both recorded and complete).
    fn elapsed_time(&self, end: &Event) -> Result<f32> {
        Ok(end.inner.elapsed_since(&self.inner)?)
    }
}

fn stream_argument(stream: Option<&Bound<'_, PyAny>>) -> Result<usize> {
    match stream {
        None => Ok(0),
        Some(s) => parse_stream(s),
    }
}

/// [`parse_stream`] for Python: the one reading of a stream object, which the numba-cuda
/// path uses too.
#[pyfunction]
pub(crate) fn stream_handle(stream: &Bound<'_, PyAny>) -> Result<usize> {
    parse_stream(stream)
}

/// The handle of a stream argument of numba-cuda's memory API (`to_device(..., stream)`,
/// `copy_to_host(stream=...)`, ...): 0 for a false value, else what [`parse_stream`] reads
/// from a stream object (numba-cuda's `Stream`, a cuda.core stream, anything with
/// `__cuda_stream__`). An int other than 0 is refused with numba-cuda's `TypeError` (its
/// `_stream_handle`): taken as a raw `CUstream`, the driver would dereference it (a crash).
#[pyfunction]
pub(crate) fn memory_stream_handle(stream: &Bound<'_, PyAny>) -> Result<usize> {
    if !stream.is_truthy()? {
        return Ok(0);
    }
    if stream.is_instance_of::<pyo3::types::PyInt>() {
        let kind = stream
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        return Err(Error::Type(format!(
            "stream: Expected a Stream object or 0, got {kind}"
        )));
    }
    parse_stream(stream)
}

/// A stream handle from 0/None, an int handle, or any object with `__cuda_stream__`
/// (numba, torch, CuPy and cuda.core streams).
pub(crate) fn parse_stream(stream: &Bound<'_, PyAny>) -> Result<usize> {
    if stream.is_none() {
        return Ok(0);
    }
    if stream.is_instance_of::<pyo3::types::PyInt>() {
        return stream.extract::<usize>().map_err(|_| {
            Error::Value(if stream.lt(0).unwrap_or(false) {
                format!("a stream handle cannot be negative, got {stream}")
            } else {
                format!("a stream handle must fit in 64 bits, got {stream}")
            })
        });
    }
    if let Some(handle) = numba_stream_class::numba_stream_handle(stream) {
        return Ok(handle?); // numba-cuda's Stream: its __cuda_stream__ without the Python frame
    }
    let protocol = intern!(stream.py(), "__cuda_stream__");
    if stream.hasattr(protocol)? {
        // called as a method: no bound method object is made
        let pair = stream.call_method0(protocol)?;
        return protocol_handle(&pair).ok_or_else(|| {
            Error::Type("__cuda_stream__() must return (version, handle) ints".into())
        });
    }
    Err(Error::Type(format!(
        "stream must be 0 or None, an int handle, or an object with __cuda_stream__ \
         (numba, torch, CuPy, cuda.core streams); got {}",
        stream
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default()
    )))
}

/// The handle of a `__cuda_stream__()` result: `(version, handle)`, two ints.
fn protocol_handle(pair: &Bound<'_, PyAny>) -> Option<usize> {
    let pair = pair.cast::<PyTuple>().ok().filter(|p| p.len() == 2)?;
    pair.get_borrowed_item(0).ok()?.extract::<i64>().ok()?;
    pair.get_borrowed_item(1).ok()?.extract::<usize>().ok()
}

/// Chooses the launch stream and orders it after the inputs' producer streams (see
/// `streams`): returns the dimensions to launch with.
#[inline]
pub(crate) fn order_inputs(
    py: Python<'_>,
    context: u64,
    dims: &LaunchDims,
    scratch: &mut Scratch,
) -> Result<LaunchDims> {
    if !ordering_enabled() && !follows_current_stream() {
        return Ok(*dims);
    }
    let mut exchange_stream = None;
    if let Some((query, device_type, device_id)) = scratch.streams.exchange_stream {
        let mut stream: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: the producer's own function, called with a valid out-pointer under the GIL.
        if unsafe { query(device_type, device_id, &mut stream) } != 0 {
            return Err(PyErr::fetch(py).into());
        }
        exchange_stream = Some(stream as usize);
    }
    let cupy_stream = if scratch.streams.has_cupy {
        Some(crate::interop::cupy_stream::current_stream(py)?)
    } else {
        None
    };
    scratch.streams.producers.extend(exchange_stream);
    scratch.streams.producers.extend(cupy_stream);
    let current_stream = exchange_stream.or(cupy_stream);
    if scratch.streams.producers.is_empty() {
        return Ok(*dims);
    }
    let mut dims = *dims;
    if dims.stream == 0 && follows_current_stream() {
        if let Some(stream) = current_stream {
            dims.stream = stream;
        }
    }
    order_after_producers(context, dims.stream, &scratch.streams.producers)?;
    Ok(dims)
}
