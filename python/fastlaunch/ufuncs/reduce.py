"""A ``cuda.reduce`` call on fastlaunch's path.

numba-cuda's ``Reduce.__call__`` slices its input and its partial results in Python and
launches up to three kernels through numba-cuda's launch path. Here a call over a numba-cuda
device array remembers, per dtype, size and device, the launches it makes (grid, block and
which of the three run), and launches the same kernel with the same arguments. Where a
launch covers a whole array (an array whose size is a multiple of the block size, or smaller
than one block) the array is passed as it is, with no slice; only a size with both full and
partial blocks slices, as numba-cuda does. With ``res`` the last kernel writes the result
into ``res[0]`` itself, where numba-cuda copies it there from its partials; without ``res``
the result is read back as numba-cuda reads it (``partials[0]``). A contiguous host array is
copied to the device once, where numba-cuda copies each slice it launches with (in and back),
with numba-cuda's warning for each of those launches.

What a plan does not cover goes to numba-cuda's own call: non-contiguous host arrays (which
numba-cuda refuses) and host arrays with a stream, a ``res`` that is not a one-dimensional
numba-cuda device array of the input's dtype, arrays of other than one dimension, empty
arrays."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from fastlaunch import _core
from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.ufuncs import arguments, kernels, plans

#: numba-cuda's limit on the first kernel's blocks (two warps of partial results)
MAX_FULL_BLOCKS = 64
#: partials arrays a plan keeps for later calls (one per thread calling it at once)
MAX_SPARES = 4


class Plan:
    """The launches of a reduction over ``size`` elements."""

    __slots__ = (
        "kernel",
        "blocksize",
        "size_full",
        "full_blocks",
        "partial",
        "partials_size",
        "spares",
        "legacy_default_stream",
    )

    def __init__(self, kernel: Any, size: int) -> None:
        self.kernel = kernel
        self.blocksize = numba_cuda.reduce_block_size()
        size_full = self.size_full = (size // self.blocksize) * self.blocksize
        self.partial = size - size_full
        # the blocks stride over all full chunks: at most MAX_FULL_BLOCKS of them
        self.full_blocks = min(size_full // self.blocksize, MAX_FULL_BLOCKS)
        self.partials_size = self.full_blocks + (1 if self.partial else 0)
        # partials arrays no launch uses any more (see `_done_with`)
        self.spares: list[Any] = []
        # numba-cuda's default stream (stream 0) is the legacy one, not one per thread
        self.legacy_default_stream = not numba_cuda.config().CUDA_PER_THREAD_DEFAULT_STREAM

    def run(self, array: Any, res: Any, init: Any, stream: Any) -> Any:
        kernel, blocksize, size_full = self.kernel, self.blocksize, self.size_full
        full_blocks, partial = self.full_blocks, self.partial
        # spares are taken and given back by calls on the default stream only, outside a
        # capture (whose launches there are captured: they run at each replay, later)
        recycles = (stream == 0 or stream is None) and _core.followed_capture() is None
        if self.partials_size == 1 and res is not None:
            partials = res  # the one kernel writes the result in place
        elif recycles and self.spares:
            try:
                partials = self.spares.pop()  # atomic: no two calls hold the same spare
            except IndexError:  # another thread took the last one
                partials = self._new_partials(array.dtype)
        else:
            partials = self._new_partials(array.dtype)
        if full_blocks:
            if partial:
                kernel[full_blocks, blocksize, stream](
                    array[:size_full], partials[:full_blocks], init, True
                )
            else:
                kernel[full_blocks, blocksize, stream](array, partials, init, True)
        if partial:
            if full_blocks:
                kernel[1, partial, stream](array[size_full:], partials[full_blocks:], init, False)
            else:
                kernel[1, partial, stream](array, partials, init, True)
        if self.partials_size > 1:
            target = partials if res is None else res
            kernel[1, self.partials_size, stream](partials, target, init, False)
        if res is not None:
            if recycles and partials is not res:
                self._done_with(partials, synchronized=False)
            return None
        value = first_element(partials)
        if recycles:
            self._done_with(partials, synchronized=True)
        return value

    def _new_partials(self, dtype: Any) -> Any:
        return sys.modules["numba.cuda"].device_array(shape=self.partials_size, dtype=dtype)

    def _done_with(self, partials: Any, synchronized: bool) -> None:
        """Keeps ``partials``, which this call's launches on the default stream used, for a
        later call there where none of them can still touch them when that call's launches
        run: either this call's result was read back there (they are done), or that stream
        is the legacy one (which runs every later call's launches after them). numba-cuda
        allocates partials per call; a spare saves the array object and its allocation."""
        if len(self.spares) >= MAX_SPARES:
            return
        if synchronized or self.legacy_default_stream:
            self.spares.append(partials)


def first_element(array: Any) -> Any:
    """``array[0]`` as numba-cuda's ``DeviceNDArray.__getitem__`` reads it: one element copied
    back on the default stream (which waits for the work there), as a NumPy scalar; without
    the view and pointer objects numba-cuda makes on the way."""
    host = np.empty(1, dtype=array.dtype)
    _core.copy_to_host(host, array.device_ctypes_pointer.value, 0, host.nbytes)
    return host[0]


def call(reduction: Any, args: tuple, kws: dict, numba_call: Any) -> Any:
    """``reduction(*args, **kws)``: by a remembered plan, or numba-cuda's ``numba_call``."""
    if len(args) != 1 or not set(kws) <= {"size", "res", "init", "stream"}:
        return numba_call(reduction, *args, **kws)
    (array,) = args
    res = kws.get("res")
    stream = kws.get("stream", 0)
    kind = arguments.kind_of(type(array))
    if kind == arguments.NUMBA_ARRAY:
        takes = array.ndim == 1
    else:
        takes = _plain_host(array, kind, stream)
        if not takes and kind == arguments.HOST_ARRAY:
            _refuse_a_host_array_on_a_stream(reduction, array, kws, stream)
    if not takes:
        return numba_call(reduction, *args, **kws)
    dtype = array.dtype
    if res is not None and (
        arguments.kind_of(type(res)) != arguments.NUMBA_ARRAY
        or res.ndim != 1
        or res.dtype != dtype
        or res.size < 1
    ):
        return numba_call(reduction, *args, **kws)
    if kws.get("size") is not None:
        array = array[: kws["size"]]  # as numba-cuda slices it
    size = array.shape[0]
    if size < 1:
        return numba_call(reduction, *args, **kws)
    init = dtype.type(kws.get("init", 0))  # numba-cuda's cast, before its compile
    key = (plans.device(), dtype, size)
    plan = plans.find(reduction, key, _plan, reduction, dtype, size)
    if kind == arguments.HOST_ARRAY:
        array = _to_device_as_numba_would(plan, array)
    return plan.run(array, res, init, stream)


def _plain_host(array: Any, kind: int, stream: Any) -> bool:
    """A host array whose reduction a plan makes: one-dimensional and contiguous (numba-cuda
    refuses others), on the default stream."""
    return (
        kind == arguments.HOST_ARRAY
        and array.ndim == 1
        and array.flags.c_contiguous
        and (stream == 0 or stream is None)
    )


def _refuse_a_host_array_on_a_stream(reduction: Any, array: Any, kws: dict, stream: Any) -> None:
    """Raises what numba-cuda's own call raises for a host array on a stream other than the
    default one, where it raises: numba-cuda 0.30's launch reads a host argument through
    ``_make_strided_memory_view`` with the launch's stream, which NumPy's ``__dlpack__``
    refuses ("NumPy only supports stream=None."). numba-cuda's call under ``install()``
    launches fastlaunch's kernels, which copy such an array on any stream, so the refusal is
    made here, by numba-cuda's own function, after what numba-cuda does first (the cast of
    ``init``, the kernel's compile). Nothing is raised where numba-cuda launches nothing (an
    empty slice: it returns ``init``), for numba-cuda versions without that function (they
    copy the array), or for streams numba-cuda's launch does not take (fastlaunch's kernels
    take them: differences.md)."""
    if stream == 0 or stream is None or array.ndim != 1:
        return  # numba-cuda's own call: a result, or its TypeError for other dimensions
    devicearray = sys.modules.get("numba.cuda.cudadrv.devicearray")
    host_view = getattr(devicearray, "_make_strided_memory_view", None)
    if host_view is None:
        return
    try:
        handle = numba_cuda.core_stream(stream).handle
    except Exception:
        return
    if kws.get("size") is not None:
        array = array[: kws["size"]]
    if array.size < 1:
        return
    try:
        host_view(np.asanyarray(array), stream_ptr=handle)  # what numba-cuda's launch reads
    except Exception as error:
        refusal = error
    else:
        return
    array.dtype.type(kws.get("init", 0))  # numba-cuda's cast: raises and warns first
    reduction._compile(array.dtype)
    raise refusal


def _to_device_as_numba_would(plan: Plan, array: Any) -> Any:
    """A host array's one copy to the device. numba-cuda passes the host array's slices to
    its kernels, which copy each in (and back: the kernels only read them); its warning for
    each such launch is given here as it gives it."""
    for _ in range((plan.full_blocks > 0) + (plan.partial > 0)):
        plan.kernel._warn_implicit_copy()
    return sys.modules["numba.cuda"].to_device(array)


def _plan(reduction: Any, dtype: Any, size: int) -> Plan:
    return Plan(kernels.as_fastlaunch(reduction._compile(dtype)), size)
