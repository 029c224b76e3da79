"""What the benchmarks that run without a GPU share: the stand-in driver
(``tests/stand_in_driver/fake_cuda.c``: every call succeeds and does nothing) built and
loaded, their timing arguments, and a stand-in for numba-cuda's ``Context`` (which numba-cuda
cannot make without a GPU) for the memory API."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import weakref
from pathlib import Path
from typing import Any


def fake_driver() -> str:
    """The stand-in driver, built as a shared library; its path."""
    source = Path(__file__).parent.parent / "tests" / "stand_in_driver" / "fake_cuda.c"
    library = Path(tempfile.gettempdir()) / "fastlaunch-fake-libcuda.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return str(library)


def timing_arguments(loops: int, repeats: int) -> argparse.Namespace:
    """``--loops`` and ``--repeats`` (these defaults); runs the calling script again with the
    stand-in driver unless ``FASTLAUNCH_CUDA_DRIVER`` names a driver already."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--loops", type=int, default=loops)
    parser.add_argument("--repeats", type=int, default=repeats)
    arguments = parser.parse_args()
    if os.environ.get("FASTLAUNCH_CUDA_DRIVER") is None:
        os.environ["FASTLAUNCH_CUDA_DRIVER"] = fake_driver()
        os.execv(sys.executable, [sys.executable, *sys.argv])
    return arguments


def best_microseconds(timer: Any, arguments: argparse.Namespace) -> float:
    """``timer``'s statement in µs per call: the best of ``--repeats`` runs of ``--loops``
    calls, after 1000 untimed ones (which fill what a first call looks up once)."""
    timer.timeit(1000)
    return min(timer.repeat(arguments.repeats, arguments.loops)) / arguments.loops * 1e6


def stand_in_context() -> None:
    """Registers a stand-in for numba-cuda's ``Context`` (its memory manager numba-cuda's)
    as the current context's, where ``fastlaunch.memory.allocation`` looks it up, and sets
    the pool's release threshold as ``allocation.context()`` does."""
    import logging

    from numba.cuda.cudadrv import driver as numba_driver

    from fastlaunch import _core
    from fastlaunch.memory import allocation

    numba_driver._logger = logging.getLogger("numba.cuda.cudadrv.driver")  # set by its init

    class StandInContext:
        def __init__(self) -> None:
            self.memory_manager = numba_driver.NumbaCUDAMemoryManager(context=self)
            self.deallocations = self.memory_manager.deallocations

    context = StandInContext()
    key = _core.context_key()
    allocation._contexts[key] = context
    allocation._proxies[key] = weakref.proxy(context)
    # as allocation.context() does: the pool keeps everything, so the freed-block cache keeps
    # blocks, as on a GPU
    _core.set_pool_release_threshold(0, allocation.KEEP_EVERYTHING)
    stand_in_context.kept = context  # type: ignore[attr-defined]
