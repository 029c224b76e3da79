/* A stand-in for libcuda.so.1 with one pretend device, for measuring fastlaunch's host-side
 * launch path on machines without a GPU (benchmarks/cpu_profile.py). Every call succeeds
 * and does nothing; calls that return values return fixed, plausible ones. Never a
 * substitute for the GPU runs: it has no kernels, memory or streams. */
#include <stdint.h>
#include <string.h>

#define OK 0
static char context_token, library_token, kernel_token;
static __thread void *current_context;

/* Stream capture, as far as CPU tests of graphs need it: kernel launches while a capture is
 * open become nodes (counted, each with a handle of its own), a context synchronisation
 * during a capture is refused and invalidates it, as the real driver does. */
#define CAPTURE_UNSUPPORTED 900
#define CAPTURE_INVALIDATED 901
static int capturing, capture_invalidated;
static size_t captured_nodes;
static char node_tokens[4096];
static void *last_node;
static void count_node(void) {
    if (capturing) {
        last_node = &node_tokens[captured_nodes % sizeof node_tokens];
        captured_nodes++;
    }
}

int cuInit(unsigned flags) { (void)flags; return OK; }
int cuDriverGetVersion(int *version) { *version = 13000; return OK; }
int cuGetErrorName(int code, const char **name) { (void)code; *name = "CUDA_ERROR_FAKE"; return OK; }
int cuGetErrorString(int code, const char **text) { (void)code; *text = "fake driver"; return OK; }
int cuDeviceGetCount(int *count) { *count = 1; return OK; }
int cuDeviceGet(int *device, int ordinal) { *device = ordinal; return OK; }
int cuDeviceGetName(char *name, int len, int device) {
    (void)device; strncpy(name, "Fake GPU", (size_t)len); return OK;
}
int cuDeviceGetUuid_v2(unsigned char *uuid, int device) { (void)device; memset(uuid, 7, 16); return OK; }
int cuDeviceGetAttribute(int *value, int attribute, int device) {
    (void)device;
    *value = attribute == 75 ? 9 : attribute == 76 ? 0 : 1024;
    return OK;
}
int cuDeviceGetPCIBusId(char *id, int len, int device) {
    (void)device; strncpy(id, "0000:00:00.0", (size_t)len); return OK;
}
int cuDeviceTotalMem_v2(size_t *bytes, int device) { (void)device; *bytes = (size_t)1 << 34; return OK; }
int cuDevicePrimaryCtxRetain(void **context, int device) { (void)device; *context = &context_token; return OK; }
int cuDevicePrimaryCtxRelease_v2(int device) { (void)device; return OK; }
int cuCtxGetCurrent(void **context) { *context = current_context; return OK; }
int cuCtxSetCurrent(void *context) { current_context = context; return OK; }
int cuCtxPushCurrent_v2(void *context) { current_context = context; return OK; }
int cuCtxPopCurrent_v2(void **context) { *context = current_context; current_context = 0; return OK; }
int cuCtxGetDevice(int *device) { *device = 0; return OK; }
int cuCtxGetId(void *context, unsigned long long *id) { *id = (unsigned long long)(size_t)context; return OK; }
int cuCtxSynchronize(void) {
    if (capturing) { capture_invalidated = 1; return CAPTURE_UNSUPPORTED; }
    return OK;
}
int cuMemGetInfo_v2(size_t *free_bytes, size_t *total) { *free_bytes = *total = (size_t)1 << 34; return OK; }
int cuLibraryLoadData(void **library) { *library = &library_token; return OK; }
int cuLibraryGetKernel(void **kernel) { *kernel = &kernel_token; return OK; }
int cuLibraryUnload(void) { return OK; }
int cuKernelGetFunction(void **function) { *function = &kernel_token; return OK; }
int cuKernelGetAttribute(int *value) { *value = 1024; return OK; }
int cuKernelSetAttribute(void) { return OK; }
int cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks) { *blocks = 8; return OK; }
int cuStreamCreate(void **stream) { *stream = &context_token; return OK; }
int cuStreamDestroy_v2(void) { return OK; }
int cuStreamSynchronize(void) { return OK; }
int cuStreamQuery(void) { return OK; }
int cuStreamWaitEvent(void) { return OK; }
int cuStreamIsCapturing(void *stream, int *status) { (void)stream; *status = 0; return OK; }
int cuEventCreate(void **event) { *event = &context_token; return OK; }
int cuEventDestroy_v2(void) { return OK; }
int cuEventRecord(void) { return OK; }
int cuEventSynchronize(void) { return OK; }
int cuEventQuery(void) { return OK; }
int cuEventElapsedTime(float *ms) { *ms = 0.0f; return OK; }
int cuLaunchKernel(void) { count_node(); return OK; }
int cuLaunchKernelEx(void) { count_node(); return OK; }
int cuMemAlloc_v2(uint64_t *ptr, size_t bytes) { (void)bytes; *ptr = 0x10000; return OK; }
int cuMemFree_v2(void) { return OK; }
int cuMemcpyHtoD_v2(void) { return OK; }
int cuMemcpyDtoH_v2(void) { return OK; }
int cuMemcpyDtoD_v2(void) { return OK; }
int cuMemcpyHtoDAsync_v2(void) { return OK; }
int cuMemAllocAsync(uint64_t *ptr, size_t bytes, void *stream) { (void)bytes; (void)stream; *ptr = 0x20000; return OK; }
int cuMemFreeAsync(void) { return OK; }
int cuMemcpyDtoHAsync_v2(void) { return OK; }
int cuMemsetD8_v2(void) { return OK; }
int cuPointerGetAttribute(int *value) { *value = 0; return OK; }
int cuDeviceCanAccessPeer(int *can) { *can = 0; return OK; }
int cuCtxEnablePeerAccess(void) { return OK; }
int cuOccupancyMaxActiveClusters(int *clusters) { *clusters = 1; return OK; }
int cuStreamBeginCapture_v2(void) {
    capturing = 1; capture_invalidated = 0; captured_nodes = 0; last_node = 0;
    return OK;
}
int cuStreamEndCapture(void *stream, void **graph) {
    (void)stream;
    capturing = 0;
    if (capture_invalidated) { *graph = 0; return CAPTURE_INVALIDATED; }
    *graph = &library_token;
    return OK;
}
int cuStreamGetCaptureInfo_v3(void *stream, int *status, unsigned long long *id, void **graph,
                              void *const **dependencies, const void **edges, size_t *count) {
    (void)stream;
    *status = capturing ? (capture_invalidated ? 2 : 1) : 0;
    *id = 1;
    *graph = &library_token;
    *dependencies = (void *const *)&last_node;
    *edges = 0;
    *count = last_node ? 1 : 0;
    return OK;
}
int cuGraphInstantiateWithFlags(void **exec) { *exec = &library_token; return OK; }
int cuGraphLaunch(void) { return OK; }
int cuGraphExecDestroy(void) { return OK; }
int cuGraphDestroy(void) { return OK; }
int cuGraphGetNodes(void *graph, void **nodes, size_t *count) {
    (void)graph; (void)nodes; *count = captured_nodes; return OK;
}
int cuGraphKernelNodeGetParams_v2(void *node, void *params) { (void)node; memset(params, 0, 72); return OK; }
int cuGraphExecKernelNodeSetParams_v2(void) { return OK; }
