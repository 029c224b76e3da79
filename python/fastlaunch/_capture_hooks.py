"""Following torch's and CuPy's own CUDA graph captures: while this thread's torch
``CUDAGraph`` (``torch.cuda.graph``, ``make_graphed_callables``, torch.compile's CUDA graphs)
or a CuPy ``Stream`` captures, fastlaunch launches given no stream go to the capturing
stream, so they are captured with the framework's work around them.

The hooks wrap ``CUDAGraph.capture_begin`` / ``capture_end`` and CuPy's
``Stream.begin_capture`` / ``end_capture``; they are installed when torch or CuPy is
imported (never importing either), and tell the Rust launch path through
``_core.follow_capture`` / ``end_followed_capture`` (one thread-local read per launch while
some thread follows a capture, one atomic load otherwise).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from fastlaunch import _core
from fastlaunch._after_import import run_after_import

_HOOKED = "_fastlaunch_follows_capture"


def _wrap_begin(begin: Any, current_stream: Any) -> Any:
    @functools.wraps(begin)
    def capture_begin(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = begin(self, *args, **kwargs)
        _core.follow_capture(current_stream(self))
        setattr(self, _HOOKED, True)
        return result

    capture_begin.__dict__[_HOOKED] = True
    return capture_begin


def _wrap_end(end: Any) -> Any:
    @functools.wraps(end)
    def capture_end(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return end(self, *args, **kwargs)
        finally:
            if getattr(self, _HOOKED, False):
                setattr(self, _HOOKED, False)
                _core.end_followed_capture()

    capture_end.__dict__[_HOOKED] = True
    return capture_end


def hook_torch(torch: Any) -> bool:
    """Wraps ``torch.cuda.CUDAGraph``'s capture methods (once); False if torch has none."""
    graph_class = getattr(getattr(torch, "cuda", None), "CUDAGraph", None)
    if graph_class is None or getattr(graph_class.capture_begin, _HOOKED, False):
        return graph_class is not None
    cuda = torch.cuda

    def capturing_stream(_graph: Any) -> int:
        return int(cuda.current_stream().cuda_stream)

    graph_class.capture_begin = _wrap_begin(graph_class.capture_begin, capturing_stream)
    graph_class.capture_end = _wrap_end(graph_class.capture_end)
    return True


def hook_cupy(cupy: Any) -> bool:
    """Wraps CuPy's ``Stream.begin_capture`` / ``end_capture`` (once); False where CuPy's
    stream class cannot be wrapped."""
    stream_class = getattr(getattr(cupy, "cuda", None), "Stream", None)
    begin = getattr(stream_class, "begin_capture", None)
    if begin is None:
        return False
    if getattr(begin, _HOOKED, False):
        return True
    try:
        stream_class.begin_capture = _wrap_begin(begin, lambda stream: int(stream.ptr))
        stream_class.end_capture = _wrap_end(stream_class.end_capture)
    except (AttributeError, TypeError):  # an extension type that cannot be patched
        return False
    return True


_HOOKS = {"torch": hook_torch, "cupy": hook_cupy}


def install() -> None:
    """Hooks torch and CuPy now if imported, else when they are."""
    for name, hook in _HOOKS.items():
        module = sys.modules.get(name)
        if module is not None and getattr(module, "cuda", None) is not None:
            try:
                hook(module)
            except Exception as e:
                print(f"fastlaunch: hooking {name}'s graph captures failed: {e!r}", file=sys.stderr)
        else:
            run_after_import(name, hook, f"hooking {name}'s graph captures")
