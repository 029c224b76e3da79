"""``fastlaunch.graphed`` without a GPU: the guard key, and against the stand-in driver
(tests/stand_in_driver: launches do nothing, captures count their kernel nodes, a context
synchronisation during a capture is refused) which path each call takes, which launches are
re-pointed, fallbacks, pinning of derived arrays, the LRU and what graphs keep alive."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

import fastlaunch
from fastlaunch.graphed import _form

TESTS = str(Path(__file__).parent)


class CAI:
    """A device array as far as the CUDA Array Interface goes (class-level attribute)."""

    def __init__(self, shape, typestr="<f4", ptr=0x1000_0000):
        self.cai = {"shape": shape, "strides": None, "typestr": typestr, "data": (ptr, False)}

    @property
    def __cuda_array_interface__(self):
        return {**self.cai, "version": 3}


# -- the guard key, in process ---------------------------------------------------------------


def test_forms_of_arrays_follow_shape_dtype_and_aliasing_not_identity():
    a, b = CAI((4, 4)), CAI((4, 4), ptr=0x2000_0000)
    key, leaves, _ = _form((a, b, 2.0), {})
    assert leaves == [a, b]
    assert _form((b, a, 2.0), {})[0] == key  # other arrays, same form
    assert _form((a, a, 2.0), {})[0] != key  # aliasing is part of the form
    assert _form((a, CAI((4, 5)), 2.0), {})[0] != key
    assert _form((a, CAI((4, 4), "<f8"), 2.0), {})[0] != key


def test_forms_of_scalars_are_their_exact_values():
    a = CAI((4,))

    def key(*args, **kwargs):
        return _form((a, *args), kwargs)[0]

    assert key(1.0) == key(1.0) != key(2.0)
    assert key(0.0) != key(-0.0)
    assert key(float("nan")) == key(float("nan"))
    assert key(1) != key(1.0) != key(True)
    assert key(np.float32(1)) != key(np.float64(1)) != key(1.0)
    assert key(np.float32(1)) == key(np.float32(1))
    assert key((1, 2.0)) != key((1, 3.0))
    assert key(scale=1.0) != key(scale=2.0) != key(1.0)
    assert key("mode") != key("other")


def test_other_objects_are_keyed_by_identity():
    a = CAI((4,))
    config, other = object(), object()
    assert _form((a, config), {})[0] == _form((a, config), {})[0]
    assert _form((a, config), {})[0] != _form((a, other), {})[0]


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        fastlaunch.graphed(steps=0)(print)
    with pytest.raises(ValueError, match="per_form must be a positive integer"):
        fastlaunch.graphed(per_form=0)(print)
    with pytest.raises(ValueError, match="cache_size must be a positive integer"):
        fastlaunch.graphed(cache_size=0)(print)
    with pytest.raises(ValueError, match="capture mode"):
        fastlaunch.graphed(mode="sometimes")(print)
    with pytest.raises(TypeError, match="takes a function"):
        fastlaunch.graphed(3)

    @fastlaunch.graphed(steps=2)
    def step(x):
        """doc"""

    assert step.__name__ == "step" and step.__doc__ == "doc" and step.steps == 2
    assert "graphs=0" in repr(step)


# -- against the stand-in driver ----------------------------------------------------------

PRELUDE = textwrap.dedent(
    """
    import gc, json, sys, warnings, weakref
    sys.path.insert(0, {tests!r})
    import fastlaunch as fl
    from fastlaunch import _core
    from fastlaunch.dispatcher import numba_type
    from test_cpu_graphed import CAI
    assert fl.is_available(), _core.unavailable_reason()
    warnings.simplefilter("ignore", category=Warning)  # numba's low-occupancy warning

    def kernel(name, args):
        namespace = {{}}
        exec(f"def {{name}}(out, a, s):\\n    pass\\n", namespace)
        k = fl.jit(namespace[name])
        fp = _core.fingerprint(args)
        param_types = tuple(numba_type(d) for d in _core.describe(fp))
        k._register(fp, 90, param_types, _core.CompiledKernel(b"image", "entry"))
        return k

    def graphs_of(step):
        return [entry for entries in step._graphs.values() for entry in entries]

    def numba_array(address, shape=(64, 64)):
        # a numba device array over memory that is never touched: a form fixed for its life
        import numpy as np
        from cuda.bindings import driver as bindings
        from numba.cuda.cudadrv import driver as numba_driver
        from numba.cuda.cudadrv.devicearray import DeviceNDArray

        pointer = numba_driver.MemoryPointer(None, bindings.CUdeviceptr(address), 1 << 20)
        gpu_data = numba_driver.OwnedPointer(pointer)
        return DeviceNDArray(shape, (4 * shape[1], 4), np.float32, gpu_data=gpu_data)

    def show(label, step):
        print(json.dumps({{"label": label, **step.counters, "graphs": step.graph_count}}))

    u, v, w = (CAI((64, 64), ptr=p) for p in (0x1000_0000, 0x2000_0000, 0x3000_0000))
    heat = kernel("heat", (u, v, 0.5))
    edges = kernel("edges", (u, v, 0.5))
    """
)


def run(run_on_stand_in, body: str) -> dict[str, dict]:
    lines = run_on_stand_in(PRELUDE.format(tests=TESTS) + textwrap.dedent(body))
    out = {}
    for line in lines:
        record = json.loads(line)
        out[record.pop("label")] = record
    return out


def test_eager_then_capture_then_replay_repointing_only_what_changed(run_on_stand_in):
    out = run(
        run_on_stand_in,
        """
        @fl.graphed(per_form=1)
        def step(a, b, dt):
            heat[1, 1](b, a, dt)
            edges[1, 1](a, b, dt)
            return b, a

        step(u, v, 0.5); show("first", step)
        step(u, v, 0.5); show("second", step)
        step(u, v, 0.5); show("same arrays", step)
        r = step(v, u, 0.5); show("swapped", step)
        print(json.dumps({"label": "returned", "swapped": r[0] is u and r[1] is v}))
        (entry,) = graphs_of(step)
        launch = entry.launches[0]
        print(json.dumps({"label": "bound", "ok": launch.args[0] is u and launch.args[1] is v}))
        step(v, w, 0.5); show("one new", step)
        """,
    )
    assert out["first"]["eager"] == 1 and out["first"]["captures"] == 0
    assert out["second"]["captures"] == 1 and out["second"]["replays"] == 1
    assert out["second"]["graphs"] == 1
    assert out["same arrays"]["replays"] == 2 and out["same arrays"]["updates"] == 0
    assert out["swapped"]["replays"] == 3 and out["swapped"]["updates"] == 2
    assert out["swapped"]["eager"] == 1
    assert out["returned"]["swapped"] and out["bound"]["ok"]
    # w replaces u: both launches take that argument
    assert out["one new"]["updates"] == 4 and out["one new"]["captures"] == 1


def test_a_ping_pong_loop_replays_two_graphs_without_re_pointing(run_on_stand_in):
    out = run(
        run_on_stand_in,
        """
        @fl.graphed
        def step(a, b):
            heat[1, 1](b, a, 1.0)
            return b, a

        a, b = u, v
        for _ in range(10):
            a, b = step(a, b)
        show("ping-pong", step)
        step(w, u); show("new arrays", step)
        step(v, w); show("newer arrays", step)
        """,
    )
    assert out["ping-pong"] == {**out["ping-pong"], "eager": 1, "captures": 2, "replays": 9}
    assert out["ping-pong"]["updates"] == 0 and out["ping-pong"]["graphs"] == 2
    # no graph holds (w, u): the least recently used one, (u, v), is re-pointed
    assert out["new arrays"]["updates"] == 1 and out["new arrays"]["captures"] == 2
    assert out["newer arrays"]["updates"] == 2 and out["newer arrays"]["graphs"] == 2


def test_a_new_form_runs_eagerly_until_it_repeats_and_the_cache_is_bounded(run_on_stand_in):
    out = run(
        run_on_stand_in,
        """
        @fl.graphed(cache_size=2)
        def step(a, b, dt):
            heat[1, 1](b, a, dt)

        for dt in (0.5, 0.5, 0.25, 0.5, 0.25):
            step(u, v, dt)
        show("two scalars", step)
        small = (CAI((8, 8), ptr=0x4000_0000), CAI((8, 8), ptr=0x5000_0000))
        step(*small, 0.5); show("new shape", step)
        step(*small, 0.5); show("new shape again", step)
        step(u, v, 0.125); step(u, v, 0.125); show("third form", step)
        step.clear(); show("cleared", step)
        """,
    )
    assert out["two scalars"] == {**out["two scalars"], "eager": 2, "captures": 2, "replays": 3}
    assert out["new shape"]["eager"] == 3 and out["new shape"]["captures"] == 2
    assert out["new shape again"]["captures"] == 3
    assert out["new shape again"]["evictions"] == 1 and out["new shape again"]["graphs"] == 2
    assert out["third form"]["evictions"] == 2 and out["third form"]["graphs"] == 2
    assert out["cleared"]["graphs"] == 0


def test_an_uncapturable_step_falls_back_to_eager_with_one_warning(run_on_stand_in):
    out = run(
        run_on_stand_in,
        """
        @fl.graphed
        def step(a, b):
            heat[1, 1](b, a, 1.0)
            fl.synchronize()            # refused while capturing

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", fl.GraphCaptureWarning)
            for _ in range(4):
                step(u, v)
        ours = [w for w in caught if issubclass(w.category, fl.GraphCaptureWarning)]
        show("step", step)
        print(json.dumps({"label": "warning", "count": len(ours),
                          "text": str(ours[0].message), "reason": step.uncapturable}))
        # the capture was ended: launches go where they were sent, and capturing works again
        heat[1, 1](v, u, 1.0)
        with fl.graph() as g:
            heat[1, 1](v, u, 1.0)
        print(json.dumps({"label": "after", "launches": len(g.launches)}))
        """,
    )
    assert out["step"]["failed_captures"] == 1 and out["step"]["eager"] == 4
    assert out["step"]["captures"] == 0 and out["step"]["replays"] == 0
    warning = out["warning"]
    assert warning["count"] == 1
    assert "step cannot be captured as a CUDA graph" in warning["text"]
    assert "synchronizing" in warning["text"] or "CUDA" in warning["text"]
    assert warning["reason"]
    assert out["after"]["launches"] == 1


def test_arrays_derived_from_arguments_pin_the_graph_to_them(run_on_stand_in):
    out = run(
        run_on_stand_in,
        """
        def interior(a):   # a view: inside a's memory, a new object on every call
            info = a.__cuda_array_interface__
            return CAI((62, 62), ptr=info["data"][0] + 4 * 65)

        @fl.graphed
        def step(a, b):
            heat[1, 1](interior(b), a, 1.0)

        scratch = CAI((64, 64), ptr=0x7000_0000)   # neither argument nor view: static

        @fl.graphed
        def with_scratch(a, b):
            heat[1, 1](scratch, a, 1.0)
            edges[1, 1](b, scratch, 1.0)

        for _ in range(3):
            step(u, v)
        show("same base", step)
        step(u, w); show("new base", step)
        step(u, w); show("new base again", step)
        step(u, v); show("first base", step)
        for pair in ((u, v), (u, v), (w, v), (v, w)):
            with_scratch(*pair)
        show("scratch", with_scratch)
        """,
    )
    assert out["same base"] == {**out["same base"], "captures": 1, "replays": 2}
    assert out["new base"]["eager"] == 2 and out["new base"]["replays"] == 2
    assert out["new base again"]["captures"] == 2 and out["new base again"]["graphs"] == 2
    assert out["first base"]["replays"] == 4 and out["first base"]["updates"] == 0
    # (w, v) gets a graph of its own; (v, w) re-points the older one: both launches
    assert out["scratch"]["captures"] == 2 and out["scratch"]["replays"] == 3
    assert out["scratch"]["updates"] == 2


def test_steps_unrolled_into_one_graph(run_on_stand_in):
    out = run(
        run_on_stand_in,
        """
        @fl.graphed(steps=4)
        def step(a, b):
            heat[1, 1](b, a, 1.0)
            return b, a

        results = [step(u, v) for _ in range(3)]
        show("unrolled", step)
        (entry,) = graphs_of(step)
        print(json.dumps({"label": "graph", "launches": len(entry.launches),
                          "nodes": entry.graph.node_count,
                          "even": all(r[0] is u and r[1] is v for r in results)}))
        """,
    )
    assert out["unrolled"]["captures"] == 1 and out["unrolled"]["replays"] == 2
    assert out["graph"] == {"launches": 4, "nodes": 4, "even": True}


def test_graphs_keep_their_arrays_alive_until_dropped(run_on_stand_in):
    out = run(
        run_on_stand_in,
        """
        @fl.graphed(cache_size=1)
        def step(a, b):
            heat[1, 1](b, a, 1.0)

        x, y = CAI((64, 64), ptr=0x8000_0000), CAI((64, 64), ptr=0x9000_0000)
        gone = weakref.ref(x)
        step(x, y); step(x, y)
        del x; gc.collect()
        alive_in_graph = gone() is not None
        step(CAI((4, 4), ptr=0xA000_0000), y); step(CAI((4, 4), ptr=0xA000_0000), y)  # evicts
        gc.collect()
        print(json.dumps({"label": "memory", "held": alive_in_graph, "released": gone() is None,
                          "evictions": step.counters["evictions"]}))
        """,
    )
    assert out["memory"] == {"held": True, "released": True, "evictions": 1}


def test_a_graphed_step_called_while_another_captures_runs_inline(run_on_stand_in):
    out = run(
        run_on_stand_in,
        """
        @fl.graphed
        def inner(a, b):
            heat[1, 1](b, a, 1.0)

        @fl.graphed
        def outer(a, b):
            inner(a, b)
            edges[1, 1](a, b, 1.0)

        for _ in range(3):
            outer(u, v)
        show("outer", outer)
        show("inner", inner)
        (entry,) = graphs_of(outer)
        print(json.dumps({"label": "graph", "launches": len(entry.launches)}))
        """,
    )
    assert out["outer"]["captures"] == 1 and out["outer"]["replays"] == 2
    assert out["inner"]["captures"] == 0 and out["inner"]["failed_captures"] == 0
    assert out["graph"]["launches"] == 2


def test_a_graphed_step_inside_a_users_graph_is_captured_there(run_on_stand_in):
    out = run(
        run_on_stand_in,
        """
        @fl.graphed
        def step(a, b):
            heat[1, 1](b, a, 1.0)

        step(u, v)
        with fl.graph() as g:
            step(u, v)   # would capture now: this thread captures already, so eager, into g
            step(u, v)
        show("step", step)
        print(json.dumps({"label": "graph", "launches": len(g.launches),
                          "uncapturable": step.uncapturable}))
        step(u, v); step(u, v); show("after", step)
        """,
    )
    assert out["step"]["eager"] == 3 and out["step"]["failed_captures"] == 0
    assert out["graph"] == {"launches": 2, "uncapturable": None}
    assert out["after"]["captures"] == 1 and out["after"]["replays"] == 2


def test_remembered_forms_of_numba_arrays_never_outlive_their_graphs(run_on_stand_in):
    out = run(
        run_on_stand_in,
        """
        a, b = numba_array(1 << 40), numba_array(1 << 41)
        c, d = numba_array(1 << 42, (8, 8)), numba_array(1 << 43, (8, 8))
        k = kernel("numba_heat", (a, b, 1.0))

        @fl.graphed(cache_size=1)
        def step(x, y):
            k[1, 1](y, x, 1.0)

        for _ in range(4):
            step(a, b)          # the same objects: the form is remembered after the first
        show("same", step)
        step(c, d); step(c, d)  # another form: captured, evicting the first
        show("other", step)
        step(a, b)              # remembered, but its graph is gone: captured again
        show("back", step)
        step.clear(); step(a, b); show("cleared", step)
        """,
    )
    assert out["same"] == {**out["same"], "eager": 1, "captures": 1, "replays": 3}
    assert out["other"]["captures"] == 2 and out["other"]["evictions"] == 1
    assert out["back"]["captures"] == 3 and out["back"]["replays"] == 5
    assert out["cleared"]["eager"] == 3 and out["cleared"]["graphs"] == 0


def test_a_stream_argument_is_captured_and_replayed_on_and_keywords_are_leaves(run_on_stand_in):
    out = run(
        run_on_stand_in,
        """
        s = fl.stream(non_blocking=True)

        @fl.graphed
        def step(a, stream, *, out):
            heat[1, 1, stream](out, a, 1.0)
            edges[1, 1](out, a, 1.0)     # no stream: the step's stream

        for pair in ((u, v), (u, v), (w, v), (u, v), (u, w)):
            step(pair[0], s, out=pair[1])
        show("step", step)
        entries = graphs_of(step)
        print(json.dumps({"label": "graph", "streams": [e.handle for e in entries],
                          "expected": s.handle, "launches": [len(e.launches) for e in entries],
                          "replayed_on": step._direct.last_stream}))
        """,
    )
    assert out["step"] == {**out["step"], "eager": 1, "captures": 2, "replays": 4}
    assert out["step"]["updates"] == 2  # (u, w): the least recently used graph, (w, v), re-pointed
    graph = out["graph"]
    assert graph["streams"] == [graph["expected"]] * 2 and graph["launches"] == [2, 2]
    assert graph["replayed_on"] == graph["expected"]


def test_the_same_arguments_again_replay_without_their_form(run_on_stand_in):
    """The very same argument objects as one of the last two replays replay that graph
    directly, without computing their form; other arrays of the form still find theirs."""
    got = run(
        run_on_stand_in,
        """
        u, v, w = (numba_array(p) for p in (0x1000_0000, 0x2000_0000, 0x3000_0000))
        copy = kernel("copy", (u, v, 0.5))

        @fl.graphed
        def step(a, b):
            copy[1, 1](a, b, 0.5)

        for _ in range(3):
            step(u, v)
        show("first", step)
        calls = []
        real = _core.step_form
        _core.step_form = lambda *a: calls.append(1) or real(*a)
        try:
            step(u, v)
            step(u, v)
            show("again", step)
            print(json.dumps({"label": "forms", "computed": len(calls)}))
            step(u, w)  # the same form, other arrays: a graph of its own or re-pointed
            step(u, w)
            step(u, v)
            show("other", step)
        finally:
            _core.step_form = real
        """,
    )
    assert got["first"]["replays"] == 2 and got["first"]["captures"] == 1  # captured, replayed
    assert got["again"]["replays"] == 4
    assert got["forms"]["computed"] == 0
    assert got["other"]["replays"] == 7  # every call after the first eager one replays
    assert got["other"]["eager"] == 1


def test_a_remembered_call_is_forgotten_when_its_graph_is_re_pointed(run_on_stand_in):
    """A call replayed directly (one Rust call, no form) must not replay its graph after
    another call re-pointed that graph at other arrays: it re-points it back."""
    got = run(
        run_on_stand_in,
        """
        u, v, w = (numba_array(p) for p in (0x1000_0000, 0x2000_0000, 0x3000_0000))
        copy = kernel("copy", (u, v, 0.5))

        @fl.graphed(per_form=1)  # one graph for the form: other arrays re-point it
        def step(a, b):
            copy[1, 1](a, b, 0.5)

        for _ in range(4):
            step(u, v)
        show("direct", step)
        print(json.dumps({"label": "remembered", "calls": len(step._direct)}))
        step(u, w)
        step(u, v)
        (entry,) = graphs_of(step)
        print(json.dumps({"label": "bound", "b_is_v": entry.launches[0].args[1] is v}))
        show("back", step)
        """,
    )
    assert got["direct"]["replays"] == 3 and got["direct"]["updates"] == 0
    assert got["remembered"]["calls"] == 1
    assert got["back"]["updates"] == 2  # re-pointed at w, then back at v: not replayed as was
    assert got["bound"]["b_is_v"]
    assert got["back"]["replays"] == 5


def test_the_cycle_collector_sees_the_calls_a_step_remembers(run_on_stand_in):
    """The calls a step remembers (``_core.DirectReplays``) hold their arguments, which may
    hold the step: the collector must see them (its referents), and none once forgotten."""
    got = run(
        run_on_stand_in,
        """
        u, v = numba_array(0x1000_0000), numba_array(0x2000_0000)
        copy = kernel("copy", (u, v, 0.5))

        @fl.graphed
        def step(a, b):
            copy[1, 1](a, b, 0.5)

        for _ in range(4):
            step(u, v)

        def seen():  # what the collector sees from the remembered calls
            found = set()
            for referent in gc.get_referents(step._direct):
                if type(referent) is list:  # a call's leaves
                    found |= {"u" for x in referent if x is u} | {"v" for x in referent if x is v}
                if type(referent).__name__ == "Graph":
                    found.add("graph")
            return sorted(found)

        remembered = (len(step._direct), seen())
        step._direct.take_hits(True)
        print(json.dumps({"label": "gc", "remembered": remembered, "forgotten": seen()}))
        """,
    )
    assert got["gc"]["remembered"] == [1, ["graph", "u", "v"]]
    assert got["gc"]["forgotten"] == []


def test_arguments_referring_back_to_their_graph_or_bound_launch_are_collected(
    run_on_stand_in,
):
    """Graphs, their launches and bound launches show what they keep alive to the cycle
    collector (`__traverse__`): an argument that refers back to the graph or bound launch
    holding it forms a cycle, which is collected once nothing else holds it."""
    out = run(
        run_on_stand_in,
        """
        class Holder(CAI):
            back = None

        def report(label, holder, owner):
            referents = gc.get_referents(owner)
            if isinstance(owner, _core.Graph):
                referents = [r for launch in owner.launches for r in gc.get_referents(launch)]
            held = any(r is holder for r in referents)
            holder.back = owner
            return label, held, weakref.ref(holder)

        refs = []
        a = Holder((64, 64), ptr=0x5000_0000)
        refs.append(report("bound", a, heat[1, 1].bind(a, v, 0.5)))
        b = Holder((64, 64), ptr=0x6000_0000)
        graph = fl.graph()
        with graph:
            heat[1, 1](b, v, 0.5)
        refs.append(report("graph", b, graph))
        del a, b, graph
        gc.collect()
        for label, held, ref in refs:
            print(json.dumps({"label": label, "held": held, "collected": ref() is None}))
        """,
    )
    assert out == {
        "bound": {"held": True, "collected": True},
        "graph": {"held": True, "collected": True},
    }
