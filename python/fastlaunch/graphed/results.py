"""A step's return value in terms of its leaves: captured once as a template (each
argument it returns as its leaf's index, tuples and lists as sequences of templates, any
other object as itself), filled on each replay with the call's leaves, and walked flat to
find what it returns besides its arguments."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any


def _template(value: Any, index: dict[int, int]) -> Any:
    """The return value in terms of leaves: ("leaf", i), ("seq", type, items) or the
    object itself (returned as captured)."""
    i = index.get(id(value))
    if i is not None:
        return ("leaf", i)
    if type(value) in (tuple, list):
        return ("seq", type(value), tuple(_template(v, index) for v in value))
    return ("static", value)


def _fill(template: Any, leaves: list[Any]) -> Any:
    tag = template[0]
    if tag == "leaf":
        return leaves[template[1]]
    if tag == "seq":
        return template[1](_fill(t, leaves) for t in template[2])
    return template[1]


def _filler(template: Any) -> Callable[[list[Any]], Any]:
    """``_fill`` for one template, with the common cases made fast."""
    tag = template[0]
    if tag == "static":
        value = template[1]
        return lambda leaves: value
    if tag == "leaf":
        return operator.itemgetter(template[1])
    if template[1] is tuple and len(template[2]) >= 2 and all(t[0] == "leaf" for t in template[2]):
        return operator.itemgetter(*(t[1] for t in template[2]))
    return lambda leaves: _fill(template, leaves)


def _walk(value: Any, out: list[Any]) -> None:
    if type(value) in (tuple, list):
        for v in value:
            _walk(v, out)
    else:
        out.append(value)
