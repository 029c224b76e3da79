"""CUDA graphs: capture launches once, replay them for the cost of one driver call.

    g = fastlaunch.graph()          # captures on a stream of its own
    with g:
        step[grid, block](x, y)     # no stream given: goes to g.stream while capturing
        other[grid, block, g.stream](y)
    g.replay()                      # both kernels again, one cuGraphLaunch
    g.launches[0].set_args(x2, y2)  # new arrays for the next replays, no re-instantiation

Launch each kernel once before capturing it: a first launch compiles and loads code, which
a capture in the default ``"global"`` mode does not allow. Captured launches keep their
arguments alive for as long as the graph lives. Capturing inside ``torch.cuda.graph`` or
CuPy's ``Stream.begin_capture`` also works: fastlaunch launches into a capturing stream stay
capturable (no ordering events are added while a stream captures).
"""

from __future__ import annotations

from typing import Any

from fastlaunch._core import Graph, GraphLaunch
from fastlaunch.streams import stream as new_stream


def graph(stream: Any = None, *, mode: str = "global") -> Graph:
    """A graph to capture with ``with``: from ``stream`` (any stream object or handle but a
    default stream), or from a new non-blocking stream when none is given (``g.stream``).
    ``mode`` is the capture mode: ``"global"`` (as torch), ``"thread_local"`` or
    ``"relaxed"``."""
    if stream is None:
        stream = new_stream(non_blocking=True)
    return Graph(stream, mode)


__all__ = ["Graph", "GraphLaunch", "graph"]
