"""numba-cuda's objects built over fastlaunch's memory without numba-cuda's slow paths, in the
very state numba-cuda's constructors leave them (the same attributes, in the same order):

- ``device_ndarray``: a ``DeviceNDArray`` as ``DeviceNDArray.__init__`` makes one over
  existing memory (its ``_dummy`` from ``dummyarray.Array.from_desc``, which numba-cuda caches
  per layout), without ``__init__``'s shape normalisation, done by the caller;
- ``pool_memory``: an ``AutoFreePointer`` with its ``OwnedPointer``, as
  ``NumbaCUDAMemoryManager.memalloc`` makes them for ``cuMemAlloc`` memory (its
  ``_finalizer`` a ``_Release``: what ``MemoryPointer.free`` uses of a ``weakref.finalize``);
- ``numba_stream``, ``numba_event``: a ``Stream`` as ``Context.create_stream`` makes one,
  an ``Event`` as ``Context.create_event`` makes one;
- ``owned_view``: what ``gpu_data.view(begin, end)`` returns for an ``OwnedPointer``
  (a ``MemoryPointer`` view of the owner, in a new ``OwnedPointer``).

An ``OwnedPointer``'s release (numba-cuda's ``deref``: the owner's reference count down, the
owner freed at zero) runs from a weak reference's callback, as it does under numba-cuda
(there, a ``weakref.finalize`` that nothing else holds); it costs a tenth of a
``weakref.finalize``. The only difference: at interpreter exit, numba-cuda runs the releases
of views still alive; fastlaunch leaves them, as the process's memory goes with it.

Where an object is not in the case built here (no memory, an EMM plugin's pointer of another
kind), the callers use numba-cuda's own constructors."""

from __future__ import annotations

import weakref
from typing import Any

from fastlaunch import _core
from fastlaunch import _numba_compat as numba_cuda

_new = object.__new__
_proxy = weakref.proxy
_ref = weakref.ref

#: the weak references that run OwnedPointers' releases, held until they run
_releases: set[Any] = set()


def device_ndarray(shape: tuple, strides: tuple, dtype: Any, stream: Any, gpu_data: Any) -> Any:
    """``DeviceNDArray(shape, strides, dtype, stream=stream, gpu_data=gpu_data)`` for a
    non-empty array: ``shape`` and ``strides`` tuples of ``int`` of one length, ``dtype`` a
    NumPy dtype."""
    kinds = numba_cuda.memory_classes()
    itemsize = dtype.itemsize
    dummy = kinds.from_desc(0, shape, strides, itemsize)
    shape = dummy.shape
    strides = dummy.strides
    array = _new(kinds.DeviceNDArray)
    # the attributes DeviceNDArrayBase.__init__ sets, in its order
    array.__dict__.update(
        ndim=len(shape),
        _dummy=dummy,
        shape=shape,
        strides=strides,
        dtype=dtype,
        size=dummy.size,
        alloc_size=kinds.memory_size_from_info(shape, strides, itemsize),
        gpu_data=gpu_data,
        stream=stream,
    )
    return array


def pool_memory(context: Any, address: int, nbytes: int, finalizer: Any) -> Any:
    """An ``AutoFreePointer`` over ``address`` owned through an ``OwnedPointer`` (what
    ``NumbaCUDAMemoryManager.memalloc`` returns), with ``finalizer`` as its release; returns
    ``(memory, owned)``. ``context`` is a weak proxy of numba-cuda's ``Context``."""
    kinds = numba_cuda.memory_classes()
    pointer = kinds.CUdeviceptr(address)
    memory = _new(kinds.AutoFreePointer)
    # MemoryPointer.__init__'s attributes, in its order; AutoFreePointer drops refct to 0
    memory.__dict__.update(
        context=context,
        device_pointer=pointer,
        size=nbytes,
        _cuda_memsize_=nbytes,
        is_managed=True,
        refct=0,
        handle=pointer,
        _owner=None,
    )
    memory._finalizer = _Release(memory, finalizer)
    proxy = _proxy(memory)
    return memory, _owned(kinds, proxy, proxy, address)


class _Release:
    """What ``MemoryPointer.free`` asks of the ``weakref.finalize`` numba-cuda keeps as a
    pointer's ``_finalizer``: ``alive``, and calling it runs the release once (again: nothing);
    the release also runs when the pointer is collected unreleased (its context was reset).
    Half the cost of a ``weakref.finalize``; no release at interpreter exit."""

    __slots__ = ("_callback", "_reference", "alive")

    def __init__(self, owner: Any, callback: Any) -> None:
        self._callback = callback
        self.alive = True
        self._reference = reference = _ref(owner, _collected)
        _pending[reference] = self

    def __call__(self) -> Any:
        callback = self._callback
        if callback is None:
            return None
        self._callback = None
        self.alive = False
        _pending.pop(self._reference, None)
        return callback()


#: the releases of pointers still alive, by the weak reference to each
_pending: dict[Any, _Release] = {}


def _collected(reference: Any) -> None:
    release = _pending.get(reference)
    if release is not None:
        release()


def numba_stream(handle: int, release: Any, argument: Any) -> Any:
    """A numba-cuda ``Stream`` over ``handle``, as ``Context.create_stream`` makes one (not
    external); when it is collected, ``release(argument)`` runs (where numba-cuda's
    finalizer queues the stream's destruction)."""
    kinds = numba_cuda.memory_classes()
    made = _new(kinds.Stream)
    made.__dict__.update(handle=kinds.CUstream(handle), external=False)

    def collected(reference: Any) -> None:
        _releases.discard(reference)
        release(argument)

    _releases.add(_ref(made, collected))
    return made


def numba_event(handle: int, deallocations: Any) -> Any:
    """A numba-cuda ``Event`` over ``handle``, as ``Context.create_event`` makes one: when it
    is collected, the event's destruction is queued in ``deallocations`` (the context's)."""
    kinds = numba_cuda.memory_classes()
    made = _new(kinds.Event)
    made.__dict__.update(handle=kinds.CUevent(handle))

    def collected(reference: Any) -> None:
        _releases.discard(reference)
        deallocations.add_item(_core.event_destroy, handle)

    _releases.add(_ref(made, collected))
    return made


def owned_view(gpu_data: Any, begin: int, end: int) -> Any:
    """``gpu_data.view(begin, end)`` for an ``OwnedPointer`` of numba-cuda's memory with a
    non-null address (the callers check), 0 <= begin <= end."""
    kinds = numba_cuda.memory_classes()
    view = gpu_data._view
    owner = view.owner  # the owning allocation itself (MemoryPointer.owner)
    address = int(view.device_pointer) + begin
    pointer = kinds.CUdeviceptr(address)
    memory = _new(kinds.MemoryPointer)
    memory.__dict__.update(
        context=view.context,
        device_pointer=pointer,
        size=end - begin,
        _cuda_memsize_=end - begin,
        is_managed=False,
        refct=1,
        handle=pointer,
        _owner=owner,
    )
    return _owned(kinds, _proxy(owner), memory, address)


def _owned(kinds: Any, memory_proxy: Any, view: Any, address: int) -> Any:
    """``OwnedPointer(memory_proxy, view)``: takes a reference on the owner; its release
    gives it back (numba-cuda's ``deref``)."""
    owned = _new(kinds.OwnedPointer)
    pointer = kinds.device_ctypes_pointer(address)
    owned.__dict__.update(_mem=memory_proxy, _view=view, device_ctypes_pointer=pointer)
    memory_proxy.refct += 1

    def deref(_: Any, memory: Any = memory_proxy) -> None:
        _releases.discard(reference)
        try:
            memory.refct -= 1
            assert memory.refct >= 0
            if memory.refct == 0:
                memory.free()
        except ReferenceError:
            pass

    reference = _ref(owned, deref)
    _releases.add(reference)
    return owned
