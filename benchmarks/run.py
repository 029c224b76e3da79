#!/usr/bin/env python3
"""Run every launch-overhead benchmark and write the report: the one command the GPU runs.

usage: python3 benchmarks/run.py --out DIR [--quick] [--no-leak] [--no-floor] [--no-pytest]
                                 [--floor-bin PATH] [--pytest-args "..."] [--pytest-timeout S]
                                 [--allow-missing-fastlaunch] [--no-results-copy]
       python3 benchmarks/run.py --render results.json --out DIR   (report only, no GPU)

Parts, in order (each can fail or time out without losing the others' results):

1. the Rust floor, ``.gpu/bin/launch-bench --bench`` (built here by ``make gpu-prepare``
   from rust/driver/benches/launch.rs): ``cuLaunchKernel`` from compiled code per case;
2. the pytest-benchmark suite ``benchmarks/test_launch_overhead.py`` with
   ``--benchmark-json`` (each benchmark also appends a JSON line as it finishes, so a run cut
   short by ``--pytest-timeout`` still reports what finished);
3. the leak check (``--no-leak`` skips it): RSS (``/proc/self/status``) and GPU memory
   (``cuMemGetInfo``) before and after 1,000,000 fastlaunch launches of case B with a numba
   device array, in a fresh process.

Then it writes ``results.md`` (environment, then per case: µs per launch median / p10 / p90,
ratio to the C floor of the same run, speed-up over numba-cuda), ``launch_overhead.png`` and
``results.json`` (everything, raw) into DIR and, when anything was measured, into
``benchmarks/results/``; the pytest-benchmark JSON goes to DIR only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"
DEFAULT_FLOOR_BIN = ROOT / ".gpu" / "bin" / "launch-bench"


def _batch() -> int:
    """Launches per timed batch, as harness.py and the floor bench read it."""
    try:
        return max(1, int(os.environ.get("FASTLAUNCH_BENCH_BATCH", "256")))
    except ValueError:
        return 256


BATCH = _batch()
CASE_ORDER = ["A", "B", "C", "D", "E16", "E256"]
SUITE_CASES = {"one_arg": "B", "many_args": "D"}  # numba-cuda's suite → floor case
#: ratio-to-floor targets of docs/benchmarks.md for fastlaunch, per case, at [1, 1]
TARGETS = {"A": 1.10, "B": 1.15, "C": 1.20, "D": 1.25, "E256": 1.5}
#: issue 8's targets: a pre-bound launch, and one kernel of a replayed graph, × the C floor
BOUND_TARGET = 1.05
GRAPH_TARGET = 0.20

FLOOR_PATHS = {
    "floor": "C floor (Rust cuLaunchKernel, packed once)",
    "floor_kernel": "C floor, CUkernel handle",
    "floor_stream": "C floor, own stream",
    "packer": "fastlaunch packer (Rust ParamBuffer per launch)",
}
PATH_LABELS = {
    "fastlaunch": "fastlaunch",
    "fastlaunch.bind": "fastlaunch pre-bound (`bind`)",
    "fastlaunch.graph": "fastlaunch graph replay, per kernel",
    "numba": "numba-cuda",
    "cuda.core": "cuda.core.launch",
    "cuda.bindings": "cuda.bindings cuLaunchKernel",
    "cupy.RawKernel": "CuPy RawKernel",
    "torch op": "torch eager op",
    "triton": "Triton",
}
MODES_ORDER = ("dispatch", "signature")
PEERS = ["cuda.core", "cuda.bindings", "cupy.RawKernel", "torch op", "triton"]
#: docs/benchmarks.md's comparators ("beat every comparator"); cuda.bindings with parameters
#: packed once is shown as a Python-side floor, not a comparator
COMPARATORS = ["cuda.core", "cupy.RawKernel", "torch op", "triton"]
DIST_NAMES = [
    "fastlaunch",
    "numba-cuda",
    "numba",
    "llvmlite",
    "numpy",
    "cuda-core",
    "cuda-bindings",
    "torch",
    "triton",
    "pytest",
    "pytest-benchmark",
    "matplotlib",
]


def _harness() -> Any:
    """benchmarks/harness.py (this file runs as a script, so the repo root is added)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import benchmarks.harness

    return benchmarks.harness


def log(message: str) -> None:
    print(f"[run.py {time.strftime('%H:%M:%S')}] {message}", flush=True)


# ----------------------------------------------------------------------- environment


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _versions() -> dict[str, str]:
    versions: dict[str, str] = {}
    for name in DIST_NAMES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    for dist in importlib.metadata.distributions():  # CuPy's name varies: cupy-cuda13x, ...
        name = dist.metadata.get("Name") or ""
        if name.lower().startswith("cupy"):
            versions[name] = dist.version
    return dict(sorted(versions.items()))


def _nvidia_smi() -> list[dict[str, str]]:
    fields = ["name", "driver_version", "memory.total", "clocks.max.sm", "pci.bus_id"]
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [
        dict(zip(fields, (v.strip() for v in line.split(",")), strict=False))
        for line in out.splitlines()
        if line.strip()
    ]


def _cuda_driver_version() -> int | None:
    try:
        from cuda.bindings import driver as cu

        (err,) = cu.cuInit(0)
        err, version = cu.cuDriverGetVersion()
        return int(version) if err == cu.CUresult.CUDA_SUCCESS else None
    except Exception:
        return None


def environment() -> dict[str, Any]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in _read("/proc/cpuinfo").splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "?",
    )
    return {
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
        "host": platform.node(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "gpus": _nvidia_smi(),
        "cuda_driver_version": _cuda_driver_version(),
        "versions": _versions(),
    }


# ------------------------------------------------------------------------ the floor


def find_floor_binary(explicit: str | None) -> Path | None:
    if explicit:
        return Path(explicit)
    if DEFAULT_FLOOR_BIN.is_file():
        return DEFAULT_FLOOR_BIN
    built = [
        p
        for p in (ROOT / "target" / "release" / "deps").glob("launch-*")
        if p.is_file() and os.access(p, os.X_OK) and p.suffix == ""
    ]
    return max(built, key=lambda p: p.stat().st_mtime) if built else None


def run_floor(binary: Path | None, batches: int, timeout: float) -> dict[str, Any]:
    part: dict[str, Any] = {"binary": str(binary) if binary else None, "results": []}
    if binary is None or not binary.is_file():
        part["skipped"] = f"no floor binary ({binary or DEFAULT_FLOOR_BIN}); run make gpu-prepare"
        log(part["skipped"])
        return part
    command = [str(binary), "--bench", "--batches", str(batches)]
    log("floor: " + " ".join(command))
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, text=True, timeout=timeout, cwd=ROOT)
        stdout, part["returncode"] = done.stdout, done.returncode
    except subprocess.TimeoutExpired as expired:
        stdout = expired.stdout or ""
        stdout = stdout.decode() if isinstance(stdout, bytes) else stdout
        part["returncode"], part["timed_out"] = None, True
        log(f"floor: timed out after {timeout:.0f} s")
    except OSError as error:
        part["skipped"] = f"floor binary failed to start: {error}"
        log(part["skipped"])
        return part
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            if line:
                print(line, flush=True)
                if "skipped" in line:
                    part["skipped"] = line
            continue
        record = json.loads(line)
        if record.get("kind") == "meta":
            part["meta"] = record
        elif record.get("kind") == "result":
            part["results"].append(record)
    log(f"floor: {len(part['results'])} results, exit {part.get('returncode')}")
    return part


# ---------------------------------------------------------------------- the suite


def run_pytest(
    out_dir: Path, work: Path, extra: list[str], timeout: float, env_extra: dict[str, str]
) -> dict[str, Any]:
    jsonl = work / "results.jsonl"
    bench_json = out_dir / "pytest-benchmark.json"
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "benchmarks" / "test_launch_overhead.py"),
        "-q",
        "-p",
        "no:cacheprovider",
        f"--benchmark-json={bench_json}",
        "--benchmark-columns=median,min,max,rounds",
        "--benchmark-group-by=func",
        *extra,
    ]
    env = {**os.environ, "FASTLAUNCH_BENCH_JSONL": str(jsonl), **env_extra}
    log("pytest: " + shlex.join(command))
    part: dict[str, Any] = {"command": command, "results": []}
    start = time.monotonic()
    process = subprocess.Popen(command, cwd=ROOT, env=env)
    try:
        part["returncode"] = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        part["returncode"], part["timed_out"] = None, True
        log(f"pytest: timed out after {timeout:.0f} s; reporting what finished")
    part["seconds"] = round(time.monotonic() - start, 1)
    if jsonl.is_file():
        part["results"] = [json.loads(line) for line in jsonl.read_text().splitlines() if line]
    elif bench_json.is_file():  # the JSON-lines file is the primary source; this is a fallback
        for bench in json.loads(bench_json.read_text()).get("benchmarks", []):
            data = bench.get("stats", {}).get("data") or []
            if data:
                stats = _harness().per_launch_stats(data)
                part["results"].append({**bench["extra_info"], **stats})
    log(f"pytest: {len(part['results'])} results, exit {part['returncode']}")
    return part


# ------------------------------------------------------------------- the leak check


def _rss_kib() -> int:
    for line in _read("/proc/self/status").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def _gpu_free_bytes() -> tuple[int, str]:
    try:
        from cuda.bindings import driver as cu

        err, free, _total = cu.cuMemGetInfo()
        if err == cu.CUresult.CUDA_SUCCESS:
            return int(free), "cuMemGetInfo (cuda.bindings)"
    except Exception:
        pass
    import torch

    free, _total = torch.cuda.mem_get_info()
    return int(free), "torch.cuda.mem_get_info"


def leak_child(launches: int) -> dict[str, Any]:
    """In a fresh process: case B through fastlaunch with a numba device array."""
    harness = _harness()
    harness.apply_numpy_shim()
    import numpy as np
    from numba import cuda

    import fastlaunch

    if not fastlaunch.is_available():
        return {"skipped": "fastlaunch.is_available() is False"}
    kernel = fastlaunch.jit(harness.py_kernel("empty_b"))
    array = cuda.device_array(128, dtype=np.float32)
    launch = kernel[1, 1]
    chunk = 10_000
    for _ in range(2 * chunk):  # warm-up: compile, load, caches, allocator
        launch(array)
    cuda.synchronize()
    import gc

    gc.collect()
    rss_before, (free_before, how) = _rss_kib(), _gpu_free_bytes()
    start = time.perf_counter()
    done = 0
    while done < launches:
        n = min(chunk, launches - done)
        for _ in range(n):
            launch(array)
        cuda.synchronize()
        done += n
    seconds = time.perf_counter() - start
    gc.collect()
    rss_after, (free_after, _) = _rss_kib(), _gpu_free_bytes()
    return {
        "launches": done,
        "seconds": round(seconds, 3),
        "us_per_launch_incl_sync": round(seconds * 1e6 / done, 3),
        "rss_before_kib": rss_before,
        "rss_after_kib": rss_after,
        "rss_delta_kib": rss_after - rss_before,
        "gpu_free_before_bytes": free_before,
        "gpu_free_after_bytes": free_after,
        "gpu_used_delta_bytes": free_before - free_after,
        "gpu_memory_source": how,
    }


def run_leak(launches: int, timeout: float) -> dict[str, Any]:
    command = [sys.executable, str(Path(__file__).resolve()), "--leak-child", str(launches)]
    log(f"leak check: {launches:,} fastlaunch launches of case B (numba device array)")
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        log(f"leak check: timed out after {timeout:.0f} s")
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        log(f"leak check: failed (exit {done.returncode})")
        return {"error": f"exit {done.returncode}", "stdout": done.stdout[-2000:]}
    result = json.loads(lines[-1])
    log(f"leak check: {result}")
    return result


# ------------------------------------------------------------------------- report


def _fmt_us(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.1f}" if value >= 100 else f"{value:.2f}"


def _fmt_ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def rows_from(results: dict[str, Any]) -> list[dict[str, Any]]:
    """All measurements as uniform rows: case, path, source, mode, grid, figures."""
    rows = []
    for r in (results.get("floor") or {}).get("results", []):
        rows.append(
            {
                "origin": "rust",
                "case": r["case"],
                "path": r["path"],
                "label": FLOOR_PATHS.get(r["path"], r["path"]),
                "source": "raw",
                "mode": "",
                "spelling": "",
                "arrays": "",
                "grid": r["grid"],
                **{k: r.get(k) for k in ("median_us", "p10_us", "p90_us", "min_us")},
            }
        )
    for r in (results.get("python") or {}).get("results", []):
        if r.get("median_us") is None:
            continue
        # graph replays are timed per replay and reported per kernel
        per = r.get("kernels") or 1
        r = {
            **r,
            **{k: r[k] / per for k in ("median_us", "p10_us", "p90_us", "min_us") if r.get(k)},
        }
        rows.append(
            {
                "origin": "python",
                "case": r["case"],
                "path": r["path"],
                "label": PATH_LABELS.get(r["path"], r["path"]),
                "source": r.get("source", ""),
                "mode": r.get("mode", ""),
                "spelling": r.get("spelling", ""),
                "arrays": r.get("arrays", "fresh"),
                "grid": r.get("grid", 1),
                **{k: r.get(k) for k in ("median_us", "p10_us", "p90_us", "min_us")},
            }
        )
    return rows


def _floor_for(rows: list[dict[str, Any]], row: dict[str, Any]) -> float | None:
    case = SUITE_CASES.get(row["case"], row["case"])
    grid = 128 if row["case"] in SUITE_CASES else 1
    for r in rows:
        if r["origin"] == "rust" and r["path"] == "floor" and r["case"] == case:
            if r["grid"] == grid:
                return r["median_us"]
    return None


def _numba_for(rows: list[dict[str, Any]], row: dict[str, Any]) -> float | None:
    numba = [r for r in rows if r["path"] == "numba"]
    case = row["case"]
    grid = row["grid"] if row["grid"] in (1, 128) else 1
    if row["origin"] == "rust" and grid == 128:
        case = {v: k for k, v in SUITE_CASES.items()}.get(case, case)
    source = row["source"] if row["source"] in ("numba", "cupy", "torch", "none") else "numba"
    candidates = [
        (source, row["mode"]),
        (source, "dispatch"),
        ("numba", "dispatch"),
        ("none", "dispatch"),
    ]
    # numba-cuda's figure for the same arrays (fresh or views) where there is one
    arrays = [row.get("arrays", "fresh"), "fresh"]
    for want_arrays in arrays:
        for want_source, want_mode in candidates:
            for r in numba:
                if (r["case"], r["source"], r["mode"], r["grid"], r.get("arrays", "fresh")) == (
                    case,
                    want_source,
                    want_mode,
                    grid,
                    want_arrays,
                ):
                    return r["median_us"]
    return None


def _sort_key(row: dict[str, Any]) -> tuple:
    order = ["floor", "floor_kernel", "floor_stream", "packer", "fastlaunch", *PEERS, "numba"]
    path_rank = order.index(row["path"]) if row["path"] in order else len(order)
    source_rank = ["none", "raw", "numba", "cupy", "torch"]
    return (
        path_rank,
        MODES_ORDER.index(row["mode"]) if row["mode"] in MODES_ORDER else 2,
        source_rank.index(row["source"]) if row["source"] in source_rank else 9,
        row.get("spelling") != "inline",
        row.get("arrays") != "views",
    )


def _table(rows: list[dict[str, Any]], all_rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| case | path / peer | source | mode | spelling | arrays | µs median | p10 | p90 "
        "| × C floor | speed-up vs numba-cuda | target |",
        "|---|---|---|---|---|---|--:|--:|--:|--:|--:|---|",
    ]
    for row in rows:
        floor = _floor_for(all_rows, row)
        numba = _numba_for(all_rows, row)
        ratio = row["median_us"] / floor if floor else None
        speedup = numba / row["median_us"] if numba and row["median_us"] else None
        target = ""
        if row["path"] == "fastlaunch" and row["case"] in TARGETS and ratio is not None:
            goal = TARGETS[row["case"]]
            target = f"≤ {goal:.2f}× {'✓' if ratio <= goal else '✗'}"
        label = f"**{row['label']}**" if row["path"] == "fastlaunch" else row["label"]
        lines.append(
            f"| {row['case']} | {label} | {row['source']} | {row['mode']} "
            f"| {row.get('spelling') or '—'} | {row.get('arrays') or '—'} "
            f"| {_fmt_us(row['median_us'])} | {_fmt_us(row['p10_us'])} "
            f"| {_fmt_us(row['p90_us'])} | {_fmt_ratio(ratio)} | {_fmt_ratio(speedup)} "
            f"| {target} |"
        )
    return lines


def _verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """Per case: does fastlaunch beat every peer, and never lose to numba-cuda?"""
    lines = [
        "| case | fastlaunch µs (best – worst) | × C floor (best – worst) | target "
        "| best comparator | numba-cuda µs (best – worst) "
        "| worst fastlaunch beats every comparator | never loses to numba-cuda |",
        "|---|--:|--:|---|---|--:|---|---|",
    ]
    for case in [*CASE_ORDER, *SUITE_CASES]:
        here = [r for r in rows if r["case"] == case and r["origin"] == "python"]
        fast = [r for r in here if r["path"] == "fastlaunch"]
        if not fast:
            continue
        peers = [r for r in here if r["path"] in COMPARATORS]
        numba = [r for r in here if r["path"] == "numba"]
        worst = max(r["median_us"] for r in fast)
        best_peer = min(peers, key=lambda r: r["median_us"]) if peers else None
        beats = "—" if best_peer is None else ("yes" if worst < best_peer["median_us"] else "no")
        losses = []
        for f in fast:
            match = [
                n
                for n in numba
                if (n["source"], n["mode"], n["grid"], n["arrays"])
                == (f["source"], f["mode"], f["grid"], f["arrays"])
            ]
            if match and f["median_us"] >= match[0]["median_us"]:
                losses.append(f"{f['source']}/{f['mode']}/{f['spelling']}/{f['arrays']}")
        if losses:
            never_loses = "no: " + ", ".join(losses)
        else:
            never_loses = "yes" if numba else "—"
        peer_text = f"{best_peer['label']} {_fmt_us(best_peer['median_us'])}" if best_peer else "—"
        floor = _floor_for(rows, fast[0])
        best = min(r["median_us"] for r in fast)
        ratio_text = f"{_fmt_ratio(best / floor)} – {_fmt_ratio(worst / floor)}" if floor else "—"
        target = ""
        if case in TARGETS and floor:
            goal = TARGETS[case]
            target = f"≤ {goal:.2f}× {'✓' if worst / floor <= goal else '✗'}"
        numba_text = (
            f"{_fmt_us(min(r['median_us'] for r in numba))} – "
            f"{_fmt_us(max(r['median_us'] for r in numba))}"
            if numba
            else "—"
        )
        lines.append(
            f"| {case} | {_fmt_us(best)} – {_fmt_us(worst)} | {ratio_text} | {target} "
            f"| {peer_text} | {numba_text} | {beats} "
            f"| {never_loses} |"
        )
    return lines


def _bound_and_graph_section(rows: list[dict[str, Any]]) -> list[str]:
    """Pre-bound launches (target ≤ 1.05× floor) and graph replays per kernel (≤ 0.20×)."""
    extra = [r for r in rows if r["path"] in ("fastlaunch.bind", "fastlaunch.graph")]
    if not extra:
        return []
    lines = [
        "## Pre-bound launches and graph replays, `[1, 1]`",
        "",
        "| case | path | mode | µs median (per kernel for graphs) | p10 | p90 | × C floor "
        "| target |",
        "|---|---|---|--:|--:|--:|--:|---|",
    ]
    for row in sorted(extra, key=lambda r: (r["path"], CASE_ORDER.index(r["case"]), r["mode"])):
        floor = _floor_for(rows, row)
        ratio = row["median_us"] / floor if floor else None
        goal = BOUND_TARGET if row["path"] == "fastlaunch.bind" else GRAPH_TARGET
        verdict = "" if ratio is None else ("✓" if ratio <= goal else "✗")
        lines.append(
            f"| {row['case']} | {row['label']} | {row['mode']} | {_fmt_us(row['median_us'])} "
            f"| {_fmt_us(row['p10_us'])} | {_fmt_us(row['p90_us'])} | {_fmt_ratio(ratio)} "
            f"| ≤ {goal:.2f}× {verdict} |"
        )
    return [*lines, ""]


def render_markdown(results: dict[str, Any], png_name: str | None) -> str:
    env = results.get("environment", {})
    floor = results.get("floor") or {}
    python = results.get("python") or {}
    leak = results.get("leak")
    rows = rows_from(results)
    out = ["# fastlaunch launch overhead", ""]
    out += [
        f"Measured {env.get('date_utc', '?')} UTC with `{results.get('command', '')}`.",
        "",
        "## Machine",
        "",
    ]
    gpus = env.get("gpus") or []
    for gpu in gpus:
        out.append(
            f"- GPU: {gpu.get('name', '?')} (driver {gpu.get('driver_version', '?')}, "
            f"{gpu.get('memory.total', '?')}, max SM clock {gpu.get('clocks.max.sm', '?')})"
        )
    meta = floor.get("meta") or {}
    if meta:
        out.append(
            f"- Device 0 (floor bench): {meta.get('device')}, compute capability "
            f"{meta.get('compute_capability')}, PTX target {meta.get('ptx_target')}"
        )
    driver_api = env.get("cuda_driver_version") or meta.get("driver_version")
    out += [
        f"- CUDA driver API version: {driver_api}",
        f"- CPU: {env.get('cpu', '?')} ({env.get('cpu_count', '?')} logical CPUs)",
        f"- Host: {env.get('host', '?')}, {env.get('platform', '?')}, Python {env.get('python')}",
        "- Libraries: " + ", ".join(f"{k} {v}" for k, v in (env.get("versions") or {}).items()),
        "",
        "## Method",
        "",
        f"Host time per launch: batches of {BATCH} back-to-back launches timed with "
        "`perf_counter` (Python, pytest-benchmark `pedantic`, one batch per round) or "
        "`Instant` (Rust), the context synchronized untimed between batches; median, p10 and "
        "p90 over the batches (at least 50). µs per launch = batch time / 256. "
        "**× C floor** is the ratio to the Rust `cuLaunchKernel` floor of this same run "
        "(same case, same parameter count, `[1,1]`, or `[128,128]` for numba-cuda's own "
        "suite); **speed-up vs numba-cuda** is numba-cuda's median for the same case, array "
        "source and mode over this row's. Case F is the `signature` rows of B and D. "
        "`cuda.bindings` launches with parameters packed once: a Python-side floor, not one "
        "of the comparators. Only ratios carry over between machines.",
        "",
    ]
    notes = []
    if floor.get("skipped"):
        notes.append(f"Floor: {floor['skipped']} (no × C floor column).")
    if floor.get("timed_out"):
        notes.append("Floor: timed out; partial results.")
    if python.get("timed_out"):
        notes.append(
            f"pytest suite: timed out after {python.get('seconds')} s; only finished "
            "benchmarks are shown."
        )
    elif python.get("returncode") not in (0, None):
        notes.append(f"pytest suite: exit status {python.get('returncode')} (see the log).")
    if notes:
        out += ["## Notes", "", *[f"- {n}" for n in notes], ""]

    case_rows = [
        r
        for r in rows
        if r["case"] in CASE_ORDER
        and r["grid"] in (0, 1)
        and r["path"] not in ("fastlaunch.bind", "fastlaunch.graph")
    ]
    case_rows.sort(key=lambda r: (CASE_ORDER.index(r["case"]), _sort_key(r)))
    headline = [
        r
        for r in case_rows
        if r["path"] == "fastlaunch"
        and r["mode"] == "dispatch"
        and r.get("spelling") == "inline"
        and r.get("arrays") in ("views", "fresh")
        and (r.get("arrays") == "views" or r["source"] == "none")
    ]
    out += ["## What users write: `kernel[1, 1](*args)` inline, arrays as views", ""]
    out += _table(headline, rows) if headline else ["No results."]
    out += [""]
    out += ["## Cases A–F, `[1, 1]`", ""]
    out += _table(case_rows, rows) if case_rows else ["No results."]
    out += [""]

    suite_rows = [r for r in rows if r["case"] in SUITE_CASES]
    suite_floor = [
        {**r, "case": k}
        for r in rows
        if r["origin"] == "rust" and r["grid"] == 128
        for k, v in SUITE_CASES.items()
        if r["case"] == v
    ]
    suite = sorted(
        suite_floor + suite_rows,
        key=lambda r: (list(SUITE_CASES).index(r["case"]), _sort_key(r)),
    )
    out += ["## numba-cuda's own `test_kernel_launch` cases, `[128, 128]`", ""]
    out += _table(suite, rows + suite_floor) if suite else ["No results."]
    out += [""]

    out += _bound_and_graph_section(rows)

    verdicts = _verdicts(rows)
    if len(verdicts) > 2:
        out += ["## Against the targets", "", *verdicts, ""]

    out += ["## Leak check", ""]
    if not leak:
        out += ["Not run."]
    elif "launches" in leak:
        out += [
            f"{leak['launches']:,} fastlaunch launches of case B (numba device array, `[1, 1]`, "
            f"synchronized every 10,000) in {leak['seconds']} s "
            f"({leak['us_per_launch_incl_sync']} µs per launch including the synchronizes).",
            "",
            "| | before | after | change |",
            "|---|--:|--:|--:|",
            f"| RSS (KiB) | {leak['rss_before_kib']:,} | {leak['rss_after_kib']:,} "
            f"| {leak['rss_delta_kib']:+,} |",
            f"| GPU free (MiB, {leak['gpu_memory_source']}) "
            f"| {leak['gpu_free_before_bytes'] / 2**20:,.1f} "
            f"| {leak['gpu_free_after_bytes'] / 2**20:,.1f} "
            f"| {-leak['gpu_used_delta_bytes'] / 2**20:+,.1f} |",
        ]
    else:
        out += [f"Not measured: {leak.get('skipped') or leak.get('error')}."]
    out += [""]
    if png_name:
        out += [f"![launch overhead]({png_name})", ""]
    return "\n".join(out)


def render_chart(results: dict[str, Any], out_path: Path) -> str | None:
    """A grouped bar chart (log scale); returns None (and says why) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as error:
        log(f"chart: skipped ({error})")
        return None
    rows = rows_from(results)
    if not rows:
        log("chart: nothing to plot")
        return None

    def median(**want: Any) -> float | None:
        for r in rows:
            if all(r.get(k) == v for k, v in want.items()):
                return r["median_us"]
        return None

    series = ["floor", "fastlaunch", "cuda.core", "cuda.bindings", "cupy.RawKernel"]
    series += ["torch op", "triton", "numba"]
    labels = {"floor": "C floor (Rust)", **PATH_LABELS}
    groups = []
    for case in CASE_ORDER:
        sources = ["none"] if case in ("A", "E16", "E256") else ["numba", "cupy", "torch"]
        for source in sources:
            groups.append((case, source))

    def value(path: str, case: str, source: str) -> float | None:
        if path == "floor":
            return median(origin="rust", path="floor", case=case, grid=1)
        if path in ("fastlaunch", "numba"):  # what users write: inline, views where arrays
            arrays = "fresh" if source == "none" else "views"
            want = {"path": path, "case": case, "source": source, "mode": "dispatch", "grid": 1}
            return median(**want, spelling="inline", arrays=arrays) or median(**want)
        natural = {"cupy.RawKernel": "cupy", "torch op": "torch", "triton": "torch"}
        if source != "none" and natural.get(path, "numba") != source:
            return None
        return median(path=path, case=case)

    suite_groups = [
        (name, jit, array)
        for name in SUITE_CASES
        for jit in MODES_ORDER
        for array in ("numba", "torch", "cupy")
    ]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(18, 11), constrained_layout=True)
    width = 0.8 / len(series)
    colors = plt.get_cmap("tab10")
    for i, path in enumerate(series):
        xs, ys = [], []
        for g, (case, source) in enumerate(groups):
            v = value(path, case, source)
            if v:
                xs.append(g + (i - len(series) / 2 + 0.5) * width)
                ys.append(v)
        if xs:
            top.bar(xs, ys, width, label=labels.get(path, path), color=colors(i))
    top.set_xticks(range(len(groups)))
    top.set_xticklabels([c if s == "none" else f"{c}\n{s}" for c, s in groups])
    top.set_yscale("log")
    top.set_ylabel("µs per launch (median, host)")
    top.set_title(
        "Cases A–E, [1,1], dispatch mode, fastlaunch and numba-cuda inline over views "
        "(bars absent where a path does not apply)"
    )
    top.legend(ncol=4, fontsize=8)
    top.grid(axis="y", which="both", alpha=0.3)

    suite_series = [("floor", "C floor [128,128]"), ("fastlaunch", "fastlaunch")]
    suite_series.append(("numba", "numba-cuda"))
    width = 0.8 / len(suite_series)
    for i, (path, label) in enumerate(suite_series):
        xs, ys = [], []
        for g, (name, jit, array) in enumerate(suite_groups):
            if path == "floor":
                v = median(origin="rust", path="floor", case=SUITE_CASES[name], grid=128)
            else:
                v = median(path=path, case=name, mode=jit, source=array)
            if v:
                xs.append(g + (i - len(suite_series) / 2 + 0.5) * width)
                ys.append(v)
        if xs:
            color = colors(series.index(path) if path in series else i)
            bottom.bar(xs, ys, width, label=label, color=color)
    bottom.set_xticks(range(len(suite_groups)))
    bottom.set_xticklabels([f"{n}\n{j}\n{a}" for n, j, a in suite_groups], fontsize=8)
    bottom.set_yscale("log")
    bottom.set_ylabel("µs per launch (median, host)")
    bottom.set_title("numba-cuda's own test_kernel_launch cases, [128,128]")
    bottom.legend(fontsize=8)
    bottom.grid(axis="y", which="both", alpha=0.3)
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    log(f"chart: {out_path}")
    return out_path.name


def write_report(results: dict[str, Any], out_dirs: Iterable[Path]) -> None:
    markdown = ""
    for out_dir in out_dirs:
        out_dir.mkdir(parents=True, exist_ok=True)
        png = render_chart(results, out_dir / "launch_overhead.png")
        markdown = render_markdown(results, png)
        (out_dir / "results.md").write_text(markdown)
        (out_dir / "results.json").write_text(json.dumps(results, indent=1) + "\n")
        log(f"report: {out_dir / 'results.md'}")
    # the verdicts and the leak check also go to the log, for a quick look
    start = markdown.find("## Against the targets")
    if start < 0:
        start = markdown.find("## Leak check")
    if start >= 0:
        print("\n" + markdown[start:], flush=True)


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="where the report and raw results go")
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    ap.add_argument("--no-leak", action="store_true", help="skip the 1,000,000-launch leak check")
    ap.add_argument("--no-floor", action="store_true", help="skip the Rust floor bench")
    ap.add_argument("--no-pytest", action="store_true", help="skip the pytest-benchmark suite")
    ap.add_argument("--floor-bin", help=f"the floor bench binary (default {DEFAULT_FLOOR_BIN})")
    ap.add_argument("--pytest-args", default="", help="extra pytest arguments, shell-quoted")
    ap.add_argument(
        "--budget", type=float, default=450.0, help="seconds for the whole run (default 450)"
    )
    ap.add_argument("--pytest-timeout", type=float, default=400.0, help="seconds, within --budget")
    ap.add_argument("--leak-launches", type=int, default=1_000_000)
    ap.add_argument(
        "--allow-missing-fastlaunch",
        action="store_true",
        help="still run the peers when fastlaunch is not available",
    )
    ap.add_argument(
        "--no-results-copy", action="store_true", help="do not write benchmarks/results/"
    )
    ap.add_argument("--render", type=Path, help="only re-render a results.json into --out")
    ap.add_argument("--leak-child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.leak_child is None and args.out is None:
        ap.error("--out DIR is required")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.leak_child is not None:
        print(json.dumps(leak_child(args.leak_child)), flush=True)
        return 0
    out_dir = args.out.resolve()
    if args.render:
        write_report(json.loads(args.render.read_text()), [out_dir])
        return 0

    started = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "schema": 1,
        "command": shlex.join(["python3", "benchmarks/run.py", *(argv or sys.argv[1:])]),
        "environment": environment(),
    }
    log(f"environment: {json.dumps(results['environment'])}")
    env_extra: dict[str, str] = {}
    if args.quick:
        env_extra.update(FASTLAUNCH_BENCH_MIN_ROUNDS="10", FASTLAUNCH_BENCH_MAX_ROUNDS="30")
    if args.allow_missing_fastlaunch:
        env_extra["FASTLAUNCH_BENCH_ALLOW_NO_FASTLAUNCH"] = "1"

    # One deadline for everything, so the run ends in time even when a part hangs: the
    # floor takes seconds, the suite gets what is left minus the leak check's reserve.
    deadline = started + args.budget

    def left(reserve: float = 0.0) -> float:
        return max(10.0, deadline - time.monotonic() - reserve)

    leak_reserve = 0.0 if args.no_leak else 100.0
    ok = True
    if not args.no_floor:
        floor = run_floor(
            find_floor_binary(args.floor_bin),
            50 if args.quick else 200,
            timeout=min(120.0, left(leak_reserve + 60)),
        )
        results["floor"] = floor
        ok &= floor.get("returncode") in (0, None) and not floor.get("timed_out")
    if not args.no_pytest:
        with tempfile.TemporaryDirectory(prefix="fastlaunch-bench-") as work:
            results["python"] = run_pytest(
                out_dir,
                Path(work),
                shlex.split(args.pytest_args),
                min(args.pytest_timeout, left(leak_reserve + 15)),
                env_extra,
            )
        ok &= results["python"].get("returncode") in (0, 5)  # 5: nothing collected
    if not args.no_leak:
        results["leak"] = run_leak(args.leak_launches, timeout=min(150.0, left(15)))
        ok &= "error" not in results["leak"]

    measured = bool(
        (results.get("floor") or {}).get("results")
        or (results.get("python") or {}).get("results")
        or "launches" in (results.get("leak") or {})
    )
    targets = [out_dir]
    if measured and not args.no_results_copy:
        targets.append(RESULTS_DIR)
    elif not measured:
        log("nothing was measured: benchmarks/results/ left as it is")
    write_report(results, targets)
    log(f"done in {time.monotonic() - started:.0f} s; {'ok' if ok else 'some parts failed'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
