"""Device memory extents: the address range an array covers (torch tensors, CUDA Array
Interface objects, cuda.core views and buffers), and which of a call's array arguments a
range overlaps. A captured graph that holds an array derived from an argument (a view, a
slice) or returns one is pinned to that argument: ``step.py`` asks these when it analyses
a capture."""

from __future__ import annotations

import sys
from typing import Any


def _extent(x: Any) -> tuple[int, int] | None:
    """The device address range an array covers, or None if it is not a known array."""
    try:
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(x, torch.Tensor):
            pointer, itemsize = x.data_ptr(), x.element_size()
            shape, strides = tuple(x.shape), tuple(s * itemsize for s in x.stride())
        elif hasattr(x, "__cuda_array_interface__"):
            cai = x.__cuda_array_interface__
            pointer = cai["data"][0]
            shape = tuple(cai["shape"])
            itemsize = int(cai["typestr"][2:])
            strides = cai.get("strides")
            if strides is None:
                strides, step = [], itemsize
                for n in reversed(shape):
                    strides.insert(0, step)
                    step *= n
        elif hasattr(x, "ptr") and hasattr(x, "shape"):  # cuda.core StridedMemoryView
            pointer, itemsize = int(x.ptr), x.dtype.itemsize
            shape = tuple(x.shape)
            strides = x.strides
            if strides is None:
                strides, step = [], itemsize
                for n in reversed(shape):
                    strides.insert(0, step)
                    step *= n
            else:
                strides = [s * itemsize for s in strides]
        elif hasattr(x, "handle") and hasattr(x, "size"):  # cuda.core Buffer
            return (int(x.handle), int(x.handle) + int(x.size))
        else:
            return None
    except Exception:
        return None
    if not pointer or any(n == 0 for n in shape):
        return None
    low = pointer + sum(min(0, (n - 1) * s) for n, s in zip(shape, strides, strict=True))
    high = pointer + sum(max(0, (n - 1) * s) for n, s in zip(shape, strides, strict=True))
    return (low, high + itemsize)


def _overlapping(extent: tuple[int, int] | None, extents: list) -> list[int]:
    if extent is None:
        return []
    low, high = extent
    return [i for i, e in enumerate(extents) if e is not None and e[0] < high and low < e[1]]
