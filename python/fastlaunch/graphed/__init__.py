"""``fastlaunch.graphed``: a whole step captured once as a CUDA graph, then replayed.

    @fastlaunch.graphed
    def step(u, v):
        heat[grid, block](v, u)          # launched without a stream
        copy_edges[grid, block](v)
        return v, u                      # optional: the next step's arguments

    for _ in range(1000):
        u, v = step(u, v)                # eager, captured, then replayed

The first call with a new *form* of arguments runs the step eagerly (compiling what needs
compiling). The second call with the same form captures it (the body runs in Python once
more, its launches are recorded, nothing runs on the GPU) and replays the graph; every later
call with that form replays it, with the arrays it was given put in place of those captured
(``GraphLaunch.set_args``, only for the launches whose arrays changed).

The contract (see ``docs/graphed.md``): what the step launches, in which order, with which
configuration, must follow from the *form* of its arguments alone: kinds, dtypes, shapes,
strides, aliasing, devices of its arrays, and the values of its scalars and other plain
arguments. That form is the guard key, computed on every call; a call whose form has no
graph yet runs eagerly. Data on the GPU may of course differ from call to call.

The package: ``step.py`` (``GraphedStep``, ``graphed``), ``forms.py`` (the guard key),
``entry.py`` (a captured graph in the step's cache), ``extents.py`` (arrays derived from
arguments), ``results.py`` (the return value's template), ``frameworks.py`` (captures by
torch or CuPy), ``host.py`` (host copies for ``check=True``).
"""

from fastlaunch.graphed.forms import _ARRAY as _ARRAY
from fastlaunch.graphed.forms import _OBJECT as _OBJECT
from fastlaunch.graphed.forms import _form as _form
from fastlaunch.graphed.frameworks import _CupyCapture as _CupyCapture
from fastlaunch.graphed.frameworks import _framework_of as _framework_of
from fastlaunch.graphed.frameworks import _TorchCapture as _TorchCapture
from fastlaunch.graphed.step import GraphCaptureWarning, GraphedCheckError, GraphedStep, graphed

__all__ = ["GraphCaptureWarning", "GraphedCheckError", "GraphedStep", "graphed"]

# The private names above are imported from here by tests and benchmarks. The public ones
# name this package as their module, as they did when it was one file (reprs, tracebacks,
# pickles): ``fastlaunch.graphed.GraphedCheckError``, not ``...graphed.step.``.
for _public in (GraphCaptureWarning, GraphedCheckError, GraphedStep, graphed):
    _public.__module__ = __name__
del _public
