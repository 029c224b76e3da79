#!/usr/bin/env python3
"""Cold start (issue 49): a program's imports, each kernel's first launch, and the time to its
first result, in fresh processes, side by side, for a module of small kernels (12 by default).

usage: python3 benchmarks/cold_start.py --out DIR [--repeats 5] [--kernels 12]
           [--cases numba-cuda,numba-cuda-cache,fastlaunch-off,fastlaunch-cold,fastlaunch-warm]

Cases (each a fresh process per repeat; the repeats interleave the cases, in an order shuffled
per round):

- ``numba-cuda``: plain numba-cuda, ``@cuda.jit``;
- ``numba-cuda-cache``: numba-cuda with ``@cuda.jit(cache=True)``, second run (its cache filled
  by a run before the measured ones, in a temporary ``NUMBA_CACHE_DIR``);
- ``fastlaunch-off``: ``fastlaunch.install()``, its compile cache off (``FASTLAUNCH_CACHE=0``);
- ``fastlaunch-cold``: installed, an empty compile cache (a new folder each repeat);
- ``fastlaunch-warm``: installed, the compile cache filled by a run before the measured ones.

Each process: imports (NumPy, numba.cuda and, but for numba-cuda's cases, fastlaunch and
``install()``), imports the module of kernels, makes its arrays (``to_device``, synchronized),
launches each kernel once (host time of each first launch), synchronizes and copies one result
back. Per case, medians over the repeats of: ``per_kernel_ms`` (the first launches together,
divided by their count), ``import_ms``, ``to_result_ms`` (the script's start to the result on
the host) and ``process_ms`` (the process's wall time, start to exit, as the parent saw it).

For ``fastlaunch-warm`` and ``-cold``, where a first launch's time goes (ms, summed over the
kernels, medians): ``toolchain`` (reading the toolchain's identity, once per process: NVVM and
nvJitLink versions and build ids, libdevice), ``key`` (the rest of computing the keys),
``read`` (the entries' files), ``rebuild`` (numba-cuda's kernel objects from them), ``load``
(fastlaunch loading each cubin: ``cuLibraryLoadData``, ``cuLibraryGetKernel``), ``compile``
(numba-cuda compiling, in the cold case), and ``rest`` (numba-cuda's dispatch around it,
fastlaunch's miss path and the launches themselves).

Each process also reports, untimed after its first result, each kernel's output summed: every
case must give the same (``breakdown.results_agree``), a loaded kernel what a compiled one
gives.

Writes DIR/cold_start.json (``rows``: ``{"case", "kernels", "per_kernel_ms", ...}``,
``breakdown``, ``meta``) and DIR/cold_start.md. Runs on a GPU with fastlaunch installed from a
wheel (no source tree needed), or on the numba stand-in driver of the CPU tests
(``tests/stand_in_driver/numba_driver.c``, its folder on ``LD_LIBRARY_PATH`` and
``FASTLAUNCH_CUDA_DRIVER`` naming its ``libcuda.so.1``), where the driver work costs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CASES = ["numba-cuda", "numba-cuda-cache", "fastlaunch-off", "fastlaunch-cold", "fastlaunch-warm"]

#: each kernel's body: out[i] = <expression of b[i] and x>
EXPRESSIONS = [
    "b[i] * x",
    "b[i] + x",
    "b[i] - x * 0.5",
    "b[i] / x",
    "math.sqrt(abs(b[i])) + x",
    "max(b[i], x)",
    "min(b[i], x) * 2.0",
    "b[i] * b[i] + x",
    "math.sin(b[i]) * x",
    "math.exp(-b[i]) - x",
    "abs(b[i] - x)",
    "b[i] * x + 1.0",
]


def module_source(kernels: int) -> str:
    lines = [
        "import math, os",
        "from numba import cuda",
        "",
        'CACHE = os.environ.get("COLD_START_NUMBA_CACHE") == "1"',
        "",
    ]
    for n in range(kernels):
        expression = EXPRESSIONS[n % len(EXPRESSIONS)]
        if n >= len(EXPRESSIONS):
            expression = f"({expression}) + {n}.0"
        lines += [
            "@cuda.jit(cache=CACHE)",
            f"def k{n:02d}(out, b, x):",
            "    i = cuda.grid(1)",
            "    if i < out.size:",
            f"        out[i] = {expression}",
            "",
        ]
    lines.append(f"KERNELS = [{', '.join(f'k{n:02d}' for n in range(kernels))}]")
    return "\n".join(lines) + "\n"


# -- one process ---------------------------------------------------------------------------------


def child(case: str, folder: str) -> dict[str, Any]:
    started = time.perf_counter()
    marks: dict[str, float] = {}
    import numpy as np

    if not hasattr(np, "row_stack"):  # numba-cuda 0.30 names it; NumPy 2.5 removed it
        np.row_stack = np.vstack  # (fastlaunch restores it itself: plain numba-cuda needs this)
    marks["numpy"] = time.perf_counter()
    fastlaunch_case = case.startswith("fastlaunch")
    steps: dict[str, float] = {}
    if fastlaunch_case:
        import fastlaunch

        marks["fastlaunch"] = time.perf_counter()
        fastlaunch.install()
    from numba import cuda

    marks["imported"] = time.perf_counter()
    if fastlaunch_case:
        _instrument(steps)
    sys.path.insert(0, folder)
    import cold_start_kernels  # type: ignore[import-not-found]

    marks["defined"] = time.perf_counter()
    n = 1 << 12
    out = cuda.to_device(np.zeros(n, np.float32))
    b = cuda.to_device(np.linspace(0.5, 2.0, n, dtype=np.float32))
    x = np.float32(1.5)
    cuda.synchronize()
    marks["ready"] = time.perf_counter()
    launches = []
    for kernel in cold_start_kernels.KERNELS:
        begin = time.perf_counter()
        kernel[(n + 255) // 256, 256](out, b, x)
        launches.append((time.perf_counter() - begin) * 1e3)
    cuda.synchronize()
    first = float(out.copy_to_host()[1])
    done = time.perf_counter()
    # (untimed) each kernel's output, summed: a loaded kernel must compute what a compiled one
    # does, in every case alike
    sums = []
    for kernel in cold_start_kernels.KERNELS:
        kernel[(n + 255) // 256, 256](out, b, x)
        sums.append(float(out.copy_to_host().astype(np.float64).sum()))
    report: dict[str, Any] = {
        "case": case,
        "launch_ms": launches,
        "import_ms": (marks["imported"] - started) * 1e3,
        "numpy_ms": (marks["numpy"] - started) * 1e3,
        "define_ms": (marks["defined"] - marks["imported"]) * 1e3,
        "arrays_ms": (marks["ready"] - marks["defined"]) * 1e3,
        "to_result_ms": (done - started) * 1e3,
        "result": first,
        "sums": sums,
    }
    if fastlaunch_case:
        from fastlaunch.cache import stats

        snapshot = stats.snapshot()
        report["fastlaunch_import_ms"] = (marks["fastlaunch"] - marks["numpy"]) * 1e3
        report["cache"] = {k: snapshot[k] for k in ("hits", "misses", "stores", "uncachable")}
        report["steps_ms"] = {
            "toolchain": steps.get("toolchain", 0.0),
            "key": snapshot["ms"]["key"] - steps.get("toolchain", 0.0),
            "read": snapshot["ms"]["read"],
            "rebuild": snapshot["ms"]["rebuild"],
            "save": snapshot["ms"]["save"],
            "load": steps.get("load", 0.0),
            "compile": steps.get("compile", 0.0),
        }
    return report


def _instrument(steps: dict[str, float]) -> None:
    """Timers around the steps of a first launch (the cache's own are in its statistics)."""
    from fastlaunch import dispatcher
    from fastlaunch.cache import key, toolchain

    def timed(name: str, function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            begin = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                steps[name] = steps.get(name, 0.0) + (time.perf_counter() - begin) * 1e3

        return wrapper

    common = timed("toolchain", toolchain.common)
    toolchain.common = common  # type: ignore[method-assign]
    key.toolchain.common = common  # type: ignore[attr-defined]
    dispatcher.Kernel._target = timed("load", dispatcher.Kernel._target)  # type: ignore[method-assign]
    from numba.cuda import dispatcher as numba_dispatcher

    numba_dispatcher._Kernel.__init__ = timed("compile", numba_dispatcher._Kernel.__init__)


# -- the parent ------------------------------------------------------------------------------------


def run_case(case: str, folder: Path, env: dict[str, str]) -> dict[str, Any]:
    begin = time.perf_counter()
    done = subprocess.run(
        [sys.executable, __file__, "--child", case, "--folder", str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    wall = (time.perf_counter() - begin) * 1e3
    if done.returncode != 0:
        raise RuntimeError(f"{case} failed:\n{done.stderr[-4000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report["process_ms"] = wall
    return report


def environments(scratch: Path, cases: list[str]) -> dict[str, Any]:
    """Per case, how to make the environment of one measured run (after any filling run)."""
    unset = ("FASTLAUNCH_CACHE", "FASTLAUNCH_CACHE_DIR", "FASTLAUNCH_INSTALL", "NUMBA_CACHE_DIR")
    base = {k: v for k, v in os.environ.items() if k not in unset}
    base["PYTHONWARNINGS"] = "ignore"
    base["NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"] = "0"
    made: dict[str, Any] = {}
    counter = iter(range(1 << 30))

    def fresh(name: str) -> str:
        path = scratch / f"{name}-{next(counter)}"
        path.mkdir()
        return str(path)

    numba_cache = fresh("numba-cache")
    warm = fresh("fastlaunch-warm")
    made["numba-cuda"] = lambda: {**base, "FASTLAUNCH_CACHE": "0", "NUMBA_CACHE_DIR": fresh("n")}
    made["numba-cuda-cache"] = lambda: {
        **base,
        "NUMBA_CACHE_DIR": numba_cache,
        "COLD_START_NUMBA_CACHE": "1",
    }
    made["fastlaunch-off"] = lambda: {
        **base,
        "FASTLAUNCH_CACHE": "0",
        "NUMBA_CACHE_DIR": fresh("n"),
    }
    made["fastlaunch-cold"] = lambda: {**base, "FASTLAUNCH_CACHE_DIR": fresh("cold")}
    made["fastlaunch-warm"] = lambda: {**base, "FASTLAUNCH_CACHE_DIR": warm}
    return {case: made[case] for case in cases}


def measure(cases: list[str], kernels: int, repeats: int) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix="cold-start-"))
    try:
        folder = scratch / "program"
        folder.mkdir()
        (folder / "cold_start_kernels.py").write_text(module_source(kernels))
        envs = environments(scratch, cases)
        for case in ("numba-cuda-cache", "fastlaunch-warm"):  # the filling runs
            if case in envs:
                filled = run_case(case, folder, envs[case]())
                print(f"filled {case}: {sum(filled['launch_ms']):.0f} ms of first launches")
        found: dict[str, list[dict[str, Any]]] = {case: [] for case in cases}
        order = list(cases)
        for round_ in range(repeats):
            random.shuffle(order)
            for case in order:
                report = run_case(case, folder, envs[case]())
                found[case].append(report)
                launches, to_result = sum(report["launch_ms"]), report["to_result_ms"]
                print(
                    f"round {round_ + 1}/{repeats} {case:18} first launches "
                    f"{launches:8.1f} ms, to result {to_result:7.0f} ms"
                )
        return summarize(found, kernels)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarize(found: dict[str, list[dict[str, Any]]], kernels: int) -> dict[str, Any]:
    rows = []
    for case, reports in found.items():
        row = {
            "case": case,
            "kernels": kernels,
            "per_kernel_ms": _median([sum(r["launch_ms"]) / kernels for r in reports]),
            "first_kernel_ms": _median([r["launch_ms"][0] for r in reports]),
            "other_kernels_ms": _median(
                [sum(r["launch_ms"][1:]) / max(1, kernels - 1) for r in reports]
            ),
            "import_ms": _median([r["import_ms"] for r in reports]),
            "define_ms": _median([r["define_ms"] for r in reports]),
            "arrays_ms": _median([r["arrays_ms"] for r in reports]),
            "to_result_ms": _median([r["to_result_ms"] for r in reports]),
            "process_ms": _median([r["process_ms"] for r in reports]),
            "repeats": len(reports),
        }
        if reports and "cache" in reports[0]:
            row["cache"] = reports[-1]["cache"]
        rows.append(row)
    # every case computes the same thing: a loaded kernel must give what a compiled one gives
    results = {case: sorted({tuple(r["sums"]) for r in reports}) for case, reports in found.items()}
    agree = len({tuple(v) for v in results.values()}) == 1
    breakdown: dict[str, Any] = {"results": results, "results_agree": agree}
    for case in ("fastlaunch-warm", "fastlaunch-cold"):
        reports = found.get(case) or []
        if not reports:
            continue
        steps = {
            name: _median([r["steps_ms"][name] for r in reports]) for name in reports[0]["steps_ms"]
        }
        launches = _median([sum(r["launch_ms"]) for r in reports])
        accounted = sum(
            v
            for k, v in steps.items()
            if k in ("toolchain", "key", "read", "rebuild", "load", "compile", "save")
        )
        steps["rest"] = launches - accounted
        breakdown[case] = {
            "first_launches_ms": launches,
            "steps_ms": steps,
            "import_ms": _median([r["import_ms"] for r in reports]),
            "fastlaunch_import_ms": _median([r["fastlaunch_import_ms"] for r in reports]),
            "define_ms": _median([r["define_ms"] for r in reports]),
        }
    return {"rows": rows, "breakdown": breakdown}


def meta() -> dict[str, Any]:
    info: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine()}
    for name in ("fastlaunch", "numba-cuda", "numba", "cuda-core"):
        try:
            import importlib.metadata

            info[name] = importlib.metadata.version(name)
        except Exception:
            info[name] = None
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        info["gpu"] = done.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        info["gpu"] = None
    info["driver"] = os.environ.get("FASTLAUNCH_CUDA_DRIVER") or "libcuda.so.1"
    return info


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Cold start: a module of small kernels, fresh processes",
        "",
        f"{json.dumps(result['meta'])}",
        "",
        "| case | per kernel (ms) | first kernel | others, each | imports | kernels defined "
        "| arrays | to result | process |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['case']} | {r['per_kernel_ms']:.2f} | {r['first_kernel_ms']:.1f} "
            f"| {r['other_kernels_ms']:.2f} | {r['import_ms']:.0f} | {r['define_ms']:.0f} "
            f"| {r['arrays_ms']:.0f} | {r['to_result_ms']:.0f} | {r['process_ms']:.0f} |"
        )
    lines += ["", f"Results agree across the cases: {result['breakdown']['results_agree']}"]
    for case, b in result["breakdown"].items():
        if not isinstance(b, dict) or "steps_ms" not in b:
            continue
        lines += ["", f"## Where {case}'s first launches go (ms, all kernels together)", ""]
        lines.append(
            f"imports {b['import_ms']:.0f} (fastlaunch {b['fastlaunch_import_ms']:.0f}), "
            f"kernels defined {b['define_ms']:.0f}, first launches {b['first_launches_ms']:.1f}:"
        )
        lines.append("")
        lines.append("| step | ms |")
        lines.append("|---|--:|")
        for name, value in b["steps_ms"].items():
            lines.append(f"| {name} | {value:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kernels", type=int, default=12)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.folder)))
        return
    cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; known: {CASES}")
    result = measure(cases, args.kernels, args.repeats)
    result["meta"] = meta()
    text = markdown(result)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cold_start.json").write_text(json.dumps(result, indent=1))
        (args.out / "cold_start.md").write_text(text)


if __name__ == "__main__":
    main()
