/* A stand-in for libcuda.so.1 with one pretend device, for measuring fastlaunch's host-side
 * launch path on machines without a GPU (benchmarks/cpu_profile.py). Every call succeeds;
 * calls that return values return fixed, plausible ones. Memory is real host memory, so CPU
 * tests of the memory API see their bytes go round: allocations (device, pool, pinned) are
 * malloc'd and counted (fake_outstanding_allocations / fake_outstanding_bytes), copies and
 * sets touch only memory it allocated (tests pass made-up device pointers to launches).
 * Never a substitute for the GPU runs: it has no kernels, and streams do not order. */
#include <stdint.h>
#include <stdlib.h>
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
/* Streams: each created one a handle of its own, remembering its flags (cuStreamGetFlags);
 * the default streams (0, 1, 2) and unknown handles have flags 0. */
#define MAX_STREAMS 1024
static char stream_tokens[MAX_STREAMS];
static unsigned stream_flags[MAX_STREAMS];
static size_t streams_created;
int cuStreamCreate(void **stream, unsigned flags) {
    size_t slot = streams_created++ % MAX_STREAMS;
    stream_flags[slot] = flags;
    *stream = &stream_tokens[slot];
    return OK;
}
int cuStreamGetFlags(void *stream, unsigned *flags) {
    /* as the driver: not while capturing, and asking invalidates the capture */
    if (capturing) { capture_invalidated = 1; return CAPTURE_UNSUPPORTED; }
    char *token = stream;
    int ours = token >= stream_tokens && token < stream_tokens + MAX_STREAMS;
    *flags = ours ? stream_flags[token - stream_tokens] : 0;
    return OK;
}
int cuStreamDestroy_v2(void) { return OK; }
int cuStreamSynchronize(void) { return OK; }
int cuStreamQuery(void) { return OK; }
/* Counted for tests of the memory API's ordering: how many waits, and the stream last made
 * to wait. */
static size_t stream_waits;
static void *last_waiting_stream;
size_t fake_stream_waits(void) { return stream_waits; }
void *fake_last_waiting_stream(void) { return last_waiting_stream; }
int cuStreamWaitEvent(void *stream) { stream_waits++; last_waiting_stream = stream; return OK; }
int cuStreamIsCapturing(void *stream, int *status) {
    (void)stream;
    *status = capturing ? (capture_invalidated ? 2 : 1) : 0;
    return OK;
}
int cuEventCreate(void **event) { *event = &context_token; return OK; }
int cuEventDestroy_v2(void) { return OK; }
int cuEventRecord(void) { return OK; }
int cuEventSynchronize(void) { return OK; }
int cuEventQuery(void) { return OK; }
int cuEventElapsedTime(float *ms) { *ms = 0.0f; return OK; }
int cuLaunchKernel(void) { count_node(); return OK; }
int cuLaunchKernelEx(void) { count_node(); return OK; }
/* Allocations: a table of the live ones (address, size). */
#define INVALID_VALUE 1
#define MAX_ALLOCATIONS 65536
static struct { uintptr_t address; size_t size; } allocations[MAX_ALLOCATIONS];
static size_t allocation_count;
static size_t release_threshold;

static int allocate(void **out, size_t bytes) {
    if (allocation_count == MAX_ALLOCATIONS) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    void *memory = calloc(1, bytes ? bytes : 1);
    if (!memory) return 2;
    allocations[allocation_count].address = (uintptr_t)memory;
    allocations[allocation_count].size = bytes;
    allocation_count++;
    *out = memory;
    return OK;
}
static int release(uintptr_t address) {
    for (size_t i = 0; i < allocation_count; i++) {
        if (allocations[i].address == address) {
            free((void *)address);
            allocations[i] = allocations[--allocation_count];
            return OK;
        }
    }
    return INVALID_VALUE;
}
/* Whether [address, address + bytes) lies in one allocation made here. */
static int allocated(uintptr_t address, size_t bytes) {
    for (size_t i = 0; i < allocation_count; i++) {
        uintptr_t start = allocations[i].address;
        if (address >= start && address + bytes <= start + (allocations[i].size ? allocations[i].size : 1))
            return 1;
    }
    return 0;
}
static int copy(uintptr_t to, uintptr_t from, size_t bytes, int to_device, int from_device) {
    if ((to_device && !allocated(to, bytes)) || (from_device && !allocated(from, bytes)))
        return OK; /* a made-up device pointer: nothing to copy */
    if (bytes) memmove((void *)to, (const void *)from, bytes);
    return OK;
}
int fake_outstanding_allocations(void) { return (int)allocation_count; }
size_t fake_outstanding_bytes(void) {
    size_t total = 0;
    for (size_t i = 0; i < allocation_count; i++) total += allocations[i].size;
    return total;
}

int cuMemAlloc_v2(uint64_t *ptr, size_t bytes) { return allocate((void **)ptr, bytes); }
int cuMemFree_v2(uint64_t ptr) { return ptr ? release(ptr) : OK; }
int cuMemAllocAsync(uint64_t *ptr, size_t bytes, void *stream) { (void)stream; return allocate((void **)ptr, bytes); }
int cuMemFreeAsync(uint64_t ptr, void *stream) { (void)stream; return ptr ? release(ptr) : OK; }
int cuMemHostAlloc(void **ptr, size_t bytes, unsigned flags) { (void)flags; return allocate(ptr, bytes); }
int cuMemFreeHost(void *ptr) { return release((uintptr_t)ptr); }
int cuMemcpyHtoD_v2(uint64_t to, const void *from, size_t n) { return copy(to, (uintptr_t)from, n, 1, 0); }
int cuMemcpyDtoH_v2(void *to, uint64_t from, size_t n) { return copy((uintptr_t)to, from, n, 0, 1); }
int cuMemcpyDtoD_v2(uint64_t to, uint64_t from, size_t n) { return copy(to, from, n, 1, 1); }
int cuMemcpyHtoDAsync_v2(uint64_t to, const void *from, size_t n, void *s) { (void)s; return copy(to, (uintptr_t)from, n, 1, 0); }
int cuMemcpyDtoHAsync_v2(void *to, uint64_t from, size_t n, void *s) { (void)s; return copy((uintptr_t)to, from, n, 0, 1); }
int cuMemcpyDtoDAsync_v2(uint64_t to, uint64_t from, size_t n, void *s) { (void)s; return copy(to, from, n, 1, 1); }
int cuMemsetD8_v2(uint64_t to, unsigned char value, size_t n) {
    if (allocated(to, n) && n) memset((void *)to, value, n);
    return OK;
}
int cuMemsetD8Async(uint64_t to, unsigned char value, size_t n, void *s) { (void)s; return cuMemsetD8_v2(to, value, n); }
int cuDeviceGetMemPool(void **pool, int device) { (void)device; *pool = &context_token; return OK; }
int cuMemPoolSetAttribute(void *pool, int attribute, void *value) {
    (void)pool;
    if (attribute == 4) release_threshold = (size_t)*(uint64_t *)value;
    return OK;
}
int cuMemPoolGetAttribute(void *pool, int attribute, void *value) {
    (void)pool;
    uint64_t bytes = attribute == 4 ? release_threshold : (attribute == 5 || attribute == 7) ? fake_outstanding_bytes() : 0;
    *(uint64_t *)value = bytes;
    return OK;
}
int cuMemPoolTrimTo(void) { return OK; }
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
