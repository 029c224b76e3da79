"""Tests marked ``gpu`` are skipped when fastlaunch finds no usable CUDA device. The
``stand_in_driver`` fixture builds the stand-in CUDA driver for CPU tests of the launch path."""

import shutil
import subprocess
from pathlib import Path

import pytest

STAND_IN_SOURCE = Path(__file__).parent.parent / "benchmarks" / "fake_driver" / "fake_cuda.c"


@pytest.fixture(scope="session")
def stand_in_driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``benchmarks/fake_driver`` built as a ``libcuda.so.1`` (every call succeeds and does
    nothing): point ``FASTLAUNCH_CUDA_DRIVER`` at it in a child process."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler for the stand-in driver")
    library = tmp_path_factory.mktemp("stand-in-driver") / "libcuda.so.1"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(library), str(STAND_IN_SOURCE)], check=True
    )
    return library


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import fastlaunch  # lazily: collecting CPU-only tests never needs it

    if fastlaunch.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (fastlaunch.is_available() is False)")
    for item in gpu_items:
        item.add_marker(skip)
