//! CUDA graphs made by stream capture: begin and end a capture, find the kernel node a
//! captured launch added, instantiate, replay, and update a kernel node's parameters in
//! the executable graph without instantiating again.

use std::ffi::{c_int, c_void};
use std::ptr;

use crate::error::{Error, Result};
use crate::params::ParamBuffer;
use crate::sys::{self, CUgraph, CUgraphExec, CUgraphNode, CudaKernelNodeParams};
use crate::Driver;

/// `CUstreamCaptureMode`: which other threads' unsafe CUDA calls invalidate a capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum CaptureMode {
    /// Any thread's unsafe call (what torch uses by default).
    Global = 0,
    /// Only this thread's.
    ThreadLocal = 1,
    /// None: the caller takes responsibility.
    Relaxed = 2,
}

/// A node of a graph; valid while its graph lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphNode(CUgraphNode);

// SAFETY: node handles are plain identifiers; the driver locks graphs internally.
unsafe impl Send for GraphNode {}
// SAFETY: as above.
unsafe impl Sync for GraphNode {}

/// A kernel node's launch parameters, as the driver reported them at capture.
#[derive(Clone, Copy, Debug)]
pub struct KernelNodeParams(CudaKernelNodeParams);

// SAFETY: the struct holds driver handles (function, kernel, context) that may be used from
// any thread; its parameter pointers are replaced before every use (see `set_kernel_node`).
unsafe impl Send for KernelNodeParams {}
// SAFETY: as above.
unsafe impl Sync for KernelNodeParams {}

/// A captured graph and its executable instance; both destroyed on drop.
pub struct Graph {
    driver: &'static Driver,
    graph: CUgraph,
    exec: CUgraphExec,
}

// SAFETY: graph and executable-graph handles may be used from any thread.
unsafe impl Send for Graph {}
// SAFETY: as above; launching and updating are driver calls the driver serialises.
unsafe impl Sync for Graph {}

impl Driver {
    /// Starts capturing the work submitted to `stream` (not a legacy default stream).
    pub fn begin_capture(&self, stream: usize, mode: CaptureMode) -> Result<()> {
        // SAFETY: a stream handle from the caller; the driver validates it.
        self.check(
            unsafe { (self.api.stream_begin_capture)(stream as sys::CUstream, mode as c_int) },
            "beginning a stream capture",
        )
    }

    /// Ends the capture on `stream` and instantiates what it recorded.
    pub fn end_capture(&'static self, stream: usize) -> Result<Graph> {
        let mut graph: CUgraph = ptr::null_mut();
        self.check(
            // SAFETY: valid out-pointer; the driver reports an invalidated capture as an error.
            unsafe { (self.api.stream_end_capture)(stream as sys::CUstream, &mut graph) },
            "ending a stream capture",
        )?;
        let mut exec: CUgraphExec = ptr::null_mut();
        // SAFETY: a graph just returned by the driver; valid out-pointer.
        let code = unsafe { (self.api.graph_instantiate)(&mut exec, graph, 0) };
        if let Err(e) = self.check(code, "instantiating a captured graph") {
            // SAFETY: the graph is ours and not used again.
            unsafe { (self.api.graph_destroy)(graph) };
            return Err(e);
        }
        Ok(Graph {
            driver: self,
            graph,
            exec,
        })
    }

    /// The node the last work submitted to capturing `stream` added: the capture's single
    /// current dependency. `None` when the stream is not capturing.
    pub fn last_captured_node(&self, stream: usize) -> Result<Option<GraphNode>> {
        let info = self.capture_info(stream)?;
        if info.status != sys::CU_STREAM_CAPTURE_STATUS_ACTIVE
            || info.count != 1
            || info.dependencies.is_null()
        {
            return Ok(None);
        }
        // SAFETY: the driver returned `count` (1) node handles at `dependencies`, read before
        // any other call on this stream.
        Ok(Some(GraphNode(unsafe { *info.dependencies })))
    }

    fn capture_info(&self, stream: usize) -> Result<CaptureInfo> {
        let mut status: c_int = 0;
        let mut id: u64 = 0;
        let mut graph: CUgraph = ptr::null_mut();
        let mut dependencies: *const CUgraphNode = ptr::null();
        let mut count: usize = 0;
        let stream = stream as sys::CUstream;
        // SAFETY: valid out-pointers; the dependency array belongs to the driver.
        let code = unsafe {
            if let Some(info) = self.api.stream_get_capture_info_v3 {
                let mut edges: *const c_void = ptr::null();
                info(
                    stream,
                    &mut status,
                    &mut id,
                    &mut graph,
                    &mut dependencies,
                    &mut edges,
                    &mut count,
                )
            } else if let Some(info) = self.api.stream_get_capture_info_v2 {
                info(
                    stream,
                    &mut status,
                    &mut id,
                    &mut graph,
                    &mut dependencies,
                    &mut count,
                )
            } else {
                return Err(Error::Unavailable(
                    "this CUDA driver lacks cuStreamGetCaptureInfo".into(),
                ));
            }
        };
        self.check(code, "reading a stream's capture state")?;
        Ok(CaptureInfo {
            status,
            dependencies,
            count,
        })
    }

    /// A kernel node's parameters (from a graph, captured or not).
    pub fn kernel_node_params(&self, node: GraphNode) -> Result<KernelNodeParams> {
        // SAFETY: all-zero is a valid value of this plain C struct.
        let mut params: CudaKernelNodeParams = unsafe { std::mem::zeroed() };
        self.check(
            // SAFETY: a node handle from the driver; valid out-pointer.
            unsafe { (self.api.graph_kernel_node_get_params)(node.0, &mut params) },
            "reading a kernel node's parameters",
        )?;
        Ok(KernelNodeParams(params))
    }
}

impl Graph {
    /// Launches the executable graph on `stream`.
    pub fn launch(&self, stream: usize) -> Result<()> {
        // SAFETY: a live executable graph; the driver validates the stream.
        self.driver.check(
            unsafe { (self.driver.api.graph_launch)(self.exec, stream as sys::CUstream) },
            "launching a graph",
        )
    }

    /// Nodes in the graph (kernels, copies, and whatever else was captured).
    pub fn node_count(&self) -> Result<usize> {
        let mut count: usize = 0;
        self.driver.check(
            // SAFETY: a null node array asks only for the count.
            unsafe { (self.driver.api.graph_get_nodes)(self.graph, ptr::null_mut(), &mut count) },
            "counting a graph's nodes",
        )?;
        Ok(count)
    }

    /// Replaces the arguments of kernel node `node` in the executable graph: later launches
    /// of the graph run it with the values in `values`, prepared since they last changed
    /// (copied by the driver).
    ///
    /// # Safety
    /// `values` must hold one value per parameter of the node's kernel, each of that
    /// parameter's size, as for [`crate::Function::launch`].
    pub unsafe fn set_kernel_node(
        &self,
        node: GraphNode,
        captured: &KernelNodeParams,
        values: &ParamBuffer,
    ) -> Result<()> {
        let Some(kernel_params) = values.prepared() else {
            return Err(crate::launch::unprepared());
        };
        let mut params = captured.0;
        params.kernel_params = kernel_params;
        params.extra = ptr::null_mut();
        // SAFETY: node belongs to this graph's executable; the parameter array is valid for
        // the call (guaranteed by the caller) and copied by the driver.
        self.driver.check(
            unsafe {
                (self.driver.api.graph_exec_kernel_node_set_params)(self.exec, node.0, &params)
            },
            "updating a kernel node of a graph",
        )
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: both handles are ours and destroyed once; failures at teardown leave
        // nothing to clean up.
        unsafe {
            let _ = (self.driver.api.graph_exec_destroy)(self.exec);
            let _ = (self.driver.api.graph_destroy)(self.graph);
        }
    }
}

/// What `cuStreamGetCaptureInfo` says of a stream.
struct CaptureInfo {
    status: c_int,
    dependencies: *const CUgraphNode,
    count: usize,
}
