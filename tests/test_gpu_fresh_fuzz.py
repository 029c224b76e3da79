"""A differential fuzz of launches over fresh and changing objects (issue "fresh objects"):
seeded sequences of steps, each launching one kernel twice over the same arguments, by
numba-cuda's own launch path (the reference: it reads every argument afresh on every launch)
and by fastlaunch, and comparing the outputs bit for bit. A step repeats the last arguments,
makes new arrays (numba, CuPy, torch, CUDA Array Interface objects, views of them), drops
and reallocates an array of the same size (its memory is likely reused), mutates one in
place (values; a torch tensor's storage with ``set_`` and ``resize_``),
or launches on a new stream. Run one seed again with ``FASTLAUNCH_FRESH_SEEDS=17`` (or a
range, ``0-39``); ``FASTLAUNCH_FRESH_STEPS`` sets the steps per seed."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
from arrays import CAIView
from numba import cuda
from numba.cuda.decorators import jit as numba_jit

import fastlaunch as fl

pytestmark = pytest.mark.gpu

N = 64  # output elements
SLOTS = 3  # array parameters of the kernel
DTYPES = ["float32", "float64", "int32"]

SOURCE = """
def kernel(out, a, b, c):
    i = cuda.grid(1)
    if i < out.size:
        total = 0.0
        if i < a.size:
            total += a[i % a.shape[0]]
        if i < b.size:
            total += b[i % b.shape[0]] * 2
        if i < c.size:
            total += c[i % c.shape[0]] * 3
        out[i] = total + a.shape[0] * 1000 + b.shape[0] * 100000 + c.shape[0] * 10000000
"""


def seeds() -> list[int]:
    spec = os.environ.get("FASTLAUNCH_FRESH_SEEDS", "0-19")
    if "-" in spec:
        lo, hi = spec.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in spec.split(",")]


def sources() -> list[str]:
    found = ["numba", "numba-view", "cai"]
    for module in ("cupy", "torch"):
        try:
            __import__(module)
            found.append(module)
        except ImportError:
            pass
    return found


def new_array(rng: random.Random, source: str, dtype: str):
    length = rng.choice([N // 2, N, N + 7])
    host = np.random.default_rng(rng.randint(0, 2**32)).uniform(-9, 9, length).astype(dtype)
    if source == "numba":
        return cuda.to_device(host)
    if source == "numba-view":
        return cuda.to_device(np.repeat(host, 2))[::2]
    if source == "cai":
        return CAIView(cuda.to_device(host))
    if source == "cupy":
        import cupy

        return cupy.asarray(host)
    import torch

    return torch.as_tensor(host, device="cuda")


def mutate(rng: random.Random, array) -> str:
    """Changes ``array`` in place, as its library allows; what was done."""
    kind = type(array).__module__.split(".")[0]
    if kind == "torch":
        import torch

        choice = rng.choice(["set_", "resize_", "values"])
        if choice == "set_":
            array.set_(torch.arange(N + 3, dtype=array.dtype, device="cuda"))
            return "torch set_"
        if choice == "resize_":
            array.resize_(max(1, array.numel() - 5))
            return "torch resize_"
    if kind in ("cupy", "torch"):
        array += 1
        return "values"
    if hasattr(array, "copy_to_device") and array.is_c_contiguous():
        array.copy_to_device(np.full(array.shape, rng.randint(-5, 5), array.dtype))
        return "values"
    return "none"


def launch_both(numba_kernel, fast_kernel, args, stream) -> tuple[np.ndarray, np.ndarray]:
    outs = []
    for kernel in (numba_kernel, fast_kernel):
        out = cuda.device_array(N, np.float64)
        if stream is None:
            kernel[1, N](out, *args)
        else:
            kernel[1, N, stream](out, *args)
        cuda.synchronize()
        outs.append(out.copy_to_host())
    return outs[0], outs[1]


def run_seed(seed: int, steps: int) -> list[str]:
    rng = random.Random(seed)
    namespace = {"cuda": cuda}
    exec(SOURCE, namespace)
    numba_kernel = numba_jit(namespace["kernel"])
    fast_kernel = fl.jit(namespace["kernel"])
    available = sources()
    dtype = rng.choice(DTYPES)
    args = [new_array(rng, rng.choice(available), dtype) for _ in range(SLOTS)]
    failures, done = [], []
    for step in range(steps):
        action = rng.choice(["repeat", "repeat", "new", "reallocate", "mutate", "stream"])
        slot = rng.randrange(SLOTS)
        stream = None
        if action == "new":
            args[slot] = new_array(rng, rng.choice(available), rng.choice(DTYPES))
        elif action == "reallocate":
            source = rng.choice(available)
            args[slot] = None  # dropped first: the new array may take its memory
            args[slot] = new_array(rng, source, dtype)
        elif action == "mutate":
            action = f"mutate ({mutate(rng, args[slot])})"
        elif action == "stream":
            stream = cuda.stream()
        done.append(f"{action}@{slot}")
        try:
            expected, got = launch_both(numba_kernel, fast_kernel, args, stream)
        except Exception as error:
            failures.append(f"seed {seed} step {step} ({' '.join(done[-5:])}): {error!r}")
            break
        if expected.tobytes() != got.tobytes():
            bad = np.flatnonzero(expected != got)[:4]
            failures.append(
                f"seed {seed} step {step} ({' '.join(done[-5:])}): at {bad} numba-cuda "
                f"{expected[bad]}, fastlaunch {got[bad]}"
            )
    return failures


def test_fresh_and_changing_objects_launch_as_numba_cuda_launches_them():
    steps = int(os.environ.get("FASTLAUNCH_FRESH_STEPS", "60"))
    failures = []
    for seed in seeds():
        failures += run_seed(seed, steps)
    assert not failures, "\n".join(failures)
