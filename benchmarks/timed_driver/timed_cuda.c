/* A CUDA driver that forwards every call fastlaunch makes (rust/driver/src/sys.rs's table) to
 * the real one (libcuda.so.1), counting the calls and the host time each function took:
 * FASTLAUNCH_CUDA_DRIVER=.gpu/timed-cuda.so makes fastlaunch load it (numba-cuda, CuPy and
 * torch keep the real driver). benchmarks/driver_calls.py reads the counts through ctypes:
 * timed_cuda_count(), timed_cuda_name(i), timed_cuda_calls(i), timed_cuda_ns(i),
 * timed_cuda_reset(). TIMED_CUDA_REAL names another driver to forward to (the CPU tests give
 * the stand-in, tests/stand_in_driver/fake_cuda.c).
 *
 * Each wrapper passes eleven word-sized arguments on: on x86-64 (System V) a function reads
 * the arguments it has and the caller cleans the stack, so a call of fewer arguments reaches
 * the real function intact. Every argument of the functions in the table is an integer or a
 * pointer (none is a float or a structure by value). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

typedef uintptr_t W;
typedef int (*driver_fn)(W, W, W, W, W, W, W, W, W, W, W);

#define FUNCTIONS(X) \
    X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) \
    X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetUuid_v2) \
    X(cuDeviceGetAttribute) X(cuDeviceGetPCIBusId) X(cuDeviceTotalMem_v2) \
    X(cuDevicePrimaryCtxRetain) X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxPushCurrent_v2) \
    X(cuCtxPopCurrent_v2) X(cuCtxGetDevice) X(cuCtxSynchronize) X(cuMemGetInfo_v2) \
    X(cuLibraryLoadData) X(cuLibraryGetKernel) X(cuLibraryUnload) X(cuKernelGetFunction) \
    X(cuKernelGetAttribute) X(cuKernelSetAttribute) X(cuOccupancyMaxActiveBlocksPerMultiprocessor) \
    X(cuStreamCreate) X(cuStreamDestroy_v2) X(cuStreamSynchronize) X(cuStreamQuery) \
    X(cuStreamWaitEvent) X(cuStreamGetFlags) X(cuStreamIsCapturing) X(cuEventCreate) \
    X(cuEventDestroy_v2) X(cuEventRecord) X(cuEventSynchronize) X(cuEventQuery) \
    X(cuEventElapsedTime) X(cuLaunchKernel) X(cuLaunchKernelEx) X(cuMemAlloc_v2) \
    X(cuMemFree_v2) X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2) X(cuMemcpyDtoD_v2) \
    X(cuMemcpyHtoDAsync_v2) X(cuMemcpyDtoHAsync_v2) X(cuMemsetD8_v2) X(cuMemAllocAsync) \
    X(cuMemFreeAsync) X(cuMemcpyDtoDAsync_v2) X(cuMemsetD8Async) X(cuDeviceGetMemPool) \
    X(cuMemPoolSetAttribute) X(cuMemPoolGetAttribute) X(cuMemPoolTrimTo) X(cuMemHostAlloc) \
    X(cuMemFreeHost) X(cuPointerGetAttribute) X(cuDeviceCanAccessPeer) X(cuCtxEnablePeerAccess) \
    X(cuStreamBeginCapture_v2) X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags) \
    X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuGraphGetNodes) \
    X(cuGraphKernelNodeGetParams_v2) X(cuGraphExecKernelNodeSetParams_v2) X(cuCtxGetId) \
    X(cuStreamGetCtx) X(cuStreamGetId) X(cuMemPoolCreate) X(cuMemPoolDestroy) \
    X(cuMemAllocFromPoolAsync) X(cuStreamGetCaptureInfo_v3) X(cuStreamGetCaptureInfo_v2) \
    X(cuThreadExchangeStreamCaptureMode)

#define INDEX(name) I_##name,
enum { FUNCTIONS(INDEX) COUNT };
#define NAME(name) #name,
static const char *names[COUNT] = {FUNCTIONS(NAME)};

static driver_fn real[COUNT];
static uint64_t calls[COUNT], nanoseconds[COUNT];
static int loaded;

static void load(void) {
    const char *path = getenv("TIMED_CUDA_REAL"); /* tests: the stand-in driver */
    void *library = dlopen(path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    for (int i = 0; library && i < COUNT; i++) real[i] = (driver_fn)dlsym(library, names[i]);
    loaded = 1;
}

static uint64_t now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

#define NOT_FOUND 500 /* CUDA_ERROR_NOT_FOUND */
#define WRAPPER(name) \
    int name(W a, W b, W c, W d, W e, W f, W g, W h, W i, W j, W k) { \
        if (!loaded) load(); \
        if (!real[I_##name]) return NOT_FOUND; \
        uint64_t start = now(); \
        int result = real[I_##name](a, b, c, d, e, f, g, h, i, j, k); \
        __atomic_add_fetch(&nanoseconds[I_##name], now() - start, __ATOMIC_RELAXED); \
        __atomic_add_fetch(&calls[I_##name], 1, __ATOMIC_RELAXED); \
        return result; \
    }
FUNCTIONS(WRAPPER)

int timed_cuda_count(void) { return COUNT; }
const char *timed_cuda_name(int i) { return i >= 0 && i < COUNT ? names[i] : 0; }
uint64_t timed_cuda_calls(int i) { return i >= 0 && i < COUNT ? calls[i] : 0; }
uint64_t timed_cuda_ns(int i) { return i >= 0 && i < COUNT ? nanoseconds[i] : 0; }
void timed_cuda_reset(void) {
    for (int i = 0; i < COUNT; i++) {
        __atomic_store_n(&calls[i], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&nanoseconds[i], 0, __ATOMIC_RELAXED);
    }
}
