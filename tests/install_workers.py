"""Worker functions for the process-wide tests in ``test_gpu_install.py`` (spawned processes
and Dask workers import them by name). Each returns plain data. Nothing here touches CUDA,
or installs fastlaunch, at import time."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np


def install_in_worker(*_: Any) -> bool:
    """``ProcessPoolExecutor(initializer=...)`` / Dask plugin body: install in this process."""
    import fastlaunch

    fastlaunch.install()
    return fastlaunch.is_installed()


def _saxpy_source() -> Any:
    """A kernel made with plain ``numba.cuda.jit`` in the calling process."""
    from numba import cuda

    @cuda.jit
    def saxpy(out, a, x, y):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a * x[i] + y[i]

    return saxpy


def launch(index: int, kernel: Any = None, n: int = 4096, repeats: int = 2000) -> dict[str, Any]:
    """Makes (or takes) a kernel, launches it ``repeats`` times on numba device arrays, checks
    the result, and reports the kernel's class, how it launched and the host time per launch."""
    from numba import cuda

    import fastlaunch

    kernel = _saxpy_source() if kernel is None else kernel
    x = np.arange(n, dtype=np.float32)
    y = np.full(n, index, dtype=np.float32)
    d_out = cuda.device_array(n, np.float32)
    d_x, d_y = cuda.to_device(x), cuda.to_device(y)
    a = np.float32(2.0)
    configured = kernel[(n + 127) // 128, 128]
    configured(d_out, a, d_x, d_y)  # compiles
    cuda.synchronize()
    started = time.perf_counter()
    for _ in range(repeats):
        configured(d_out, a, d_x, d_y)
    per_launch_us = (time.perf_counter() - started) / repeats * 1e6
    cuda.synchronize()
    ok = bool(np.array_equal(d_out.copy_to_host(), 2 * x + y))
    return {
        "index": index,
        "pid": os.getpid(),
        "installed": fastlaunch.is_installed(),
        "kernel": f"{type(kernel).__module__}.{type(kernel).__qualname__}",
        "fastlaunch_kernel": isinstance(kernel, fastlaunch.Kernel),
        "numba_launches": getattr(kernel, "numba_launches", None),
        "overloads": getattr(kernel, "overload_count", None),
        "per_launch_us": round(per_launch_us, 2),
        "ok": ok,
    }


def torch_spawn_worker(rank: int, out_dir: str) -> None:
    """``torch.multiprocessing.spawn`` target: installs, then launches a ``cuda.jit`` kernel
    on torch tensors; the report goes to ``out_dir/<rank>.json``."""
    import json

    import torch
    from numba import cuda

    import fastlaunch

    fastlaunch.install()

    @cuda.jit
    def add(out, x, v):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = x[i] + v

    n = 4096
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    out = torch.empty_like(x)
    add[(n + 127) // 128, 128](out, x, float(rank))
    torch.cuda.synchronize()
    report = {
        "rank": rank,
        "kernel": type(add).__qualname__,
        "numba_launches": add.numba_launches,
        "ok": bool(torch.equal(out, x + rank)),
    }
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as f:
        json.dump(report, f)


def kernel_kind(index: int, kernel: Any = None) -> dict[str, Any]:
    """No GPU needed: whether this process is installed and what a ``numba.cuda.jit`` kernel
    (or the one given) is here."""
    import fastlaunch

    kernel = _saxpy_source() if kernel is None else kernel
    return {
        "index": index,
        "pid": os.getpid(),
        "installed": fastlaunch.is_installed(),
        "kernel": type(kernel).__name__,
    }


def run_on_dask_workers(task: Any, kernel: Any) -> tuple[list[Any], list[Any]]:
    """Runs ``task`` on the two worker processes of a Dask ``LocalCluster`` whose workers a
    plugin installs fastlaunch in: once making its own kernel, once given ``kernel``
    (shipped from here). Returns both lists of results."""
    import distributed

    class InstallFastlaunch(distributed.WorkerPlugin):
        def setup(self, worker: Any) -> None:
            install_in_worker()

    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        client.register_plugin(InstallFastlaunch())
        made_there = client.gather(client.map(task, range(2), pure=False))
        shipped = client.gather(client.map(task, range(2), kernel=kernel, pure=False))
    return made_there, shipped
