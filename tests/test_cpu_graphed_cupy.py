"""``fastlaunch.graphed`` with CuPy arrays, without CuPy or a GPU (``tests/stand_in_cupy``
stands in for CuPy): which framework captures a step, and CuPy's capture as graphed makes
it: on a non-blocking side stream made CuPy's current one, in the step's capture mode, with
fastlaunch launches following it, CuPy's allocations in a pool of the graph's own whose
cudaMalloc runs in relaxed mode; replayed by CuPy's ``Graph.launch`` on CuPy's current
stream; failures given up on, the capture ended."""

from __future__ import annotations

import sys
import warnings

import pytest
import stand_in_cupy
from exchange_tensors import Tensor, fake_torch
from stand_in_cupy import fake_cupy, ndarray, op

import fastlaunch as fl
from fastlaunch import _capture_hooks, _core
from fastlaunch.graphed import (
    _ARRAY,
    _OBJECT,
    _CupyCapture,
    _framework_of,
    _TorchCapture,
    frameworks,
)

N = 1024


@pytest.fixture
def cupy(monkeypatch: pytest.MonkeyPatch):
    module = fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", module)
    cuda = module.cuda

    def exchange(mode):  # cuThreadExchangeStreamCaptureMode, on the stand-in's state
        previous = cuda.exchanged_mode[0]
        cuda.exchanged_mode[0] = "relaxed" if mode is None else mode
        return previous

    # in the module whose CuPy capture calls it
    monkeypatch.setattr(frameworks, "_exchange_capture_mode", exchange)
    return module


@pytest.fixture
def no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error", fl.GraphCaptureWarning)
        yield


def arrays():
    return ndarray((N,)), ndarray((N,)), ndarray((N,))


# -- which framework captures a step ----------------------------------------------------------


def test_cupy_arrays_are_captured_by_cupy_unless_a_cuda_tensor_is_there(cupy, monkeypatch):
    out, x, _ = arrays()
    assert _framework_of([out, x, 0.5], [_ARRAY, _ARRAY, 0]) == (_CupyCapture, cupy)
    assert _framework_of([0.5, x], [0, _ARRAY]) == (_CupyCapture, cupy)
    assert _framework_of([x], [_OBJECT]) is None  # not an array leaf
    assert _framework_of([0.5], [0]) is None
    torch = fake_torch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    tensor = Tensor((N,), 1 << 32)
    assert _framework_of([x, tensor], [_ARRAY, _ARRAY]) == (_TorchCapture, torch)
    tensor.is_cuda = False  # a host tensor: CuPy's arrays decide
    assert _framework_of([tensor, x], [_ARRAY, _ARRAY]) == (_CupyCapture, cupy)


def test_without_torch_or_cupy_imported_fastlaunch_captures(monkeypatch):
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert _framework_of([ndarray((N,))], [_ARRAY]) is None


# -- CuPy's capture -----------------------------------------------------------------------------


def test_a_cupy_step_is_captured_by_cupy_and_replayed_on_its_current_stream(cupy, no_warnings):
    cuda = cupy.cuda
    followed = []

    @fl.graphed
    def step(out, x, y):
        followed.append(_core.followed_capture())
        op(out)  # a CuPy operation: a temporary

    out, x, y = arrays()
    for _ in range(4):
        step(out, x, y)
    assert step.counters["eager"] == 1 and step.counters["captures"] == 1
    assert step.counters["replays"] == 3 and step.uncapturable is None
    [side] = cuda.captures
    assert side.non_blocking and side.capture_mode is None  # captured, then ended
    assert side.waited == [cuda.null]  # after CuPy's current stream
    assert cuda.null.waited == [side]
    assert followed == [None, side.ptr]  # fastlaunch launches followed the capture only
    assert _core.followed_capture() is None
    [entry] = [e for entries in step._graphs.values() for e in entries]
    capture = entry.framework_graph
    assert isinstance(capture, _CupyCapture) and capture.graph.captured_on is side
    assert capture.graph.launches == [0, 0, 0]  # CuPy's current stream: the null stream
    with cuda.Stream() as other:  # replays follow CuPy's current stream
        step(out, x, y)
    assert capture.graph.launches[-1] == other.ptr
    step.synchronize()  # CuPy's current stream, where it replayed
    assert cuda.null.synchronized == 1


def test_cupy_allocations_in_the_capture_come_from_a_private_pool_in_relaxed_mode(
    cupy, no_warnings
):
    cuda = cupy.cuda

    @fl.graphed
    def step(out, x):
        op(out)
        op(x)

    out, x, _ = arrays()
    for _ in range(3):
        step(out, x)
    eager, captured = cuda.log[:2], cuda.log[2:]
    assert len(eager) == len(captured) == 2  # replays run no Python
    [side] = cuda.captures
    [entry] = [e for entries in step._graphs.values() for e in entries]
    pool = entry.framework_graph.pool
    assert all(stream == 0 and source is cuda.default_pool for stream, _, source in eager)
    assert all(stream == side.ptr and source is pool for stream, _, source in captured)
    assert side.capture_mode is None and cuda.exchanged_mode[0] == "global"  # given back
    during = [m for m in cuda.mallocs if m[1]]  # cudaMalloc while capturing: relaxed only
    assert during == [(N * 4, [side.ptr], "relaxed")] * 2
    assert len(pool.given) == 2
    assert {p.ptr for p in pool.given}.isdisjoint(p.ptr for p in cuda.default_pool.given)


def test_each_graph_has_a_pool_of_its_own(cupy, no_warnings):
    cuda = cupy.cuda

    def body(out, x):
        op(out)

    first, second = fl.graphed(body), fl.graphed(body)
    out, x, _ = arrays()
    for _ in range(3):
        first(out, x)
        second(out, x)
    pools = [
        e.framework_graph.pool for s in (first, second) for es in s._graphs.values() for e in es
    ]
    assert len(pools) == 2 and pools[0] is not pools[1]
    pointers = [{p.ptr for p in pool.given} for pool in pools]
    assert pointers[0].isdisjoint(pointers[1])
    assert cuda.allocator == cuda.default_pool.malloc  # the default allocator given back


@pytest.mark.parametrize(("mode", "expected"), [("thread_local", 1), ("global", 0), ("relaxed", 2)])
def test_the_capture_mode_is_the_steps(cupy, no_warnings, mode, expected):
    @fl.graphed(mode=mode)
    def step(out):
        op(out)

    out = ndarray((N,))
    for _ in range(2):
        step(out)
    [side] = cupy.cuda.captures
    assert side.capture_mode is None
    assert step.counters["captures"] == 1
    assert side.begun_mode == expected


def test_a_returned_temporary_is_the_graphs_static_output(cupy, no_warnings):
    @fl.graphed
    def step(out, x):
        return op(out)

    out, x, _ = arrays()
    results = [step(out, x) for _ in range(4)]
    assert results[2] is results[1] is results[3]  # the captured one, rewritten per replay
    [entry] = [e for entries in step._graphs.values() for e in entries]
    assert results[1].data in entry.framework_graph.pool.given


def test_hooked_or_not_fastlaunch_follows_the_capture_once(cupy, no_warnings, monkeypatch):
    for name in ("begin_capture", "end_capture"):  # unwrapped again after the test
        monkeypatch.setattr(stand_in_cupy.Stream, name, getattr(stand_in_cupy.Stream, name))
    assert _capture_hooks.hook_cupy(cupy)  # as when CuPy is imported after fastlaunch
    seen = []

    @fl.graphed
    def step(out):
        seen.append(_core.followed_capture())
        if _core.followed_capture() is not None:
            assert _core.end_followed_capture()  # followed once: nothing under it
            assert _core.followed_capture() is None
            _core.follow_capture(seen[-1])

    out = ndarray((N,))
    for _ in range(3):
        step(out)
    assert seen == [None, cupy.cuda.captures[0].ptr]
    assert _core.followed_capture() is None


def test_a_step_that_raises_while_captured_ends_the_capture(cupy):
    cuda = cupy.cuda
    calls = []

    @fl.graphed
    def step(out):
        calls.append(_core.followed_capture())
        if len(calls) == 2:
            raise ValueError("in the capture")

    out = ndarray((N,))
    step(out)
    with pytest.warns(fl.GraphCaptureWarning, match="ValueError: in the capture"):
        step(out)  # the capture fails: given up, then eagerly
    [side] = cuda.captures
    assert side.capture_mode is None and _core.followed_capture() is None
    assert cuda.get_current_stream() is cuda.null and cuda.allocator == cuda.default_pool.malloc
    assert step.uncapturable and calls[2] is None  # ran eagerly after


def test_an_invalidated_capture_is_given_up_with_one_warning(cupy):
    cupy.cuda.invalidate_next = True

    @fl.graphed
    def step(out):
        op(out)

    out = ndarray((N,))
    with pytest.warns(fl.GraphCaptureWarning, match="StreamCaptureInvalidated") as caught:
        for _ in range(4):
            step(out)
    assert len([w for w in caught if w.category is fl.GraphCaptureWarning]) == 1
    assert step.counters["eager"] == 4 and step.counters["captures"] == 0
    assert _core.followed_capture() is None


def test_a_pool_that_gave_memory_back_while_capturing_is_given_up(cupy):
    cuda = cupy.cuda

    @fl.graphed
    def step(out):
        temporary = op(out)
        if cuda.get_current_stream().is_capturing():  # out of memory: free blocks released
            pool = cuda.allocator.__self__
            pool.release(temporary.data)
            pool.free_all_blocks()

    out = ndarray((N,))
    with pytest.warns(fl.GraphCaptureWarning, match="gave memory back"):
        for _ in range(3):
            step(out)
    assert step.uncapturable and step.counters["captures"] == 0


def test_inside_a_cupy_capture_the_step_runs_eagerly_into_it(cupy, no_warnings):
    cuda = cupy.cuda

    @fl.graphed
    def step(out):
        op(out)

    out = ndarray((N,))
    outer = cuda.Stream(non_blocking=True)
    with outer:
        outer.begin_capture()
        for _ in range(3):
            step(out)
        outer.end_capture()
    assert step.counters["eager"] == 3 and step.uncapturable is None
    assert [s for s, _, _ in cuda.log] == [outer.ptr] * 3


def test_the_same_cupy_arrays_again_replay_directly_until_a_shape_is_assigned(
    cupy, no_warnings, monkeypatch
):
    """A call with the very CuPy arrays of one of the last two replays is held
    (``HeldArgs``, each array's shape kept): replayed in one Rust call, no form computed;
    an array whose shape was assigned in place is a new form, run eagerly, not replayed."""

    @fl.graphed
    def step(out, x):
        op(out)

    out, x, _ = arrays()
    for _ in range(3):
        step(out, x)
    assert len(step._direct) == 1
    forms: list[int] = []
    real = _core.step_form
    monkeypatch.setattr(_core, "step_form", lambda *a: forms.append(1) or real(*a))
    [entry] = [e for entries in step._graphs.values() for e in entries]
    launches = entry.framework_graph.graph.launches
    for _ in range(4):
        step(out, x)
    assert forms == [] and len(launches) == 6 and step.counters["replays"] == 6
    out.shape = (32, 32)  # the stand-in's shape is a plain attribute, as CuPy's reshape
    out.ndim = 2
    step(out, x)
    assert forms == [1] and len(launches) == 6  # a new form: eager, not replayed
    assert step.counters["eager"] == 2
