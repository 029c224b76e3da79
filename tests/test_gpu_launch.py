"""Launches on the GPU: results match NumPy for every array source, dtype and layout,
and repeated launches stay on the Rust fast path (the miss counter does not move)."""

from __future__ import annotations

import math
import sys
import weakref
from typing import Any

import numpy as np
import pytest
from arrays import to_host
from numba import cuda

import fastlaunch as fl

pytestmark = pytest.mark.gpu


def _sources():
    sources = {"numba": cuda.to_device}
    try:
        import cupy

        sources["cupy"] = cupy.asarray
    except ImportError:
        pass
    try:
        import torch

        sources["torch"] = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to("cuda")
    except ImportError:
        pass
    return sources


SOURCES = _sources()


@fl.jit
def axpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


@fl.jit
def stencil(out, a):
    i, j = cuda.grid(2)
    if 0 < i < a.shape[0] - 1 and 0 < j < a.shape[1] - 1:
        out[i, j] = a[i - 1, j] + a[i + 1, j] + a[i, j - 1] + a[i, j + 1] - 4 * a[i, j]


@fl.jit
def total(result, x):
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(result, 0, x[i])


@fl.jit
def copy2d(out, a):
    i, j = cuda.grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        out[i, j] = a[i, j]


@fl.jit
def store_scalar(out, value):
    out[0] = value


@fl.jit
def zero_d(out, a):
    out[()] = a[()] * 2


@fl.jit
def nothing(a):
    pass


@pytest.mark.parametrize("source", list(SOURCES))
def test_axpy_matches_numpy_and_stays_on_the_fast_path(source):
    make = SOURCES[source]
    rng = np.random.default_rng(1)
    x, y = rng.random(1000, dtype=np.float32), rng.random(1000, dtype=np.float32)
    out, dx, dy = make(np.zeros(1000, np.float32)), make(x), make(y)
    axpy[4, 256](out, np.float32(3.0), dx, dy)
    fl.synchronize()
    np.testing.assert_allclose(to_host(out), 3 * x + y, rtol=1e-6)
    misses = axpy.miss_count
    for _ in range(100):
        axpy[4, 256](out, np.float32(3.0), dx, dy)
    fl.synchronize()
    assert axpy.miss_count == misses


def test_sources_mixed_in_one_call():
    if len(SOURCES) < 3:
        pytest.skip("needs numba, CuPy and torch")
    x, y = np.arange(64, dtype=np.float32), np.ones(64, np.float32)
    out = SOURCES["numba"](np.zeros(64, np.float32))
    axpy[1, 64](out, 2.0, SOURCES["cupy"](x), SOURCES["torch"](y))
    fl.synchronize()
    np.testing.assert_array_equal(to_host(out), 2 * x + y)


@pytest.mark.parametrize("source", list(SOURCES))
def test_2d_stencil(source):
    make = SOURCES[source]
    a = np.random.default_rng(2).random((33, 47))
    out = make(np.zeros_like(a))
    stencil[(3, 4), (16, 16)](out, make(a))
    fl.synchronize()
    expected = np.zeros_like(a)
    expected[1:-1, 1:-1] = (
        a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] - 4 * a[1:-1, 1:-1]
    )
    np.testing.assert_allclose(to_host(out), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("source", list(SOURCES))
def test_atomic_reduction(source):
    make = SOURCES[source]
    x = np.arange(10_000, dtype=np.float64)
    result = make(np.zeros(1, np.float64))
    total[40, 256](result, make(x))
    fl.synchronize()
    assert to_host(result)[0] == x.sum()


@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("view", ["strided", "fortran", "negative", "transposed"])
def test_views_keep_their_strides(source, view):
    make = SOURCES[source]
    base = np.arange(20 * 30, dtype=np.float32).reshape(20, 30)
    device = make(base)
    if view == "strided":
        arg, expected = device[::2, 1::3], base[::2, 1::3]
    elif view == "negative":
        if source == "torch":
            pytest.skip("torch has no negative strides")
        arg, expected = device[::-1, ::-2], base[::-1, ::-2]
    elif view == "transposed":
        arg, expected = device.T, base.T
    else:
        fortran = np.asfortranarray(base)
        if source == "torch":
            import torch

            arg = torch.from_numpy(base.T.copy()).to("cuda").T
        else:
            arg = make(fortran)
        expected = fortran
    out = SOURCES["numba"](np.zeros(expected.shape, np.float32))
    copy2d[(4, 4), (8, 8)](out, arg)
    fl.synchronize()
    np.testing.assert_array_equal(to_host(out), expected)
    layout = fl._core.classify(arg)[3]
    if source == "numba":
        # numba's own typing is right for its arrays (its 2-D .T is a C-ordered copy).
        assert layout == arg._numba_type_.layout
    else:
        flags = expected.flags
        assert layout == ("C" if flags.c_contiguous else "F" if flags.f_contiguous else "A")


DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_as_array_and_scalar(dtype):
    value = dtype(1) if dtype is np.bool_ else dtype(3 + (2j if np.dtype(dtype).kind == "c" else 0))
    out = cuda.to_device(np.zeros(1, dtype))
    store_scalar[1, 1](out, value)
    fl.synchronize()
    assert to_host(out)[0] == value


@pytest.mark.parametrize("value", [True, 7, -(2**40), 2**63 + 5, 2.5, 1 - 2j])
def test_python_scalars(value):
    dtype = {bool: np.bool_, int: np.int64, float: np.float64, complex: np.complex128}[type(value)]
    if isinstance(value, int) and not isinstance(value, bool) and value >= 2**63:
        dtype = np.uint64
    out = cuda.to_device(np.zeros(1, dtype))
    store_scalar[1, 1](out, value)
    fl.synchronize()
    assert to_host(out)[0] == value


def test_zero_d_and_zero_size_arrays():
    a = cuda.to_device(np.array(21.0))
    out = cuda.to_device(np.array(0.0))
    zero_d[1, 1](out, a)
    fl.synchronize()
    assert to_host(out)[()] == 42.0
    for make in SOURCES.values():
        nothing[1, 1](make(np.zeros((0, 3), np.float32)))
    fl.synchronize()


def test_explicit_signature_refuses_wrong_layout_and_dtype():
    @fl.jit("void(float32[::1], float32)")
    def fill(out, v):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = v

    good = cuda.to_device(np.zeros(16, np.float32))
    fill[1, 16](good, 3)  # int converts to float32, as numba-cuda converts it
    fl.synchronize()
    assert (to_host(good) == 3).all()
    with pytest.raises(
        fl.KernelArgumentError, match=r"argument 0 \(out\).*float32, 1d, C.*float32, 1d, A"
    ):
        fill[1, 16](cuda.to_device(np.zeros(32, np.float32))[::2], 1.0)
    with pytest.raises(fl.KernelArgumentError, match=r"argument 0 \(out\).*float64"):
        fill[1, 16](cuda.to_device(np.zeros(16, np.float64)), 1.0)
    with pytest.raises(fl.KernelArgumentError, match=r"argument 1 \(v\).*complex"):
        fill[1, 16](good, 1j)


def test_several_signatures_pick_the_matching_one():
    @fl.jit(["void(float32[::1], float32)", "void(float64[::1], float64)"])
    def fill(out, v):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = v

    a32 = cuda.to_device(np.zeros(8, np.float32))
    a64 = cuda.to_device(np.zeros(8, np.float64))
    fill[1, 8](a32, np.float32(1.5))
    fill[1, 8](a64, 2.5)
    fl.synchronize()
    assert (to_host(a32) == 1.5).all() and (to_host(a64) == 2.5).all()


def test_wrap_existing_numba_kernel_and_streams():
    @cuda.jit
    def inc(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] += 1

    kernel = fl.jit(inc)
    a = cuda.to_device(np.zeros(32, np.int32))
    numba_stream = cuda.stream()
    kernel[1, 32, numba_stream](a)
    kernel[
        1,
        32,
        numba_stream.handle.value
        if hasattr(numba_stream.handle, "value")
        else int(numba_stream.handle),
    ](a)
    kernel[1, 32, None, 0](a)
    try:
        import torch

        torch_stream = torch.cuda.Stream()
        kernel[1, 32, torch_stream](a)
        torch_stream.synchronize()
    except ImportError:
        kernel[1, 32](a)
    numba_stream.synchronize()
    fl.synchronize()
    assert (to_host(a) == 4).all()


def test_wrong_argument_count_and_bad_arguments():
    out = cuda.to_device(np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="takes 4 positional arguments"):
        axpy[1, 4](out, 1.0, out)
    with pytest.raises(fl.KernelArgumentError, match=r"argument 2 \(x\): str"):
        axpy[1, 4](out, 1.0, "x", out)


def test_launch_errors_name_the_cuda_error():
    out = cuda.to_device(np.zeros(4, np.float32))
    with pytest.raises(fl.LaunchConfigurationError) as info:
        axpy[1, 2048](out, 1.0, out, out)
    assert "(CUDA_ERROR_INVALID_VALUE from the driver)" in str(info.value)
    # also what numba-cuda raises for it: a CudaDriverError, so cuda.core's CUDAError
    assert isinstance(info.value, fl.CudaDriverError)
    assert isinstance(info.value, fl.LaunchRefusedError)
    assert info.value.name == "CUDA_ERROR_INVALID_VALUE"
    axpy[1, 4](out, 1.0, out, out)  # the context is still usable
    fl.synchronize()


def test_debug_kernels_raise_with_thread_indices():
    @fl.jit(debug=True, opt=False)
    def check(a):
        i = cuda.grid(1)
        if i == 3:
            raise ValueError("bad element")
        a[i] = i

    a = cuda.to_device(np.zeros(8, np.float32))
    with pytest.raises(ValueError, match=r"tid=\[0, 0, 3\].*bad element"):
        check[1, 8](a)


def test_math_inside_kernels():
    @fl.jit
    def sines(out, x):
        i = cuda.grid(1)
        if i < x.size:
            out[i] = math.sin(x[i])

    x = np.linspace(0, 3, 100)
    out = cuda.to_device(np.zeros_like(x))
    sines[1, 128](out, cuda.to_device(x))
    fl.synchronize()
    np.testing.assert_allclose(to_host(out), np.sin(x))


@pytest.mark.parametrize("launch", ["first", "second"])
def test_the_arrays_of_a_launch_are_released_when_dropped(launch, monkeypatch):
    """As under numba-cuda, a launch holds no reference to its arguments once it returns:
    the array dropped after it goes at once (its memory to the stream-ordered free), also
    after the launch that compiled the kernel. Seen on the H200 on 2026-12-05: after a
    kernel's first launch the argument tuple stayed referenced (not a cycle: ``gc.collect``
    did not free it) until a later launch; on the stand-in driver (numba-cuda's real compile,
    its module load replaced; CPython 3.11 and 3.12) it is not held
    (benchmarks/results/gpu-tests-2026-12-05-9504548.md). The stand-in shows one way it
    happens: something that keeps an exception raised during the compile (pytest's hook for
    exceptions in finalizers) keeps the miss path's frames; since 2026-12-06 none of them
    holds the arguments (test_cpu_miss.py)."""

    @fl.jit
    def double(out, a):
        i = cuda.grid(1)
        if i < a.size:
            out[i] = 2 * a[i]

    # exceptions raised in finalizers meanwhile: none may come from fastlaunch; any other is
    # named if the array is held. Handed on to the hook in place (pytest's keeps them, with
    # their frames), so that what the test watches for still happens.
    unraisable: list[str] = []
    handed_on = sys.unraisablehook

    def collect(raised: Any) -> None:
        unraisable.append(f"{raised.object!r}: {raised.exc_value!r}")
        handed_on(raised)

    monkeypatch.setattr(sys, "unraisablehook", collect)
    source = fl.to_device(np.arange(1024, dtype=np.float64))
    if launch == "second":
        double[4, 256](fl.device_array(1024), source)
    out = fl.device_array(1024)
    released = weakref.ref(out)
    double[4, 256](out, source)
    del out
    assert released() is None, _holders(released()) + f"\nraised in finalizers: {unraisable}"
    cuda.synchronize()
    assert not [u for u in unraisable if "fastlaunch" in u], unraisable


def _holders(value: object, depth: int = 4) -> str:
    """What keeps ``value`` alive, ``depth`` referrers deep (frames by file, line and
    function; a module's namespace not followed further): the failure names the holder."""
    import gc
    import sys

    lines: list[str] = []
    ours = {id(lines), id(sys._getframe())}

    def walk(obj: object, level: int) -> None:
        found = gc.get_referrers(obj)
        ours.add(id(found))
        for holder in found:
            code = getattr(holder, "f_code", None)
            if id(holder) in ours or code in (walk.__code__, _holders.__code__):
                continue
            ours.add(id(holder))
            where = f"{code.co_filename}:{holder.f_lineno} {code.co_name}" if code else ""
            lines.append("  " * level + f"{type(holder).__name__} {where or repr(holder)[:160]}")
            namespace = isinstance(holder, dict) and "__name__" in holder
            if level + 1 < depth and len(lines) < 60 and not namespace:
                walk(holder, level + 1)

    walk(value, 0)
    return "held by:\n" + "\n".join(lines)
