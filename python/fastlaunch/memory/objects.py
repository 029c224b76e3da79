"""numba-cuda's objects built over fastlaunch's memory without numba-cuda's slow paths, in the
very state numba-cuda's constructors leave them (the same attributes, in the same order).
Most are made in Rust (``rust/ext/src/memory/numba_arrays.rs``, ``numba_views.rs``,
``numba_streams.rs``) from the classes ``kinds()`` gives it, and the layouts ``layout`` keeps:

- ``device_ndarray``: a ``DeviceNDArray`` as ``DeviceNDArray.__init__`` makes one over
  existing memory, from a ``layout`` (its ``_dummy`` the very object
  ``dummyarray.Array.from_desc`` returns, which numba-cuda caches per layout), without
  ``__init__``'s shape normalisation, done by the caller; one more attribute,
  ``_fastlaunch_description``, carries what a launch reads of it (``_core.describe_birth``),
  so that its first launch costs what a repeat costs (the class says None: numba-cuda's own
  arrays have none);
- ``pool_memory``: an ``AutoFreePointer`` with its ``OwnedPointer``, as
  ``NumbaCUDAMemoryManager.memalloc`` makes them for ``cuMemAlloc`` memory (its
  ``_finalizer`` a ``_core.PoolRelease``: what ``MemoryPointer.free`` uses of a
  ``weakref.finalize``); ``_core.pool_array`` makes both over new pool memory in one call;
- ``d[a:b]``: a ``DeviceNDArray`` over what ``gpu_data.view(begin, end)`` returns for an
  ``OwnedPointer`` (``_core.first_axis_view``);
- a ``Stream`` as ``Context.create_stream`` makes one (``_core.numba_stream``);
- ``numba_event`` (here): an ``Event`` as ``Context.create_event`` makes one.

An ``OwnedPointer``'s release (numba-cuda's ``deref``: the owner's reference count down, the
owner freed at zero) and the pool memory's release run in Rust
(``rust/ext/src/memory/releases.rs``) from weak references' callbacks, as they do under
numba-cuda (there, ``weakref.finalize`` objects), without a Python frame. The only
difference: at interpreter exit, numba-cuda runs the releases of views still alive;
fastlaunch leaves them, as the process's memory goes with it.

Where an object is not in the case built here (no memory, an EMM plugin's pointer of another
kind), the callers use numba-cuda's own constructors."""

from __future__ import annotations

import weakref
from typing import Any

from fastlaunch import _core
from fastlaunch import _numba_compat as numba_cuda

_new = object.__new__
_numba_device_array = _core.numba_device_array
_numba_pool_memory = _core.numba_pool_memory
_ref = weakref.ref

#: per weak reference to an event made here: the release its collection runs,
#: ``(function, argument)``
_releases: dict[Any, tuple] = {}


def _released(reference: Any) -> None:
    release, argument = _releases.pop(reference)
    release(argument)


#: numba-cuda's classes these objects are made of, once looked up
_classes: Any = None


def kinds() -> Any:
    """numba-cuda's classes these objects are made of (``_numba_compat.memory_classes``)."""
    global _classes
    if _classes is None:
        _classes = numba_cuda.memory_classes()
        _core.describe_births_of(_classes.DeviceNDArray)
        _core.read_numba_streams(_classes.Stream, _classes.CUstream, _reads_int_of_handle())
        _core.read_numba_memory_classes(_classes, _layouts, layout)
    return _classes


def _reads_int_of_handle() -> bool:
    """Whether numba-cuda's ``Stream.__cuda_stream__`` returns ``int()`` of its handle (0.30's
    ``CUstream``), which Rust then reads without calling it."""
    probe = _new(_classes.Stream)
    probe.handle = _classes.CUstream(0x1000)
    try:
        return bool(probe.__cuda_stream__() == (0, int(probe.handle)) == (0, 0x1000))
    except (AttributeError, TypeError, ValueError):
        return False  # (0.26: int() of its ctypes c_void_p parses the pointer's bytes)


#: per (shape, strides, itemsize): what a DeviceNDArray of that layout holds, from numba-cuda's
#: dummy array for it (ndim, the dummy, shape, strides, size, alloc_size); one entry per
#: layout, as numba-cuda's own cache of dummy arrays keeps one
_layouts: dict[tuple, tuple] = {}


def layout(shape: tuple, strides: tuple, itemsize: int) -> tuple:
    """The attributes a ``DeviceNDArray`` of this layout takes from its dummy array: ``shape``
    and ``strides`` tuples of positive (shape) ``int`` of one length."""
    key = (shape, strides, itemsize)
    found = _layouts.get(key)
    if found is None:
        classes = kinds()
        dummy = classes.from_desc(0, shape, strides, itemsize)
        shape, strides = dummy.shape, dummy.strides
        alloc_size = classes.memory_size_from_info(shape, strides, itemsize)
        found = _layouts[key] = (len(shape), dummy, shape, strides, dummy.size, alloc_size)
    return found


def device_ndarray(
    described: tuple, dtype: Any, stream: Any, gpu_data: Any, address: int | None
) -> Any:
    """``DeviceNDArray(shape, strides, dtype, stream=stream, gpu_data=gpu_data)`` for a
    non-empty array of the ``layout`` ``described``, ``dtype`` a NumPy dtype; ``address``:
    ``gpu_data``'s, where the caller knows it (else None). Made in Rust
    (``_core.numba_device_array``)."""
    if _classes is None:
        kinds()
    return _numba_device_array(described, dtype, stream, gpu_data, address)


def pool_memory(
    context: Any, address: int, nbytes: int, allocations: Any, deallocations: Any, key: int
) -> Any:
    """An ``AutoFreePointer`` over ``address`` (pool memory of the context whose key is
    ``key``), entered in its memory manager's ``allocations`` and owned through an
    ``OwnedPointer`` (what ``NumbaCUDAMemoryManager.memalloc`` returns), with a
    ``_core.PoolRelease`` as its finalizer; returns the ``OwnedPointer``. ``context`` is a
    weak proxy of numba-cuda's ``Context``. Made in Rust (``_core.numba_pool_memory``)."""
    if _classes is None:
        kinds()
    return _numba_pool_memory(context, address, nbytes, allocations, deallocations, key)


def numba_event(handle: int, deallocations: Any) -> Any:
    """A numba-cuda ``Event`` over ``handle``, as ``Context.create_event`` makes one: when it
    is collected, the event's destruction is queued in ``deallocations`` (the context's)."""
    classes = _classes or kinds()
    made = _new(classes.Event)
    made.handle = classes.CUevent(handle)
    _releases[_ref(made, _released)] = (_queue_event_destroy, (deallocations, handle))
    return made


def _queue_event_destroy(item: tuple) -> None:
    deallocations, handle = item
    deallocations.add_item(_core.event_destroy, handle)
