"""Steps with torch or CuPy operations, captured by that framework (``_FrameworkCapture``):
by torch as ``torch.cuda.graph`` captures (``_TorchCapture``), or by CuPy's own stream
capture with a memory pool of the graph's own (``_CupyCapture``, its ``cudaMalloc`` made
in relaxed mode through ``_exchange_capture_mode``), fastlaunch's launches following the
capture; and which framework captures a step, given its leaves (``_framework_of``). Such a
graph is replayed by the framework on its current stream and pinned to its arrays."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

from fastlaunch import _core
from fastlaunch.graphed.forms import _ARRAY


class _FrameworkCapture:
    """A step captured by the framework whose arrays it takes (torch, CuPy): on a side stream
    made the framework's current one, the framework's allocator in memory of the graph's own,
    so the framework's operations, their temporaries and fastlaunch launches (given no
    stream: they follow the framework's capture, ``_capture_hooks``) land in one graph.
    ``replay()`` replays it on the framework's current stream. fastlaunch cannot re-point
    its launches inside it: such a graph is pinned to its arrays."""

    launches: list[Any] = []
    node_count = 1  # more nodes than launches fastlaunch can re-point: pinned
    replay: Callable[[], Any]

    def __init__(self, module: Any, mode: str) -> None:
        self.module = module
        self.mode = mode

    def nested(self) -> bool:
        """Whether this thread captures already (the step then runs eagerly, so that the
        capture around it takes the step)."""
        raise NotImplementedError

    def capture(self, run: Callable[[], Any]) -> Any:
        """``run()`` captured; its result."""
        raise NotImplementedError

    @staticmethod
    def synchronize_current(module: Any) -> None:
        """Waits for the framework's current stream (where its graphs replay)."""
        raise NotImplementedError


class _TorchCapture(_FrameworkCapture):
    """Captured the way torch captures (``torch.cuda.graph``): torch's caching allocator in the
    graph's own memory pool, ``torch.cuda.CUDAGraph.replay()`` (which also moves torch's
    random number generators on for graphs that use them)."""

    def __init__(self, torch: Any, mode: str) -> None:
        super().__init__(torch, mode)
        self.torch = torch
        self.graph = torch.cuda.CUDAGraph()
        self.replay = self.graph.replay  # torch's own replay, called with nothing around it

    def nested(self) -> bool:
        return bool(self.torch.cuda.is_current_stream_capturing())

    def capture(self, run: Callable[[], Any]) -> Any:
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.graph(self.graph, stream=side, capture_error_mode=self.mode):
            result = run()
        torch.cuda.current_stream().wait_stream(side)
        return result

    @staticmethod
    def synchronize_current(module: Any) -> None:
        module.cuda.current_stream().synchronize()


# GraphedStep.mode as CuPy's runtime names the capture modes (cudaStreamCaptureMode)
_CUPY_CAPTURE_MODES = {
    "global": "streamCaptureModeGlobal",
    "thread_local": "streamCaptureModeThreadLocal",
    "relaxed": "streamCaptureModeRelaxed",
}


def _exchange_capture_mode(mode: Any) -> Any:
    """``cuThreadExchangeStreamCaptureMode``: makes ``mode`` this thread's stream capture
    interaction mode (None: relaxed); returns the mode it had, to be given back."""
    from cuda.bindings import driver  # type: ignore[import-untyped]

    if mode is None:
        mode = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    err, previous = driver.cuThreadExchangeStreamCaptureMode(mode)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuThreadExchangeStreamCaptureMode failed: {err!r}")
    return previous


class _CupyCapture(_FrameworkCapture):
    """Captured with CuPy's own ``Stream.begin_capture()`` / ``end_capture()`` on a
    non-blocking side stream made CuPy's current stream, in the step's capture mode, CuPy's
    allocations going to a memory pool of the graph's own (``cupy.cuda.MemoryPool``, used
    for nothing else): temporaries the graph writes are never handed to anyone else, and
    live as long as the graph. Replayed by CuPy's ``Graph.launch()`` on CuPy's current stream.

    CuPy's pool takes new memory with ``cudaMalloc`` (and nothing else: no events, no
    ``cudaFree`` unless it runs out of memory or over its limit), which the 'global' and
    'thread_local' modes forbid while capturing; as torch does, that one ``cudaMalloc`` is
    made with this thread's capture mode exchanged for 'relaxed'. A pool that gave memory
    back during the capture (out of memory: it frees its free blocks and tries again) may
    have freed memory captured work uses: the capture is then given up."""

    def __init__(self, cupy: Any, mode: str) -> None:
        super().__init__(cupy, mode)
        self.cupy = cupy
        self.graph: Any = None
        self.allocated = 0  # bytes the pool took from cudaMalloc
        self.pool = cupy.cuda.MemoryPool(self._malloc)

    def _malloc(self, size: int) -> Any:
        """The pool's own allocations: ``cudaMalloc``, allowed in any capture mode."""
        cuda = self.cupy.cuda
        previous = _exchange_capture_mode(None)
        try:
            memory = cuda.Memory(size)
        finally:
            _exchange_capture_mode(previous)
        self.allocated += size
        return cuda.MemoryPointer(memory, 0)

    def nested(self) -> bool:
        try:
            return bool(self.cupy.cuda.get_current_stream().is_capturing())
        except Exception:  # the query itself is refused while some capture runs
            return True

    def capture(self, run: Callable[[], Any]) -> Any:
        cuda = self.cupy.cuda
        mode = getattr(cuda.runtime, _CUPY_CAPTURE_MODES[self.mode])
        pool = self.pool
        # made now, not while capturing: the pool's per-device state, and cuda.bindings'
        # driver (found working) for the exchange of capture modes around cudaMalloc
        pool.malloc(0)
        _exchange_capture_mode(_exchange_capture_mode(None))
        current = cuda.get_current_stream()
        side = cuda.Stream(non_blocking=True)
        side.wait_event(current.record())
        with side, cuda.using_allocator(pool.malloc):
            side.begin_capture(mode)
            # _capture_hooks makes fastlaunch follow CuPy's captures; if CuPy's Stream could
            # not be wrapped, follow this one here
            follow = _core.followed_capture() != side.ptr
            if follow:
                _core.follow_capture(side.ptr)
            try:
                result = run()
            except BaseException:
                with contextlib.suppress(Exception):
                    self._end(side, follow)  # ends the capture, drops it
                raise
            self.graph = self._end(side, follow)  # raises if the capture was invalidated
        current.wait_event(side.record())
        if pool.total_bytes() < self.allocated:
            raise RuntimeError(
                "CuPy's memory pool gave memory back while capturing (out of memory?)"
            )
        self.replay = self.graph.launch  # on CuPy's current stream
        return result

    @staticmethod
    def _end(side: Any, follow: bool) -> Any:
        try:
            return side.end_capture()
        finally:
            if follow:
                _core.end_followed_capture()

    @staticmethod
    def synchronize_current(module: Any) -> None:
        module.cuda.get_current_stream().synchronize()


def _framework_of(
    leaves: list[Any], kinds: list[int]
) -> tuple[type[_FrameworkCapture], Any] | None:
    """Which framework captures a step (one with no stream argument) given its leaves, and
    its module: torch when a leaf is a CUDA tensor, else CuPy when a leaf is a CuPy array;
    None when neither (fastlaunch captures it)."""
    torch = sys.modules.get("torch")
    cupy = sys.modules.get("cupy")
    if torch is None and cupy is None:
        return None
    by_cupy: tuple[type[_FrameworkCapture], Any] | None = None
    for leaf, kind in zip(leaves, kinds, strict=True):
        if kind != _ARRAY:
            continue
        if torch is not None and isinstance(leaf, torch.Tensor) and leaf.is_cuda:
            return _TorchCapture, torch
        if by_cupy is None and cupy is not None and isinstance(leaf, cupy.ndarray):
            by_cupy = (_CupyCapture, cupy)
    return by_cupy
