"""The kernels a plan launches: numba-cuda's kernels as fastlaunch kernels, and the block
size numba-cuda's ``forall`` would give them, asked once per plan."""

from __future__ import annotations

import sys
from typing import Any

from fastlaunch import _core
from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.dispatcher import Kernel, numba_type


def as_fastlaunch(kernel: Any) -> Any:
    """``kernel`` as a fastlaunch kernel: a ufunc or reduction made before ``install()``
    holds numba-cuda's dispatcher, wrapped once (its compiled code is numba-cuda's, shared)."""
    if isinstance(kernel, Kernel):
        return kernel
    made = kernel.__dict__.get("_fastlaunch_kernel")
    if made is None:
        made = kernel._fastlaunch_kernel = Kernel(kernel)
    return made


def block_size(kernel: Any, example: tuple) -> int:
    """numba-cuda's ``forall`` block size for ``kernel`` over arguments of ``example``'s
    types, as fastlaunch types them (the overload the plan's launches use), compiled now:
    asked once, where ``forall`` asks the driver on every call."""
    argtypes = tuple(numba_type(d) for d in _core.describe(_core.fingerprint(example)))
    return numba_cuda.forall_block_size(kernel.dispatcher, argtypes, 0)


def copy_twin(host: Any) -> Any:
    """A device array of the shape, dtype and order that copying the contiguous host array
    ``host`` to the device makes: what a plan's kernel is typed for where a call passes
    ``host``."""
    cuda = sys.modules["numba.cuda"]
    order = "C" if host.flags.c_contiguous else "F"
    return cuda.device_array(host.shape, host.dtype, order=order)
