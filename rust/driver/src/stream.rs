//! Streams and events.

use std::ptr;

/// The legacy default stream (`CU_STREAM_LEGACY`): synchronises with every blocking stream.
pub const LEGACY_STREAM: usize = crate::sys::CU_STREAM_LEGACY;
/// The calling thread's default stream (`CU_STREAM_PER_THREAD`).
pub const PER_THREAD_STREAM: usize = crate::sys::CU_STREAM_PER_THREAD;

use crate::error::Result;
use crate::sys::{self, CUevent, CUstream};
use crate::Driver;

/// A stream handle; destroyed on drop only when this process created it here.
pub struct Stream {
    driver: &'static Driver,
    handle: CUstream,
    owned: bool,
}

// SAFETY: stream handles may be used from any thread.
unsafe impl Send for Stream {}
// SAFETY: as above; no interior mutability.
unsafe impl Sync for Stream {}

impl Stream {
    /// A new stream in the current context; `non_blocking` streams do not
    /// synchronise with the legacy default stream.
    pub fn create(driver: &'static Driver, non_blocking: bool) -> Result<Stream> {
        let flags = if non_blocking {
            sys::CU_STREAM_NON_BLOCKING
        } else {
            0
        };
        let mut handle: CUstream = ptr::null_mut();
        driver.check(
            // SAFETY: valid out-pointer.
            unsafe { (driver.api.stream_create)(&mut handle, flags) },
            "creating a stream",
        )?;
        Ok(Stream {
            driver,
            handle,
            owned: true,
        })
    }

    /// Wraps a handle owned elsewhere (0 = legacy default, 1 = legacy, 2 = per-thread).
    pub fn external(driver: &'static Driver, handle: usize) -> Stream {
        Stream {
            driver,
            handle: handle as CUstream,
            owned: false,
        }
    }

    pub fn handle(&self) -> usize {
        self.handle as usize
    }

    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: a valid stream handle.
        self.driver.check(
            unsafe { (self.driver.api.stream_synchronize)(self.handle) },
            "synchronizing a stream",
        )
    }

    /// Whether all work submitted to the stream has finished.
    pub fn query(&self) -> Result<bool> {
        // SAFETY: a valid stream handle.
        match unsafe { (self.driver.api.stream_query)(self.handle) } {
            sys::CUDA_SUCCESS => Ok(true),
            sys::CUDA_ERROR_NOT_READY => Ok(false),
            code => Err(self.driver.error(code, "querying a stream")),
        }
    }

    /// Makes future work on this stream wait for `event` (no host blocking).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        // SAFETY: valid stream and event handles.
        self.driver.check(
            unsafe { (self.driver.api.stream_wait_event)(self.handle, event.handle, 0) },
            "making a stream wait on an event",
        )
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

    /// Makes `stream` wait, on the GPU, for the work submitted to `producer` so far, through
    /// `event` (recorded on `producer`). The host never blocks.
    pub fn order_after(&self, stream: usize, producer: usize, event: &Event) -> Result<()> {
        event.record(producer)?;
        // SAFETY: valid stream and event handles.
        self.check(
            unsafe { (self.api.stream_wait_event)(stream as CUstream, event.handle, 0) },
            "making a stream wait on an event",
        )
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: created by cuStreamCreate and destroyed once.
            let _ = unsafe { (self.driver.api.stream_destroy)(self.handle) };
        }
    }
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
        let flags = if timing {
            0
        } else {
            sys::CU_EVENT_DISABLE_TIMING
        };
        let mut handle: CUevent = ptr::null_mut();
        driver.check(
            // SAFETY: valid out-pointer.
            unsafe { (driver.api.event_create)(&mut handle, flags) },
            "creating an event",
        )?;
        Ok(Event { driver, handle })
    }

    pub fn record(&self, stream: usize) -> Result<()> {
        // SAFETY: valid event; the stream handle is the caller's.
        self.driver.check(
            unsafe { (self.driver.api.event_record)(self.handle, stream as CUstream) },
            "recording an event",
        )
    }

    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: a valid event handle.
        self.driver.check(
            unsafe { (self.driver.api.event_synchronize)(self.handle) },
            "synchronizing an event",
        )
    }

    pub fn query(&self) -> Result<bool> {
        // SAFETY: a valid event handle.
        match unsafe { (self.driver.api.event_query)(self.handle) } {
            sys::CUDA_SUCCESS => Ok(true),
            sys::CUDA_ERROR_NOT_READY => Ok(false),
            code => Err(self.driver.error(code, "querying an event")),
        }
    }

    /// Milliseconds between `start` and this event, both recorded and complete.
    pub fn elapsed_since(&self, start: &Event) -> Result<f32> {
        let mut ms = 0f32;
        self.driver.check(
            // SAFETY: valid out-pointer and event handles.
            unsafe { (self.driver.api.event_elapsed_time)(&mut ms, start.handle, self.handle) },
            "timing between events",
        )?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by cuEventCreate and destroyed once.
        let _ = unsafe { (self.driver.api.event_destroy)(self.handle) };
    }
}
