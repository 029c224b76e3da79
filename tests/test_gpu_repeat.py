"""Launches like the last (`rust/ext/src/repeat.rs`) on the GPU: loops that pass the same
arrays again, swap them, change scalars, or change an array in place between launches must
compute what numba-cuda computes with the same calls."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import fastlaunch as fl

pytestmark = pytest.mark.gpu


def axpy_body(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


fl_axpy = fl.jit(axpy_body)
numba_axpy = cuda.jit(axpy_body)

N = 1000


def run_loop(kernel, to_device, to_host):
    """A loop of inline launches over swapped buffers with a changing scalar, each result
    read back."""
    rng = np.random.default_rng(7)
    u = to_device(rng.random(N, dtype=np.float32))
    v = to_device(rng.random(N, dtype=np.float32))
    out = to_device(np.zeros(N, dtype=np.float32))
    results = []
    for step in range(8):
        kernel[(N + 127) // 128, 128](out, np.float32(0.5 + step), u, v)
        results.append(to_host(out).copy())
        u, v = v, u
    return results


def numba_reference():
    return run_loop(numba_axpy, cuda.to_device, lambda a: a.copy_to_host())


def test_numba_arrays_swapped_in_a_loop():
    expected = numba_reference()
    got = run_loop(fl_axpy, cuda.to_device, lambda a: a.copy_to_host())
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_array_equal(e, g)


def test_cupy_and_torch_arrays_swapped_in_a_loop():
    expected = numba_reference()
    cupy = pytest.importorskip("cupy")
    got = run_loop(fl_axpy, cupy.asarray, cupy.asnumpy)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_array_equal(e, g)
    torch = pytest.importorskip("torch")
    got = run_loop(fl_axpy, lambda a: torch.from_numpy(a).cuda(), lambda t: t.cpu().numpy())
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_array_equal(e, g)


def test_torch_tensor_changed_in_place_between_identical_launches():
    torch = pytest.importorskip("torch")
    x = torch.arange(N, dtype=torch.float32, device="cuda")
    y = torch.zeros(N, dtype=torch.float32, device="cuda")
    out = torch.empty(N, dtype=torch.float32, device="cuda")
    blocks = (N + 127) // 128
    for _ in range(3):
        fl_axpy[blocks, 128](out, 2.0, x, y)
    torch.cuda.synchronize()
    assert torch.equal(out, 2 * x)
    other = torch.full((N,), 5.0, device="cuda")
    y.set_(other)  # the same object, other memory
    fl_axpy[blocks, 128](out, 2.0, x, y)
    torch.cuda.synchronize()
    assert torch.equal(out, 2 * x + 5)
    x2 = x[::2]
    out2 = torch.empty(N // 2, dtype=torch.float32, device="cuda")
    y2 = torch.ones(N // 2, dtype=torch.float32, device="cuda")
    for _ in range(2):
        fl_axpy[blocks, 128](out2, 3.0, x2, y2)
    torch.cuda.synchronize()
    assert torch.equal(out2, 3 * x2 + 1)


def test_cupy_shape_assigned_in_place_between_identical_launches():
    cupy = pytest.importorskip("cupy")

    @fl.jit
    def rows(out, x):
        i, j = cuda.grid(2)
        if i < x.shape[0] and j < x.shape[1]:
            out[i, j] = x[i, j] * (i + 1)

    x = cupy.arange(24, dtype=cupy.float32).reshape(4, 6)
    out = cupy.zeros((4, 6), dtype=cupy.float32)
    for _ in range(2):
        rows[(1, 1), (8, 8)](out, x)
    x.shape = (6, 4)
    out.shape = (6, 4)
    rows[(1, 1), (8, 8)](out, x)
    expected = cupy.arange(24, dtype=cupy.float32).reshape(6, 4) * cupy.arange(1, 7)[:, None]
    assert bool((out == expected).all())


def test_cupy_shapes_are_read_from_cupys_layout_where_cupy_keeps_it():
    """CuPy before 14.3 keeps its ndarray's C layout (its public C API header reads it): once
    an array read through its attributes agrees with it, launches like the last read shapes
    from it (`cupy_layout.rs`), and still notice a 1-D array made 2-D in place."""
    cupy = pytest.importorskip("cupy")
    from fastlaunch import _core

    @fl.jit
    def ndim_of(out, x):
        out[0] = x.ndim

    x = cupy.arange(24, dtype=cupy.float32)
    out = cupy.zeros(1, dtype=cupy.int64)
    for _ in range(2):
        ndim_of[1, 1](out, x)
    major, minor = (int(part) for part in cupy.__version__.split(".")[:2])
    keeps_layout = (8, 0) <= (major, minor) < (14, 3)
    assert _core._cupy_layout() == ("confirmed" if keeps_layout else "unconfirmed")
    x.shape = (4, 6)
    ndim_of[1, 1](out, x)
    assert int(out[0]) == 2
    x.shape = (24,)
    ndim_of[1, 1](out, x)
    assert int(out[0]) == 1


@pytest.mark.parametrize("source", ["numba", "cupy", "torch"])
def test_many_arrays_launched_again_are_proven_unchanged_not_read_again(source):
    """The loop `k[1, 1](*arrays)` over 26 arrays: each array of the remembered launch is
    proven unchanged by its identity (and CuPy's shape, torch's description) instead of
    being read and repacked."""
    from fastlaunch import _core

    make = {
        "numba": lambda: cuda.to_device(np.zeros(16, np.float32)),
        "cupy": lambda: pytest.importorskip("cupy").zeros(16, np.float32),
        "torch": lambda: pytest.importorskip("torch").zeros(16, device="cuda"),
    }[source]
    arrays = [make() for _ in range(26)]
    names = ", ".join(f"a{i}" for i in range(26))
    namespace: dict = {}
    exec(f"def touch({names}):\n    a0[0] = a25[0] + 1\n", namespace)  # noqa: S102
    touch = fl.jit(namespace["touch"])
    for _ in range(3):
        touch[1, 1](*arrays)
    expected = {"numba": "numba array", "cupy": "cupy array", "torch": "tensor"}[source]
    assert _core._remembered_checks() == [expected] * 26
    fl.synchronize()
    first = arrays[0] if source != "numba" else arrays[0].copy_to_host()
    assert float(first[0]) == 1.0


def test_cupys_current_stream_is_read_as_cupy_reads_it():
    """Launches with CuPy arrays order after CuPy's current stream, read through the C
    function CuPy's own modules call where CuPy exports it (`cupy_stream.rs`)."""
    cupy = pytest.importorskip("cupy")
    from fastlaunch import _core

    stream, how = _core._cupy_current_stream()
    assert stream == cupy.cuda.get_current_stream().ptr
    capi = getattr(__import__("cupy_backends.cuda.stream").cuda.stream, "__pyx_capi__", {})
    assert how == ("exported" if "get_current_stream_ptr" in capi else "python")
    with cupy.cuda.Stream() as other:
        assert _core._cupy_current_stream()[0] == other.ptr != stream
    assert _core._cupy_current_stream()[0] == stream


@pytest.mark.parametrize("source", ["cupy", "torch"])
def test_new_arrays_each_step_of_one_layout_and_then_others(source):
    """A loop making its arrays anew each step: once the launch is remembered, a new CuPy
    array or torch tensor of the layout read last rewrites its data slot alone
    (`classify/same_layout.rs`); views of other shapes, strides and offsets between them are
    read in full. Every step computes what numba-cuda computes over the same values."""
    from fastlaunch import _core

    if source == "cupy":
        lib = pytest.importorskip("cupy")

        def array(values):
            return lib.asarray(values)

        def host(a):
            return lib.asnumpy(a)

    else:
        lib = pytest.importorskip("torch")

        def array(values):
            return lib.as_tensor(values, device="cuda")

        def host(a):
            return a.cpu().numpy()

    @fl.jit
    def scaled(out, x, a):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a * x[i]

    @cuda.jit
    def numba_scaled(out, x, a):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a * x[i]

    rng = np.random.default_rng(11)
    base = rng.random(4 * N, dtype=np.float32)
    # (start, stop, step) of the view of `base` each step passes: one layout for the first
    # twelve steps, then other sizes, strides and offsets, then the first layout again
    views = [(step, step + N, 1) for step in range(12)]
    views += [(5, 5 + N // 2, 1), (0, 2 * N, 2), (3, 3 + 3 * N, 3), (7, 7 + N, 1)]
    views += [(step, step + N, 1) for step in range(20, 26)]
    for step, (start, stop, stride) in enumerate(views):
        values = base[start:stop:stride]
        whole = array(base)
        x = whole[start:stop:stride]
        out = array(np.zeros(values.size, np.float32))
        scaled[(values.size + 127) // 128, 128](out, x, np.float32(step))
        expected = cuda.device_array(values.size, np.float32)
        given = cuda.to_device(np.ascontiguousarray(values))
        numba_scaled[(values.size + 127) // 128, 128](expected, given, np.float32(step))
        np.testing.assert_array_equal(host(out), expected.copy_to_host(), err_msg=f"step {step}")
        if step == 11:
            assert _core._remembered_checks() == ["same layout", "same layout", "scalar"]
