"""Kernels that run a ufunc's core function over arrays of any dimensions, broadcasting in
place.

numba-cuda's own kernel for a ufunc loop (its "stager") indexes one-dimensional arrays, so
numba-cuda ravels every argument first: a Python object per argument per call, and for a
broadcast or non-contiguous device array a copy through the host. The stagers here index each
argument with the output's multi-index instead (an index of 0 on the dimensions the argument
broadcasts along), take scalars as scalars, and call the same core function numba-cuda
compiled for the loop, so every element is computed by the same code.

A stager is made per *pattern*: the output's dimension count and, per argument, which of its
dimensions broadcast (or that it is a scalar). Its types are numba-cuda's to infer at the
first launch, as for any kernel."""

from __future__ import annotations

from typing import Any

#: per argument: None for a scalar, else per dimension whether it broadcasts (extent 1
#: against a larger extent of the output)
Pattern = tuple[int, tuple[tuple[bool, ...] | None, ...]]


def pattern_of(shapes: list[tuple[int, ...] | None], out_shape: tuple[int, ...]) -> Pattern:
    """The pattern of arguments of these shapes (None: a scalar) against ``out_shape``."""
    ndim = len(out_shape)
    per_argument = []
    for shape in shapes:
        if shape is None:
            per_argument.append(None)
            continue
        offset = ndim - len(shape)
        per_argument.append(
            tuple(extent == 1 and out_shape[offset + d] != 1 for d, extent in enumerate(shape))
        )
    return ndim, tuple(per_argument)


def source(name: str, pattern: Pattern) -> str:
    """The Python source of the stager for ``pattern``, a function named ``name``."""
    ndim, per_argument = pattern
    names = [f"a{i}" for i in range(len(per_argument))]
    indices = [f"__i{d}__" for d in range(ndim)]
    lines = [
        f"def {name}({', '.join([*names, '__out__'])}):",
        "    __tid__ = __cuda__.grid(1)",
        "    if __tid__ < __out__.size:",
    ]
    if ndim == 1:
        lines.append("        __i0__ = __tid__")
    else:
        lines.append("        __rest__ = __tid__")
        for d in range(ndim - 1, 0, -1):
            lines.append(f"        __i{d}__ = __rest__ % __out__.shape[{d}]")
            lines.append(f"        __rest__ //= __out__.shape[{d}]")
        lines.append("        __i0__ = __rest__")
    items = []
    for argument, broadcast in zip(names, per_argument, strict=True):
        if broadcast is None:
            items.append(argument)
            continue
        offset = ndim - len(broadcast)
        index = ["0" if b else indices[offset + d] for d, b in enumerate(broadcast)]
        items.append(f"{argument}[{', '.join(index)}]")
    lines.append(f"        __out__[{', '.join(indices)}] = __core__({', '.join(items)})")
    return "\n".join(lines) + "\n"


def make(core: Any, pattern: Pattern, jit: Any, cuda: Any) -> Any:
    """The stager for ``pattern`` calling the device function ``core``, made with ``jit``."""
    name = f"__fastlaunch_ufunc_{getattr(core, '__name__', 'core')}"
    namespace: dict[str, Any] = {"__cuda__": cuda, "__core__": core}
    exec(compile(source(name, pattern), f"<fastlaunch ufunc stager {name}>", "exec"), namespace)
    return jit(namespace[name])
