"""The counting driver of ``benchmarks/driver_calls.py`` (``benchmarks/timed_driver``), on the
stand-in driver: it exports every function fastlaunch's driver table loads, and forwards each
call, counted, to the driver it wraps (here the stand-in), so that a launch still launches and
the counts say what each case asked of the driver."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_cpu_memory_api import PRELUDE

ROOT = Path(__file__).parent.parent
SHIM_SOURCE = ROOT / "benchmarks" / "timed_driver" / "timed_cuda.c"


def test_it_exports_every_function_of_fastlaunch_s_driver_table():
    table = set(re.findall(r'= "(cu\w+)"', (ROOT / "rust/driver/src/sys.rs").read_text()))
    wrapped = set(re.findall(r"X\((cu\w+)\)", SHIM_SOURCE.read_text()))
    assert table and table == wrapped


@pytest.fixture(scope="module")
def timed_driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler for the counting driver")
    library = tmp_path_factory.mktemp("timed-driver") / "timed-cuda.so"
    subprocess.run(
        [compiler, "-O2", "-shared", "-fPIC", "-o", str(library), str(SHIM_SOURCE), "-ldl"],
        check=True,
    )
    return library


#: the cases of `benchmarks/driver_calls.py` under install() on the counting driver, a
#: five-array kernel registered by hand (the stand-in has no kernels): `found` and `timed`
CASES = (
    PRELUDE
    + """
from fastlaunch.dispatcher import numba_type
from benchmarks.driver_calls import TimedDriver, cases, markdown, measure
fl.install()
from numba import cuda

@fl.jit
def five(a, b, c, d, e):
    pass

arrays = tuple(cuda.device_array(4096, dtype=np.float32) for _ in range(5))
fingerprint = _core.fingerprint(arrays)
types = tuple(numba_type(d) for d in _core.describe(fingerprint))
five._register(fingerprint, 90, types, _core.CompiledKernel(b"fake image", "fake_entry"))
timed = TimedDriver(os.environ["FASTLAUNCH_CUDA_DRIVER"])
found = cases(cuda, five, np)
"""
)


def run_counted(source: str, timed_driver: Path, stand_in_driver: Path) -> list[str]:
    """The lines `source` printed, run on the counting driver over the stand-in."""
    env = {
        **os.environ,
        "FASTLAUNCH_CUDA_DRIVER": str(timed_driver),
        "TIMED_CUDA_REAL": str(stand_in_driver),
        "CUDA_VISIBLE_DEVICES": "",
    }
    done = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=300, env=env,
        cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_cases_count_their_driver_calls(timed_driver: Path, stand_in_driver: Path):
    lines = run_counted(
        CASES
        + """
results = {name: measure(found[name], 40, timed, cuda.synchronize) for name in found}
for name in ("numba: launch_reused", "numba: launch_new", "stream_new", "stream_alone", "d[1:-1]"):
    driver = results[name]["driver"]
    print(name, driver.get("cuLaunchKernel", [0])[0], results[name]["wall_us"] > 0)
print("cuLaunchKernel" in markdown(results, {"measured": "now", "calls": 40}))
""",
        timed_driver,
        stand_in_driver,
    )
    assert lines == [
        "numba: launch_reused 1.0 True",
        "numba: launch_new 1.0 True",
        "stream_new 1.0 True",
        "stream_alone 0 True",
        "d[1:-1] 0 True",
        "True",
    ]
