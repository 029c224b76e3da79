"""CuPy arrays are read through their attributes (CuPy has no DLPack C exchange API). A
C-contiguous array (CuPy's `_c_contiguous` flag) is read without building its `shape` and
`strides` tuples: its strides follow from its shape, and a 1-D array's shape is its size.
Checked here against stand-ins with CuPy's attributes (CuPy needs a GPU to make arrays): the
fingerprint and the packed parameters must equal those of the same array described through
the CUDA Array Interface, and the shortcut must not read what it skips."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from arrays import PTR, FakeCAI

from fastlaunch import _core
from fastlaunch.dispatcher import numba_type


class MemoryPointer:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class FakeCupyArray:
    """CuPy's `ndarray` as fastlaunch reads it; `shape` and `strides` count their reads."""

    def __init__(self, shape, dtype, strides=None, c_contiguous=None):
        self.dtype = np.dtype(dtype)
        self._shape = tuple(shape)
        itemsize = self.dtype.itemsize
        c_strides = tuple(
            int(np.prod(self._shape[i + 1 :], dtype=np.int64)) * itemsize
            for i in range(len(self._shape))
        )
        self._strides = c_strides if strides is None else tuple(strides)
        self._c_contiguous = self._strides == c_strides if c_contiguous is None else c_contiguous
        self.ndim = len(self._shape)
        self.size = int(np.prod(self._shape, dtype=np.int64))
        self.tuple_reads = 0
        self.data_reads = 0
        self.ptr = PTR

    @property
    def data(self):
        self.data_reads += 1
        return MemoryPointer(self.ptr)

    @property
    def shape(self):
        self.tuple_reads += 1
        return self._shape

    @shape.setter
    def shape(self, shape):  # CuPy's in-place reshape (same size, C-contiguous here)
        assert int(np.prod(shape, dtype=np.int64)) == self.size
        self._shape = tuple(shape)
        itemsize = self.dtype.itemsize
        self._strides = tuple(
            int(np.prod(self._shape[i + 1 :], dtype=np.int64)) * itemsize
            for i in range(len(self._shape))
        )
        self.ndim = len(self._shape)

    @property
    def strides(self):
        self.tuple_reads += 1
        return self._strides

    @property
    def __cuda_array_interface__(self):  # what marks it as an array; not read
        raise AssertionError("fastlaunch reads CuPy arrays' attributes")


FakeCupyArray.__module__ = "cupy._core.core"


@pytest.fixture(autouse=True)
def cupy_module(monkeypatch):
    """A `cupy` module whose `ndarray` is the stand-in: CuPy is recognised by type."""
    cupy = types.ModuleType("cupy")
    cupy.ndarray = FakeCupyArray  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return cupy


LAYOUTS = [
    ((128,), "float32", None),
    ((16, 8), "float64", None),
    ((2, 3, 4), "int16", None),
    ((0,), "float32", None),
    ((4, 6), "float32", (4, 24)),  # F order
    ((4, 3), "float32", (24, 8)),  # every other column
    ((5,), "complex64", (16,)),  # strided 1-D
]


@pytest.mark.parametrize(("shape", "dtype", "strides"), LAYOUTS)
def test_cupy_arrays_pack_as_the_same_array_through_the_interface(shape, dtype, strides):
    array = FakeCupyArray(shape, dtype, strides)
    cai = FakeCAI(shape, np.dtype(dtype).str, strides=strides or array._strides)
    fingerprint = _core.fingerprint((array,))
    assert fingerprint == _core.fingerprint((cai,))
    (descriptor,) = _core.describe(fingerprint)
    param_types = (numba_type(descriptor),)
    assert _core.pack(param_types, (array,)) == _core.pack(param_types, (cai,))


@pytest.mark.parametrize(
    ("shape", "expected_reads"), [((128,), 0), ((16, 8), 1)], ids=["1-D", "2-D"]
)
def test_c_contiguous_arrays_skip_the_tuples(shape, expected_reads):
    array = FakeCupyArray(shape, "float32")
    _core.fingerprint((array,))
    assert array.tuple_reads == expected_reads


def test_other_arrays_read_shape_and_strides():
    array = FakeCupyArray((4, 3), "float32", (24, 8))
    _core.fingerprint((array,))
    assert array.tuple_reads == 2


def test_an_array_launched_before_is_not_read_again():
    array = FakeCupyArray((128,), "float32")
    first = _core.fingerprint((array,))
    reads = array.data_reads
    assert _core.fingerprint((array,)) == first
    assert array.data_reads == reads  # pushed from the table of known arrays


@pytest.mark.parametrize(
    ("before", "after"),
    [((128,), (8, 16)), ((8, 16), (16, 8)), ((8, 16), (128,)), ((2, 3, 4), (4, 3, 2))],
)
def test_a_shape_assigned_in_place_is_noticed(before, after):
    array = FakeCupyArray(before, "float32")
    _core.fingerprint((array,))
    array.shape = after
    cai = FakeCAI(after, "<f4", strides=array._strides)
    assert _core.fingerprint((array,)) == _core.fingerprint((cai,))
    (descriptor,) = _core.describe(_core.fingerprint((cai,)))
    param_types = (numba_type(descriptor),)
    assert _core.pack(param_types, (array,)) == _core.pack(param_types, (cai,))


def test_a_type_not_laid_out_as_cupys_ndarray_is_never_read_from_memory(monkeypatch):
    """CuPy's object layout (`cupy_layout.rs`) is read only for subclasses of `cupy.ndarray`
    of a CuPy that keeps it (8.0 up to 14.3) whose instances are as large as the layout. A
    stand-in of such a CuPy, but a Python object, is read through its attributes: a read of
    its memory as CuPy's would refute the layout (or crash), and the shape assigned in place
    is noticed through the attributes."""

    class SmallerThanCupys(FakeCupyArray):
        pass

    SmallerThanCupys.__module__ = "cupy._core.core"
    cupy = types.ModuleType("cupy")
    cupy.__version__ = "14.2.0"  # type: ignore[attr-defined]
    cupy.ndarray = SmallerThanCupys  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    array = SmallerThanCupys((8, 16), "float32")
    _core.fingerprint((array,))
    reads = array.tuple_reads
    array.shape = (16, 8)
    assert _core.fingerprint((array,)) == _core.fingerprint((FakeCAI((16, 8), "<f4"),))
    assert array.tuple_reads > reads
    assert _core._cupy_layout() == "unconfirmed"


def test_a_new_array_at_a_freed_arrays_address_is_read():
    old = FakeCupyArray((128,), "float32")
    _core.fingerprint((old,))
    address = id(old)
    del old
    # CPython reuses a freed object's memory for the next object of its size.
    candidates = [FakeCupyArray((2, 2), "float64") for _ in range(64)]
    reused = [a for a in candidates if id(a) == address]
    if not reused:
        pytest.skip("the allocator did not reuse the address")
    (array,) = reused
    array.ptr = PTR + 4096
    cai = FakeCAI((2, 2), "<f8", ptr=PTR + 4096)
    assert _core.fingerprint((array,)) == _core.fingerprint((cai,))
    (descriptor,) = _core.describe(_core.fingerprint((cai,)))
    param_types = (numba_type(descriptor),)
    assert _core.pack(param_types, (array,)) == _core.pack(param_types, (cai,))


@pytest.mark.parametrize(
    ("before", "after"),
    [((128,), (8, 16)), ((8, 16), (16, 8)), ((8, 16), (128,))],
)
def test_a_graphed_call_holds_cupy_arrays_until_their_shape_is_assigned(before, after):
    """A graphed call with CuPy arrays is held (``HeldArgs``: the same objects come back with
    the same form, and its graph replays directly) until a shape is assigned in place."""
    array, other = FakeCupyArray(before, "float32"), FakeCupyArray((64,), "float32")
    args = (array, other, 0.5)
    held = _core.step_form(args, None, 0)[3]
    assert held is not None and held.holds(args)
    assert not held.holds((other, array, 0.5))  # other objects
    array.shape = after
    assert not held.holds(args)
    array.shape = before
    assert held.holds(args)
