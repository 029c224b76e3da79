"""``fastlaunch.graphed`` with torch tensors, without torch or a GPU: ``tests/exchange_tensors``
stands in for torch (tensors read through the DLPack C exchange API, changed in place as
torch's are; graphs that count their replays). The same tensors again replay directly, each
read once; a tensor changed in place (``set_``, ``resize_``, ``as_strided_``, ``.data =``,
another device) is never replayed with the graph of what it was; ``_core.HeldArgs``."""

from __future__ import annotations

import sys
import threading

import pytest
from exchange_tensors import COMPLEX64, Tensor, fake_torch, reads

import fastlaunch as fl
from fastlaunch import _core

N = 1024


@pytest.fixture
def torch(monkeypatch: pytest.MonkeyPatch):
    module = fake_torch()
    monkeypatch.setitem(sys.modules, "torch", module)
    return module


def tensors():
    return tuple(Tensor((N,), (i + 1) << 32) for i in range(3))


def called(args, times):
    """An empty graphed step called ``times`` times with ``args``: eager, captured, then
    replayed."""

    @fl.graphed
    def step(out, x, y):
        pass

    for _ in range(times):
        step(*args)
    return step


def replays_by_graph(step) -> dict[int, int]:
    """Replays of each cached graph, by the data pointer its x (argument 1) was pinned to."""
    counts = {}
    for key, entries in step._graphs.items():
        for entry in entries:
            pinned = dict(key[1])
            counts[pinned[id(entry.pinned[1])]] = entry.framework_graph.graph.replays
    return counts


def counting_forms(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = _core.step_form
    monkeypatch.setattr(_core, "step_form", lambda *a: calls.append(1) or real(*a))
    return calls


def test_the_same_tensors_again_replay_directly_reading_each_once(torch, monkeypatch):
    out, x, y = tensors()

    step = called((out, x, y), 4)
    assert step.counters["captures"] == 1 and step.counters["replays"] == 3
    forms = counting_forms(monkeypatch)
    reads[0] = 0
    for _ in range(5):
        step(out, x, y)
    assert forms == [] and reads[0] == 3 * 5  # no form: each tensor read once, in Rust
    assert step.counters["replays"] == 8
    assert replays_by_graph(step) == {x.data_ptr(): 8}


def change_set(x: Tensor, other: Tensor) -> None:
    x.set_(other)


def change_data(x: Tensor, other: Tensor) -> None:
    x.data = other


@pytest.mark.parametrize("change", [change_set, change_data], ids=["set_", "data"])
def test_a_tensor_given_other_memory_gets_a_graph_of_its_own(torch, monkeypatch, change):
    out, x, y = tensors()
    first = x.data_ptr()

    step = called((out, x, y), 3)  # eager, captured, replayed
    change(x, Tensor((N,), 9 << 32))
    forms = counting_forms(monkeypatch)
    for _ in range(3):
        step(out, x, y)
    assert len(forms) == 1  # the direct replay refused, the form read again once
    assert step.counters["captures"] == 2 and step.counters["eager"] == 2
    assert replays_by_graph(step) == {first: 2, 9 << 32: 2}
    change(x, Tensor((N,), first))  # back: its first graph is right again
    step(out, x, y)
    step(out, x, y)
    assert replays_by_graph(step) == {first: 4, 9 << 32: 2}


def shrink(x: Tensor) -> None:
    x.resize_(N // 2)


def restride(x: Tensor) -> None:
    x.as_strided_((N // 2,), (2,))


def other_dtype(x: Tensor) -> None:
    x.data = Tensor((N,), x.data_ptr(), dtype=(1, 32, 1))  # int32, same memory


def other_device(x: Tensor) -> None:
    x.data = Tensor((N,), x.data_ptr(), device=1)


@pytest.mark.parametrize(
    "change",
    [shrink, restride, other_dtype, other_device],
    ids=["resize_", "as_strided_", "dtype", "device"],
)
def test_a_tensor_changed_in_place_at_the_same_address_is_another_form(torch, change):
    out, x, y = tensors()

    step = called((out, x, y), 3)
    change(x)
    step(out, x, y)
    assert step.counters["eager"] == 2  # a form not seen before: eager, not replayed
    assert replays_by_graph(step) == {x.data_ptr(): 2}


def test_another_tensor_object_at_the_same_address_is_not_replayed_directly(torch):
    out, x, y = tensors()

    step = called((out, x, y), 3)
    twin = Tensor((N,), x.data_ptr())  # as a new tensor where a freed one was
    for _ in range(3):
        step(out, twin, y)
    assert step.counters["captures"] == 2  # pinned to its objects: a graph of its own
    assert step.graph_count == 2


def test_ping_pong_tensors_replay_two_graphs_directly(torch, monkeypatch):
    out, x, y = tensors()

    @fl.graphed
    def step(out, a, b):
        pass

    for _ in range(3):
        step(out, x, y)
        step(out, y, x)
    replays = step.counters["replays"]
    forms = counting_forms(monkeypatch)
    for _ in range(3):
        step(out, x, y)
        step(out, y, x)
    assert forms == [] and step.counters["replays"] == replays + 6


def test_held_args_hold_tensors_and_fixed_arguments_only(torch):
    out, x, y = tensors()
    held = _core.step_form((out, x, 0.5, "mode"), {}, 0)[3]
    assert held is not None and held.tensor_count == 2 and held.args == (out, x, 0.5, "mode")
    assert held.holds((out, x, 0.5, "mode"))
    assert not held.holds((out, y, 0.5, "mode")) and not held.holds((out, x, 0.5))
    x.resize_(N // 2)
    assert not held.holds((out, x, 0.5, "mode"))
    x.resize_(N)
    assert held.holds((out, x, 0.5, "mode"))  # described as it was: the same form and memory
    assert _core.step_form((out, [x]), {}, 0)[3] is None  # a list can change
    assert _core.step_form((out,), {"x": x}, 0)[3] is None


def test_complex_tensors_of_a_producer_with_lazy_conjugation_are_not_held(torch):
    class Lazy(Tensor):
        def is_conj(self) -> bool:
            return False

        def is_neg(self) -> bool:
            return False

    real = Lazy((N,), 1 << 32)
    complex_ = Lazy((N,), 2 << 32, dtype=COMPLEX64)
    assert _core.step_form((real,), {}, 0)[3].tensor_count == 1
    assert _core.step_form((complex_,), {}, 0)[3] is None  # its conjugate bit is read each time


def test_a_direct_replay_waits_while_another_thread_holds_the_step(torch):
    """torch's replay lets the GIL go, so a direct replay of a graph torch captured holds the
    step's lock; while another thread holds it (re-pointing or replaying the step's graphs),
    a call waits for it instead of replaying beside it."""
    out, x, y = tensors()

    step = called((out, x, y), 3)
    assert len(step._direct) == 1  # remembered: the next call replays in one Rust call
    done = threading.Event()
    with step._lock:
        worker = threading.Thread(target=lambda: (step(out, x, y), done.set()))
        worker.start()
        assert not done.wait(0.3)  # the step is held: the call waits
    worker.join(5)
    assert done.is_set()
    step(out, x, y)
    assert step.counters["replays"] == 4
    assert replays_by_graph(step) == {x.data_ptr(): 4}
