"""numba-cuda's ``DeviceNDArray`` views made without its slow paths: ``d[a:b]``
(``__getitem__``, built in Rust), ``reshape`` and ``ravel``. Each computes what numba-cuda
computes (its ``dummyarray`` where the case is not the plain one) and builds the view as
``objects.device_ndarray`` does; whatever is outside the cases handled here goes to
numba-cuda's own code (``_do_getitem``, the original methods), so its results and errors stay
its own. Neither asks numba-cuda for its context (a view allocates nothing)."""

from __future__ import annotations

from typing import Any

from fastlaunch import _core
from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.memory import objects
from fastlaunch.memory.originals import original


def getitem(self: Any, item: Any) -> Any:
    """``DeviceNDArray.__getitem__``: a slice of the first axis with step 1 of an array with
    positive strides (``d[1:-1]``, ``d[:n]``) is built in Rust; the rest is numba-cuda's
    ``_do_getitem``."""
    if type(item) is slice and item.step is None:
        view = _first_axis_view(self, item)
        if view is not None:
            return view
    return self._do_getitem(item)


#: ``self[item]`` (``item`` a slice of the first axis with step 1) built in Rust
#: (``rust/ext/src/memory/numba_views.rs``), or None where numba-cuda's ``_do_getitem`` is to
#: make it: another class than ``DeviceNDArray`` itself, memory not numba-cuda's
#: ``OwnedPointer``, an extent or stride not above 0, an empty view
first_axis_slice = _first_axis_view = _core.first_axis_view


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
