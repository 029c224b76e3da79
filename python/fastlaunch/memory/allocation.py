"""Device memory for numba-cuda's arrays: from the driver's stream-ordered pool, owned by a
numba-cuda ``MemoryPointer`` built as numba-cuda's own memory manager builds its pointers, so
views, ``OwnedPointer`` reference counts, ``cuda.close()`` and deferred deallocation
(``cuda.defer_cleanup()``) behave as they do for numba-cuda's memory. The free (the
pointer's finalizer, a ``_core.PoolRelease``) is ``_core.mem_free`` at once (through the
context's deallocation queue inside ``cuda.defer_cleanup()``): ordered on the legacy default
stream (after all work on blocking streams), after the work on non-blocking streams since
the last free (``rust/ext/src/memory/ordering.rs``). With an External Memory Management
plugin selected, its ``memalloc`` allocates.

numba-cuda's ``Context`` is looked up once per context (by its unique id), not per call."""

from __future__ import annotations

import os
import weakref
from typing import Any

from fastlaunch import _core
from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.errors import CudaError
from fastlaunch.memory import objects

#: numba-cuda's Context per context key (``_core.context_key()``), and a weak proxy of it
#: (what numba-cuda's memory pointers hold)
_contexts: dict[int, Any] = {}
_proxies: dict[int, Any] = {}
# (Rust reads them where it makes arrays: _core.pool_array)
_core.read_numba_contexts(_contexts, _proxies)
_pool_array = _core.pool_array


#: the release threshold set on fastlaunch's own pool (one per context, never the device's
#: current pool, which CuPy and torch may share) when fastlaunch first allocates there:
#: everything is kept between calls (as CuPy's and torch's caches keep it), unless
#: FASTLAUNCH_POOL_RELEASE_THRESHOLD says otherwise (bytes; 0 is the driver's own default)
KEEP_EVERYTHING = 2**64 - 1
POOL_THRESHOLD_ENV = "FASTLAUNCH_POOL_RELEASE_THRESHOLD"


def context() -> tuple[int, Any]:
    """The current context's key and numba-cuda's ``Context`` object for it. With no context
    current, numba-cuda makes its own current first (as its own calls do), so that its
    context stack stays its own to pop (``cuda.close()``)."""
    if _core.current_context() is None:
        numba_cuda.numba_context()
    key = _core.context_key()
    found = _contexts.get(key)
    if found is None:
        found = _contexts[key] = numba_cuda.numba_context()
        _proxies[key] = weakref.proxy(found)
        _core.set_pool_release_threshold(_core.current_device() or 0, _configured_threshold())
    return key, found


def forget(numba_context: Any) -> list[int]:
    """Forgets numba-cuda's ``numba_context`` (being reset); the keys it was kept under."""
    keys = [key for key, found in _contexts.items() if found is numba_context]
    for key in keys:
        del _contexts[key]
        _proxies.pop(key, None)
    return keys


def _configured_threshold() -> int:
    configured = os.environ.get(POOL_THRESHOLD_ENV, "").strip()
    if not configured:
        return KEEP_EVERYTHING
    try:
        value = int(configured)
    except ValueError:
        raise ValueError(
            f"{POOL_THRESHOLD_ENV} must be a number of bytes, got {configured!r}"
        ) from None
    if value < 0:
        raise ValueError(f"{POOL_THRESHOLD_ENV} must not be negative, got {value}")
    return value


def allocate(nbytes: int, stream_handle: int) -> tuple[Any, int | None]:
    """``nbytes`` of device memory for an array used on ``stream_handle``: a numba-cuda
    pointer (an ``OwnedPointer``, as ``Context.memalloc`` returns), and its address (None
    where an EMM plugin allocated: its pointer knows it)."""
    key = _core.current_context_key()
    ctx = _contexts.get(key)
    if ctx is None:
        key, ctx = context()
    manager = ctx.memory_manager
    if type(manager) is not (_manager_class or _numba_memory_manager()):
        return ctx.memalloc(nbytes), None  # the user's EMM plugin allocates
    if nbytes < 0:
        raise OverflowError(f"cannot allocate a negative number of bytes ({nbytes})")
    try:
        address = _core.mem_alloc(nbytes, stream_handle)
    except CudaError as error:
        address = _pool_alloc_again(error, nbytes, stream_handle, manager)
    owned = objects.pool_memory(
        _proxies[key], address, nbytes, manager.allocations, manager.deallocations, key
    )
    return owned, address


def allocate_array(described: tuple, dtype: Any, stream: Any, stream_handle: int) -> Any:
    """A ``DeviceNDArray`` of the ``objects.layout`` ``described`` (non-empty) and NumPy
    ``dtype`` over new memory (``allocate``'s), for use on ``stream`` (whose handle is
    ``stream_handle``): made in one call to Rust (``_core.pool_array``) once the context's
    numba-cuda ``Context`` is known, its memory manager numba-cuda's own; otherwise (and after
    a failed allocation, retried here) through ``allocate``."""
    made = _pool_array(described, dtype, stream, stream_handle)
    if made is not None:
        return made
    return allocate_array_in_python(described, dtype, stream, stream_handle)


def allocate_array_in_python(described: tuple, dtype: Any, stream: Any, stream_handle: int) -> Any:
    """``allocate_array`` where ``_core.pool_array`` said None: the memory from ``allocate``
    (which knows the context, or retries a failed allocation and raises numba-cuda's
    errors), the array made around it."""
    gpu_data, address = allocate(described[5], stream_handle)
    return objects.device_ndarray(described, dtype, stream, gpu_data, address)


#: numba-cuda's own memory manager class, once looked up
_manager_class: type | None = None


def _numba_memory_manager() -> type:
    global _manager_class
    _manager_class = numba_cuda.cudadrv_driver().NumbaCUDAMemoryManager
    return _manager_class


def _pool_alloc_again(error: CudaError, nbytes: int, stream_handle: int, manager: Any) -> int:
    """After a pool allocation failed with ``error``: when it ran out of memory, the pending
    deallocations are flushed and it is tried again, then numba-cuda's ``CudaAPIError`` is
    raised (as numba-cuda's memory manager does); any other error is raised as it is."""
    code = getattr(error, "code", None)
    if code != numba_cuda.out_of_memory_code():
        raise error
    manager.deallocations.clear()
    try:
        return _core.mem_alloc(nbytes, stream_handle)
    except CudaError as again:
        code = getattr(again, "code", None)
        if code != numba_cuda.out_of_memory_code():
            raise
        message = f"Call to cuMemAllocAsync results in {again}"
        raise numba_cuda.cuda_api_error(code, message) from None


def is_pool_memory(gpu_data: Any) -> bool:
    """Whether ``gpu_data`` (a device array's) is, or is a view of, a live allocation made
    here."""
    memory = getattr(gpu_data, "_mem", None)  # an OwnedPointer's owner (a weak proxy)
    if memory is None:
        return False
    try:
        release = memory._finalizer
    except (ReferenceError, AttributeError):
        return False
    return type(release) is _core.PoolRelease and release.alive


def set_pool_release_threshold(nbytes: int, device: int | None = None) -> None:
    """How many bytes the driver's pool of ``device`` (the current device when None) keeps
    at a synchronization instead of giving them back: 0 (the driver's default) returns all
    unused memory at every synchronization; ``2**64 - 1``, what fastlaunch sets when it first
    allocates on a device (unless ``FASTLAUNCH_POOL_RELEASE_THRESHOLD`` gives bytes), keeps
    everything, as CuPy's and torch's caches do."""
    if device is None:
        device = _core.current_device() or 0
    _core.set_pool_release_threshold(device, nbytes)
