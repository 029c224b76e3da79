"""numba-cuda's array constructors on the Rust core: ``device_array`` and
``device_array_like`` (memory from the stream-ordered pool), ``pinned_array`` and
``pinned_array_like`` (page-locked host memory, freed through the context's deallocation
queue as numba-cuda frees its own). With an External Memory Management plugin selected, its
``memalloc`` and ``memhostalloc`` allocate."""

from __future__ import annotations

import ctypes
import functools
import weakref
from typing import Any

from fastlaunch import _core
from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.memory import objects
from fastlaunch.memory.allocation import allocate, allocate_array, allocate_array_in_python, context
from fastlaunch.memory.transfers import stream_handle

#: ``allocate_array``'s first step, which ``device_array`` makes itself
_pool_array = _core.pool_array


def device_array_in_python(
    shape: Any, dtype: Any = "float64", strides: Any = None, order: str = "C", stream: Any = 0
) -> Any:
    """numba-cuda's ``cuda.device_array``: an uninitialised ``DeviceNDArray``. ``device_array``
    (below) calls this for every call its table of layouts does not serve."""
    if strides is None and type(order) is str:
        found = _contiguous_layout(shape, order, dtype)
        if found is not None:
            handle = stream_handle(stream) if stream else 0
            # allocate_array's first step written out: one Python frame fewer per array
            made = _pool_array(found[1], found[0], stream, handle)
            if made is not None:
                return made
            return allocate_array_in_python(found[1], found[0], stream, handle)
    shape, strides, dtype = numba_cuda.prepare_shape_strides_dtype(shape, strides, dtype, order)
    return new_device_array(shape, strides, dtype, stream, "shape")


def contiguous_layout(shape: tuple[int, ...], dtype: Any) -> tuple | None:
    """``(NumPy dtype, objects.layout(...))`` of the C-contiguous array
    ``device_array(shape, dtype)`` makes, for a caller that makes many (``allocate_array``
    makes each); None where ``device_array``'s own checks decide (an extent of 0)."""
    return _contiguous_layout(shape, "C", dtype)


#: per (shape, itemsize, order) of a contiguous array: its ``objects.layout``
_contiguous: dict[tuple, tuple] = {}
#: per (shape, dtype, order) arguments of a contiguous array whose dtype is a name or a
#: scalar type (which always give the same dtype): what ``_contiguous_layout`` returns
_arguments: dict[tuple, tuple] = {}
#: the same for a NumPy dtype given (``device_array_like``'s): an entry per the first of
#: equal dtypes seen, which serves that very dtype
_dtype_arguments: dict[tuple, tuple] = {}
#: per dtype argument (a name or a scalar type): NumPy's dtype for it
_dtypes: dict[Any, Any] = {}


def _contiguous_layout(shape: Any, order: str, dtype: Any) -> tuple | None:
    """``(dtype, objects.layout(...))`` of the contiguous array ``device_array`` makes for
    these arguments (with no strides given), where its shape is an ``int`` or a tuple of
    ``int``, every extent positive, and ``order`` is "C" or "F"; else None (numba-cuda's
    normalisation and checks take it)."""
    if type(shape) is int:
        if shape <= 0:
            return None
    elif type(shape) is tuple:
        for n in shape:
            if type(n) is not int or n <= 0:
                return None
    else:
        return None
    named = type(dtype) is str or type(dtype) is type
    given_dtype = not named and isinstance(dtype, _dtype_class())
    if named:
        # (a name and a type never compare equal, nor do an int and a tuple: the key is exact)
        found = _arguments.get((shape, dtype, order))
        if found is not None:
            return found
    elif given_dtype:
        # a NumPy dtype equals others (one with metadata equals one without): an entry
        # serves the very dtype it was made for
        found = _dtype_arguments.get((shape, dtype, order))
        if found is not None and found[0] is dtype:
            return found
    if order != "C" and order != "F":
        return None
    if named:
        np_dtype = _dtypes.get(dtype)
        if np_dtype is None:
            np_dtype = _numpy_dtype(dtype)
    elif given_dtype:
        np_dtype = dtype  # numpy.dtype(dtype) is dtype itself
    else:
        np_dtype = _numpy_dtype(dtype)
    itemsize = np_dtype.itemsize
    key = (shape, itemsize, order)
    described = _contiguous.get(key)
    if described is None:
        extents = (shape,) if type(shape) is int else shape
        strides = _contiguous_strides(extents, itemsize, order)
        described = _contiguous[key] = objects.layout(extents, strides, itemsize)
    found = (np_dtype, described)  # the very tuple: describe_birth knows its arrays by it
    if named:
        _arguments[shape, dtype, order] = found
    elif given_dtype:
        _dtype_arguments[shape, dtype, order] = found
    return found


def _numpy_dtype(dtype: Any) -> Any:
    """``numpy.dtype(dtype)``, remembered for names and scalar types (which always give the
    same dtype)."""
    import numpy as np

    made = np.dtype(dtype)
    if type(dtype) is str or type(dtype) is type:
        _dtypes[dtype] = made
    return made


@functools.cache
def _dtype_class() -> type:
    import numpy as np

    return np.dtype


def _contiguous_strides(shape: tuple, itemsize: int, order: str) -> tuple:
    """The strides of a C- or F-contiguous array (numba-cuda's ``_fill_stride_by_order``)."""
    strides = [0] * len(shape)
    stride = itemsize
    axes = range(len(shape) - 1, -1, -1) if order == "C" else range(len(shape))
    for axis in axes:
        strides[axis] = stride
        stride *= shape[axis]
    return tuple(strides)


_core.give_device_array(device_array_in_python, _contiguous_layout, allocate_array_in_python)

#: numba-cuda's ``cuda.device_array``: in Rust (``rust/ext/src/memory/device_array_call.rs``),
#: which makes a contiguous array of a shape and dtype made before on the thread with no Python
#: frame, and calls ``device_array_in_python`` for every other call
device_array = _core.device_array


def new_device_array(shape: Any, strides: Any, dtype: Any, stream: Any, argument: str) -> Any:
    """A ``DeviceNDArray`` of this layout over new memory, made as numba-cuda's
    ``DeviceNDArray(shape, strides, dtype, stream=stream)`` makes it (``argument`` names the
    caller's argument in errors)."""
    if _plain_layout(shape, strides):
        described = objects.layout(shape, strides, dtype.itemsize)
        return allocate_array(described, dtype, stream, stream_handle(stream))
    # empty, negative or unusual shapes: numba-cuda's constructor, over memory from the pool
    _require_integer_extents(shape)
    nbytes = _extent(shape, strides, dtype.itemsize)
    if nbytes < 0:  # numba-cuda's cuMemAlloc call refuses it with this class
        raise OverflowError(f"{argument} {shape!r} gives a negative size ({nbytes} bytes)")
    gpu_data = allocate(nbytes, stream_handle(stream))[0] if nbytes else None
    device_array_class = numba_cuda.devicearray().DeviceNDArray
    return device_array_class(shape, strides, dtype, stream=stream, gpu_data=gpu_data)


def device_array_like(ary: Any, stream: Any = 0) -> Any:
    """numba-cuda's ``cuda.device_array_like``."""
    shape = ary.shape
    if type(shape) is tuple and len(shape) == 1:
        # numba-cuda gives a one-dimensional array no strides and order "C"
        return device_array(shape, ary.dtype, None, "C", stream)
    api = numba_cuda.api()
    return device_array(
        shape=shape,
        dtype=ary.dtype,
        strides=api._contiguous_strides_like_array(ary),
        order=api._order_like_array(ary),
        stream=stream,
    )


def pinned_array(shape: Any, dtype: Any = "float64", strides: Any = None, order: str = "C") -> Any:
    """numba-cuda's ``cuda.pinned_array``: a NumPy array over page-locked memory."""
    _, ctx = context()
    shape, strides, dtype = numba_cuda.prepare_shape_strides_dtype(shape, strides, dtype, order)
    manager = ctx.memory_manager
    if type(manager) is not numba_cuda.cudadrv_driver().NumbaCUDAMemoryManager:
        # an EMM plugin allocates (its memhostalloc), as in numba-cuda
        return _managers_pinned_array(manager, shape, strides, dtype, order)
    nbytes = _extent(shape, strides, dtype.itemsize)
    if nbytes < 0:  # numba-cuda's cuMemHostAlloc call refuses it with this class
        raise OverflowError(f"shape {shape!r} gives a negative size ({nbytes} bytes)")
    if nbytes == 0:
        return _managers_pinned_array(manager, shape, strides, dtype, order)
    address = _core.pinned_alloc(nbytes)
    buffer = (ctypes.c_byte * nbytes).from_address(address)
    deallocations = manager.deallocations
    weakref.finalize(buffer, deallocations.add_item, _core.pinned_free, address, nbytes)
    import numpy as np

    return np.ndarray(shape=shape, strides=strides, dtype=dtype, order=order, buffer=buffer)


def _managers_pinned_array(
    manager: Any, shape: tuple, strides: tuple, dtype: Any, order: str
) -> Any:
    """numba-cuda's ``pinned_array`` after its normalisation, with the memory manager of the
    context already looked up (numba-cuda's ``Context.memhostalloc`` is this call): an EMM
    plugin's ``memhostalloc``, or numba-cuda's own for empty arrays."""
    nbytes = numba_cuda.cudadrv_driver().memory_size_from_info(shape, strides, dtype.itemsize)
    buffer = manager.memhostalloc(nbytes, False, False, False)
    import numpy as np

    return np.ndarray(shape=shape, strides=strides, dtype=dtype, order=order, buffer=buffer)


def pinned_array_like(ary: Any) -> Any:
    """numba-cuda's ``cuda.pinned_array_like`` (an EMM plugin allocates, through
    ``pinned_array``)."""
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
