"""A CUDA gufunc call (``guvectorize(target="cuda")``) on fastlaunch's path.

numba-cuda's ``GeneralizedUFunc.__call__`` builds a call-steps object per call, schedules the
loop from the input shapes, looks the kernel up by dtypes, allocates the outputs, reshapes
every argument into a new array object and launches through ``forall``, which asks the driver
for a block size. Here the first call with given argument types and shapes asks numba-cuda's
own scheduler (``GUFuncEngine.schedule``, so its errors are numba-cuda's) and makes a
:class:`Plan`: the kernel, its block size (asked once), the outputs' shapes and dtypes. Later
calls with the same key copy host inputs, allocate the outputs, launch once and copy back if
every input was on the host.

A plan covers calls whose arguments are already in the form numba-cuda's kernel takes: one
loop dimension, every input of shape ``(loop, *core)``, and outputs of the loop's dtypes
allocated or given (one output, ``out=`` a numba-cuda device array of its shape and dtype).
Everything else (scalar or broadcast inputs, several or no loop dimensions, casts to another
loop, positional outputs, host arrays with a stream) is numba-cuda's own call."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from fastlaunch.ufuncs import arguments, kernels, plans
from fastlaunch.ufuncs.arguments import keys_of
from fastlaunch.ufuncs.outputs import Output
from fastlaunch.ufuncs.plans import UNPLANNED


class Plan:
    """A gufunc call's work, fixed by its key."""

    __slots__ = (
        "copies",
        "copies_any",
        "kernel",
        "griddim",
        "blockdim",
        "outputs",
        "single",
        "to_host",
        "launchers",
    )

    def __init__(
        self,
        copies: tuple[bool, ...],
        kernel: Any,
        griddim: int,
        blockdim: int,
        outputs: tuple[Output, ...],
        to_host: bool,
    ) -> None:
        self.copies = copies
        self.copies_any = any(copies)
        self.kernel = kernel
        self.griddim = griddim
        self.blockdim = blockdim
        self.outputs = outputs
        # the one output of most gufuncs (a call passes it alone, no list)
        self.single = outputs[0] if len(outputs) == 1 else None
        self.to_host = to_host
        self.launchers: tuple[Any, Any] = (None, None)

    def run(self, args: tuple, out: Any, stream: Any) -> Any:
        if self.copies_any:
            to_device = sys.modules["numba.cuda"].to_device
            args = tuple(
                to_device(value, stream=stream) if copy else value
                for copy, value in zip(self.copies, args, strict=True)
            )
        last_stream, launcher = self.launchers
        if launcher is None or last_stream is not stream:
            launcher = self.kernel[self.griddim, self.blockdim, stream]
            self.launchers = (stream, launcher)
        if self.single is not None:
            output = self.single.new(stream) if out is None else out
            launcher(*args, output)
            return output.copy_to_host() if self.to_host else output
        outputs = [output.new(stream) for output in self.outputs]  # (out= only with one)
        launcher(*args, *outputs)
        if self.to_host:
            outputs = [output.copy_to_host() for output in outputs]
        return tuple(outputs)


def call(gufunc: Any, args: tuple, kws: dict, numba_call: Any) -> Any:
    """``gufunc(*args, **kws)``: by a remembered plan, or numba-cuda's ``numba_call``."""
    if kws:
        stream = kws.get("stream", 0)
        out = kws.get("out")
        if len(kws) > ("stream" in kws) + ("out" in kws):
            return numba_call(gufunc, *args, **kws)
        out_key = None if out is None else arguments.key_of(out)
        if out is not None and (
            out_key is None or out_key[0] != arguments.NUMBA_ARRAY or gufunc.engine.nout != 1
        ):
            return numba_call(gufunc, *args, **kws)
    else:
        stream, out, out_key = 0, None, None
    key = (plans.device(), out_key, stream == 0 or stream is None, keys_of(args))
    remembered = gufunc.__dict__.get("_fastlaunch_plans")  # (``plans.find``, without its frame)
    plan = UNPLANNED if remembered is None else remembered.get(key, UNPLANNED)
    if plan is UNPLANNED:
        plan = plans.find(gufunc, key, _plan, gufunc, args, out, stream)
    if plan is None:
        return numba_call(gufunc, *args, **kws)
    return plan.run(args, out, stream)


def _plan(gufunc: Any, args: tuple, out: Any, stream: Any) -> Plan | None:
    """The plan of a call, or None (numba-cuda's own call, which raises its own errors)."""
    if len(args) != gufunc.engine.nin:
        return None  # outputs given positionally, or an error
    kinds = [arguments.kind_of(type(value)) for value in args]
    if arguments.SCALAR in kinds or arguments.OTHER in kinds:
        return None  # scalars (numba-cuda broadcasts them), and what only numba-cuda takes
    shapes = [arguments.shape_of(value) for value in args]
    try:
        schedule = gufunc.engine.schedule(shapes)
    except Exception:
        return None
    dtypes = tuple(np.dtype(_dtype(value, kind)) for value, kind in zip(args, kinds, strict=True))
    found = gufunc.kernelmap.get(dtypes)
    if found is None or len(schedule.loopdims) != 1:
        return None  # casts to another loop, no or several loop dimensions
    out_dtypes, kernel = found
    loop = schedule.loopdims[0]
    if loop < 1 or any(
        shape != (loop, *core) for shape, core in zip(shapes, schedule.ishapes, strict=True)
    ):
        return None  # broadcast or pinned inputs: numba-cuda reshapes them
    host = [value for kind, value in zip(kinds, args, strict=True) if kind == arguments.HOST_ARRAY]
    if host and not (stream == 0 or stream is None):
        return None
    if not all(value.flags.c_contiguous or value.flags.f_contiguous for value in host):
        return None
    outputs = tuple(
        Output(tuple(shape), np.dtype(dtype))
        for shape, dtype in zip(schedule.output_shapes, out_dtypes, strict=True)
    )
    if out is not None and (tuple(out.shape), out.dtype) != (outputs[0].shape, outputs[0].dtype):
        return None
    kernel = kernels.as_fastlaunch(kernel)
    copies = tuple(kind == arguments.HOST_ARRAY for kind in kinds)
    example = [
        kernels.copy_twin(value) if copy else value
        for copy, value in zip(copies, args, strict=True)
    ]
    example += [out] if out is not None else [output.new(0) for output in outputs]
    blockdim = kernels.block_size(kernel, tuple(example))
    griddim = (loop + blockdim - 1) // blockdim
    to_host = out is None and all(copies)
    return Plan(copies, kernel, griddim, blockdim, outputs, to_host)


def _dtype(value: Any, kind: int) -> Any:
    if kind == arguments.CAI_ARRAY:
        return np.dtype(value.__cuda_array_interface__["typestr"])
    return value.dtype
