"""The compile cache is never stale: each thing a kernel's key holds is edited between two
fresh processes, and the second must run the new code (docs/cache.md, "How it is proven").

One project (a program, the modules it imports, a CUDA C++ file it links, a settings file it
reads) runs in fresh processes on the numba stand-in driver, where numba-cuda really compiles
and links (NVVM, nvJitLink) without a GPU:

1. ``before``: every kernel compiles and is stored;
2. every edit at once (each kernel depends on one of them), then ``after``: each edited kernel
   compiles anew, and its PTX is a fresh compile's (``FRESH=1``: the same function, options and
   types compiled with no cache at all), holding the new value; the kernels nothing touched,
   and the one whose module was rewritten unchanged with a new time stamp, are hits of the
   entries ``before`` stored, and are the fresh compile's too;
3. ``version``: the same project with numba-cuda's version changed (simulated): every kernel
   compiles anew;
4. ``cc``: the same project on a device of compute capability 8.6 (simulated): every kernel
   compiles anew, for sm_86.

The processes are shared by the tests (four in all): each test reads its kernel's report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cache_programs import REPORT, reports, target
from conftest import numba_stand_in_env

PROGRAM = (
    textwrap.dedent(
        """
    import json, os, struct, sys
    if os.environ.get("SIMULATED_VERSION"):  # another build of the same release
        import numba_cuda
        numba_cuda.__version__ += os.environ["SIMULATED_VERSION"]
    import numpy as np
    from numba import cuda
    from numba.cuda import types
    import fastlaunch as fl

    import consts, helpers
    from consts import FACTOR
    from restored import k_restored

    settings = json.load(open("settings.json"))
    ext_add = cuda.declare_device("ext_add", "float32(float32)")

    @fl.jit
    def k_device(a, x):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = helpers.scale(x)

    @fl.jit
    def k_attribute(a, x):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = x * consts.FACTOR

    @fl.jit
    def k_name(a, x):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = x + FACTOR

    def closing_over(value):
        @fl.jit
        def k_closure(a, x):
            i = cuda.grid(1)
            if i < a.size:
                a[i] = x * value
        return k_closure

    k_closure = closing_over(settings["closure"])

    @fl.jit(fastmath=settings["fastmath"])
    def k_fastmath(a, x):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = a[i] / x

    @fl.jit(link=["ext.cu"])
    def k_link(a, x):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = ext_add(x)

    @fl.jit
    def k_plain(a, x):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = x - 1.5

    a = cuda.device_array(64, np.float32)
    x = np.float32(2.0)
    KERNELS = {}
    for k in (k_device, k_attribute, k_name, k_closure, k_fastmath, k_link, k_plain, k_restored):
        k[1, 64](a, x)
        KERNELS[k.__name__] = (k, (types.float32[::1], types.float32))
    LOOK_FOR = {"k_link": {str(v): struct.pack("<f", v) for v in (7.0, 9.0)}}
    """
    )
    + REPORT
)

FILES = {
    "helpers.py": "from numba import cuda\n\n@cuda.jit(device=True)\ndef scale(x):\n"
    "    return x * 2.5\n",
    "consts.py": "FACTOR = 3.0\n",
    "restored.py": "from numba import cuda\nimport fastlaunch as fl\n\n@fl.jit\n"
    "def k_restored(a, x):\n    i = cuda.grid(1)\n    if i < a.size:\n        a[i] = x + 11.0\n",
    "ext.cu": 'extern "C" __device__ int ext_add(float *out, float x)\n'
    "{ *out = x + 7.0f; return 0; }\n",
    "settings.json": json.dumps({"closure": 6.0, "fastmath": False}),
}

EDITS = {
    "helpers.py": ("x * 2.5", "x * 5.5"),
    "consts.py": ("3.0", "4.0"),
    "ext.cu": ("7.0f", "9.0f"),
    "settings.json": (
        json.dumps({"closure": 6.0, "fastmath": False}),
        json.dumps({"closure": 8.0, "fastmath": True}),
    ),
}

KERNELS = [
    "k_device",
    "k_attribute",
    "k_name",
    "k_closure",
    "k_fastmath",
    "k_link",
    "k_plain",
    "k_restored",
]


def _run(project: Path, folder: Path, cache: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "prog.py"],
        cwd=project,
        env=numba_stand_in_env(folder, FASTLAUNCH_CACHE_DIR=str(cache), **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(process: subprocess.Popen) -> dict[str, dict]:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    return reports(out.splitlines())


@pytest.fixture(scope="module")
def runs(numba_stand_in: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    project = tmp_path_factory.mktemp("project")
    cache = tmp_path_factory.mktemp("cache")
    for name, text in FILES.items():
        (project / name).write_text(text)
    (project / "prog.py").write_text(PROGRAM)
    found = {"before": _finish(_run(project, numba_stand_in, cache))}
    for name, (old, new) in EDITS.items():
        path = project / name
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new))
    restored = project / "restored.py"
    restored.write_text(restored.read_text())  # the same bytes, rewritten
    stamp = restored.stat().st_mtime + 1000
    os.utime(restored, (stamp, stamp))
    found["after"] = _finish(_run(project, numba_stand_in, cache, FRESH="1"))
    # the simulated version and compute capability: side by side (different keys)
    version = _run(project, numba_stand_in, cache, SIMULATED_VERSION="+local")
    cc = _run(project, numba_stand_in, cache, FAKE_CC="8.6")
    found["version"], found["cc"] = _finish(version), _finish(cc)
    return found


def _first_compiled_and_stored(runs: dict, kernel: str) -> None:
    before = runs["before"][kernel]
    assert (before["hits"], before["misses"], before["stores"]) == (0, 1, 1), before


def _compiled_anew(runs: dict, kernel: str, run: str = "after") -> dict:
    """The kernel compiled anew in ``run`` (stored under its new key), and is not stale: its
    PTX is a fresh compile's (``after``) and its cubin differs from ``before``'s."""
    _first_compiled_and_stored(runs, kernel)
    report = runs[run][kernel]
    assert (report["hits"], report["misses"], report["stores"]) == (0, 1, 1), report
    if run == "after":
        assert report["ptx"] == report["fresh"]
        assert report["cubin"] != runs["before"][kernel]["cubin"]
    return report


def _hit(runs: dict, kernel: str) -> dict:
    _first_compiled_and_stored(runs, kernel)
    report = runs["after"][kernel]
    assert (report["hits"], report["misses"], report["stores"]) == (1, 0, 0), report
    assert report["ptx"] == report["fresh"] == runs["before"][kernel]["ptx"]
    assert report["cubin"] == runs["before"][kernel]["cubin"]
    return report


def _holds_constant(ptx: str, value: float) -> bool:
    import struct

    return f"0f{struct.unpack('>I', struct.pack('>f', value))[0]:08X}" in ptx


def test_stale_device_function_edited_in_another_module(runs):
    report = _compiled_anew(runs, "k_device")
    assert _holds_constant(runs["before"]["k_device"]["ptx"], 2.5)
    assert _holds_constant(report["ptx"], 5.5) and not _holds_constant(report["ptx"], 2.5)


def test_stale_global_constant_of_another_module(runs):
    for kernel in ("k_attribute", "k_name"):  # consts.FACTOR, and FACTOR imported from it
        report = _compiled_anew(runs, kernel)
        assert _holds_constant(runs["before"][kernel]["ptx"], 3.0)
        assert _holds_constant(report["ptx"], 4.0)


def test_stale_closure_variable(runs):
    report = _compiled_anew(runs, "k_closure")
    assert _holds_constant(runs["before"]["k_closure"]["ptx"], 6.0)
    assert _holds_constant(report["ptx"], 8.0)


def test_stale_fastmath(runs):
    report = _compiled_anew(runs, "k_fastmath")
    assert "div.rn.f32" in runs["before"]["k_fastmath"]["ptx"]
    assert "div.rn.f32" not in report["ptx"] and "div.approx" in report["ptx"]


def test_stale_link_file(runs):
    report = _compiled_anew(runs, "k_link")
    assert runs["before"]["k_link"]["holds"] == {"7.0": True, "9.0": False}
    assert report["holds"] == {"7.0": False, "9.0": True}


def test_not_invalidated_by_a_restored_file_with_a_new_time_stamp(runs):
    _hit(runs, "k_restored")


def test_not_invalidated_without_an_edit(runs):
    _hit(runs, "k_plain")


def test_invalidated_by_a_version_simulated(runs):
    for kernel in KERNELS:
        report = _compiled_anew(runs, kernel, "version")
        assert report["ptx"] == runs["after"][kernel]["ptx"]  # the same code, compiled again


def test_invalidated_by_the_compute_capability_simulated(runs):
    for kernel in KERNELS:
        report = _compiled_anew(runs, kernel, "cc")
        assert report["cc"] == [8, 6, ""]
        assert target(report["ptx"]) == "sm_86"
        assert target(runs["after"][kernel]["ptx"]) == "sm_90a"
