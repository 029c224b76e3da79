"""One captured graph of a step, as the step's cache holds it (``_Entry``): the graph and
its launches, which leaf each launch argument is bound to (and which launches to re-point
when a leaf changes), the leaves it holds now, those it is pinned to, its replay stream and
how to fill its return value; and the pinned leaves' part of a cache key
(``_pinned_key``), for the forms whose graphs hold arrays that cannot be re-pointed."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from fastlaunch._core import Graph


class _Entry:
    """A captured graph and how to put a call's arguments into it."""

    __slots__ = (
        "bindings",
        "bound",
        "deps",
        "fill",
        "foreign",
        "graph",
        "handle",
        "key",
        "launches",
        "pinned",
        "repoint",
        "result",
        "statics",
        "framework_graph",
    )

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.launches = graph.launches
        self.bindings: list[tuple[int, ...]] = []  # per launch, per argument: leaf or -1
        self.statics: list[tuple[Any, ...]] = []  # per launch: the captured arguments
        self.deps: dict[int, list[int]] = {}  # leaf index -> launches that take it
        self.repoint: tuple[int, ...] = ()  # leaves some launch takes
        self.bound: list[Any] = []  # the leaves the launches hold now (by leaf index)
        self.pinned: tuple[Any, ...] = ()  # leaves that must be passed again as they are
        self.result: Any = None  # template of the return value
        self.foreign = False  # torch or CuPy arrays among the leaves: order after their streams
        self.handle: int | None = None  # the replay stream, when the form fixes it
        self.fill: Callable[[list[Any]], Any] = lambda leaves: None  # the return value
        # captured by torch or CuPy (a step with their operations; _FrameworkCapture)
        self.framework_graph: Any = None
        self.key: Any = None  # where the cache holds it


def _pinned_key(leaves: list[Any], pins: tuple[int, ...]) -> tuple:
    """The pinned leaves' part of a graph's key: each by identity (the graph holds it, so the
    identity is not reused) and, for a torch tensor, its memory, which ``set_()`` or
    ``.data = ...`` can change under the same identity while the graph still holds the old."""
    torch = sys.modules.get("torch")
    return tuple(
        (id(leaf), leaf.data_ptr() if torch is not None and isinstance(leaf, torch.Tensor) else 0)
        for leaf in (leaves[i] for i in pins)
    )
