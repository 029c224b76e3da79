"""``fastlaunch.graphed`` on the GPU: replayed steps give bit for bit what eager launches
give, re-pointed arrays, streams, fallbacks, check mode, arguments kept alive, faults."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from numba import cuda

import fastlaunch as fl

pytestmark = pytest.mark.gpu

N = 128
BLOCK = (16, 16)
GRID = (N // 16, N // 16)


@fl.jit
def diffuse(out, u, k):
    i, j = cuda.grid(2)
    n, m = u.shape
    if 0 < i < n - 1 and 0 < j < m - 1:
        out[i, j] = u[i, j] + k * (
            u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4 * u[i, j]
        )


@fl.jit
def hold_edges(out, u):
    i, j = cuda.grid(2)
    n, m = u.shape
    if i < n and j < m and (i == 0 or j == 0 or i == n - 1 or j == m - 1):
        out[i, j] = u[i, j]


@fl.jit
def add_scaled(out, a, s):
    i = cuda.grid(1)
    if i < out.size:
        out[i] += s * a[i]


@fl.jit
def axpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


def heat(u, v, k):
    diffuse[GRID, BLOCK](v, u, k)
    hold_edges[GRID, BLOCK](v, u)
    return v, u


def heat_chained(u, v, k):
    """``heat`` returning every argument of the next step, as ``steps=k`` chains them."""
    v, u = heat(u, v, k)
    return v, u, k


def start() -> np.ndarray:
    rng = np.random.default_rng(7)
    return rng.random((N, N)).astype(np.float32)


def run_eager(steps: int) -> np.ndarray:
    u, v = cuda.to_device(start()), cuda.to_device(start())
    for _ in range(steps):
        u, v = heat(u, v, np.float32(0.2))
    fl.synchronize()
    return u.copy_to_host()


@pytest.mark.parametrize("unroll", [1, 2, 5])
def test_heat_steps_are_bit_identical_to_eager(unroll):
    steps = 50
    step = fl.graphed(heat_chained, steps=unroll)
    u, v = cuda.to_device(start()), cuda.to_device(start())
    for _ in range(steps // unroll):
        u, v, _ = step(u, v, np.float32(0.2))
    fl.synchronize()
    # an odd number of steps per call swaps the buffers: a second graph holds them swapped
    assert step.counters["captures"] == (1 if unroll % 2 == 0 else 2)
    assert step.counters["replays"] == steps // unroll - 1
    assert step.counters["updates"] == 0
    assert step.counters["eager"] == 1 and step.counters["failed_captures"] == 0
    np.testing.assert_array_equal(u.copy_to_host(), run_eager(steps))


def test_new_arrays_each_call_are_put_in_place():
    step = fl.graphed(heat)
    outs = []
    for seed in range(4):
        u = cuda.to_device(start() + seed)
        v = cuda.to_device(np.zeros((N, N), np.float32))
        step(u, v, np.float32(0.1))
        outs.append((seed, v))
    fl.synchronize()
    for seed, v in outs:
        expected_u = cuda.to_device(start() + seed)
        expected_v = cuda.to_device(np.zeros((N, N), np.float32))
        heat(expected_u, expected_v, np.float32(0.1))
        fl.synchronize()
        np.testing.assert_array_equal(v.copy_to_host(), expected_v.copy_to_host())
    # calls 2 and 3 capture (two graphs per form), call 4 re-points the older graph
    assert step.counters["replays"] == 3 and step.counters["captures"] == 2
    assert step.counters["updates"] == 2


def test_a_changed_scalar_runs_eagerly_then_gets_its_own_graph():
    step = fl.graphed(heat)
    u, v = cuda.to_device(start()), cuda.to_device(start())
    for k in (0.1, 0.1, 0.2, 0.1, 0.2, 0.2):
        u, v = step(u, v, np.float32(k))
    fl.synchronize()
    # 0.1: eager, captured (v, u), replayed; 0.2: eager, captured (u, v), then (v, u)
    assert step.counters["eager"] == 2 and step.counters["captures"] == 3
    assert step.graph_count == 3
    e_u, e_v = cuda.to_device(start()), cuda.to_device(start())
    for k in (0.1, 0.1, 0.2, 0.1, 0.2, 0.2):
        e_u, e_v = heat(e_u, e_v, np.float32(k))
    fl.synchronize()
    np.testing.assert_array_equal(u.copy_to_host(), e_u.copy_to_host())


def test_views_of_arguments_pin_the_graph_and_stay_correct():
    @fl.graphed
    def interior(a, b):
        add_scaled[1, 64](a[1:-1], b[2:], np.float32(2))

    a = cuda.to_device(np.zeros(66, np.float32))
    b = cuda.to_device(np.arange(66, dtype=np.float32))
    c = cuda.to_device(np.ones(66, np.float32))
    for _ in range(3):
        interior(a, b)
    interior(a, c)  # a new base for a view: eager (new pinned form)
    fl.synchronize()
    expected = np.zeros(66, np.float32)
    for _ in range(3):
        expected[1:-1] += 2 * np.arange(66, dtype=np.float32)[2:]
    expected[1:-1] += 2
    np.testing.assert_array_equal(a.copy_to_host(), expected)
    assert interior.counters["captures"] == 1 and interior.counters["replays"] == 2


def test_on_a_stream_argument():
    s = fl.stream()

    @fl.graphed
    def step(out, a, stream):
        add_scaled[4, 64, stream](out, a, np.float32(1))
        add_scaled[4, 64](out, a, np.float32(1))  # no stream: the step's stream

    out = cuda.to_device(np.zeros(256, np.float32))
    a = cuda.to_device(np.arange(256, dtype=np.float32))
    for _ in range(4):
        step(out, a, s)
    s.synchronize()
    fl.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), 8 * np.arange(256, dtype=np.float32))
    assert step.counters["replays"] == 3


def test_torch_tensors():
    torch = pytest.importorskip("torch")
    step = fl.graphed(heat)
    u = torch.tensor(start(), device="cuda")
    v = u.clone()
    e_u, e_v = u.clone(), u.clone()
    torch.cuda.synchronize()
    for _ in range(20):
        u, v = step(u, v, np.float32(0.2))
        e_u, e_v = heat(e_u, e_v, np.float32(0.2))
    torch.cuda.synchronize()
    fl.synchronize()
    assert torch.equal(u, e_u)
    # captured by torch, so pinned to its tensors: each pairing's first call is eager
    assert step.counters["replays"] == 18


def test_a_host_copy_in_the_step_makes_it_eager_with_one_warning():
    seen = []

    @fl.graphed
    def step(out, a):
        add_scaled[4, 64](out, a, np.float32(1))
        seen.append(out.copy_to_host()[0])  # a host copy: cannot be captured

    out = cuda.to_device(np.zeros(256, np.float32))
    a = cuda.to_device(np.ones(256, np.float32))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", fl.GraphCaptureWarning)
        for _ in range(4):
            step(out, a)
    fl.synchronize()
    ours = [w for w in caught if issubclass(w.category, fl.GraphCaptureWarning)]
    assert len(ours) == 1 and "step cannot be captured" in str(ours[0].message)
    assert step.uncapturable and step.counters["captures"] == 0
    np.testing.assert_array_equal(out.copy_to_host(), 4)  # each call ran exactly once
    # the stream is not left capturing: ordinary launches and captures work
    add_scaled[4, 64](out, a, np.float32(1))
    fl.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), 5)


def test_a_torch_operation_in_a_step_is_captured_with_it():
    torch = pytest.importorskip("torch")

    @fl.graphed
    def step(x):
        add_scaled[1, 128](x, x, np.float32(1))  # x += x
        x.mul_(0.5)  # torch: captured by torch with the launch (no longer eager)

    x = torch.ones(128, device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error", fl.GraphCaptureWarning)
        for _ in range(3):
            step(x)
    torch.cuda.synchronize()
    assert step.uncapturable is None and step.counters["captures"] == 1
    assert torch.equal(x, torch.ones_like(x))  # each call ran once: (x + x) * 0.5


# -- steps with CuPy operations: captured by CuPy ---------------------------------------------

M = 1 << 16
AXPY_GRID = M // 256


def cupy_step(out, x, y):
    """The step of the issue: a kernel, then a CuPy operation with a temporary."""
    axpy[AXPY_GRID, 256](out, 0.5, x, y)
    y[...] = out * 0.999


def cupy_inputs(cupy):
    rng = np.random.default_rng(11)
    x = cupy.asarray(rng.random(M, dtype=np.float32))
    y = cupy.asarray(rng.random(M, dtype=np.float32))
    return cupy.empty_like(x), x, y


def cupy_copies(cupy, arrays):
    return tuple(a.copy() for a in arrays)


def same_bits(cupy, a, b) -> bool:
    a, b = cupy.asnumpy(a), cupy.asnumpy(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def synchronize_all(cupy) -> None:
    cupy.cuda.Device().synchronize()
    fl.synchronize()


def graphed_entries(step):
    return [entry for entries in step._graphs.values() for entry in entries]


@pytest.mark.parametrize("mode", ["thread_local", "global", "relaxed"])
def test_a_cupy_operation_in_a_step_is_captured_by_cupy(mode):
    cupy = pytest.importorskip("cupy")
    step = fl.graphed(cupy_step, mode=mode)
    out, x, y = cupy_inputs(cupy)
    e_out, e_x, e_y = cupy_copies(cupy, (out, x, y))
    with warnings.catch_warnings():
        warnings.simplefilter("error", fl.GraphCaptureWarning)
        for _ in range(10):
            step(out, x, y)
            cupy_step(e_out, e_x, e_y)  # eager: fastlaunch's launch, CuPy's operation
    synchronize_all(cupy)
    assert step.uncapturable is None and step.counters["failed_captures"] == 0
    assert step.counters["eager"] == 1 and step.counters["captures"] == 1
    assert step.counters["replays"] == 9
    [entry] = graphed_entries(step)
    assert type(entry.framework_graph).__name__ == "_CupyCapture"
    assert entry.framework_graph.pool is not cupy.get_default_memory_pool()
    assert same_bits(cupy, y, e_y) and same_bits(cupy, out, e_out)
    step.synchronize()  # waits for CuPy's current stream, where it replayed


def test_a_cupy_step_replays_on_cupys_current_stream():
    cupy = pytest.importorskip("cupy")
    step = fl.graphed(cupy_step)
    out, x, y = cupy_inputs(cupy)
    e_out, e_x, e_y = cupy_copies(cupy, (out, x, y))
    for _ in range(2):
        # eager, then captured (eagerly the kernel goes to the legacy stream, which a
        # non-blocking CuPy stream would not wait for: outside the stream below)
        step(out, x, y)
    synchronize_all(cupy)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        for _ in range(5):
            step(out, x, y)  # replayed on `stream`, kernel and CuPy operation alike
        stream.synchronize()
    for _ in range(7):
        cupy_step(e_out, e_x, e_y)
    synchronize_all(cupy)
    assert step.counters["replays"] == 6
    assert same_bits(cupy, y, e_y)


def test_check_mode_passes_on_a_cupy_step():
    cupy = pytest.importorskip("cupy")
    step = fl.graphed(cupy_step, check=True)
    out, x, y = cupy_inputs(cupy)
    e_out, e_x, e_y = cupy_copies(cupy, (out, x, y))
    for _ in range(4):
        step(out, x, y)
        cupy_step(e_out, e_x, e_y)
    synchronize_all(cupy)
    assert step.counters["checks"] == 3 and step.counters["captures"] == 1
    assert same_bits(cupy, y, e_y)


def test_a_cupy_temporary_returned_by_a_step_holds_each_replays_result():
    cupy = pytest.importorskip("cupy")

    def scaled(out, x, y):
        axpy[AXPY_GRID, 256](out, 0.5, x, y)
        return out * 2.0  # made by the step: the graph's static output

    step = fl.graphed(scaled)
    out, x, y = cupy_inputs(cupy)
    e_out, e_x, e_y = cupy_copies(cupy, (out, x, y))
    returned = []
    for i in range(5):
        y += 1.0  # new data on CuPy's current stream, before the call
        e_y += 1.0
        got = step(out, x, y)
        want = scaled(e_out, e_x, e_y)
        synchronize_all(cupy)
        assert same_bits(cupy, got, want), f"call {i}"  # valid until the next replay
        returned.append(got)
    assert step.counters["captures"] == 1 and step.counters["replays"] == 4
    assert all(r is returned[1] for r in returned[1:])  # the captured array, rewritten


def test_a_reduction_in_a_cupy_step_is_captured():
    cupy = pytest.importorskip("cupy")

    def normalised(out, x, y):
        axpy[AXPY_GRID, 256](out, 0.5, x, y)
        y[...] = out / out.sum()  # a reduction: a 0-d temporary (and CUB's workspace)

    step = fl.graphed(normalised)
    out, x, y = cupy_inputs(cupy)
    e_out, e_x, e_y = cupy_copies(cupy, (out, x, y))
    with warnings.catch_warnings():
        warnings.simplefilter("error", fl.GraphCaptureWarning)
        for _ in range(6):
            step(out, x, y)
            normalised(e_out, e_x, e_y)
    synchronize_all(cupy)
    assert step.counters["captures"] == 1 and step.counters["replays"] == 5
    assert same_bits(cupy, y, e_y)


def test_cupy_graphs_keep_their_temporaries_to_themselves():
    """Each graph's CuPy memory is its own pool's: a replay never writes memory handed to
    anyone else (another graph's returned temporary, arrays made after the capture)."""
    cupy = pytest.importorskip("cupy")

    def tripled(out):
        return out * 3.0  # returned: as large as cupy_step's temporary

    first, second = fl.graphed(cupy_step), fl.graphed(tripled)
    out, x, y = cupy_inputs(cupy)
    other = cupy.full(M, 5.0, dtype=cupy.float32)
    for _ in range(3):
        first(out, x, y)  # eager, captured (its temporary freed into its pool), replayed
    for _ in range(3):
        kept = second(other)  # captured: its static output from its own pool
    probes = [cupy.full(M, 7.0, dtype=cupy.float32) for _ in range(4)]  # the default pool
    synchronize_all(cupy)
    for _ in range(5):
        first(out, x, y)  # its temporary rewritten on every replay
    synchronize_all(cupy)
    assert same_bits(cupy, kept, cupy.full(M, 15.0, dtype=cupy.float32))
    for probe in probes:
        assert same_bits(cupy, probe, cupy.full(M, 7.0, dtype=cupy.float32))
    [a], [b] = graphed_entries(first), graphed_entries(second)
    pools = {
        id(a.framework_graph.pool),
        id(b.framework_graph.pool),
        id(cupy.get_default_memory_pool()),
    }
    assert len(pools) == 3
    assert (
        a.framework_graph.pool.total_bytes() >= 4 * M
        and b.framework_graph.pool.total_bytes() >= 4 * M
    )


def test_check_mode_passes_on_a_good_step_and_catches_a_hidden_dependency():
    step = fl.graphed(heat, check=True)
    u, v = cuda.to_device(start()), cuda.to_device(start())
    for _ in range(4):
        u, v = step(u, v, np.float32(0.2))
    assert step.counters["checks"] == 3
    np.testing.assert_array_equal(u.copy_to_host(), run_eager(4))

    hidden = {"scale": 1.0}

    @fl.graphed(check=True)
    def bad(out, a):
        add_scaled[4, 64](out, a, np.float32(hidden["scale"]))  # not in the form

    out = cuda.to_device(np.zeros(256, np.float32))
    a = cuda.to_device(np.ones(256, np.float32))
    bad(out, a)
    bad(out, a)
    hidden["scale"] = 3.0
    with pytest.raises(fl.GraphedCheckError, match="differs between the replayed graph"):
        bad(out, a)


def test_a_closure_array_is_kept_alive_by_the_graph():
    holder = [cuda.to_device(np.full(256, 2, np.float32))]

    @fl.graphed
    def step(out):
        add_scaled[4, 64](out, holder[0], np.float32(1))

    out = cuda.to_device(np.zeros(256, np.float32))
    step(out)
    step(out)  # captured: the graph's launch holds the array
    holder.clear()
    gc.collect()  # only the graph holds it now; replays do not run the body
    for _ in range(3):
        step(out)
    fl.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), 10)
    step.clear()
    gc.collect()


def test_a_fault_in_a_replayed_graph_is_reported_naming_the_step():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import time
                import numpy as np
                from numba import cuda
                import fastlaunch as fl

                @fl.jit
                def write_at(a, where):
                    a[where[0]] = 1.0

                @fl.graphed
                def poke(a, where):
                    write_at[1, 1](a, where)

                a = cuda.to_device(np.zeros(4, np.float32))
                where = cuda.to_device(np.zeros(1, np.int64))
                poke(a, where); poke(a, where); fl.synchronize()
                where.copy_to_device(np.array([1 << 40], np.int64))
                poke(a, where)           # replays: faults on the GPU
                time.sleep(1)
                for attempt in ("replay", "step.synchronize"):
                    try:
                        if attempt == "replay":
                            poke(a, where)   # the next replay reports it
                        poke.synchronize()
                        print(attempt, "NO ERROR")
                    except fl.CudaDriverError as e:
                        notes = " ".join(getattr(e, "__notes__", []))
                        print(attempt, "fault ->", e.name, "|", notes)
                """
            ),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    out = done.stdout + done.stderr
    lines = [line for line in out.splitlines() if "fault ->" in line or "NO ERROR" in line]
    assert len(lines) == 2, out
    for line in lines:
        assert "fault -> CUDA_ERROR_ILLEGAL_ADDRESS" in line, out
        assert "graphed step poke" in line, out
