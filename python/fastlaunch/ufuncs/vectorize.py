"""A CUDA ufunc call (``vectorize(target="cuda")``) on fastlaunch's path.

numba-cuda's ``CUDAUFuncMechanism.call`` chooses the loop, broadcasts, ravels, allocates and
launches through ``forall``, which asks the driver for a block size, on every call. Here the
first call with given argument types and shapes asks numba-cuda's own type resolution for the
loop (so its choice and its errors are numba-cuda's) and makes a :class:`Plan`: the kernel
specialized for those types, its block size (asked once), the output's shape and dtype, and
what each argument needs (a host copy, a scalar cast). Later calls with the same key run the
plan: copy host inputs, allocate the output, launch once, copy back if all inputs were on the
host.

What a plan does not cover goes to numba-cuda's own call (under install its copies,
allocations and launch are fastlaunch's): keywords other than ``out`` and ``stream``,
0-d and zero-size arrays, non-contiguous host arrays, host ``out=`` arrays, an ``out=`` that is
not a numba-cuda device array of the call's shape and loop dtype (and C-contiguous, when it
has more than one dimension), host arrays with a stream, arguments numba-cuda does not take
as scalars or arrays.

One deliberate difference: with ``out=``, the call returns ``out`` itself, where numba-cuda
returns a new array object over the same memory (``out.reshape(out.shape)``)."""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.ufuncs import arguments, kernels, plans, stagers
from fastlaunch.ufuncs.arguments import keys_of
from fastlaunch.ufuncs.outputs import Output
from fastlaunch.ufuncs.plans import UNPLANNED

#: what a key maps to when numba-cuda's own call takes that call
NUMBA = None

# what a plan does with each argument
_PASS = 0  # a device array, or a scalar of the loop's own NumPy type: passed as it is
_CAST = 1  # a scalar: cast to the loop's dtype, as numba-cuda's np.array([x], dtype) casts
_COPY = 2  # a host array: copied to the device

#: the scalars whose cast by the loop's type (``np.float32(x)``) gives what numba-cuda's
#: ``np.array([x], dtype)`` gives: the same value, exception and warnings, for every NumPy
#: number type (``tests/test_cpu_ufuncs.py`` compares the two over every edge); a NumPy
#: scalar of another type does not (``np.int32(np.int64(2**40))`` wraps to 0 where the array
#: raises ``OverflowError``), nor do subclasses
_BUILTIN_SCALARS = (int, float, complex, bool)


class Plan:
    """A call's work, fixed by its key."""

    __slots__ = (
        "actions",
        "casts",
        "kernel",
        "griddim",
        "blockdim",
        "output",
        "to_host",
        "passes",
        "launchers",
    )

    def __init__(
        self,
        actions: tuple[int, ...],
        casts: tuple[Any, ...],
        kernel: Any,
        griddim: int,
        blockdim: int,
        shape: tuple[int, ...],
        dtype: np.dtype,
        to_host: bool,
    ) -> None:
        self.actions = actions
        self.casts = casts
        self.kernel = kernel
        self.griddim = griddim
        self.blockdim = blockdim
        self.output = Output(shape, dtype)
        self.to_host = to_host
        # every argument a device array or a scalar of its loop's type, launched as it is
        self.passes = all(action == _PASS for action in actions)
        # the launcher of the last stream object, by identity (held, so never another's)
        self.launchers: tuple[Any, Any] = (None, None)

    def launcher(self, stream: Any) -> Any:
        last_stream, launcher = self.launchers
        if launcher is None or last_stream is not stream:
            launcher = self.kernel[self.griddim, self.blockdim, stream]
            self.launchers = (stream, launcher)
        return launcher

    def run(self, args: tuple, out: Any, stream: Any) -> Any:
        launch_args = args if self.passes else self._staged(args, stream)
        if out is None:
            out = self.output.new(stream)
        last_stream, launcher = self.launchers  # (``launcher``, without its frame)
        if launcher is None or last_stream is not stream:
            launcher = self.launcher(stream)
        launcher(*launch_args, out)
        return out.copy_to_host() if self.to_host else out

    def _staged(self, args: tuple, stream: Any) -> list:
        """The arguments as launched: scalars cast, host arrays copied to the device."""
        to_device = sys.modules["numba.cuda"].to_device
        staged = []
        for action, cast, value in zip(self.actions, self.casts, args, strict=True):
            if action == _PASS:
                staged.append(value)
            elif action == _CAST:
                staged.append(cast(value))
            else:
                staged.append(to_device(value, stream=stream))
        return staged


def call(ufunc: Any, args: tuple, kws: dict, numba_call: Any) -> Any:
    """``ufunc(*args, **kws)``: by a remembered plan, or numba-cuda's ``numba_call``."""
    if kws:
        stream = kws.get("stream", 0)
        out = kws.get("out")
        if len(kws) > ("stream" in kws) + ("out" in kws):
            return numba_call(ufunc, *args, **kws)  # numba-cuda warns about the others
        out_key = None if out is None else arguments.key_of(out)
        if out is not None and (out_key is None or out_key[0] != arguments.NUMBA_ARRAY):
            return numba_call(ufunc, *args, **kws)
    else:
        stream, out, out_key = 0, None, None
    key = (plans.device(), out_key, stream == 0 or stream is None, keys_of(args))
    remembered = ufunc.__dict__.get("_fastlaunch_plans")  # (``plans.find``, without its frame)
    plan = UNPLANNED if remembered is None else remembered.get(key, UNPLANNED)
    if plan is UNPLANNED:
        plan = plans.find(ufunc, key, _plan, ufunc, args, out, stream)
    if plan is NUMBA:
        return numba_call(ufunc, *args, **kws)
    return plan.run(args, out, stream)


def _plan(ufunc: Any, args: tuple, out: Any, stream: Any) -> Plan | None:
    """The plan of a call, or None (numba-cuda's own call) where a plan cannot give what
    numba-cuda gives. numba-cuda's refusals (no loop, shapes that do not broadcast) are
    raised by its own call, so None for them too."""
    kinds = [arguments.kind_of(type(value)) for value in args]
    if arguments.OTHER in kinds:
        return NUMBA  # an argument only numba-cuda's call takes
    try:
        loop_dtypes, result_dtype, kernel, shape = numba_cuda.ufunc_loop(ufunc.functions, args)
    except Exception:
        return NUMBA
    shapes = [
        None if kind == arguments.SCALAR else arguments.shape_of(value)
        for kind, value in zip(kinds, args, strict=True)
    ]
    if not shape or 0 in shape or any(s == () for s in shapes):
        return NUMBA  # 0-d and zero-size arrays: numba-cuda's own handling
    host = [value for kind, value in zip(kinds, args, strict=True) if kind == arguments.HOST_ARRAY]
    if host and not (stream == 0 or stream is None):
        return NUMBA
    if not all(value.flags.c_contiguous or value.flags.f_contiguous for value in host):
        return NUMBA
    if out is not None and (tuple(out.shape) != shape or out.dtype != result_dtype):
        return NUMBA
    if out is not None and out.ndim > 1 and not out.is_c_contiguous():
        # numba-cuda ravels such an `out` through a copy and writes the copy, not `out`
        return NUMBA
    loop_dtypes = tuple(np.dtype(dtype) for dtype in loop_dtypes)
    actions = tuple(
        _action(kind, type(value), dtype)
        for kind, value, dtype in zip(kinds, args, loop_dtypes, strict=True)
    )
    casts = tuple(
        scalar_cast(type(value), dtype) if action == _CAST else None
        for action, value, dtype in zip(actions, args, loop_dtypes, strict=True)
    )
    kernel = kernels.as_fastlaunch(kernel)
    if len(shape) != 1 or any(s != shape for s in shapes):
        # numba-cuda's own kernel indexes 1-d arrays only: a stager over the same core
        core = kernel.py_func.__globals__["__core__"]
        kernel = _stager(ufunc, core, stagers.pattern_of(shapes, shape))
    example = _example_arguments(args, actions, loop_dtypes, shape, result_dtype, out)
    blockdim = kernels.block_size(kernel, example)
    elements = int(np.prod(shape))
    griddim = (elements + blockdim - 1) // blockdim
    # numba-cuda's rule: the result stays on the device if any input or `out` is there
    on_host = (arguments.HOST_ARRAY, arguments.SCALAR)
    to_host = out is None and all(kind in on_host for kind in kinds)
    return Plan(actions, casts, kernel, griddim, blockdim, shape, np.dtype(result_dtype), to_host)


def _action(kind: int, cls: type, dtype: np.dtype) -> int:
    if kind == arguments.SCALAR:
        # np.array([x], dtype)[0] of a scalar of the dtype's own type is x's value
        return _PASS if cls is dtype.type else _CAST
    return _COPY if kind == arguments.HOST_ARRAY else _PASS


def scalar_cast(cls: type, dtype: np.dtype) -> Any:
    """What casts a scalar of class ``cls`` to a loop of ``dtype`` as numba-cuda casts it
    (``np.array([x], dtype=dtype)``, whose element the loop reads): the same value, or the
    same exception, and the same warnings, once."""
    if cls in _BUILTIN_SCALARS and dtype.kind in "biufc":
        return dtype.type  # the same as the array's cast (and a quarter of its time)
    return functools.partial(_cast_as_an_array, dtype)


def _cast_as_an_array(dtype: np.dtype, value: Any) -> Any:
    return np.array([value], dtype=dtype)[0]


def _example_arguments(
    args: tuple, actions: tuple, loop_dtypes: tuple, shape: tuple, dtype: Any, out: Any
) -> tuple:
    """Arguments of the types a plan launches with: host arrays as the device arrays they
    are copied to (writable, as every copy is), scalars as a zero of the loop's type (the
    call's own value is cast once, by the call: a cast that warns warns once, as numba-cuda's,
    and one that raises raises there)."""
    cuda = sys.modules["numba.cuda"]
    example = []
    for action, loop_dtype, value in zip(actions, loop_dtypes, args, strict=True):
        if action == _CAST:
            example.append(np.zeros(1, loop_dtype)[0])
        elif action == _COPY:
            example.append(kernels.copy_twin(value))
        else:
            example.append(value)
    example.append(out if out is not None else cuda.device_array(shape, dtype))
    return tuple(example)


def _stager(ufunc: Any, core: Any, pattern: stagers.Pattern) -> Any:
    """The ufunc's stager for ``pattern`` over ``core``, made once."""
    from fastlaunch.dispatcher import jit

    made = ufunc.__dict__.setdefault("_fastlaunch_stagers", {})
    key = (id(core), pattern)
    found = made.get(key)
    if found is None or found[0] is not core:
        found = made[key] = (core, stagers.make(core, pattern, jit, sys.modules["numba.cuda"]))
    return found[1]
