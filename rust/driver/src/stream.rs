//! Streams and events: owned wrappers ([`Stream`], [`Event`]), and the same calls on raw
//! handles ([`Driver::create_stream`], [`Driver::record_event`], ...) for callers that own
//! handles themselves (the memory API's Python objects keep them as ints).
//!
//! Calls on a handle are safe functions, as elsewhere in this crate: the driver rejects
//! handles it does not know with an error, and a handle is only as good as its owner keeps
//! it. Destroying one is `unsafe`: a handle destroyed twice, or used after, may name another
//! object by then.

use std::ffi::c_uint;
use std::ptr;

/// The legacy default stream (`CU_STREAM_LEGACY`): synchronises with every blocking stream.
pub const LEGACY_STREAM: usize = crate::sys::CU_STREAM_LEGACY;
/// The calling thread's default stream (`CU_STREAM_PER_THREAD`).
pub const PER_THREAD_STREAM: usize = crate::sys::CU_STREAM_PER_THREAD;

/// `cuStreamCreate`'s flag for a stream that does not synchronise with the legacy default
/// stream (`CU_STREAM_NON_BLOCKING`).
pub const STREAM_NON_BLOCKING: u32 = crate::sys::CU_STREAM_NON_BLOCKING;

/// Whether `stream` names the legacy default stream: 0 and [`LEGACY_STREAM`] both do.
#[inline]
pub fn is_legacy_stream(stream: usize) -> bool {
    stream == 0 || stream == LEGACY_STREAM
}

/// Whether `stream` is a default stream (legacy or per-thread): both order with every
/// blocking stream, and neither is a non-blocking stream.
#[inline]
pub fn is_default_stream(stream: usize) -> bool {
    is_legacy_stream(stream) || stream == PER_THREAD_STREAM
}

use crate::error::Result;
use crate::sys::{self, CUevent, CUstream};
use crate::Driver;

/// A stream handle; destroyed on drop only when this process created it here, and only
/// while the context it was created in lives (a reset context took its streams with it).
pub struct Stream {
    driver: &'static Driver,
    handle: CUstream,
    owned: bool,
    /// The context it was created in, and that context's unique id then.
    created_in: Option<(crate::Context, Option<u64>)>,
}

// SAFETY: stream handles may be used from any thread.
unsafe impl Send for Stream {}
// SAFETY: as above; no interior mutability.
unsafe impl Sync for Stream {}

impl Stream {
    /// A new stream in the current context; `non_blocking` streams do not
    /// synchronise with the legacy default stream.
    pub fn create(driver: &'static Driver, non_blocking: bool) -> Result<Stream> {
        let handle = driver.create_stream(non_blocking)? as CUstream;
        let created_in = driver
            .current_context()?
            .map(|context| (context, driver.context_id(context)));
        Ok(Stream {
            driver,
            handle,
            owned: true,
            created_in,
        })
    }

    /// Wraps a handle owned elsewhere (0 = legacy default, 1 = legacy, 2 = per-thread).
    pub fn external(driver: &'static Driver, handle: usize) -> Stream {
        Stream {
            driver,
            handle: handle as CUstream,
            owned: false,
            created_in: None,
        }
    }

    pub fn handle(&self) -> usize {
        self.handle as usize
    }

    pub fn synchronize(&self) -> Result<()> {
        self.driver.stream_synchronize(self.handle())
    }

    /// Whether all work submitted to the stream has finished.
    pub fn query(&self) -> Result<bool> {
        self.driver.stream_query(self.handle())
    }

    /// Makes future work on this stream wait for `event` (no host blocking).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.driver.stream_wait_event(self.handle(), event.handle())
    }
}

impl Driver {
    /// Whether work submitted to `stream` is being captured into a CUDA graph.
    pub fn stream_is_capturing(&self, stream: usize) -> Result<bool> {
        let mut status: std::ffi::c_int = 0;
        self.check(
            // SAFETY: valid out-pointer; the driver validates the handle.
            unsafe { (self.api.stream_is_capturing)(stream as CUstream, &mut status) },
            "querying stream capture",
        )?;
        Ok(status != 0)
    }

    /// The context `stream` belongs to; `None` for the default streams (the current
    /// context's) and where the driver lacks `cuStreamGetCtx`.
    pub fn stream_context(&self, stream: usize) -> Result<Option<crate::Context>> {
        let Some(get_ctx) = self.api.stream_get_ctx else {
            return Ok(None);
        };
        if is_default_stream(stream) {
            return Ok(None);
        }
        let mut context: crate::sys::CUcontext = std::ptr::null_mut();
        self.check(
            // SAFETY: valid out-pointer; the driver validates the handle.
            unsafe { get_ctx(stream as CUstream, &mut context) },
            "reading a stream's context (cuStreamGetCtx)",
        )?;
        Ok(Some(crate::Context::from_raw(context)))
    }

    /// `stream`'s id, unique among the streams of its context over the context's life (a
    /// destroyed stream's handle may be given to a new stream; its id is not). None where
    /// the driver lacks `cuStreamGetId` (before CUDA 12.0).
    pub fn stream_id(&self, stream: usize) -> Result<Option<u64>> {
        let Some(get_id) = self.api.stream_get_id else {
            return Ok(None);
        };
        let mut id = 0u64;
        self.check(
            // SAFETY: valid out-pointer; the driver validates the handle.
            unsafe { get_id(stream as CUstream, &mut id) },
            "reading a stream's id (cuStreamGetId)",
        )?;
        Ok(Some(id))
    }

    /// Whether work submitted to `stream` now would be captured into a graph, or, for the
    /// legacy stream, is refused because a blocking stream is being captured (work there
    /// would join that capture implicitly). Asking never invalidates a capture.
    pub fn capture_state(&self, stream: usize) -> Result<Capture> {
        let mut status: std::ffi::c_int = 0;
        // SAFETY: valid out-pointer; the driver validates the handle.
        let code = unsafe { (self.api.stream_is_capturing)(stream as CUstream, &mut status) };
        if code == crate::sys::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT {
            return Ok(Capture::Implicit);
        }
        self.check(code, "querying stream capture (cuStreamIsCapturing)")?;
        Ok(if status == 0 {
            Capture::None
        } else {
            Capture::Active
        })
    }

    /// Whether this driver lets a thread set its own stream-capture mode
    /// (`cuThreadExchangeStreamCaptureMode`), so that [`Driver::relaxed`] can make host waits
    /// legal while another thread or library captures in global mode.
    pub fn can_relax_capture(&self) -> bool {
        self.api.thread_exchange_stream_capture_mode.is_some()
    }

    /// Runs `work` with the calling thread in the relaxed stream-capture mode, its own mode
    /// put back after. In the default (global) mode, an event query or synchronization made
    /// while any thread captures in global mode is refused and invalidates that capture
    /// (CUDA's "potentially unsafe" calls); in relaxed mode it is legal for events recorded
    /// outside a capture, and captures are left alone. A driver without the call runs `work`
    /// as it is.
    pub fn relaxed<T>(&self, work: impl FnOnce() -> Result<T>) -> Result<T> {
        const RELAXED: std::ffi::c_int = 2;
        let Some(exchange) = self.api.thread_exchange_stream_capture_mode else {
            return work();
        };
        let mut mode = RELAXED;
        self.check(
            // SAFETY: a valid in/out pointer to a mode; the call only swaps the thread's mode.
            unsafe { exchange(&mut mode) },
            "setting the thread's capture mode (cuThreadExchangeStreamCaptureMode)",
        )?;
        let done = work();
        let restored = self.check(
            // SAFETY: as above; `mode` holds the thread's previous mode, put back.
            unsafe { exchange(&mut mode) },
            "restoring the thread's capture mode (cuThreadExchangeStreamCaptureMode)",
        );
        let done = done?;
        restored?;
        Ok(done)
    }

    /// Makes `stream` wait, on the GPU, for the work submitted to `producer` so far, through
    /// `event` (recorded on `producer`). The host never blocks.
    pub fn order_after(&self, stream: usize, producer: usize, event: &Event) -> Result<()> {
        event.record(producer)?;
        self.stream_wait_event(stream, event.handle())
    }

    /// A new stream in the current context, [`STREAM_NON_BLOCKING`] when `non_blocking`;
    /// its handle, destroyed with [`Driver::destroy_stream`].
    pub fn create_stream(&self, non_blocking: bool) -> Result<usize> {
        let flags = if non_blocking { STREAM_NON_BLOCKING } else { 0 };
        let mut handle: CUstream = ptr::null_mut();
        self.check(
            // SAFETY: valid out-pointer; the driver checks the flags.
            unsafe { (self.api.stream_create)(&mut handle, flags as c_uint) },
            "creating a stream (cuStreamCreate)",
        )?;
        Ok(handle as usize)
    }

    /// Destroys a stream from [`Driver::create_stream`]; work already submitted to it still
    /// runs to completion (the driver releases the stream afterwards).
    ///
    /// # Safety
    /// `stream` came from `create_stream`, is destroyed once, and is not used afterwards.
    pub unsafe fn destroy_stream(&self, stream: usize) -> Result<()> {
        self.check(
            // SAFETY: per the caller.
            unsafe { (self.api.stream_destroy)(stream as CUstream) },
            "destroying a stream (cuStreamDestroy)",
        )
    }

    /// Blocks until all work submitted to `stream` has finished.
    pub fn stream_synchronize(&self, stream: usize) -> Result<()> {
        self.check(
            // SAFETY: no memory is passed; the driver checks the handle.
            unsafe { (self.api.stream_synchronize)(stream as CUstream) },
            "synchronizing a stream (cuStreamSynchronize)",
        )
    }

    /// Whether all work submitted to `stream` has finished (never blocks).
    pub fn stream_query(&self, stream: usize) -> Result<bool> {
        // SAFETY: no memory is passed; the driver checks the handle.
        match unsafe { (self.api.stream_query)(stream as CUstream) } {
            sys::CUDA_SUCCESS => Ok(true),
            sys::CUDA_ERROR_NOT_READY => Ok(false),
            code => Err(self.error(code, "querying a stream (cuStreamQuery)")),
        }
    }

    /// The flags `stream` was created with ([`STREAM_NON_BLOCKING`] or 0).
    pub fn stream_flags(&self, stream: usize) -> Result<u32> {
        let mut flags: c_uint = 0;
        self.check(
            // SAFETY: valid out-pointer; the driver checks the handle.
            unsafe { (self.api.stream_get_flags)(stream as CUstream, &mut flags) },
            "reading a stream's flags (cuStreamGetFlags)",
        )?;
        Ok(flags)
    }

    /// Makes work submitted to `stream` from now on wait, on the GPU, until `event`'s
    /// recorded work has run. The wait takes the event as recorded at this call, so the event
    /// may be recorded again right after.
    pub fn stream_wait_event(&self, stream: usize, event: usize) -> Result<()> {
        self.check(
            // SAFETY: no memory is passed; the driver checks both handles.
            unsafe { (self.api.stream_wait_event)(stream as CUstream, event as CUevent, 0) },
            "making a stream wait on an event (cuStreamWaitEvent)",
        )
    }

    /// A new event in the current context; `timing: false` creates it with
    /// `CU_EVENT_DISABLE_TIMING`, which makes recording and waiting cheaper. Its handle,
    /// destroyed with [`Driver::destroy_event`].
    pub fn create_event(&self, timing: bool) -> Result<usize> {
        let flags = if timing {
            0
        } else {
            sys::CU_EVENT_DISABLE_TIMING
        };
        let mut handle: CUevent = ptr::null_mut();
        self.check(
            // SAFETY: valid out-pointer.
            unsafe { (self.api.event_create)(&mut handle, flags) },
            "creating an event (cuEventCreate)",
        )?;
        Ok(handle as usize)
    }

    /// Destroys an event from [`Driver::create_event`] (an event still pending is released
    /// by the driver once its work is done).
    ///
    /// # Safety
    /// `event` came from `create_event`, is destroyed once, and is not used afterwards.
    pub unsafe fn destroy_event(&self, event: usize) -> Result<()> {
        self.check(
            // SAFETY: per the caller.
            unsafe { (self.api.event_destroy)(event as CUevent) },
            "destroying an event (cuEventDestroy)",
        )
    }

    /// Records `event` after the work submitted to `stream` so far.
    pub fn record_event(&self, event: usize, stream: usize) -> Result<()> {
        self.check(
            // SAFETY: no memory is passed; the driver checks both handles.
            unsafe { (self.api.event_record)(event as CUevent, stream as CUstream) },
            "recording an event (cuEventRecord)",
        )
    }

    /// Blocks until the work `event` was last recorded after has run.
    pub fn event_synchronize(&self, event: usize) -> Result<()> {
        self.check(
            // SAFETY: no memory is passed; the driver checks the handle.
            unsafe { (self.api.event_synchronize)(event as CUevent) },
            "synchronizing an event (cuEventSynchronize)",
        )
    }

    /// Whether the work `event` was last recorded after has run (never blocks).
    pub fn event_query(&self, event: usize) -> Result<bool> {
        // SAFETY: no memory is passed; the driver checks the handle.
        match unsafe { (self.api.event_query)(event as CUevent) } {
            sys::CUDA_SUCCESS => Ok(true),
            sys::CUDA_ERROR_NOT_READY => Ok(false),
            code => Err(self.error(code, "querying an event (cuEventQuery)")),
        }
    }

    /// Milliseconds from `start` to `end`, both created with timing, recorded and complete.
    pub fn event_elapsed_ms(&self, start: usize, end: usize) -> Result<f32> {
        let mut ms = 0f32;
        self.check(
            // SAFETY: valid out-pointer; the driver checks both handles.
            unsafe { (self.api.event_elapsed_time)(&mut ms, start as CUevent, end as CUevent) },
            "timing between events (cuEventElapsedTime)",
        )?;
        Ok(ms)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let context_lives = match self.created_in {
            Some((context, Some(id))) => self.driver.context_id(context) == Some(id),
            _ => true,
        };
        if self.owned && context_lives && !Driver::exiting() {
            // SAFETY: created by cuStreamCreate and destroyed once.
            let _ = unsafe { (self.driver.api.stream_destroy)(self.handle) };
        }
    }
}

/// What [`Driver::capture_state`] says of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capture {
    /// Work there runs when submitted.
    None,
    /// The stream is being captured (or its capture was invalidated and not yet ended).
    Active,
    /// The legacy stream, while a blocking stream is being captured: work there is refused
    /// (and would invalidate that capture).
    Implicit,
}

/// An event; destroyed on drop.
pub struct Event {
    driver: &'static Driver,
    handle: CUevent,
}

// SAFETY: event handles may be used from any thread.
unsafe impl Send for Event {}
// SAFETY: as above; no interior mutability.
unsafe impl Sync for Event {}

impl Event {
    pub fn create(driver: &'static Driver, timing: bool) -> Result<Event> {
        Ok(Event {
            driver,
            handle: driver.create_event(timing)? as CUevent,
        })
    }

    pub fn handle(&self) -> usize {
        self.handle as usize
    }

    pub fn record(&self, stream: usize) -> Result<()> {
        self.driver.record_event(self.handle(), stream)
    }

    pub fn synchronize(&self) -> Result<()> {
        self.driver.event_synchronize(self.handle())
    }

    pub fn query(&self) -> Result<bool> {
        self.driver.event_query(self.handle())
    }

    /// Milliseconds between `start` and this event, both recorded and complete.
    pub fn elapsed_since(&self, start: &Event) -> Result<f32> {
        self.driver.event_elapsed_ms(start.handle(), self.handle())
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if Driver::exiting() {
            return;
        }
        // SAFETY: created by cuEventCreate and destroyed once.
        let _ = unsafe { (self.driver.api.event_destroy)(self.handle) };
    }
}
