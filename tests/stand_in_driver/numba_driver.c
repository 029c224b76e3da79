/* The stand-in driver (fake_cuda.c) with what numba-cuda's own driver layer needs besides, so
 * that numba-cuda really compiles (NVVM, nvJitLink: no GPU needed) and "loads" kernels on a
 * machine without a GPU: the compile cache's CPU tests (tests/test_cpu_cache_*.py) run the
 * real compile through it. Built from this file alone; fake_cuda.c is included, unchanged.
 *
 * - cuGetProcAddress / cuGetProcAddress_v2: cuda-bindings resolves every entry point through
 *   them; a name is looked up as <name>_v3, <name>_v2 and <name> in this library, and a name it
 *   lacks maps to a no-op that returns success.
 * - cuLibraryLoadData, cuModuleLoadData*: a distinct handle per call (numba-cuda keys its
 *   modules by handle and refuses a repeated one); counted in stand_in_loads.
 * - cuDeviceGetAttribute: the compute capability is FAKE_CC ("8.6"), read at every call;
 *   9.0 when unset, as fake_cuda.c says.
 * - the module, function and occupancy queries numba-cuda makes, with plausible values. */
#define cuDeviceGetAttribute fake_cuda_cuDeviceGetAttribute
#define cuLibraryLoadData fake_cuda_cuLibraryLoadData
#include "fake_cuda.c"
#undef cuDeviceGetAttribute
#undef cuLibraryLoadData

#include <dlfcn.h>

int stand_in_loads; /* images loaded (cuLibraryLoadData, cuModuleLoadData*) */

static int no_op(void) { return OK; }

static void *own_symbol(const char *name) {
    static void *self;
    if (!self) {
        Dl_info info;
        if (dladdr((void *)no_op, &info) && info.dli_fname)
            self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    }
    return self ? dlsym(self, name) : 0;
}

int cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                        int *status) {
    (void)version; (void)flags;
    static const char *suffixes[] = {"_v3", "_v2", ""};
    char name[256];
    void *found = 0;
    for (int i = 0; i < 3 && !found; i++) {
        snprintf(name, sizeof name, "%s%s", symbol, suffixes[i]);
        found = own_symbol(name);
    }
    *pfn = found ? found : (void *)no_op;
    if (status) *status = 0; /* CU_GET_PROC_ADDRESS_SUCCESS */
    return OK;
}
int cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, 0);
}

int cuDeviceGetAttribute(int *value, int attribute, int device) {
    const char *cc = getenv("FAKE_CC");
    if (cc && (attribute == 75 || attribute == 76)) {
        int major = 0, minor = 0;
        sscanf(cc, "%d.%d", &major, &minor);
        *value = attribute == 75 ? major : minor;
        return OK;
    }
    return fake_cuda_cuDeviceGetAttribute(value, attribute, device);
}
int cuDeviceComputeCapability(int *major, int *minor, int device) {
    cuDeviceGetAttribute(major, 75, device);
    return cuDeviceGetAttribute(minor, 76, device);
}

static void *new_handle(void) {
    LOCKED;
    stand_in_loads++;
    return malloc(16);
}
int cuLibraryLoadData(void **library) { *library = new_handle(); return OK; }
int cuModuleLoadData(void **module) { *module = new_handle(); return OK; }
int cuModuleLoadDataEx(void **module) { *module = new_handle(); return OK; }
int cuModuleUnload(void) { return OK; }
int cuModuleGetFunction(void **function) { *function = malloc(16); return OK; }
/* a module's globals (numba-cuda reads a debug kernel's exception flag, an int, after each
 * launch): each at an address the stand-in never allocated, so copies from it copy nothing */
int cuModuleGetGlobal_v2(unsigned long long *pointer, size_t *bytes) {
    if (pointer) *pointer = 0x7100000;
    if (bytes) *bytes = 4;
    return OK;
}
int cuLibraryGetGlobal(unsigned long long *pointer, size_t *bytes) {
    return cuModuleGetGlobal_v2(pointer, bytes);
}
int cuLibraryGetModule(void **module) { *module = malloc(16); return OK; }
int cuFuncGetAttribute(int *value, int attribute) {
    *value = attribute == 0 ? 1024 : attribute == 4 ? 32 : 0; /* max threads, registers */
    return OK;
}
int cuFuncSetAttribute(void) { return OK; }
int cuFuncSetCacheConfig(void) { return OK; }
int cuOccupancyMaxPotentialBlockSize(int *grid, int *block) {
    *grid = 132;
    *block = 1024;
    return OK;
}
int cuCtxGetApiVersion(void *context, unsigned *version) {
    (void)context; *version = 13000; return OK;
}
