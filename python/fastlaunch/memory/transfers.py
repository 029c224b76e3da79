"""Transfers between host NumPy arrays and numba-cuda device arrays on the Rust core:
``to_device``, ``DeviceNDArray.copy_to_host`` and ``copy_to_device``, and the three
module-level copy functions of numba-cuda's driver (``host_to_device``, ``device_to_host``,
``device_to_device``) that numba-cuda's other paths copy through (``__setitem__``,
``auto_device``).

``copy_to_device`` keeps numba-cuda's checks without its context lookup. A copy to the
device returns once the host bytes are taken (staged into pinned memory, or,
above a staging slot, taken by the driver); it runs in the stream's order (the legacy default
stream for ``stream=0``), before any later work on that stream, on any blocking stream, before
fastlaunch's launches and copies on non-blocking streams (``rust/ext/src/memory/ordering.rs``),
and before any copy back. A copy to the host returns when the bytes are there. What these cannot
take (objects that are not contiguous NumPy arrays, negative strides) goes to numba-cuda's own
code, so its checks and errors stay its own."""

from __future__ import annotations

import sys
from typing import Any

from fastlaunch import _core
from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.memory import objects, views
from fastlaunch.memory.allocation import allocate_array, allocate_array_in_python
from fastlaunch.memory.originals import original

#: ``to_device``'s array made and filled in one call to Rust
_pool_array_from = _core.pool_array_from
#: dtype kinds whose arrays export their bytes through the buffer protocol
_BUFFER_KINDS = frozenset("biufc")
#: datetimes export no buffer: their bytes are copied as int64
_DATETIME_KINDS = frozenset("Mm")


def host_bytes(array: Any, exact: bool = False) -> Any:
    """A contiguous NumPy array whose buffer export gives ``array``'s bytes, or None. With
    ``exact``, only a ``numpy.ndarray`` itself (numba-cuda gives subclasses, such as its
    mapped and managed arrays, which are device memory already, their own treatment)."""
    np = sys.modules.get("numpy")  # no NumPy imported: no NumPy array given
    if np is None:
        return None
    if type(array) is not np.ndarray and (exact or not isinstance(array, np.ndarray)):
        return None
    flags = array.flags
    if not (flags.c_contiguous or flags.f_contiguous):
        return None
    kind = array.dtype.kind
    if kind in _BUFFER_KINDS:
        return array
    if kind in _DATETIME_KINDS:
        return array.view(np.int64)
    return None


#: The handle of a memory API stream argument: 0 for 0/None, else what
#: ``_core.stream_handle`` reads from a stream object (numba-cuda's ``Stream``, a cuda.core
#: stream, anything with ``__cuda_stream__``). An int other than 0 is refused with
#: numba-cuda's ``TypeError`` (its ``_stream_handle``): ``_core.stream_handle`` would take it
#: as a raw ``CUstream``, which the driver dereferences (a crash). (``device_array`` reads its
#: stream to order the allocation, so it refuses one at once; numba-cuda's, at the first copy
#: on it.) In Rust: it is on the path of every call that takes a stream.
stream_handle = _core.memory_stream_handle


def to_device(obj: Any, stream: Any = 0, copy: bool = True, to: Any = None) -> Any:
    """numba-cuda's ``cuda.to_device``: a ``DeviceNDArray`` from the stream-ordered pool,
    filled through the staged copy; returns once the host bytes are taken."""
    if to is not None:
        if copy:
            to.copy_to_device(obj, stream=stream)
        return to
    source = host_bytes(obj, exact=True)
    if source is None:  # scalars, records, lists, non-contiguous: numba-cuda's own path
        return original(numba_cuda.api(), "to_device")(obj, stream=stream, copy=copy)
    handle = stream_handle(stream)
    shape = obj.shape
    if not obj.size:  # numba-cuda's constructor makes its null pointer
        device_array_class = numba_cuda.devicearray().DeviceNDArray
        return device_array_class(shape, obj.strides, obj.dtype, stream=stream)
    dtype = obj.dtype
    described = objects.layout(shape, obj.strides, dtype.itemsize)
    if not copy:
        return allocate_array(described, dtype, stream, handle)
    made = _pool_array_from(described, dtype, stream, handle, source)
    if made is not None:
        return made
    # (where Rust made none, its pool_array would make none either: Python makes the array)
    array = allocate_array_in_python(described, dtype, stream, handle)
    _core.copy_to_device(array.gpu_data.device_ctypes_pointer.value, source, handle)
    return array


def copy_to_host(self: Any, ary: Any = None, stream: Any = 0) -> Any:
    """numba-cuda's ``DeviceNDArray.copy_to_host``, its copy made on the Rust core. A
    writable ``plain_match`` target needs none of the general path's checks."""
    if ary is not None and plain_match(self, ary) and ary.flags.writeable:
        handle = stream_handle(self.stream if not stream else stream)
        _core.copy_to_host(ary, _address(self), handle, self.alloc_size)
        return ary
    strides = self.strides
    if (strides and min(strides) < 0) or (
        ary is not None and (host_bytes(ary) is None or not ary.flags.writeable)
    ):  # numba-cuda's own path (and errors)
        return original(numba_cuda.devicearray().DeviceNDArray, "copy_to_host")(self, ary, stream)
    import numpy as np

    stream = self.stream if not stream else stream
    nbytes = self.alloc_size
    if ary is None:
        host = np.empty(shape=nbytes, dtype=np.byte)
    else:
        if not _same_layout(self, ary):
            numba_cuda.devicearray().check_array_compatibility(self, ary)  # raises, or agrees
        host = ary
    if nbytes:
        target = host if ary is None else host_bytes(host)  # a new byte array is its bytes
        _core.copy_to_host(target, _address(self), stream_handle(stream), nbytes)
    if ary is not None:
        return host
    # numba-cuda's np.ndarray(shape=..., dtype=..., [strides=...,] buffer=host), its
    # arguments given by position (NumPy parses keywords at several times the cost)
    if self.size == 0:
        return np.ndarray(self.shape, self.dtype, host)
    return np.ndarray(self.shape, self.dtype, host, 0, strides)


def setitem(self: Any, key: Any, value: Any) -> None:
    """numba-cuda's ``DeviceNDArray.__setitem__``. ``d[a:b] = host`` of a contiguous NumPy
    array of the slice's very dtype, shape and strides (no broadcast, no cast), on an array
    bound to no stream, is one staged copy into the slice, then numba-cuda's wait for the
    default stream; the rest is numba-cuda's ``_do_setitem`` (its assignment kernel, its
    checks), without its context lookup, its copies through the staged copies below."""
    if type(key) is slice and key.step is None and not self.stream:
        source = host_bytes(value, exact=True)
        if source is not None:
            target = views.first_axis_slice(self, key)
            if target is not None and _same_layout(target, value):
                _core.copy_to_device(_address(target), source, 0, value.nbytes)
                _core.stream_synchronize(0)  # numba-cuda's assignment is synchronous
                return
    self._do_setitem(key, value)


def copy_to_device(self: Any, ary: Any, stream: Any = 0) -> None:
    """numba-cuda's ``DeviceNDArray.copy_to_device`` (its checks, in its order), without its
    context lookup, its copy made on the Rust core. A ``plain_match`` source needs none of
    its checks: it passes them all, and is copied as it is."""
    if plain_match(self, ary):
        handle = stream_handle(self.stream if not stream else stream)
        _core.copy_to_device(_address(self), ary, handle, self.alloc_size)
        return
    if ary.size == 0:
        return
    devicearray = numba_cuda.devicearray()
    self_core, ary_core = _array_core(self), _array_core(ary)
    flags = self_core.flags  # (a broadcast array's core may be a NumPy scalar: it has flags)
    if not (flags["C_CONTIGUOUS"] or flags["F_CONTIGUOUS"]):
        devicearray.sentry_contiguous(self)  # raises numba-cuda's error
    stream = self.stream if not stream else stream
    if numba_cuda.cudadrv_driver().is_device_memory(ary):
        devicearray.sentry_contiguous(ary)
        devicearray.check_array_compatibility(self_core, ary_core)
        device_to_device(self, ary, self.alloc_size, stream=stream)
        return
    import numpy as np

    # the same contiguity as the device array (a host copy only where one is needed)
    order = "C" if flags["C_CONTIGUOUS"] else "F"
    ary_core = np.array(ary_core, order=order, subok=True, copy=None)
    if not _same_layout(self_core, ary_core):
        devicearray.check_array_compatibility(self_core, ary_core)  # raises, or agrees
    host_to_device(self, ary_core, self.alloc_size, stream=stream)


def cuda_array_interface(self: Any) -> Any:
    """numba-cuda's ``__cuda_array_interface__``, read by another library on streams fastlaunch
    cannot see: what ``install()`` puts on numba-cuda's arrays (``interface_property``)."""
    return interface_property().__get__(self, type(self))


#: the property ``install()`` puts on numba-cuda's ``DeviceNDArrayBase``, made once
_property: Any = None


def interface_property() -> Any:
    """numba-cuda's ``__cuda_array_interface__`` property wrapped in Rust
    (``_core.InterfaceProperty``, no Python frame): numba-cuda's copies to the device and
    allocations are synchronous; fastlaunch enqueues them on the legacy stream, so before the
    dictionary is handed out the array's own pending work there (a staged copy into it, its
    allocation after a free) is waited for on the host, without the GIL and in the relaxed
    capture mode (no capture refuses it or is broken by it), whatever stream the array is
    bound to: at once, with no driver call, when none is pending. Its block is then freed as
    numba-cuda frees memory, after all the context's work (``rust/ext/src/memory/exports.rs``)."""
    global _property
    if _property is None:
        base = numba_cuda.devicearray().DeviceNDArrayBase
        _property = _core.InterfaceProperty(original(base, "__cuda_array_interface__").fget)
    return _property


def plain_match(device: Any, host: Any) -> bool:
    """Whether ``host`` is a plain ``numpy.ndarray`` (no subclass: numba-cuda's mapped and
    managed arrays are device memory) of ``device``'s very dtype, shape and strides, C- or
    F-contiguous, non-empty, with positive strides, of a dtype that exports its bytes: then
    numba-cuda's checks in ``copy_to_device`` and ``copy_to_host`` pass (the device array has
    the host array's contiguity; each is its own ``array_core``; ``np.array(..., copy=None)``
    returns the host array itself), and the copy moves all of its ``nbytes``, which are the
    device array's ``alloc_size``."""
    if type(host) is not (_ndarray or _ndarray_type()):
        return False
    dtype = host.dtype
    strides = host.strides
    if host.shape != device.shape or strides != device.strides:
        return False
    if dtype is not device.dtype and dtype != device.dtype:
        return False
    # (a contiguous array may have a zero or negative stride on an extent of 1; a 0-d array,
    # numba-cuda's copy of a scalar, has none)
    if dtype.kind not in _BUFFER_KINDS or not host.size or (strides and min(strides) <= 0):
        return False
    flags = host.flags
    return flags.c_contiguous or flags.f_contiguous


#: ``numpy.ndarray`` once NumPy is imported (before, no NumPy array exists)
_ndarray: type | None = None


def _ndarray_type() -> type | None:
    global _ndarray
    if _ndarray is None:
        np = sys.modules.get("numpy")
        if np is None:
            return None
        _ndarray = np.ndarray
    return _ndarray


def _same_layout(device: Any, host: Any) -> bool:
    """Whether ``device`` and ``host`` have one dtype, shape and strides: then numba-cuda's
    ``check_array_compatibility`` (which squeezes both, making a device array) agrees."""
    return (
        device.dtype == host.dtype and device.shape == host.shape and device.strides == host.strides
    )


def _array_core(array: Any) -> Any:
    """numba-cuda's ``array_core`` (the repeated core of a broadcast array), without making a
    full view of an array that has no zero stride (which is its own core)."""
    if 0 not in array.strides:
        return array
    return numba_cuda.devicearray().array_core(array)


def host_to_device(dst: Any, src: Any, size: int, stream: Any = 0) -> None:
    """numba-cuda's ``driver.host_to_device``, staged."""
    source = host_bytes(src)
    if source is None or source.nbytes < size:
        return original(numba_cuda.cudadrv_driver(), "host_to_device")(
            dst, src, size, stream=stream
        )
    _core.copy_to_device(_device_address(dst), source, stream_handle(stream), size)
    return None


def device_to_host(dst: Any, src: Any, size: int, stream: Any = 0) -> None:
    """numba-cuda's ``driver.device_to_host``, staged."""
    target = host_bytes(dst)
    if target is None or target.nbytes < size or not target.flags.writeable:
        return original(numba_cuda.cudadrv_driver(), "device_to_host")(
            dst, src, size, stream=stream
        )
    _core.copy_to_host(target, _device_address(src), stream_handle(stream), size)
    return None


def device_to_device(dst: Any, src: Any, size: int, stream: Any = 0) -> None:
    """numba-cuda's ``driver.device_to_device``, in stream order."""
    _core.copy_device(_device_address(dst), _device_address(src), size, stream_handle(stream))


def _address(array: Any) -> int:
    return array.device_ctypes_pointer.value or 0


def _device_address(obj: Any) -> int:
    return int(numba_cuda.cudadrv_driver().device_pointer(obj) or 0)
