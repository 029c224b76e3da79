"""numba-cuda's array constructors on the Rust core: ``device_array`` and
``device_array_like`` (memory from the stream-ordered pool), ``pinned_array`` and
``pinned_array_like`` (page-locked host memory, freed through the context's deallocation
queue as numba-cuda frees its own)."""

from __future__ import annotations

import ctypes
import weakref
from typing import Any

from fastlaunch import _core
from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.memory import objects
from fastlaunch.memory.allocation import allocate, context
from fastlaunch.memory.transfers import stream_handle


def device_array(
    shape: Any, dtype: Any = "float64", strides: Any = None, order: str = "C", stream: Any = 0
) -> Any:
    """numba-cuda's ``cuda.device_array``: an uninitialised ``DeviceNDArray``."""
    shape, strides, dtype = numba_cuda.prepare_shape_strides_dtype(shape, strides, dtype, order)
    return new_device_array(shape, strides, dtype, stream, "shape")


def new_device_array(shape: Any, strides: Any, dtype: Any, stream: Any, argument: str) -> Any:
    """A ``DeviceNDArray`` of this layout over new memory, made as numba-cuda's
    ``DeviceNDArray(shape, strides, dtype, stream=stream)`` makes it (``argument`` names the
    caller's argument in errors)."""
    if _plain_layout(shape, strides):
        nbytes = numba_cuda.memory_classes().memory_size_from_info(shape, strides, dtype.itemsize)
        gpu_data = allocate(nbytes, stream_handle(stream))
        return objects.device_ndarray(shape, strides, dtype, stream, gpu_data)
    # empty, negative or unusual shapes: numba-cuda's constructor, over memory from the pool
    _require_integer_extents(shape)
    nbytes = _extent(shape, strides, dtype.itemsize)
    if nbytes < 0:  # numba-cuda's cuMemAlloc call refuses it with this class
        raise OverflowError(f"{argument} {shape!r} gives a negative size ({nbytes} bytes)")
    gpu_data = allocate(nbytes, stream_handle(stream)) if nbytes else None
    device_array_class = numba_cuda.devicearray().DeviceNDArray
    return device_array_class(shape, strides, dtype, stream=stream, gpu_data=gpu_data)


def device_array_like(ary: Any, stream: Any = 0) -> Any:
    """numba-cuda's ``cuda.device_array_like``."""
    api = numba_cuda.api()
    return device_array(
        shape=ary.shape,
        dtype=ary.dtype,
        strides=api._contiguous_strides_like_array(ary),
        order=api._order_like_array(ary),
        stream=stream,
    )


def pinned_array(shape: Any, dtype: Any = "float64", strides: Any = None, order: str = "C") -> Any:
    """numba-cuda's ``cuda.pinned_array``: a NumPy array over page-locked memory."""
    shape, strides, dtype = numba_cuda.prepare_shape_strides_dtype(shape, strides, dtype, order)
    nbytes = _extent(shape, strides, dtype.itemsize)
    if nbytes == 0:
        return numba_cuda.api().pinned_array(shape, dtype, strides, order)
    _, ctx = context()
    address = _core.pinned_alloc(nbytes)
    buffer = (ctypes.c_byte * nbytes).from_address(address)
    deallocations = ctx.memory_manager.deallocations
    weakref.finalize(buffer, deallocations.add_item, _core.pinned_free, address, nbytes)
    import numpy as np

    return np.ndarray(shape=shape, strides=strides, dtype=dtype, order=order, buffer=buffer)


def pinned_array_like(ary: Any) -> Any:
    """numba-cuda's ``cuda.pinned_array_like``."""
    api = numba_cuda.api()
    return pinned_array(
        shape=ary.shape,
        dtype=ary.dtype,
        strides=api._contiguous_strides_like_array(ary),
        order=api._order_like_array(ary),
    )


def _plain_layout(shape: Any, strides: Any) -> bool:
    """Tuples of ``int`` of one length, every extent positive: what ``objects`` builds."""
    if type(shape) is not tuple or type(strides) is not tuple or len(shape) != len(strides):
        return False
    for n in shape:
        if type(n) is not int or n <= 0:
            return False
    for s in strides:
        if type(s) is not int:
            return False
    return True


def _require_integer_extents(shape: tuple) -> None:
    """numba-cuda's check of a device array's shape (``DeviceNDArrayBase.__init__``), made
    before anything is allocated for it."""
    import numpy as np

    for extent in shape:
        if not isinstance(extent, (int, np.integer)):
            raise TypeError(f"shape elements must be integers, got {type(extent).__name__}")


def _extent(shape: tuple, strides: tuple, itemsize: int) -> int:
    """The bytes an array of this layout spans (0 when it is empty), as numba-cuda counts."""
    size = 1
    for n in shape:
        size *= n
    if not size or len(shape) != len(strides):  # numba-cuda's constructor sorts these out
        return 0
    return int(numba_cuda.cudadrv_driver().memory_size_from_info(shape, strides, itemsize))
