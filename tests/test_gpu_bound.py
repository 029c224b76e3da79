"""Bound launches on the GPU: ``kernel[...].bind(*args)`` packs once, calling it launches
again, and ``set_arg`` / ``set_args`` replace arguments in place (rust/ext/src/bound.rs,
packed.rs). Bound launches of other sources and settings are tested with them: cuda.core
buffers (test_gpu_core_objects.py), clusters (test_gpu_graphs.py), devices
(test_gpu_multi.py), records (test_gpu_records.py)."""

from __future__ import annotations

import numpy as np
import pytest
from arrays import to_host
from numba import cuda

import fastlaunch as fl

pytestmark = pytest.mark.gpu


@fl.jit
def axpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


@fl.jit
def scale_into(out, a, factor):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] * factor


def test_bound_launches_pack_once_and_replace_arguments_in_place():
    a = cuda.to_device(np.arange(64, dtype=np.float32))
    b = cuda.to_device(np.ones(64, np.float32))
    out = cuda.to_device(np.zeros(64, np.float32))
    launch = axpy[1, 64].bind(out, 2.0, a, b)
    misses = axpy.miss_count
    launch()
    fl.synchronize()
    np.testing.assert_array_equal(to_host(out), 2 * np.arange(64) + 1)
    launch.set_arg(1, 3.0)
    launch.set_arg(3, a)
    launch()
    fl.synchronize()
    np.testing.assert_array_equal(to_host(out), 4 * np.arange(64))
    other = cuda.to_device(np.zeros(64, np.float32))
    launch.set_args(other, 1.0, b, b)
    launch()
    fl.synchronize()
    np.testing.assert_array_equal(to_host(other), np.full(64, 2.0))
    assert axpy.miss_count == misses
    with pytest.raises(fl.KernelArgumentError, match="same type"):
        launch.set_arg(0, cuda.to_device(np.zeros(64, np.float64)))
    with pytest.raises(IndexError):
        launch.set_arg(9, 1.0)


def test_bound_launch_with_every_source():
    torch = pytest.importorskip("torch")
    out = torch.zeros(256, device="cuda")
    a = torch.arange(256, dtype=torch.float32, device="cuda")
    bound = scale_into[2, 128].bind(out, a, np.float32(3))
    misses = scale_into.miss_count
    for _ in range(10):
        bound()
    torch.cuda.synchronize()
    assert torch.equal(out, a * 3)
    assert scale_into.miss_count == misses
