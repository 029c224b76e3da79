"""numba-cuda's objects built over fastlaunch's memory without numba-cuda's slow paths, in the
very state numba-cuda's constructors leave them (the same attributes, in the same order):

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
  ``weakref.finalize``);
- ``numba_event``: an ``Event`` as ``Context.create_event`` makes one (a ``Stream`` as
  ``Context.create_stream`` makes one is made in Rust: ``_core.pooled_numba_stream``, from
  the classes ``kinds()`` gives it);
- (``d[a:b]``, a ``DeviceNDArray`` over what ``gpu_data.view(begin, end)`` returns for an
  ``OwnedPointer``, is made in Rust from the classes ``kinds()`` gives it:
  ``rust/ext/src/memory/numba_views.rs``).

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
_describe_birth = _core.describe_birth
_pool_release = _core.pool_release
_deref_when_collected = _core.deref_when_collected
_dict_set = dict.__setitem__
_proxy = weakref.proxy
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
        _core.read_numba_views(
            _classes.DeviceNDArray,
            _classes.MemoryPointer,
            _classes.OwnedPointer,
            _classes.CUdeviceptr,
            _classes.device_ctypes_pointer,
            _layouts,
            layout,
        )
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
    ``gpu_data``'s, where the caller knows it (else None)."""
    ndim, dummy, shape, strides, size, alloc_size = described
    array = _new((_classes or kinds()).DeviceNDArray)
    # the attributes DeviceNDArrayBase.__init__ sets, in its order
    array.ndim = ndim
    array._dummy = dummy
    array.shape = shape
    array.strides = strides
    array.dtype = dtype
    array.size = size
    array.alloc_size = alloc_size
    array.gpu_data = gpu_data
    array.stream = stream
    array._fastlaunch_description = _describe_birth(array, described, dtype, gpu_data, address)
    return array


def pool_memory(
    context: Any, address: int, nbytes: int, allocations: Any, deallocations: Any, key: int
) -> Any:
    """An ``AutoFreePointer`` over ``address`` (pool memory of the context whose key is
    ``key``), entered in its memory manager's ``allocations`` and owned through an
    ``OwnedPointer`` (what ``NumbaCUDAMemoryManager.memalloc`` returns), with a
    ``_core.PoolRelease`` as its finalizer; returns the ``OwnedPointer``. ``context`` is a
    weak proxy of numba-cuda's ``Context``."""
    classes = _classes or kinds()
    pointer = classes.CUdeviceptr(address)
    # the attributes AutoFreePointer.__init__ sets (MemoryPointer.__init__'s), in its order
    memory = _new(classes.AutoFreePointer)
    memory.context = context
    memory.device_pointer = pointer
    memory.size = nbytes
    memory._cuda_memsize_ = nbytes
    memory.is_managed = True
    memory.refct = 1  # AutoFreePointer drops it to 0, its OwnedPointer takes it to 1
    memory.handle = pointer
    memory._owner = None
    memory._finalizer = release = _pool_release(
        memory, allocations, deallocations, address, key, nbytes
    )
    proxy = _proxy(memory)
    # the attributes OwnedPointer.__init__ sets, in its order; its deref runs in Rust
    owned = _new(classes.OwnedPointer)
    owned._mem = proxy
    owned._view = proxy
    _deref_when_collected(owned, proxy, release)
    owned.device_ctypes_pointer = classes.device_ctypes_pointer(address)
    # numba-cuda's allocations are a UniqueDict; a live pool address is unique already
    _dict_set(allocations, address, memory)
    return owned


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
