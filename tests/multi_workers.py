"""Worker functions for the multi-process tests in ``test_gpu_multi.py``.

Processes started with ``spawn`` receive their function by reference (module and name), so
the workers live in this importable module rather than in the test file. Each returns only
plain data (ints, floats, bools, strings) so results pickle back to the parent. Nothing
here touches CUDA at import time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from numba import cuda

import fastlaunch as fl


@fl.jit
def scale(out, x, factor):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] * factor


@fl.jit
def add_one(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] += 1


def child_info() -> dict[str, Any]:
    """What a spawned child sees: its pid and whether it finds fastlaunch's GPUs (no GPU
    work; the CPU-only test of the spawn plumbing)."""
    available = fl.is_available()
    return {
        "pid": os.getpid(),
        "available": available,
        "gpus": len(fl.gpus) if available else 0,
        "fastlaunch": fl.__file__,
    }


def launch_on_gpu(index: int, n: int = 4096, kernel: Any = None) -> dict[str, Any]:
    """Selects GPU ``index % len(gpus)``, compiles and launches a kernel there, verifies the
    result on the host and reports where everything ran. ``kernel`` (a pickled fastlaunch
    kernel) replaces this module's ``scale``."""
    kernel = scale if kernel is None else kernel
    ordinal = index % len(fl.gpus)
    factor = np.float32(index + 1)
    expected = np.arange(n, dtype=np.float32) * factor
    with fl.gpus[ordinal]:
        current = fl.gpus.current
        x = cuda.to_device(np.arange(n, dtype=np.float32))  # numba follows the current context
        out = cuda.device_array(n, np.float32)
        kernel[(n + 127) // 128, 128](out, x, factor)
        fl.synchronize()
        host = out.copy_to_host()
        pointer_device = fl._core.pointer_device(out.device_ctypes_pointer.value)
    return {
        "index": index,
        "pid": os.getpid(),
        "device": ordinal,
        "current": None if current is None else current.id,
        "pointer_device": pointer_device,
        "ok": bool(np.array_equal(host, expected)),
        "overloads": kernel.overload_count,
        "misses": kernel.miss_count,
    }


def torch_spawn_worker(rank: int, out_dir: str, n: int = 4096) -> None:
    """``torch.multiprocessing.spawn`` target: torch tensors on GPU ``rank % len(gpus)``,
    launched by fastlaunch; the report goes to ``out_dir/<rank>.json`` (spawn returns
    nothing)."""
    import torch

    ordinal = rank % len(fl.gpus)
    torch.cuda.set_device(ordinal)
    device = f"cuda:{ordinal}"
    x = torch.arange(n, dtype=torch.float32, device=device)
    out = torch.empty(n, dtype=torch.float32, device=device)
    with fl.gpus[ordinal]:
        scale[(n + 127) // 128, 128](out, x, np.float32(rank + 2))
        add_one[(n + 127) // 128, 128](out)
    torch.cuda.synchronize(device)
    ok = torch.equal(out, x * (rank + 2) + 1)
    report = {
        "rank": rank,
        "pid": os.getpid(),
        "device": ordinal,
        "tensor_device": out.device.index,
        "ok": bool(ok),
    }
    Path(out_dir, f"{rank}.json").write_text(json.dumps(report))


def launch_with_array_on(array_device: int, launch_device: int, n: int = 1024) -> dict[str, Any]:
    """Launches ``add_one`` on ``launch_device`` with an array allocated on ``array_device``
    (in a child process, so that a faulting launch cannot poison the tests' own
    contexts). Reports what was raised, or whether the result is right."""
    with cuda.gpus[array_device]:
        a = cuda.to_device(np.arange(n, dtype=np.int64))
    raised: BaseException | None = None
    try:
        with fl.gpus[launch_device]:
            add_one[(n + 127) // 128, 128](a)
            fl.synchronize()
    except Exception as e:  # reported to the parent, which decides
        raised = e
    report: dict[str, Any] = {
        "raised": None if raised is None else type(raised).__name__,
        "message": "" if raised is None else str(raised),
        "argument_error": isinstance(raised, fl.KernelArgumentError | ValueError),
        "driver_error": isinstance(raised, fl.CudaError),
        "ok": None,
    }
    if raised is None:
        with cuda.gpus[array_device]:
            report["ok"] = bool(np.array_equal(a.copy_to_host(), np.arange(n) + 1))
    return report
