"""numba-cuda's ``DeviceNDArray`` views made without its slow paths: ``d[a:b]``
(``__getitem__``), ``reshape`` and ``ravel``. Each computes what numba-cuda computes (its
``dummyarray`` where the case is not the plain one) and builds the view as
``objects.device_ndarray`` and ``objects.array_view`` do; whatever is outside the cases
handled here goes to numba-cuda's own code (``_do_getitem``, the original methods), so its
results and errors stay its own. Neither asks numba-cuda for its context (a view allocates
nothing)."""

from __future__ import annotations

from typing import Any

from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.memory import objects
from fastlaunch.memory.originals import original


def getitem(self: Any, item: Any) -> Any:
    """``DeviceNDArray.__getitem__``: a slice of the first axis with step 1 of an array with
    positive strides (``d[1:-1]``, ``d[:n]``) is built here; the rest is numba-cuda's
    ``_do_getitem``."""
    if type(item) is slice and item.step is None:
        view = first_axis_slice(self, item)
        if view is not None:
            return view
    return self._do_getitem(item)


def first_axis_slice(self: Any, item: slice) -> Any:
    """``self[item]`` built here (``item`` a slice of the first axis with step 1), or None
    where numba-cuda's ``_do_getitem`` is to make it."""
    classes = objects._classes or objects.kinds()
    if type(self) is not classes.DeviceNDArray:
        return None
    gpu_data = self.gpu_data
    if type(gpu_data) is not classes.OwnedPointer:
        return None
    shape, strides = self.shape, self.strides
    if len(shape) == 1:
        extent = shape[0]
        stride = strides[0]
        if stride <= 0 or extent <= 0:
            return None  # numba-cuda's dummy array treats these its own way
        start, stop, _ = item.indices(extent)
        count = stop - start
        if count <= 0:
            return None
        view_shape: tuple = (count,)
        begin = start * stride
        end = begin + (count - 1) * stride + self.dtype.itemsize
    else:
        if not shape or min(strides) <= 0 or min(shape) <= 0:
            return None
        stride = strides[0]
        start, stop, _ = item.indices(shape[0])
        count = stop - start
        if count <= 0:
            return None
        view_shape = (count, *shape[1:])
        # numba-cuda's extent of the sliced dummy array: first element to one past the last
        begin = start * stride
        end = begin + (count - 1) * stride + self.dtype.itemsize
        for n, s in zip(shape[1:], strides[1:], strict=True):
            end += (n - 1) * s
    address = gpu_data.device_ctypes_pointer.value
    if not address:
        return None
    return objects.array_view(self, gpu_data, address, begin, end, view_shape)


def reshape(self: Any, *newshape: Any, **kws: Any) -> Any:
    """``DeviceNDArray.reshape``: numba-cuda's steps, the view built without
    ``DeviceNDArray.__init__``."""
    if not _plain(self):
        return original(numba_cuda.memory_classes().DeviceNDArray, "reshape")(
            self, *newshape, **kws
        )
    if len(newshape) == 1 and isinstance(newshape[0], (tuple, list)):
        newshape = newshape[0]
    if newshape == self.shape:  # numba-cuda's reshape gives its view no stream
        return _view_of(self, self.shape, self.strides, 0)
    dummy = self._dummy
    # numba-cuda's dummy array reshapes in Python (most of a reshape's cost): its answer for
    # extents that are all int and no keyword but "order" is kept per dummy array (which
    # numba-cuda keeps one of per layout), shape and order
    key = None
    if (not kws or (len(kws) == 1 and type(kws.get("order")) is str)) and all(
        type(n) is int for n in newshape
    ):
        key = (dummy, tuple(newshape), kws.get("order"))
        found = _reshapes.get(key)
        if found is not None:
            return _view_of(self, found[0], found[1], 0)
    newarr, extents = dummy.reshape(*newshape, **kws)
    if extents == [dummy.extent]:
        if key is not None:
            _reshapes[key] = (newarr.shape, newarr.strides)
        return _view_of(self, newarr.shape, newarr.strides, 0)
    raise NotImplementedError("operation requires copying")


#: per (dummy array, new shape, order keyword) of a reshape made without a copy: the view's
#: (shape, strides), as numba-cuda's dummy array computes them
_reshapes: dict[tuple, tuple] = {}


def ravel(self: Any, order: str = "C", stream: Any = 0) -> Any:
    """``DeviceNDArray.ravel``: numba-cuda's steps, the view built without
    ``DeviceNDArray.__init__``."""
    if not _plain(self):
        return original(numba_cuda.memory_classes().DeviceNDArray, "ravel")(
            self, order=order, stream=stream
        )
    stream = self.stream if not stream else stream
    dummy = self._dummy
    newarr, extents = dummy.ravel(order=order)
    if extents == [dummy.extent]:
        return _view_of(self, newarr.shape, newarr.strides, stream)
    raise NotImplementedError("operation requires copying")


def _view_of(array: Any, shape: tuple, strides: tuple, stream: Any) -> Any:
    """A ``DeviceNDArray`` of this layout over ``array``'s memory (numba-cuda's
    ``DeviceNDArray(shape, strides, dtype, stream, gpu_data=array.gpu_data)``)."""
    dtype = array.dtype
    described = objects.layout(shape, strides, dtype.itemsize)
    return objects.device_ndarray(described, dtype, stream, array.gpu_data, None)


def _plain(array: Any) -> bool:
    """A non-empty ``DeviceNDArray`` itself (not a subclass): numba-cuda's constructor would
    keep its memory (an empty one gets a new null pointer)."""
    return type(array) is numba_cuda.memory_classes().DeviceNDArray and array.size > 0
