"""What numba-cuda's own suite found once host arrays were packed by fastlaunch, side by side
with numba-cuda: `recompile()` takes the new code (fastlaunch forgets its overloads too), and
extensions appended to a kernel after it was made still rewrite its arguments (numba-cuda
launches it)."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda
from numba.cuda.args import wrap_arg

import fastlaunch as fl

pytestmark = pytest.mark.gpu

OFFSET = 1


def add_offset(r, x):
    r[()] = x[()] + OFFSET


def test_recompile_takes_a_changed_global_as_numba_cuda_does():
    global OFFSET
    results = []
    for jit in (cuda.jit, fl.jit):
        OFFSET = 1
        kernel = jit(add_offset)
        r, x = np.zeros((), np.int64), np.array(2, np.int64)
        kernel[1, 1](r, x)
        before = int(r)
        OFFSET = 10
        kernel[1, 1](r, x)
        unchanged = int(r)
        kernel.recompile()
        kernel[1, 1](r, x)
        results.append((before, unchanged, int(r)))
    OFFSET = 1
    assert results[0] == results[1] == (3, 3, 12)


class DefaultIn:
    def prepare_args(self, ty, val, **kwargs):
        return ty, wrap_arg(val, default=cuda.In)


def set_three(a):
    a[0] = 3


def test_extensions_appended_after_the_kernel_was_made_rewrite_its_arguments():
    seen = []
    for jit in (cuda.jit, fl.jit):
        kernel = jit(set_three)
        kernel.extensions.append(DefaultIn())
        host = np.zeros(1, np.int64)
        kernel[1, 1](host)  # an In array: not copied back
        seen.append(int(host[0]))
    assert seen == [0, 0]


def test_installed_transfers_do_not_go_through_numba_cudas_driver_functions():
    """A deliberate difference (docs/differences.md): replacing numba-cuda's
    `driver.cuMemcpyHtoD` / `cuMemcpyDtoH` (numba-cuda's `test_no_transfer_for_device_data`)
    does not touch the memory API's transfers under `install()`."""
    from numba.cuda.cudadrv import driver as numba_driver

    def refuse(*args, **kwargs):
        raise AssertionError("numba-cuda's transfer function was called")

    names = ("cuMemcpyHtoD", "cuMemcpyDtoH")
    saved = {name: getattr(numba_driver.driver, name) for name in names}
    with fl.install():
        try:
            for name in names:
                setattr(numba_driver.driver, name, refuse)
            back = cuda.to_device(np.arange(4.0)).copy_to_host()
        finally:
            for name, function in saved.items():
                setattr(numba_driver.driver, name, function)
    assert back.tolist() == [0.0, 1.0, 2.0, 3.0]
