"""Host NumPy arrays as kernel arguments, packed by fastlaunch, side by side with numba-cuda:
every host array is copied back after the launch (synchronously when no stream is given),
`cuda.In` is not copied back and `cuda.Out` is not copied in."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda
from numba.cuda.decorators import jit as numba_jit

import fastlaunch as fl

pytestmark = pytest.mark.gpu


def add_index(a, b):
    i = cuda.grid(1)
    if i < a.size:
        b.flat[i] = a.flat[i] + i


def add_index_1d(a, b):
    i = cuda.grid(1)
    if i < a.size:
        b[i] = a[i] + i


def both(source):
    return numba_jit(source), fl.jit(source)


plain_add, fast_add = both(add_index_1d)


def run_both(make, launch):
    """`launch(kernel, arrays)` with numba-cuda's kernel and fastlaunch's, each on its own
    copies of `make()`; returns both sets of arrays after the launch returned."""
    results = []
    for kernel in (plain_add, fast_add):
        arrays = make()
        launch(kernel, arrays)
        results.append(arrays)
    return results


def sequences():
    rng = np.random.default_rng(0)
    return rng.random(64), np.full(64, -1.0)


@pytest.mark.parametrize(
    "wrap",
    [
        lambda a, b: (a, b),
        lambda a, b: (cuda.In(a), cuda.Out(b)),
        lambda a, b: (cuda.InOut(a), cuda.InOut(b)),
        lambda a, b: (cuda.In(a), cuda.In(b)),
        lambda a, b: (a, cuda.Out(b)),
    ],
    ids=["bare", "in-out", "inout", "in-in", "bare-out"],
)
def test_host_arrays_and_hints_launch_as_numba_cuda_launches_them(wrap):
    def launch(kernel, arrays):
        kernel[1, 64](*wrap(*arrays))  # returns with the copies back on the host

    (plain_a, plain_b), (fast_a, fast_b) = run_both(sequences, launch)
    assert np.array_equal(fast_b, plain_b)
    assert np.array_equal(fast_a, plain_a)


def test_cuda_out_is_not_copied_in():
    a, b = sequences()
    b[:] = 7.0
    fast_add[1, 64](a, cuda.Out(b))  # b's device copy starts uninitialised: b is written
    assert np.array_equal(b, a + np.arange(64))


def test_cuda_in_is_not_copied_back():
    a, b = sequences()
    fast_add[1, 64](a, cuda.In(b))
    assert (b == -1.0).all()


@pytest.mark.parametrize(
    "make",
    [
        lambda: (np.arange(12.0).reshape(3, 4), np.zeros((3, 4))),
        lambda: (np.asfortranarray(np.arange(12.0).reshape(3, 4)), np.zeros((3, 4), order="F")),
        lambda: (np.arange(6, dtype=np.int32), np.zeros(6, np.int32)),
        lambda: (np.zeros(0), np.zeros(0)),
        lambda: (np.array(2.5), np.array(0.0)),
    ],
    ids=["C", "F", "int32", "empty", "0-d"],
)
def test_layouts_and_dtypes_side_by_side(make):
    plain, fast = numba_jit(add_index), fl.jit(add_index)
    (pa, pb), (fa, fb) = make(), make()
    n = max(pa.size, 1)
    plain[1, n](pa, pb)
    fast[1, n](fa, fb)
    assert fb.dtype == pb.dtype and fb.shape == pb.shape and fb.strides == pb.strides
    assert np.array_equal(fb, pb)
    assert fast.numba_launches == 0  # packed by fastlaunch, not handed to numba-cuda


def test_read_only_host_arrays_are_read():
    a = np.frombuffer(np.arange(8.0).tobytes(), np.float64)
    assert not a.flags.writeable
    b = np.zeros(8)
    fast_add[1, 8](a, b)
    assert np.array_equal(b, np.arange(8.0) * 2)


@pytest.mark.parametrize("stream_kind", ["numba", "per-thread", "external"])
def test_host_arrays_on_a_stream(stream_kind):
    if stream_kind == "numba":
        stream = cuda.stream()
    elif stream_kind == "per-thread":
        stream = cuda.per_thread_default_stream()
    else:
        owner = cuda.stream()
        handle = owner.handle
        stream = cuda.external_stream(getattr(handle, "value", None) or int(handle))
    a, b = sequences()
    fast_add[1, 64, stream](a, b)
    stream.synchronize()
    assert np.array_equal(b, a + np.arange(64))


def test_non_contiguous_host_arrays_still_go_through_numba_cuda():
    kernel = fl.jit(add_index_1d)
    a = np.arange(16.0)[::2]
    b = np.zeros(16)[::2]
    kernel[1, 8](a, b)
    assert np.array_equal(b, a + np.arange(8))
    assert kernel.numba_launches == 1
