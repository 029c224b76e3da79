"""Host NumPy arrays as kernel arguments, packed by fastlaunch (`classify/host.rs`,
`staging.rs`): the kernel gets a device array over a copy the launch stages, with the host
array's shape, strides and type; `cuda.In` / `Out` / `InOut` choose which way the bytes go.
Checked on the stand-in driver: `_core._keep_submitted(True)` keeps the slots each launch
submitted."""

from __future__ import annotations

PRELUDE = """
import struct
import numpy as np
from numba import cuda
import fastlaunch as fl
from fastlaunch import _core
from fastlaunch.dispatcher import numba_type

COMPILED = _core.CompiledKernel(b"fake image", "fake_entry")
_core._keep_submitted(True)

def launch(kernel, args):
    fingerprint = _core.fingerprint(args)
    types = tuple(numba_type(d) for d in _core.describe(fingerprint))
    kernel._register(fingerprint, 90, types, COMPILED)
    kernel[1, 1](*args)
    raw = _core._submitted()
    return list(struct.unpack(f"<{len(raw) // 8}q", raw))

@fl.jit
def one(a):
    pass
"""


def test_a_host_array_is_passed_as_a_device_copy_with_its_shape_and_strides(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
for array in (
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.asfortranarray(np.zeros((3, 4))),
    np.zeros((), np.complex128),
    np.zeros(0, np.int16),
):
    meminfo, parent, nitems, itemsize, data, *dims = launch(one, (array,))
    assert (meminfo, parent) == (0, 0)
    assert (nitems, itemsize) == (array.size, array.itemsize)
    assert data != array.ctypes.data  # a device copy's address (null for an empty one)
    assert data != 0 or array.size == 0
    # (an empty array's strides are never read: NumPy says 0 where its buffer says itemsize)
    assert dims[: array.ndim] == list(array.shape), dims
    assert array.size == 0 or dims[array.ndim :] == list(array.strides), dims
    print(array.ndim, "ok")
print(_core._remembered_launches()[0])  # launches with host copies are not remembered
"""
    )
    assert lines == ["2 ok", "2 ok", "0 ok", "1 ok", "0"]


def test_transfer_hints_are_typed_as_the_array_they_hold(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
a = np.zeros((2, 3), np.float32)
for hint in (cuda.In, cuda.Out, cuda.InOut):
    print(_core.describe(_core.fingerprint((hint(a),))) == _core.describe(_core.fingerprint((a,))))
print(_core.describe(_core.fingerprint((np.frombuffer(b"abcd", np.uint8),))))
"""
    )
    assert lines == ["True", "True", "True", "[('array', 'uint8', 1, 'C', True)]"]


def test_host_arrays_fastlaunch_does_not_pack_go_to_numba_cuda(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
for value in (np.zeros(8)[::2], cuda.In(np.zeros(8)[::2]), np.zeros(3, "V8")):
    try:
        _core.fingerprint((value,))
    except TypeError as error:
        print("numba-cuda" if "numba-cuda's own launch path" in str(error) else error)
"""
    )
    assert lines == ["numba-cuda"] * 3


def test_host_arrays_cannot_be_bound(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
a = np.zeros(4, np.float32)
fingerprint = _core.fingerprint((a,))
one._register(fingerprint, 90, tuple(numba_type(d) for d in _core.describe(fingerprint)), COMPILED)
try:
    one[1, 1].bind(a)
except TypeError as error:
    print(error)
"""
    )
    assert len(lines) == 1 and "take no records or host arrays" in lines[0]


def test_a_bare_host_array_warns_as_numba_cuda_does_and_a_hint_does_not(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
import warnings
a = np.zeros(4, np.float32)
for args in ((a,), (cuda.InOut(a),)):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        launch(one, args)
    print([str(w.message) for w in caught if "copy overhead" in str(w.message)])
"""
    )
    assert lines == [
        "['Host array used in CUDA kernel will incur copy overhead to/from device.']",
        "[]",
    ]


def test_copies_go_the_way_each_hint_says_and_are_all_freed(run_on_stand_in):
    """The stand-in's memory is real and its kernels do nothing: a device copy that is not
    copied in starts zeroed (its `calloc`), so copying it back zeroes the host array."""
    lines = run_on_stand_in(
        PRELUDE
        + """
import ctypes, os
fake = ctypes.CDLL(os.environ["FASTLAUNCH_CUDA_DRIVER"])
@fl.jit
def two(a, b):
    pass
for hint in (lambda x: x, cuda.InOut, cuda.In, cuda.Out):
    a = np.ones(64 * 1024)  # 512 KiB: staged through a pinned slot
    b = np.ones(256 * 1024)  # 2 MiB: copied straight from and to pageable memory
    for _ in range(2):  # the staging ring makes its pinned slots on first use
        launch(two, (hint(a), hint(b)))
    before = fake.fake_outstanding_allocations()
    launch(two, (hint(a), hint(b)))
    left = fake.fake_outstanding_allocations() - before
    print(float(a.sum()) == a.size, float(b.sum()) == b.size, left)
"""
    )
    assert lines == [
        "True True 0",  # copied in and back
        "True True 0",  # InOut: the same
        "True True 0",  # In: not copied back
        "False False 0",  # Out: not copied in, its zeroed device copy copied back
    ]
