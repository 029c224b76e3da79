"""A graphed call's *form*, the guard key its graphs are cached under: the kinds, dtypes,
shapes, strides, aliasing and devices of its arrays, the values of its scalars and other
plain arguments, the identity of other objects, the handles of its streams and the current
device, with the call's *leaves* (the arrays, streams and objects a graph is re-pointed at
or keyed by) and their kinds. Computed in Rust (``_core.step_form``, which the step in
``step.py`` calls itself, keeping the arguments it holds too; ``_form`` is the form alone,
for tests and benchmarks), with the device and stream handles read here."""

from __future__ import annotations

from typing import Any

from fastlaunch import _core
from fastlaunch.errors import CudaUnavailableError

# Kinds of leaves, as ``_core.step_form`` numbers them. Arrays and streams are leaves: the
# graph is re-pointed at new ones. Objects are leaves too, but keyed by identity (the step
# may read anything from them).
_ARRAY, _STREAM, _OBJECT = 3, 4, 5


def _stream_handle(x: Any) -> int:
    if isinstance(x, int):
        return x
    return int(x.__cuda_stream__()[1])


def _device() -> int:
    try:
        device = _core.current_device()
    except CudaUnavailableError:
        return 0  # the step's launches say why
    return 0 if device is None else device  # launches with no current context use device 0


def _form(args: tuple, kwargs: dict) -> tuple[bytes, list[Any], list[int]]:
    """The guard key of a call, its leaves (arrays, streams, objects; each object once, in
    order of first appearance) and their kinds. A leaf seen again is keyed by its index,
    so aliasing is part of the key. Computed in Rust (``_core.step_form``), where arrays
    are read by the launch's own classifier: a step's form and its launches agree on
    which protocol each array is read through."""
    key, leaves, kinds, _held = _core.step_form(args, kwargs, _device())
    return key, leaves, kinds
