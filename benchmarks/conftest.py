"""Fixtures for the launch-overhead benchmarks.

Everything here is skipped unless there is a CUDA GPU and ``fastlaunch.is_available()``;
with ``FASTLAUNCH_BENCH_ALLOW_NO_FASTLAUNCH=1`` (``run.py --allow-missing-fastlaunch``) the
peers still run when only fastlaunch is missing. Array sources (numba device arrays, CuPy,
torch) and the peer libraries (cuda.core, cuda.bindings, Triton) skip with a message when
they are not installed.
"""

from __future__ import annotations

import functools
import math
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# numba warns about small grids when a launch configuration is made; [1, 1] is on purpose.
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

HERE = Path(__file__).resolve().parent
ALLOW_NO_FASTLAUNCH_ENV = "FASTLAUNCH_BENCH_ALLOW_NO_FASTLAUNCH"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fastlaunch: a benchmark that launches through fastlaunch")


@functools.cache
def availability() -> tuple[bool, bool, str]:
    """(a CUDA GPU is usable, fastlaunch is usable, why not)."""
    fastlaunch_ok, why = False, ""
    try:
        import fastlaunch

        fastlaunch_ok = bool(fastlaunch.is_available())
        if not fastlaunch_ok:
            why = "fastlaunch.is_available() is False"
    except Exception as error:  # an unbuilt or broken extension: report, do not crash
        why = f"fastlaunch does not import ({type(error).__name__}: {error})"
    try:
        from numba import cuda

        gpu_ok = bool(cuda.is_available())
    except Exception as error:
        return False, fastlaunch_ok, f"numba-cuda does not import ({error})"
    if not gpu_ok:
        return False, fastlaunch_ok, "no CUDA GPU (numba.cuda.is_available() is False)"
    return True, fastlaunch_ok, why


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if HERE in Path(str(item.path)).resolve().parents]
    if not ours:
        return
    gpu_ok, fastlaunch_ok, why = availability()
    if gpu_ok and fastlaunch_ok:
        return
    peers_only = gpu_ok and os.environ.get(ALLOW_NO_FASTLAUNCH_ENV) == "1"
    skip = pytest.mark.skip(reason=f"launch benchmarks need a GPU and fastlaunch: {why}")
    for item in ours:
        if not peers_only or item.get_closest_marker("fastlaunch") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _numba_ready() -> Iterator[None]:
    """numba-cuda imported with NumPy 2.5's removed ``row_stack`` restored, and its
    small-grid performance warnings silenced."""
    from benchmarks.harness import apply_numpy_shim

    apply_numpy_shim()
    from numba.core.errors import NumbaPerformanceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumbaPerformanceWarning)
        yield


@pytest.fixture(scope="session")
def sync() -> Callable[[], None]:
    """Waits for all work in the current (device 0 primary) context; every library here
    uses that context."""
    from numba import cuda

    cuda.current_context()  # make device 0's primary context current
    return cuda.synchronize


@pytest.fixture(scope="session")
def cupy() -> Any:
    return pytest.importorskip("cupy", reason="CuPy is not installed")


@pytest.fixture(scope="session")
def torch() -> Any:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA support here")
    return torch


@pytest.fixture(scope="session")
def triton(torch: Any) -> Any:
    return pytest.importorskip("triton", reason="Triton is not installed")


@pytest.fixture(scope="session")
def cuda_core() -> Any:
    return pytest.importorskip("cuda.core", reason="cuda.core is not installed")


@pytest.fixture(scope="session")
def cuda_driver() -> Any:
    """``cuda.bindings.driver`` (the raw driver API)."""
    return pytest.importorskip("cuda.bindings.driver", reason="cuda.bindings is not installed")


@pytest.fixture
def make_arrays(request: pytest.FixtureRequest) -> Callable[..., list]:
    """``make_arrays(source, n, shape, arrays="fresh")``: ``n`` float32 C-order device arrays
    of ``shape`` from ``source`` ("numba", "cupy", "torch"; "none" for no arrays), skipping
    the test when that library is missing. ``arrays="views"`` makes them slices of one
    buffer (``buf[i * size : (i + 1) * size]``, reshaped): torch views carry ``_base``, CuPy
    views share ``data.mem``, numba views are device arrays over the buffer's memory."""

    def make(source: str, n: int, shape: tuple[int, ...], arrays: str = "fresh") -> list:
        if n == 0 or source == "none":
            return []
        size = math.prod(shape)
        if source == "numba":
            import numpy as np
            from numba import cuda

            if arrays == "views":
                buffer = cuda.device_array(n * size, dtype=np.float32)
                return [buffer[i * size : (i + 1) * size].reshape(shape) for i in range(n)]
            return [cuda.device_array(shape, dtype=np.float32) for _ in range(n)]
        if source == "cupy":
            import numpy as np

            cupy = request.getfixturevalue("cupy")
            if arrays == "views":
                buffer = cupy.empty(n * size, dtype=np.float32)
                return [buffer[i * size : (i + 1) * size].reshape(shape) for i in range(n)]
            return [cupy.empty(shape, dtype=np.float32) for _ in range(n)]
        if source == "torch":
            torch = request.getfixturevalue("torch")
            if arrays == "views":
                buffer = torch.empty(n * size, dtype=torch.float32, device="cuda:0")
                return [buffer[i * size : (i + 1) * size].view(shape) for i in range(n)]
            return [torch.empty(shape, dtype=torch.float32, device="cuda:0") for _ in range(n)]
        raise ValueError(f"unknown array source {source!r}")

    return make
