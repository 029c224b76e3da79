"""Device memory for numba-cuda's arrays: from the driver's stream-ordered pool, owned by a
numba-cuda ``MemoryPointer`` built as numba-cuda's own memory manager builds its pointers, so
views, ``OwnedPointer`` reference counts, ``cuda.close()`` and deferred deallocation
(``cuda.defer_cleanup()``) behave as they do for numba-cuda's memory. The free goes through
the context's deallocation queue, then ``_core.mem_free``: ordered on the legacy default
stream (after all work on blocking streams) and after the non-default stream the array was
allocated on. With an External Memory Management plugin selected, its ``memalloc`` allocates.

numba-cuda's ``Context`` is looked up once per context (by its unique id), not per call."""

from __future__ import annotations

import os
import weakref
from typing import Any

from fastlaunch import _core
from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.errors import CudaError

#: numba-cuda's Context per context key (``_core.context_key()``)
_contexts: dict[int, Any] = {}

#: the special stream handles a free on the legacy stream is already ordered after:
#: default, legacy, per-thread (blocking streams order with the legacy stream too)
_ORDERED_WITH_LEGACY = (0, 1, 2)


#: the release threshold set on each device's pool when fastlaunch first allocates there:
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
        _core.set_pool_release_threshold(_core.current_device() or 0, _configured_threshold())
    return key, found


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


def allocate(nbytes: int, stream_handle: int) -> Any:
    """``nbytes`` of device memory for an array used on ``stream_handle``: a numba-cuda
    pointer (an ``OwnedPointer``, as ``Context.memalloc`` returns)."""
    key, ctx = context()
    if not numba_cuda.uses_numbas_memory_manager(ctx):
        return ctx.memalloc(nbytes)  # the user's EMM plugin allocates
    manager = ctx.memory_manager
    address = _pool_alloc(nbytes, stream_handle, manager)
    after = () if stream_handle in _ORDERED_WITH_LEGACY else (stream_handle,)
    driver = numba_cuda.cudadrv_driver()
    memory = driver.AutoFreePointer(
        weakref.proxy(ctx),
        numba_cuda.device_pointer(address),
        nbytes,
        finalizer=_finalizer(manager, address, key, after, nbytes),
    )
    manager.allocations[address] = memory
    return memory.own()


def _pool_alloc(nbytes: int, stream_handle: int, manager: Any) -> int:
    """A pool allocation; on running out of memory, the pending deallocations are flushed
    and it is tried again, then numba-cuda's ``CudaAPIError`` is raised (as numba-cuda's
    memory manager does)."""
    for attempt in range(2):
        try:
            return _core.mem_alloc(nbytes, stream_handle)
        except CudaError as error:
            code = getattr(error, "code", None)
            if code != numba_cuda.out_of_memory_code():
                raise
            if attempt == 0:
                manager.deallocations.clear()
                continue
            message = f"Call to cuMemAllocAsync results in {error}"
            raise numba_cuda.cuda_api_error(code, message) from None
    raise AssertionError("unreachable")  # pragma: no cover


def _finalizer(manager: Any, address: int, key: int, after: tuple, nbytes: int) -> Any:
    allocations = manager.allocations
    deallocations = manager.deallocations

    def core() -> None:
        allocations.pop(address, None)
        deallocations.add_item(_free, (address, key, after), nbytes)

    return core


def _free(item: tuple[int, int, tuple]) -> None:
    address, key, after = item
    _core.mem_free(address, 0, after, key)


def set_pool_release_threshold(nbytes: int, device: int | None = None) -> None:
    """How many bytes the driver's pool of ``device`` (the current device when None) keeps
    at a synchronization instead of giving them back: 0 (the driver's default) returns all
    unused memory at every synchronization; ``2**64 - 1``, what fastlaunch sets when it first
    allocates on a device (unless ``FASTLAUNCH_POOL_RELEASE_THRESHOLD`` gives bytes), keeps
    everything, as CuPy's and torch's caches do."""
    if device is None:
        device = _core.current_device() or 0
    _core.set_pool_release_threshold(device, nbytes)
