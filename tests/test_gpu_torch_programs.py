"""fastlaunch kernels in torch (and CuPy) programs, on the GPU, compared bit for bit with
eager: ``fastlaunch.graphed`` steps with torch operations (captured by torch),
launches inside ``torch.cuda.graph`` and ``make_graphed_callables`` (they follow torch's
capture), CuPy's ``begin_capture``, and ``torch.compile`` through ``fastlaunch.torch_op``
(default, ``reduce-overhead``, ``fullgraph``)."""

from __future__ import annotations

import warnings

import pytest
from numba import cuda

import fastlaunch as fl

pytestmark = pytest.mark.gpu

N = 1 << 16
BLOCKS = N // 256


@fl.jit
def axpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


def eager_step(torch, out, x, y):
    axpy[BLOCKS, 256](out, 0.5, x, y)
    y.copy_(out * 0.999)


def inputs(torch):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(N, device="cuda", generator=g)
    y = torch.rand(N, device="cuda", generator=g)
    return torch.empty_like(x), x, y


def test_graphed_step_with_torch_operations_is_captured_and_bit_identical():
    torch = pytest.importorskip("torch")
    out, x, y = inputs(torch)
    e_out, e_x, e_y = out.clone(), x.clone(), y.clone()

    @fl.graphed
    def step(out, x, y):
        eager_step(torch, out, x, y)

    with warnings.catch_warnings():
        warnings.simplefilter("error", fl.GraphCaptureWarning)
        for _ in range(10):
            step(out, x, y)
            eager_step(torch, e_out, e_x, e_y)
    torch.cuda.synchronize()
    assert step.uncapturable is None
    assert step.counters["captures"] == 1 and step.counters["replays"] == 9
    assert torch.equal(y, e_y) and torch.equal(out, e_out)


def test_a_graphed_torch_step_notices_a_tensor_given_other_memory_in_place():
    """A graph torch captured is tied to its tensors and their memory: after ``x.set_()``
    (the same object and shape, other memory) the step captures again, and reads the new."""
    torch = pytest.importorskip("torch")
    out, x, y = inputs(torch)
    e_out, e_x, e_y = out.clone(), x.clone(), y.clone()

    @fl.graphed
    def step(out, x, y):
        eager_step(torch, out, x, y)

    for _ in range(3):
        step(out, x, y)
        eager_step(torch, e_out, e_x, e_y)
    replacement = torch.rand(N, device="cuda")
    x.set_(replacement.clone())
    e_x.set_(replacement.clone())
    for _ in range(3):
        step(out, x, y)
        eager_step(torch, e_out, e_x, e_y)
    torch.cuda.synchronize()
    assert step.counters["captures"] == 2
    assert torch.equal(y, e_y) and torch.equal(out, e_out)


def seeded(torch, seed, n=N):
    return torch.rand(n, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed))


def change_set(torch, tensors):
    tensors[1].set_(seeded(torch, 1))  # other memory, the same shape


def change_data(torch, tensors):
    tensors[1].data = seeded(torch, 2)


def change_resize(torch, tensors):
    for t in tensors:  # the same memory, a smaller shape
        t.resize_(N // 2)


def change_as_strided(torch, tensors):
    for t in tensors:  # the same memory, every other element
        t.as_strided_((N // 2,), (2,))


def change_device(torch, tensors):
    for t in tensors:
        t.data = t.to("cuda:1")


@pytest.mark.parametrize(
    "change",
    [change_set, change_data, change_resize, change_as_strided, change_device],
    ids=["set_", "data", "resize_", "as_strided_", "device"],
)
def test_a_graphed_torch_step_never_replays_a_graph_its_tensors_left(change):
    """The same tensor objects, changed in place: the direct replay (identity, then each
    tensor's memory, shape, strides, dtype and device) refuses, the step runs eagerly and
    captures again, and every byte of the tensors' memory, old and new, is as eager left it."""
    torch = pytest.importorskip("torch")
    if change is change_device and torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    graphed_set = inputs(torch)
    eager_set = tuple(t.clone() for t in graphed_set)

    @fl.graphed
    def step(out, x, y):
        eager_step(torch, out, x, y)

    for _ in range(4):
        step(*graphed_set)
        eager_step(torch, *eager_set)
    before = dict(step.counters)
    # views of the memory the graph was captured with: nothing may write there wrongly
    whole = [t.as_strided((N,), (1,), 0) for t in graphed_set + eager_set]
    change(torch, graphed_set)
    change(torch, eager_set)
    device = 1 if change is change_device else torch.cuda.current_device()
    with torch.cuda.device(device):
        for _ in range(4):
            step(*graphed_set)
            eager_step(torch, *eager_set)
        torch.cuda.synchronize()
    torch.cuda.synchronize(0)
    assert step.counters["eager"] == before["eager"] + 1
    assert step.counters["captures"] == before["captures"] + 1
    for got, want in zip(graphed_set, eager_set, strict=True):
        assert got.shape == want.shape and torch.equal(got, want)
    for got, want in zip(whole[:3], whole[3:], strict=True):
        assert torch.equal(got, want)


def test_a_tensor_made_where_a_freed_one_was_is_not_given_its_graph():
    """x's memory freed (``x.set_()``) and a new tensor made at that address: called with the
    new tensor, the step captures anew; x set to the new tensor's memory (the address its
    graph was captured with) replays x's graph, rightly."""
    torch = pytest.importorskip("torch")
    out, x, y = inputs(torch)
    e_out, e_x, e_y = out.clone(), x.clone(), y.clone()

    @fl.graphed
    def step(out, x, y):
        eager_step(torch, out, x, y)

    for _ in range(3):
        step(out, x, y)
        eager_step(torch, e_out, e_x, e_y)
    address = x.data_ptr()
    x.set_(torch.empty(0, device="cuda"))  # frees x's memory (nothing else holds it)
    twin = seeded(torch, 3)
    if twin.data_ptr() != address:
        pytest.skip("the caching allocator gave the new tensor other memory")
    e_twin = twin.clone()
    before = dict(step.counters)
    for _ in range(3):
        step(out, twin, y)
        eager_step(torch, e_out, e_twin, e_y)
    assert step.counters["captures"] == before["captures"] + 1
    x.set_(twin)  # x views the captured address again: its graph is right for it
    e_x.set_(e_twin)
    before = dict(step.counters)
    for _ in range(3):
        step(out, x, y)
        eager_step(torch, e_out, e_x, e_y)
    torch.cuda.synchronize()
    assert step.counters["captures"] == before["captures"]
    assert step.counters["replays"] == before["replays"] + 3
    assert torch.equal(out, e_out) and torch.equal(y, e_y) and torch.equal(twin, e_twin)


def test_graphed_torch_step_with_the_same_tensors_replays_without_their_form(monkeypatch):
    torch = pytest.importorskip("torch")
    out, x, y = inputs(torch)
    e_out, e_x, e_y = out.clone(), x.clone(), y.clone()

    @fl.graphed
    def step(out, x, y):
        eager_step(torch, out, x, y)

    for _ in range(3):
        step(out, x, y)
        eager_step(torch, e_out, e_x, e_y)
    calls = []
    real = fl._core.step_form
    monkeypatch.setattr(fl._core, "step_form", lambda *a: calls.append(1) or real(*a))
    for _ in range(5):
        step(out, x, y)
        eager_step(torch, e_out, e_x, e_y)
    torch.cuda.synchronize()
    assert calls == [] and step.counters["replays"] == 7
    assert torch.equal(out, e_out) and torch.equal(y, e_y)


def test_graphed_torch_step_passes_check_and_returns_its_temporaries():
    torch = pytest.importorskip("torch")
    out, x, y = inputs(torch)

    @fl.graphed(check=True)
    def step(out, x, y):
        axpy[BLOCKS, 256](out, 0.5, x, y)
        return out * 2.0  # a temporary: the graph's static output, as torch documents

    results = [step(out, x, y).clone() for _ in range(4)]
    torch.cuda.synchronize()
    assert step.counters["checks"] == 3  # the capturing call checks too
    expected = (0.5 * x + y) * 2.0
    for r in results:
        assert torch.equal(r, expected)


def test_launches_inside_torch_cuda_graph_follow_the_capture():
    torch = pytest.importorskip("torch")
    out, x, y = inputs(torch)
    e_out, e_x, e_y = out.clone(), x.clone(), y.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        eager_step(torch, out, x, y)  # warm-up (compiles)
    torch.cuda.current_stream().wait_stream(side)
    eager_step(torch, e_out, e_x, e_y)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        assert fl._core.followed_capture() == torch.cuda.current_stream().cuda_stream
        eager_step(torch, out, x, y)  # no stream given: captured with the torch operation
    assert fl._core.followed_capture() is None
    for _ in range(5):
        g.replay()
        eager_step(torch, e_out, e_x, e_y)
    torch.cuda.synchronize()
    assert torch.equal(y, e_y) and torch.equal(out, e_out)


def test_make_graphed_callables_with_a_fastlaunch_kernel():
    torch = pytest.importorskip("torch")

    class Axpy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            out = torch.empty_like(x)
            axpy[BLOCKS, 256](out, 0.5, x, y)
            return out

        @staticmethod
        def backward(ctx, grad):
            return 0.5 * grad, grad

    def fn(x, y):
        return Axpy.apply(x, y) * 0.999

    _, x, y = inputs(torch)
    x.requires_grad_(True)
    y.requires_grad_(True)
    graphed = torch.cuda.make_graphed_callables(fn, (x, y))
    for _ in range(3):
        got = graphed(x, y)
        want = fn(x, y)
        torch.cuda.synchronize()
        assert torch.equal(got, want)


def test_launches_inside_a_cupy_capture_follow_it():
    cupy = pytest.importorskip("cupy")
    x = cupy.random.rand(N, dtype=cupy.float32)
    y = cupy.random.rand(N, dtype=cupy.float32)
    out = cupy.empty_like(x)
    axpy[BLOCKS, 256](out, 0.5, x, y)  # compiles
    cupy.cuda.get_current_stream().synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        axpy[BLOCKS, 256](out, 0.5, x, y)  # no stream given: captured
        cupy.multiply(out, 2.0, out=out)
        graph = stream.end_capture()
    assert fl._core.followed_capture() is None
    out.fill(0)
    stream.synchronize()
    graph.launch(stream)
    stream.synchronize()
    assert bool(cupy.all(out == (0.5 * x + y) * 2.0))


def compiled_step(torch, op):
    def step(x, y):
        out = torch.empty_like(x)
        op[BLOCKS, 256](out, 0.5, x, y)
        return out * 0.999

    return step


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_torch_compile_fullgraph_runs_the_kernel_bit_identically(mode):
    torch = pytest.importorskip("torch")
    op = fl.torch_op(axpy, mutates=["out"])
    step = compiled_step(torch, op)
    compiled = torch.compile(step, fullgraph=True, mode=mode)
    _, x, y = inputs(torch)
    for _ in range(5):
        got = compiled(x, y).clone()
        torch.cuda.synchronize()
        assert torch.equal(got, step(x, y))
    if mode == "reduce-overhead":
        explained = torch._dynamo.explain(step)(x, y)
        assert explained.graph_break_count == 0


def test_torch_op_default_marks_every_tensor_mutated_and_stays_right():
    torch = pytest.importorskip("torch")
    op = fl.torch_op(axpy)
    out, x, y = inputs(torch)

    @torch.compile(fullgraph=True)
    def step(out, x, y):
        op[BLOCKS, 256](out, 0.5, x, y)
        return out.sum()

    got = step(out, x, y)
    torch.cuda.synchronize()
    assert torch.equal(out, 0.5 * x + y) and torch.equal(got, (0.5 * x + y).sum())
