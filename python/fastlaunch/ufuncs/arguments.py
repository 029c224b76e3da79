"""What a ufunc's arguments are (a device array, a host array, a scalar, or something only
numba-cuda's own code takes), and the key of a call: everything a plan depends on, read
from attributes that cost a few dozen nanoseconds each."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastlaunch import _numba_compat as numba_cuda

#: kinds of arguments
NUMBA_ARRAY = 0  # numba-cuda's DeviceNDArray
CAI_ARRAY = 1  # any other __cuda_array_interface__ object (CuPy, torch, ...)
HOST_ARRAY = 2  # a NumPy ndarray
SCALAR = 3  # int, float, complex (bool among ints) or a NumPy number: numba-cuda's scalars
OTHER = 4  # lists, NumPy bools and timedeltas, mapped arrays...: numba-cuda's own code's

#: the kind of each argument class seen
_kinds: dict[type, int] = {}
#: numba-cuda's DeviceNDArray, once an argument was one (``keys_of`` reads these inline)
_numba_array_class: type | None = None
#: scalar classes whose NumPy type is their value's: ``int`` and its subclasses but ``bool``
#: (every other scalar's is its class's)
_typed_by_value: set[type] = {int}

#: the NumPy type of a Python int (``np.asarray(x).dtype``, which numba-cuda resolves a
#: scalar's loop by): int64, uint64 from 2**63, object past uint64 or below int64
INT64, UINT64, OBJECT = np.dtype(np.int64), np.dtype(np.uint64), np.dtype(object)
_INT64_MIN, _UINT64_MIN, _UINT64_END = -(2**63), 2**63, 2**64


def kind_of(cls: type) -> int:
    kind = _kinds.get(cls)
    if kind is None:
        kind = _kinds[cls] = _classify(cls)
    return kind


def _classify(cls: type) -> int:
    global _numba_array_class
    if cls is numba_cuda.devicearray().DeviceNDArray:
        _numba_array_class = cls
        return NUMBA_ARRAY
    if cls is np.ndarray:
        return HOST_ARRAY
    if issubclass(cls, np.timedelta64):
        # a scalar to numba-cuda, but its NumPy type's unit is its value's, not its class's
        return OTHER
    # numba-cuda's own scalar test (UFuncMechanism._fill_arrays); np.bool_ is no np.number
    if issubclass(cls, (int, float, complex, np.number)):
        if issubclass(cls, int) and cls is not bool:
            _typed_by_value.add(cls)
        return SCALAR
    if hasattr(cls, "__cuda_ndarray__") or issubclass(cls, np.ndarray):
        return OTHER  # mapped and managed arrays, ndarray subclasses
    if hasattr(cls, "__cuda_array_interface__"):
        return CAI_ARRAY
    return OTHER


def key_of(value: Any) -> Any:
    """The part of a call's key that ``value`` fixes, or None when only numba-cuda's own code
    takes it. Arrays: dtype, shape and strides (the numba type and the launch size follow
    from them); scalars: their class (which casts them), and for an int the NumPy type
    numba-cuda's resolution gives it (``int_dtype``), which its choice of loop reads."""
    cls = type(value)
    kind = _kinds.get(cls)  # (``kind_of``, without its frame: this runs per argument per call)
    if kind is None:
        kind = kind_of(cls)
    if kind is NUMBA_ARRAY or kind is HOST_ARRAY:
        return (kind, value.dtype, value.shape, value.strides)
    if kind is SCALAR:
        if cls in _typed_by_value:  # (``int_dtype``, without its frame)
            if _INT64_MIN <= value < _UINT64_MIN:
                return (kind, cls, INT64)
            return (kind, cls, UINT64 if _UINT64_MIN <= value < _UINT64_END else OBJECT)
        return (kind, cls)
    if kind is CAI_ARRAY:
        interface = value.__cuda_array_interface__
        strides = interface.get("strides")
        if strides is not None and type(strides) is not tuple:
            strides = tuple(strides)  # a list, where the interface says a tuple: a key still
        return (
            kind,
            cls,
            interface["typestr"],
            tuple(interface["shape"]),
            strides,
            interface["data"][1],
        )
    return None


def int_dtype(value: int) -> np.dtype:
    """``np.asarray(value).dtype`` of an int, without making the array."""
    if _INT64_MIN <= value < _UINT64_MIN:
        return INT64
    return UINT64 if _UINT64_MIN <= value < _UINT64_END else OBJECT


def keys_of(args: tuple) -> tuple:
    """``key_of`` of each argument, numba-cuda's arrays (most calls' arguments) read here
    without its frame."""
    numba_array = _numba_array_class
    return tuple(
        [
            (NUMBA_ARRAY, value.dtype, value.shape, value.strides)
            if type(value) is numba_array
            else key_of(value)
            for value in args
        ]
    )


def shape_of(value: Any) -> tuple[int, ...]:
    """An argument's shape as numba-cuda broadcasts it: a scalar is a one-element array."""
    if kind_of(type(value)) is SCALAR:
        return (1,)
    shape = getattr(value, "shape", None)
    if shape is None:
        shape = value.__cuda_array_interface__["shape"]
    return tuple(shape)
