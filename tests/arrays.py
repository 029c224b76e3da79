"""Helpers shared by the tests: fake and real device arrays."""

from __future__ import annotations

import numpy as np


def to_host(array) -> np.ndarray:
    """A NumPy copy of a numba, CuPy or torch device array."""
    if hasattr(array, "copy_to_host"):
        return array.copy_to_host()
    if hasattr(array, "get"):
        return array.get()
    return array.cpu().numpy()


# Every numeric dtype numba passes to kernels, by NumPy name.
DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]

PTR = 0x7F00_0000_1000


class FakeCAI:
    """A device array as far as the CUDA Array Interface goes (v3); never dereferenced."""

    def __init__(self, shape, typestr, strides=None, ptr=PTR, readonly=False):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape),
            "strides": None if strides is None else tuple(strides),
            "typestr": typestr,
            "data": (ptr, readonly),
            "version": 3,
        }


class CAIView:
    """A bare CUDA Array Interface (v3, no stream) over a real device array, which it keeps
    alive. With ``explicit_strides``, C strides are spelled out where the array reports
    none (numba-cuda then types it layout 'A', fastlaunch from the strides)."""

    def __init__(self, array, explicit_strides=False):
        cai = dict(array.__cuda_array_interface__, stream=None)
        if explicit_strides and cai["strides"] is None:
            itemsize = np.dtype(cai["typestr"]).itemsize
            strides, step = [], itemsize
            for extent in reversed(cai["shape"]):
                strides.insert(0, step)
                step *= extent
            cai["strides"] = tuple(strides)
        self.__cuda_array_interface__ = cai
        self._array = array
