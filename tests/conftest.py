"""Tests marked ``gpu`` are skipped when fastlaunch finds no usable CUDA device. Tests marked
``no_gpu`` check what happens without one: where there is a GPU they are skipped in this
process and run by ``tests/test_gpu_hidden.py`` in a child pytest with every GPU hidden
(``HIDE_GPUS``), so the CPU suite runs on every machine. The ``stand_in_driver`` fixture builds
the stand-in CUDA driver for CPU tests of the launch path."""

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

STAND_IN_SOURCE = Path(__file__).parent / "stand_in_driver" / "fake_cuda.c"

#: The environment that hides every GPU from the CUDA driver, for fastlaunch and numba-cuda
#: alike: ``cuInit`` then reports ``CUDA_ERROR_NO_DEVICE``, so ``fastlaunch.is_available()``
#: is false and numba-cuda raises ``CudaSupportError`` ("Error at driver init"), as on a
#: machine without a GPU.
HIDE_GPUS = {"CUDA_VISIBLE_DEVICES": ""}


@pytest.fixture(scope="session")
def stand_in_driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tests/stand_in_driver`` built as a ``libcuda.so.1`` (every call succeeds and does
    nothing): point ``FASTLAUNCH_CUDA_DRIVER`` at it in a child process."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler for the stand-in driver")
    library = tmp_path_factory.mktemp("stand-in-driver") / "libcuda.so.1"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(library), str(STAND_IN_SOURCE)], check=True
    )
    return library


@pytest.fixture
def run_on_stand_in(stand_in_driver: Path) -> Callable[..., list[str]]:
    """Runs Python source in a child process against the stand-in driver; returns the lines
    it printed (it must exit 0). ``env`` adds environment variables (the stand-in's
    ``FAKE_*`` switches)."""

    def run(source: str, env: dict[str, str] | None = None) -> list[str]:
        env = {**os.environ, **(env or {}), "FASTLAUNCH_CUDA_DRIVER": str(stand_in_driver)}
        done = subprocess.run(
            [sys.executable, "-c", source], capture_output=True, text=True, timeout=120, env=env
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    return run


NUMBA_STAND_IN_SOURCE = Path(__file__).parent / "stand_in_driver" / "numba_driver.c"


@pytest.fixture(scope="session")
def numba_stand_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in driver with what numba-cuda's own driver layer needs too
    (``stand_in_driver/numba_driver.c``), as the folder holding its ``libcuda.so.1``: with it
    on ``LD_LIBRARY_PATH``, numba-cuda really compiles and links (NVVM, nvJitLink) and
    "loads" kernels without a GPU. The compile cache's tests run through it."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler for the stand-in driver")
    folder = tmp_path_factory.mktemp("numba-stand-in")
    subprocess.run(
        [
            compiler,
            "-shared",
            "-fPIC",
            "-o",
            str(folder / "libcuda.so.1"),
            str(NUMBA_STAND_IN_SOURCE),
            "-ldl",
        ],
        check=True,
    )
    return folder


def numba_stand_in_env(folder: Path, **extra: str) -> dict[str, str]:
    """The environment of a child process that compiles on the numba stand-in driver."""
    library = os.environ.get("LD_LIBRARY_PATH")
    return {
        **os.environ,
        "FASTLAUNCH_CUDA_DRIVER": str(folder / "libcuda.so.1"),
        "LD_LIBRARY_PATH": f"{folder}:{library}" if library else str(folder),
        "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS": "0",
        **extra,
    }


def pytest_configure(config: pytest.Config) -> None:
    """fastlaunch's compile cache (on by default) gets a folder of its own for the session, so
    tests neither share compiled kernels with other sessions nor leave them behind; the
    cache's own tests give each test its own folder."""
    import tempfile

    folder = tempfile.mkdtemp(prefix="fastlaunch-test-cache-")
    config._fastlaunch_cache_folder = folder  # type: ignore[attr-defined]
    os.environ["FASTLAUNCH_CACHE_DIR"] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = getattr(config, "_fastlaunch_cache_folder", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    no_gpu_items = [item for item in items if item.get_closest_marker("no_gpu") is not None]
    if not gpu_items and not no_gpu_items:
        return
    import fastlaunch  # lazily: collecting CPU-only tests never needs it

    if fastlaunch.is_available():
        hidden = pytest.mark.skip(
            reason="checks behaviour without a GPU: tests/test_gpu_hidden.py runs it in a "
            "child process with the GPUs hidden"
        )
        for item in no_gpu_items:
            item.add_marker(hidden)
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (fastlaunch.is_available() is False)")
    for item in gpu_items:
        item.add_marker(skip)
