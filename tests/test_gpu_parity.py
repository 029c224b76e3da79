"""Parity with numba-cuda on the GPU for the argument kinds beyond device arrays and
scalars. numba-cuda's own launch path takes non-contiguous host arrays (which numba-cuda
itself refuses) and kernels with extensions. Host arrays (copied in and back, with numba's
warning), records, tuples, named tuples, enum members, datetime scalars and datetime arrays
are packed by fastlaunch itself (no numba-path launch); they are checked here against what
numba-cuda computes."""

from __future__ import annotations

import enum
from collections import namedtuple

import numpy as np
import pytest
from numba import cuda
from numba.cuda.core.errors import NumbaPerformanceWarning

import fastlaunch as fl

pytestmark = pytest.mark.gpu


@fl.jit
def double(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] *= 2


@fl.jit
def double_2d(a):
    i, j = cuda.grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        a[i, j] *= 2


def test_host_arrays_are_copied_in_and_back_with_numbas_warning():
    a = np.arange(10, dtype=np.float32)
    handed_to_numba = double.numba_launches
    with pytest.warns(NumbaPerformanceWarning, match="copy overhead"):
        double[1, 32](a)
    np.testing.assert_array_equal(a, 2 * np.arange(10))
    assert double.numba_launches == handed_to_numba  # packed by fastlaunch


def test_non_contiguous_host_arrays_work():
    base = np.arange(40, dtype=np.float64).reshape(5, 8)
    view = base[::2, 1::3]
    expected = base.copy()
    expected[::2, 1::3] *= 2
    double_2d[(1, 1), (8, 8)](view)
    np.testing.assert_array_equal(base, expected)


def test_in_out_inout_hints():
    @fl.jit
    def add_one(dst, src):
        i = cuda.grid(1)
        if i < dst.size:
            dst[i] = src[i] + 1

    src = np.arange(8, dtype=np.int32)
    dst = np.zeros(8, np.int32)
    add_one[1, 8](cuda.Out(dst), cuda.In(src))
    np.testing.assert_array_equal(dst, src + 1)
    add_one[1, 8](cuda.InOut(dst), cuda.In(dst.copy()))
    np.testing.assert_array_equal(dst, src + 2)


def test_records_tuples_enums_and_datetimes():
    class Shade(enum.IntEnum):
        LIGHT = 3
        DARK = 7

    Pair = namedtuple("Pair", ["x", "y"])
    record_type = np.dtype([("a", np.float64), ("b", np.int32)], align=True)

    @fl.jit
    def mixed(out, record, pair, shade, when):
        out[0] = record.a + record.b
        out[1] = pair.x * pair.y
        out[2] = shade
        out[3] = when

    out = cuda.to_device(np.zeros(4, np.int64))
    record = np.rec.array([(1.5, 2)], dtype=record_type)[0]
    mixed[1, 1](out, record, Pair(3, 4), Shade.DARK, np.datetime64(5, "D").astype(np.int64))
    np.testing.assert_array_equal(out.copy_to_host(), [3, 12, 7, 5])

    @fl.jit
    def days(out, when):
        out[0] = when

    stamps = cuda.to_device(np.zeros(1, "datetime64[D]"))
    days[1, 1](stamps, np.datetime64("2024-01-02"))
    assert stamps.copy_to_host()[0] == np.datetime64("2024-01-02")


def test_kernels_with_extensions_run_prepare_args():
    class Doubler:
        calls = 0

        def prepare_args(self, ty, val, stream=None, retr=None):
            Doubler.calls += 1
            return ty, val * 2 if isinstance(val, int) else val

    @fl.jit(extensions=[Doubler()])
    def store(out, v):
        out[0] = v

    out = cuda.to_device(np.zeros(1, np.int64))
    store[1, 1](out, 21)
    assert out.copy_to_host()[0] == 42
    assert Doubler.calls == 2


def test_tuples_enums_and_datetimes_take_the_fast_path():
    class Level(enum.IntEnum):
        LOW = 2
        HIGH = 9

    class Scale(enum.Enum):
        SMALL = 0.5
        LARGE = 4.0

    Pair = namedtuple("Pair", ["x", "y"])

    @fl.jit
    def combine(out, arrays, pair, nested, level, scale, when, span):
        a, b = arrays
        i = cuda.grid(1)
        if i < out.size - 1:
            out[i] = a[i] * pair.x + b[i] * pair.y + nested[0] + nested[1][1]
        if i == 0:
            later = when + span  # datetime64[h]
            out[out.size - 1] = level.value + scale.value + (later - when) / span

    n = 64
    a = cuda.to_device(np.arange(n, dtype=np.float64))
    b = cuda.to_device(np.ones(n, dtype=np.float64))
    out = cuda.device_array(n + 1, np.float64)
    args = (
        (a, b),
        Pair(2.0, 3),
        (1, (7.5, 10.0)),
        Level.HIGH,
        Scale.LARGE,
        np.datetime64(5, "D"),
        np.timedelta64(3, "h"),
    )
    combine[1, 64](out, *args)
    fl.synchronize()
    expected = np.arange(n) * 2.0 + 3 + 1 + 10.0
    result = out.copy_to_host()
    np.testing.assert_array_equal(result[:n], expected)
    assert result[n] == 9 + 4.0 + 1
    assert combine.numba_launches == 0
    misses = combine.miss_count
    combine[1, 64](out, (b, a), Pair(1.0, 1), (0, (0.0, 0.0)), Level.LOW, Scale.SMALL, *args[5:])
    fl.synchronize()
    assert combine.miss_count == misses  # same types: no new compile
    np.testing.assert_array_equal(out.copy_to_host()[:n], np.arange(n) + 1)
    assert combine.numba_launches == 0
