"""The graphed step (``GraphedStep``) and its decorator (``graphed``): per call, the very
arguments of a recent call replayed directly (``_core.DirectReplays``), or the call's form
looked up in the step's cache of graphs (least recently used forms dropped, a few graphs
per form, each re-pointed at new arrays); a new form run eagerly, then captured (by
fastlaunch, or by torch or CuPy: ``frameworks.py``), the capture analysed into an entry
(``entry.py``) and replayed; ``check=True`` against an eager run; a failed capture warned
about once (``GraphCaptureWarning``), the step eager from then on."""

from __future__ import annotations

import functools
import sys
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from fastlaunch import _core
from fastlaunch._core import Graph
from fastlaunch.graphed.entry import _Entry, _pinned_key
from fastlaunch.graphed.extents import _extent, _overlapping
from fastlaunch.graphed.forms import _ARRAY, _STREAM, _device, _stream_handle
from fastlaunch.graphed.frameworks import _framework_of, _FrameworkCapture
from fastlaunch.graphed.host import _from_host, _to_host
from fastlaunch.graphed.results import _filler, _template, _walk
from fastlaunch.streams import (
    default_stream_policy,
    event,
    external_stream,
    ordering_enabled,
)
from fastlaunch.streams import stream as new_stream

__all__ = ["GraphCaptureWarning", "GraphedCheckError", "GraphedStep", "graphed"]


class GraphCaptureWarning(RuntimeWarning):
    """A graphed step could not be captured and runs eagerly from now on (given once)."""


class GraphedCheckError(AssertionError):
    """``check=True``: a replayed graph and the eager step disagreed."""


# A call's slot in GraphedStep._recent: its arguments held (_core.HeldArgs, which also holds
# the device), form, leaves, kinds, key, the generation at which key and entries were found,
# entries.

#: What ``GraphedStep._direct`` returns for a call it does not replay.
_MISSED = object()


class _ThreadState(threading.local):
    """Per thread: whether this thread is capturing a step (a class default, so reading it
    never raises and catches an AttributeError, which a call would pay for every time)."""

    capturing = False


_tls = _ThreadState()


class GraphedStep:
    """A step function run as a replayed CUDA graph; see :func:`graphed`."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        steps: int = 1,
        check: bool = False,
        cache_size: int = 8,
        per_form: int = 2,
        mode: str = "thread_local",
    ) -> None:
        if not callable(fn):
            raise TypeError(f"graphed() takes a function, not {type(fn).__name__}")
        if not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps must be a positive integer, not {steps!r}")
        if not isinstance(cache_size, int) or cache_size < 1:
            raise ValueError(f"cache_size must be a positive integer, not {cache_size!r}")
        if not isinstance(per_form, int) or per_form < 1:
            raise ValueError(f"per_form must be a positive integer, not {per_form!r}")
        if mode not in ("global", "thread_local", "relaxed"):
            raise ValueError(f"capture mode is 'global', 'thread_local' or 'relaxed', not {mode!r}")
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.steps = steps
        self.check = check
        self.cache_size = cache_size
        self.per_form = per_form
        self.mode = mode
        self._counters: dict[str, int] = dict.fromkeys(
            ("eager", "captures", "replays", "updates", "evictions", "failed_captures", "checks"),
            0,
        )
        #: why the step runs eagerly for good (a capture failed), or None
        self.uncapturable: str | None = None
        self._graphs: OrderedDict[Any, list[_Entry]] = OrderedDict()
        self._seen: OrderedDict[Any, None] = OrderedDict()
        self._pins: dict[Any, tuple[int, ...]] = {}
        self._stream: Any = None
        self._lock = threading.RLock()
        self._recent: list[Any] = [None, None]
        self._replayed: _Entry | None = None  # the entry _replay last replayed
        self._generation = 0  # changes whenever graphs are added or dropped
        self._mru: Any = None  # the key last moved to the end of the LRU
        # The last calls' very arguments again, replayed in one Rust call (see _note_replay);
        # it also keeps the stream of the step's last replay, for synchronize().
        self._direct = _core.DirectReplays(_MISSED)
        # the frameworks that captured graphs of this step (capture class: module)
        self._frameworks: dict[type[_FrameworkCapture], Any] = {}

    # -- the public surface ----------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs:
            # One of the last two calls' very objects again, whose graph holds them still:
            # replayed in one Rust call, nothing computed here (see _note_replay).
            try:
                result = self._direct(args)
            except Exception as e:
                e.add_note(f"while replaying the CUDA graph of graphed step {self.__qualname__}")
                raise
            if result is not _MISSED:
                return result
        if self.uncapturable is not None or _tls.capturing:
            self._counters["eager"] += 1
            return self._run(args, kwargs)
        with self._lock:  # graphs are re-pointed, then replayed: one thread at a time
            return self._call(args, kwargs)

    @property
    def counters(self) -> dict[str, int]:
        """Calls by path: eager (new or unseen forms, uncapturable steps), captures, replays;
        updates (launches re-pointed), evictions, failed_captures, checks."""
        with self._lock:
            self._count_direct()
        return self._counters

    def _count_direct(self, forget: bool = False) -> None:
        """Counts the replays made by ``_direct`` since last asked, and moves their graphs
        up in the cache's order; ``forget=True``: and forgets its calls, as every change to
        a cached graph must (before the change)."""
        for key, hits in self._direct.take_hits(forget):
            self._counters["replays"] += hits
            if key in self._graphs:
                self._graphs.move_to_end(key)
                self._mru = key

    def _call(self, args: tuple, kwargs: dict) -> Any:
        # The last two calls whose arguments cannot change form under the same identity
        # (numba arrays, immutable scalars, streams), or can but are checked (torch tensors:
        # their memory, shape, strides, dtype and device are kept and read again; CuPy
        # arrays: their shape), are remembered with their form and graphs, and the graph
        # they replayed: the very same objects again (a loop passing the same buffers, or two
        # swapped ones) skip computing the form and looking it up, or (__call__) anything.
        self._replayed = None  # set by _replay: this call's graph, for _note_replay
        slot = None
        if not kwargs:
            for known in self._recent:
                if known is not None and known[0].holds(args):  # and the device
                    slot = known
                    break
        if slot is not None:
            form, leaves, kinds = slot[1], slot[2], slot[3]
            if slot[5] == self._generation:  # the cache is as it was: its graphs still are
                key, entries = slot[4], slot[6]
                if self._mru is not key:
                    self._graphs.move_to_end(key)
                    self._mru = key
                result = self._with(entries, form, key, args, kwargs, leaves, kinds)
                self._note_replay(slot)
                return result
        else:
            form, leaves, kinds, held = _core.step_form(args, kwargs, _device())
            if held is not None:
                slot = [held, form, leaves, kinds, None, -1, None]
                self._recent = [slot, self._recent[0]]
        key = form
        pins = self._pins.get(form)
        if pins is not None:
            key = (form, _pinned_key(leaves, pins))
        entries = self._graphs.get(key)
        if entries is not None:
            self._graphs.move_to_end(key)
            self._mru = key
            if slot is not None:
                slot[4], slot[5], slot[6] = key, self._generation, entries
            result = self._with(entries, form, key, args, kwargs, leaves, kinds)
            if slot is not None:
                self._note_replay(slot)
            return result
        if key not in self._seen:
            self._seen[key] = None
            if len(self._seen) > 4 * self.cache_size:
                self._seen.popitem(last=False)
            self._counters["eager"] += 1
            return self._run(args, kwargs)
        entry = self._capture(form, key, args, kwargs, leaves, kinds)
        if entry is None:
            self._counters["eager"] += 1
            return self._run(args, kwargs)
        if self.check:
            return self._checked(entry, args, kwargs, leaves, kinds)
        return self._replay(entry, leaves, kinds)

    def _note_replay(self, slot: list[Any]) -> None:
        """Remembers in ``_direct`` the call of ``slot`` with the graph it replayed (which
        holds the call's very arguments now), for ``__call__`` to replay directly; not if it
        ran eagerly or was checked against an eager run, nor for a graph whose replay stream
        or input ordering is worked out on each call (torch's or CuPy's current stream)."""
        entry, self._replayed = self._replayed, None
        if entry is None or self.check:
            return
        if entry.framework_graph is not None:
            self._direct.remember_framework(
                slot[0], entry.framework_graph.replay, entry.fill, slot[2], entry.key, self._lock
            )
        elif entry.handle is not None and not entry.foreign:
            self._direct.remember_graph(
                slot[0], entry.graph, entry.handle, entry.fill, slot[2], entry.key
            )

    def _with(
        self,
        entries: list[_Entry],
        form: Any,
        key: Any,
        args: tuple,
        kwargs: dict,
        leaves: list[Any],
        kinds: list[int],
    ) -> Any:
        """The call, with the graphs cached for its form."""
        entry = None
        for i, candidate in enumerate(entries):  # one that holds these arrays already
            bound = candidate.bound
            for k in candidate.repoint:
                if leaves[k] is not bound[k]:
                    break
            else:
                entry = candidate
                if i:
                    entries.insert(0, entries.pop(i))
                break
        if entry is None:  # no graph of this form holds these arrays
            if len(entries) < self.per_form:
                entry = self._capture(form, key, args, kwargs, leaves, kinds)
                if entry is None:
                    self._counters["eager"] += 1
                    return self._run(args, kwargs)
            else:
                entry = entries.pop()  # the least recently used: re-pointed
                entries.insert(0, entry)
        if self.check:
            return self._checked(entry, args, kwargs, leaves, kinds)
        return self._replay(entry, leaves, kinds)

    @property
    def graph_count(self) -> int:
        """Graphs cached now (at most ``cache_size`` forms of ``per_form`` graphs each)."""
        return sum(map(len, self._graphs.values()))

    def synchronize(self) -> None:
        """Waits for the stream this step last replayed on; an error from it (a fault in a
        replayed kernel) names the step."""
        try:
            last_stream = self._direct.last_stream
            if last_stream is None:
                # a graph torch or CuPy captured, replayed on that framework's current stream
                # (a step with graphs of both waits for both)
                for capture, module in self._frameworks.items():
                    capture.synchronize_current(module)
            else:
                external_stream(last_stream).synchronize()
        except Exception as e:
            e.add_note(f"after replaying the CUDA graph of graphed step {self.__qualname__}")
            raise

    def clear(self) -> None:
        """Drops every cached graph (and the arguments they hold) and the forms seen."""
        self._recent = [None, None]
        self._count_direct(forget=True)
        self._generation += 1
        self._graphs.clear()
        self._seen.clear()
        self._pins.clear()

    def __repr__(self) -> str:
        return (
            f"<fastlaunch.graphed {self.__qualname__} steps={self.steps} "
            f"graphs={len(self._graphs)}>"
        )

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        return functools.partial(self, instance)

    # -- running ---------------------------------------------------------------------------

    def _run(self, args: tuple, kwargs: dict) -> Any:
        """The step eagerly: ``steps`` calls, each given the previous one's return value
        (a tuple of arguments; None: the same arguments again)."""
        result = None
        for _ in range(self.steps):
            result = self.fn(*args, **kwargs)
            if result is not None:
                args = result if type(result) is tuple else (result,)
        return result

    def _stream_leaf(self, leaves: list[Any], kinds: list[int]) -> Any:
        streams = [leaf for leaf, kind in zip(leaves, kinds, strict=True) if kind == _STREAM]
        if len(streams) == 1 and _stream_handle(streams[0]) > 2:
            return streams[0]
        return None

    def _replay_stream(self, leaves: list[Any], kinds: list[int]) -> int:
        """The stream the step's launches without a stream would have used."""
        given = self._stream_leaf(leaves, kinds)
        if given is not None:
            return _stream_handle(given)
        if default_stream_policy() == "follow":
            torch = sys.modules.get("torch")
            if torch is not None and any(isinstance(x, torch.Tensor) for x in leaves):
                return int(torch.cuda.current_stream().cuda_stream)
            cupy = sys.modules.get("cupy")
            if cupy is not None and any(isinstance(x, cupy.ndarray) for x in leaves):
                return int(cupy.cuda.get_current_stream().ptr)
        return 0

    def _order_inputs(self, handle: int, leaves: list[Any]) -> None:
        """As eager launches do: the replay waits for torch's or CuPy's current stream when
        their arrays are arguments and that stream is another one."""
        producers = set()
        torch = sys.modules.get("torch")
        if torch is not None and any(isinstance(x, torch.Tensor) for x in leaves):
            producers.add(int(torch.cuda.current_stream().cuda_stream))
        cupy = sys.modules.get("cupy")
        if cupy is not None and any(isinstance(x, cupy.ndarray) for x in leaves):
            producers.add(int(cupy.cuda.get_current_stream().ptr))
        producers.discard(handle)
        for producer in producers:
            done = event(timing=False)
            done.record(external_stream(producer))
            external_stream(handle).wait_event(done)

    def _replay(self, entry: _Entry, leaves: list[Any], kinds: list[int]) -> Any:
        """Replays ``entry`` with ``leaves``, re-pointing the launches whose arrays changed."""
        self._replayed = entry
        if entry.framework_graph is not None:  # pinned to its arrays: nothing to re-point
            return self._replay_framework(entry, leaves)
        bound = entry.bound
        dirty: set[int] | None = None
        for k in entry.repoint:
            leaf = leaves[k]
            if leaf is not bound[k]:
                bound[k] = leaf
                if dirty is None:
                    dirty = set()
                    self._count_direct(forget=True)  # a call it remembers may hold this graph
                dirty.update(entry.deps[k])
        if dirty:
            try:
                for i in sorted(dirty):
                    entry.launches[i].set_args(
                        *[
                            leaves[b] if b >= 0 else s
                            for b, s in zip(entry.bindings[i], entry.statics[i], strict=True)
                        ]
                    )
            except BaseException:
                # some launches hold the new arrays, some the old: re-point all next time
                entry.bound = [None] * len(bound)
                raise
            self._counters["updates"] += len(dirty)
        handle = entry.handle
        if handle is None:
            handle = self._replay_stream(leaves, kinds)
        if entry.foreign and ordering_enabled():
            self._order_inputs(handle, leaves)
        self._direct.last_stream = handle
        try:
            entry.graph.replay(handle)
        except Exception as e:
            e.add_note(f"while replaying the CUDA graph of graphed step {self.__qualname__}")
            raise
        self._counters["replays"] += 1
        return entry.fill(leaves)

    def _replay_framework(self, entry: _Entry, leaves: list[Any]) -> Any:
        """Replays a graph torch or CuPy captured, with the framework's own replay, on its
        current stream (torch's also moves its random number generators on for graphs that
        use them)."""
        self._direct.last_stream = None
        try:
            entry.framework_graph.replay()
        except Exception as e:
            e.add_note(f"while replaying the CUDA graph of graphed step {self.__qualname__}")
            raise
        self._counters["replays"] += 1
        return entry.fill(leaves)

    def _checked(
        self, entry: _Entry, args: tuple, kwargs: dict, leaves: list[Any], kinds: list[int]
    ) -> Any:
        """check=True: the step eagerly, then the graph from the same inputs; every array
        argument must come out bit for bit the same."""
        arrays = [
            (i, leaf)
            for i, (leaf, kind) in enumerate(zip(leaves, kinds, strict=True))
            if kind == _ARRAY
        ]
        _core.synchronize()
        inputs = [_to_host(a) for _, a in arrays]
        self._run(args, kwargs)
        _core.synchronize()
        expected = [_to_host(a) for _, a in arrays]
        for (_, a), host in zip(arrays, inputs, strict=True):
            _from_host(a, host)
        _core.synchronize()
        result = self._replay(entry, leaves, kinds)
        try:
            _core.synchronize()
        except Exception as e:
            e.add_note(f"in the CUDA graph of graphed step {self.__qualname__}")
            raise
        self._counters["checks"] += 1
        for (i, a), want in zip(arrays, expected, strict=True):
            got = _to_host(a)
            if got.shape != want.shape or got.tobytes() != want.tobytes():
                raise GraphedCheckError(
                    f"graphed step {self.__qualname__}: argument array {i} "
                    f"({type(a).__name__} {getattr(a, 'shape', '')}) differs between the "
                    "replayed graph and the eager step; the step's launches depend on "
                    "something its arguments' form does not show"
                )
        return result

    # -- capturing -------------------------------------------------------------------------

    def _capture_stream(self, leaves: list[Any], kinds: list[int]) -> Any:
        given = self._stream_leaf(leaves, kinds)
        if given is not None:
            return given
        if self._stream is None:
            # blocking: work on the legacy default stream during the capture (host copies,
            # torch or CuPy work on their default stream) then invalidates it, so such a
            # step falls back to eager instead of replaying without that work
            self._stream = new_stream(non_blocking=False)
        return self._stream

    def _capture(
        self,
        form: Any,
        key: Any,
        args: tuple,
        kwargs: dict,
        leaves: list[Any],
        kinds: list[int],
    ) -> _Entry | None:
        if self._stream_leaf(leaves, kinds) is None:
            framework = _framework_of(leaves, kinds)
            if framework is not None:
                framework_capture, module = framework
                return self._capture_by_framework(
                    framework_capture(module, self.mode), form, key, args, kwargs, leaves, kinds
                )
        graph = Graph(self._capture_stream(leaves, kinds), self.mode)
        try:
            graph.__enter__()
        except Exception:
            # not the step's fault (this thread captures a fastlaunch graph already, whose
            # capture then takes the step's launches): eager this time, captured later
            return None

        def capture() -> Any:
            try:
                result = self._run(args, kwargs)
            except BaseException as e:
                graph.__exit__(type(e), e, e.__traceback__)  # ends the capture, drops it
                raise
            graph.__exit__(None, None, None)  # ends the capture; raises if it was invalidated
            return result

        return self._captured(graph, capture, form, key, leaves, kinds)

    def _captured(
        self,
        graph: Any,
        capture: Callable[[], Any],
        form: Any,
        key: Any,
        leaves: list[Any],
        kinds: list[int],
    ) -> _Entry | None:
        """Runs ``capture()`` (the step, captured into ``graph``) with this thread marked as
        capturing, and keeps the graph; None when the capture failed (given up on)."""
        _tls.capturing = True
        try:
            result = capture()
        except Exception as e:
            self._give_up(e)
            return None
        finally:
            _tls.capturing = False
        return self._keep(graph, result, form, key, leaves, kinds)

    def _capture_by_framework(
        self,
        graph: _FrameworkCapture,
        form: Any,
        key: Any,
        args: tuple,
        kwargs: dict,
        leaves: list[Any],
        kinds: list[int],
    ) -> _Entry | None:
        """A step with torch tensors or CuPy arrays among its arguments, captured by torch or
        CuPy (see ``_FrameworkCapture``)."""
        if _core.followed_capture() is not None or graph.nested():
            return None  # inside another capture: eager, so that capture takes the step
        entry = self._captured(
            graph, lambda: graph.capture(lambda: self._run(args, kwargs)), form, key, leaves, kinds
        )
        if entry is None:
            return None
        entry.framework_graph = graph
        self._frameworks[type(graph)] = graph.module
        return entry

    def _keep(
        self, graph: Graph, result: Any, form: Any, key: Any, leaves: list[Any], kinds: list[int]
    ) -> _Entry:
        """Caches a captured graph under its form (and pins, if any)."""
        self._counters["captures"] += 1
        entry = self._analyse(graph, result, leaves, kinds)
        if entry.pinned:
            pins = tuple(i for i, leaf in enumerate(leaves) if any(leaf is p for p in entry.pinned))
            self._pins[form] = pins
            key = (form, _pinned_key(leaves, pins))
        self._count_direct(forget=True)  # a call it remembers may hold a graph evicted below
        self._generation += 1
        entry.key = key
        self._graphs.setdefault(key, []).insert(0, entry)
        self._graphs.move_to_end(key)
        self._mru = key
        while len(self._graphs) > self.cache_size:
            self._graphs.popitem(last=False)
            self._counters["evictions"] += 1
        return entry

    def _analyse(self, graph: Graph, result: Any, leaves: list[Any], kinds: list[int]) -> _Entry:
        entry = _Entry(graph)
        index = {id(leaf): i for i, leaf in enumerate(leaves)}
        array_leaves = [i for i, kind in enumerate(kinds) if kind == _ARRAY]
        extents: list[Any] = [None] * len(leaves)
        for i in array_leaves:
            extents[i] = _extent(leaves[i])
        pinned: set[int] = set()
        if graph.node_count > len(entry.launches):
            # work fastlaunch cannot re-point (launches with tuple arguments, launches
            # through numba-cuda, library work): replay only with these very arrays
            pinned.update(array_leaves)
        for n, launch in enumerate(entry.launches):
            captured = launch.args
            binding = []
            for arg in captured:
                i = index.get(id(arg))
                if i is not None and kinds[i] == _ARRAY:
                    binding.append(i)
                    entry.deps.setdefault(i, []).append(n)
                    continue
                binding.append(-1)
                # an array derived from an argument (a view, a slice): the graph holds the
                # captured view, so its base must be passed again as the same object
                pinned.update(_overlapping(_extent(arg), extents))
            entry.bindings.append(tuple(binding))
            entry.statics.append(captured)
        returned: list[Any] = []
        _walk(result, returned)
        for value in returned:
            if id(value) not in index:
                pinned.update(_overlapping(_extent(value), extents))
        entry.repoint = tuple(sorted(entry.deps))
        entry.bound = list(leaves)
        entry.pinned = tuple(leaves[i] for i in sorted(pinned))
        entry.result = _template(result, index)
        entry.foreign = any(
            type(leaves[i]).__module__.split(".")[0] in ("torch", "cupy") for i in array_leaves
        )
        entry.fill = _filler(entry.result)
        given = self._stream_leaf(leaves, kinds)
        if given is not None:
            entry.handle = _stream_handle(given)  # part of the form
        elif not entry.foreign:
            entry.handle = 0  # launches with no stream: the legacy default stream
        return entry

    def _give_up(self, error: BaseException) -> None:
        self._counters["failed_captures"] += 1
        reason = f"{type(error).__name__}: {error}"
        self.uncapturable = reason
        self._count_direct(forget=True)
        self._generation += 1
        self._graphs.clear()
        warnings.warn(
            f"fastlaunch.graphed: {self.__qualname__} cannot be captured as a CUDA graph "
            f"({reason}); it runs eagerly from now on. Host copies, synchronisation, "
            "allocations, records and work on the default stream cannot be captured.",
            GraphCaptureWarning,
            stacklevel=4,
        )


def graphed(
    fn: Callable[..., Any] | None = None,
    *,
    steps: int = 1,
    check: bool = False,
    cache_size: int = 8,
    per_form: int = 2,
    mode: str = "thread_local",
) -> Any:
    """Runs a step function (one that launches fastlaunch kernels) as a CUDA graph.

    ``@graphed`` or ``@graphed(steps=k, check=..., cache_size=..., mode=...)``.

    - The first call with a new form of arguments runs eagerly; the second captures; later
      ones replay, with new array arguments put in place. The form (the guard key) is:
      kinds, dtypes, shapes, strides, devices and aliasing of the array arguments, the exact
      values of scalars and other plain arguments (str, None, enums), the identity of other
      objects, the handle of stream arguments, and the current device.
    - ``steps=k``: a call runs the step k times, each call given the previous one's return
      value (a tuple of arguments; None: the same arguments), all in one graph.
    - ``check=True``: each graph call also runs eagerly from the same inputs and the array
      arguments must come out bit for bit the same (slow: for testing a step).
    - ``cache_size``: forms kept per step (least recently used dropped first);
      ``per_form``: graphs kept per form, each holding other arrays (2: a ping-pong loop
      replays without re-pointing anything; past that, the least recently used graph of
      the form is re-pointed).
    - ``mode``: the capture mode (``"thread_local"``, ``"global"`` or ``"relaxed"``); a step
      captured by CuPy takes new memory for its CuPy temporaries in relaxed mode.
    - A step with torch CUDA tensors among its arguments is captured by torch, one with CuPy
      arrays (and no CUDA tensor) by CuPy, with their operations (neither with a stream
      argument): see ``docs/graphed.md``.

    Counters in ``step.counters``; ``step.uncapturable`` says why a step runs eagerly.
    """

    def wrap(f: Callable[..., Any]) -> GraphedStep:
        return GraphedStep(
            f, steps=steps, check=check, cache_size=cache_size, per_form=per_form, mode=mode
        )

    return wrap if fn is None else wrap(fn)
