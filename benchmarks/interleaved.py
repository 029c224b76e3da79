#!/usr/bin/env python3
"""Cases D, B and C timed interleaved: every variant once per round, in a shuffled order.

usage: python3 benchmarks/interleaved.py [--out DIR] [--rounds 60] [--seconds 120]
           [--batch N | --batches 64,256] [--cases D,B,C] [--sources numba,cupy,torch]
           [--floor-every 10] [--floor-batches 50] [--floor-bin PATH] [--no-floor] [--seed 0]

Why: the pytest suite runs each benchmark's batches back to back, so a slow spell of a shared
host lands on one benchmark; neighbouring benchmarks of the same code path have differed by
±2 µs per launch. Here every variant is built once in one process, then timed in rounds: each
round runs every variant once (one batch of N launches each, the context synchronized,
untimed, before each batch), in an order shuffled per round, so a slow spell is shared by all
variants instead of landing on one. Per variant: the median µs per launch over the rounds,
p10 and p90, and ratios to the floors of the same rounds.

Floors:

- C floor: the Rust ``launch-bench`` binary (``.gpu/bin/launch-bench``, as ``run.py`` runs
  it) cannot run inside this process, so it runs as a subprocess between rounds (before round
  0, every ``--floor-every`` rounds and after the last; ``--cases B,D --batches
  --floor-batches``, ``FASTLAUNCH_BENCH_BATCH`` set per batch size); its figure is the median
  of those runs' medians. Without the binary the table says so, and the in-process floor
  below is the one to read.
- in-process floor: ``cuda.bindings`` ``cuLaunchKernel`` with the parameters packed once (as
  ``test_cuda_bindings``), a variant like the others; its column is the median over rounds
  of the variant's time / this floor's time in the same round (a paired ratio).

Variants per case (what is installed of numba-cuda arrays, CuPy and torch; each built on
its own kernel object and arrays; a variant whose set-up fails is reported and skipped):

- ``fastlaunch`` ``k[1, 1](*args)`` inline over views of one buffer and over fresh arrays,
  and a reused launcher (``cfg = k[1, 1]`` once, ``cfg(*args)``) over fresh arrays;
- ``fastlaunch.bind``: ``k[1, 1].bind(*args)`` over fresh numba arrays, called bare; and the
  same bound launch submitted from one Rust loop (``_submit_repeatedly(n)``, no Python per
  launch): a floor measured inside this process, whatever slows the process down;
- ``cuda.core``: ``launch(stream, config, kernel, a0.data.ptr, ...)`` (CuPy) or
  ``a0.data_ptr()`` (torch), the pointers read per call, fresh and views
  (``test_cuda_core_by_hand``);
- ``cupy.RawKernel`` with the CuPy arrays, fresh and views;
- ``cuda.bindings``: the in-process floor above.

``--batches 64,256`` times every variant at both batch sizes within the same rounds (and the
C floor at both): if a case costs more per launch at 256 than at 64, the host was waiting on
the GPU's queue rather than doing its own work. The "drain" column (the synchronize after
each batch, µs per batch) says the same from the other side.

``--seconds`` bounds the whole run: rounds stop when the next one (and the last floor run)
would not fit, and the report says how many were done. Writes ``interleaved.md`` and
``interleaved.json`` to ``--out`` and prints the markdown.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.harness import (  # noqa: E402
    BATCH,
    CASES,
    POINTER_READS,
    Case,
    PackedParams,
    apply_numpy_shim,
    array_makers,
    cuda_core_by_hand,
    cupy_scalars,
    cupy_source,
    empty_kernel_ptx,
    make_batch,
    make_inline_batch,
    make_statement_batch,
    make_views,
    numba_layout_values,
    numba_ptx_types,
    per_launch_stats,
    ptx_target,
    py_kernel,
)
from benchmarks.run import DEFAULT_FLOOR_BIN, PATH_LABELS, environment, find_floor_binary  # noqa: E402

CASE_IDS = ("D", "B", "C")
SOURCES = ("numba", "cupy", "torch")
PATH_ORDER = ("cuda.bindings", "fastlaunch.bind", "fastlaunch", "cuda.core", "cupy.RawKernel")
#: the mode of the floor submitted from a Rust loop inside this process (``_submit_repeatedly``)
IN_PROCESS_FLOOR = "Rust loop, in-process floor"
#: the Rust floor bench's paths shown in the table (all of them are kept in the JSON)
FLOOR_ROWS = {"floor": "C floor (Rust cuLaunchKernel, packed once)", "packer": "Rust packer"}

#: ``make(n)``: a function making one batch of ``n`` launches
MakeBatch = Callable[[int], Callable[[], None]]


def log(message: str) -> None:
    print(f"[interleaved {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------- variants


@dataclass
class Variant:
    """One way of launching a case; ``build()`` allocates and compiles and returns
    ``(make, keep)``: ``make(n)`` gives a batch of ``n`` launches, ``keep`` what must stay
    alive while they run (modules, packed parameters, arrays)."""

    case: str
    path: str
    source: str
    mode: str
    spelling: str
    arrays: str
    build: Callable[[], tuple[MakeBatch, Any]]

    @property
    def name(self) -> str:
        return f"{self.case} {self.path} {self.source} {self.spelling}/{self.arrays}"

    def fields(self) -> dict[str, str]:
        keys = ("case", "path", "source", "mode", "spelling", "arrays")
        return {k: getattr(self, k) for k in keys}


def _data_pointer(array: Any) -> int:
    return int(array.__cuda_array_interface__["data"][0])


def _arrays(make: Callable[[tuple[int, ...]], Any], case: Case, arrays: str) -> list:
    if arrays == "views":
        return make_views(make, case.n_arrays, case.shape)
    return [make(case.shape) for _ in range(case.n_arrays)]


def _fastlaunch_build(case: Case, make: Callable, spelling: str, arrays: str) -> Callable:
    def build() -> tuple[MakeBatch, Any]:
        import fastlaunch

        if not fastlaunch.is_available():
            raise RuntimeError("fastlaunch.is_available() is False")
        kernel = fastlaunch.jit(py_kernel(f"empty_{case.id.lower()}"))
        args = (*_arrays(make, case, arrays), *case.scalars())
        if spelling == "inline":
            return (lambda n: make_inline_batch(kernel, (1, 1), args, n)), kernel
        if spelling == "reused":
            launcher = kernel[1, 1]
            return (lambda n: make_batch(launcher, args, n)), kernel
        launcher = kernel[1, 1]
        launcher(*args)  # compiled before it is bound
        bound = launcher.bind(*args)
        if spelling == "rust loop":  # the floor inside this process: no Python per launch
            return (lambda n: lambda: bound._submit_repeatedly(n)), (kernel, args)
        return (lambda n: make_batch(bound, (), n)), (kernel, args)

    return build


def _cuda_core_build(case: Case, source: str, make: Callable, arrays: str) -> Callable:
    def build() -> tuple[MakeBatch, Any]:
        tensors = _arrays(make, case, arrays)
        statement, names = cuda_core_by_hand(case, source, tensors)
        return (lambda n: make_statement_batch(statement, names, n)), tensors

    return build


def _rawkernel_build(case: Case, make: Callable, arrays: str) -> Callable:
    def build() -> tuple[MakeBatch, Any]:
        import cupy

        entry = f"empty_{case.id.lower()}"
        kernel = cupy.RawKernel(cupy_source(entry, case), entry)
        kernel.compile()
        made = _arrays(make, case, arrays)
        args = ((1,), (1,), (*made, *cupy_scalars(case)))
        return (lambda n: make_batch(kernel, args, n)), made

    return build


def _bindings_build(case: Case, make: Callable) -> Callable:
    def build() -> tuple[MakeBatch, Any]:
        from cuda.bindings import driver as cu
        from numba import cuda

        def check(err: Any, what: str) -> None:
            if err != cu.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"{what}: {err}")

        cuda.current_context()
        major, minor = cuda.get_current_device().compute_capability
        entry = f"empty_{case.id.lower()}"
        ptx = empty_kernel_ptx(entry, numba_ptx_types(case), ptx_target((major, minor)))
        err, module = cu.cuModuleLoadData(ptx.encode() + b"\0")
        check(err, "cuModuleLoadData")
        err, function = cu.cuModuleGetFunction(module, entry.encode())
        check(err, "cuModuleGetFunction")
        arrays = _arrays(make, case, "fresh")
        values = numba_layout_values(case, [_data_pointer(a) for a in arrays])
        packed = PackedParams(values, numba_ptx_types(case))
        args = (function, 1, 1, 1, 1, 1, 1, 0, cu.CUstream(0), packed.address, 0)
        check(cu.cuLaunchKernel(*args)[0], "cuLaunchKernel")
        return (lambda n: make_batch(cu.cuLaunchKernel, args, n)), (module, packed, arrays)

    return build


def variants_for(case: Case, makers: dict[str, Callable]) -> list[Variant]:
    """Every variant of ``case`` for the array sources in ``makers``."""
    c = case.id
    out: list[Variant] = []
    if "numba" in makers:
        numba = makers["numba"]
        # numba's data model over fresh numba arrays, as test_cuda_bindings and test_bound
        build = _bindings_build(case, numba)
        out.append(Variant(c, "cuda.bindings", "raw", "packed once", "—", "fresh", build))
        build = _fastlaunch_build(case, numba, "bound", "fresh")
        out.append(Variant(c, "fastlaunch.bind", "numba", "bound", "bound", "fresh", build))
        build = _fastlaunch_build(case, numba, "rust loop", "fresh")
        out.append(
            Variant(c, "fastlaunch.bind", "numba", IN_PROCESS_FLOOR, "bound", "fresh", build)
        )
    for source, make in makers.items():
        for spelling, arrays in (("inline", "views"), ("inline", "fresh"), ("reused", "fresh")):
            build = _fastlaunch_build(case, make, spelling, arrays)
            out.append(Variant(c, "fastlaunch", source, "dispatch", spelling, arrays, build))
    for source in ("cupy", "torch"):
        for arrays in ("views", "fresh") if source in makers else ():
            build = _cuda_core_build(case, source, makers[source], arrays)
            mode = f"{POINTER_READS[source].format('x')} per call"
            out.append(Variant(c, "cuda.core", source, mode, "inline", arrays, build))
    for arrays in ("views", "fresh") if "cupy" in makers else ():
        build = _rawkernel_build(case, makers["cupy"], arrays)
        out.append(Variant(c, "cupy.RawKernel", "cupy", "C types", "inline", arrays, build))
    return out


# --------------------------------------------------------------------------- timing


@dataclass
class Timed:
    """One variant at one batch size, and what its rounds measured."""

    variant: Variant
    batch: int
    run: Callable[[], None]
    #: what must stay alive while ``run`` launches (modules, packed parameters, arrays)
    keep: Any = None
    #: seconds per batch, by round index
    seconds: dict[int, float] = field(default_factory=dict)
    #: seconds of the synchronize after the batch, by round index
    drain: dict[int, float] = field(default_factory=dict)
    error: str | None = None


def one_round(
    timed: Sequence[Timed],
    index: int,
    sync: Callable[[], Any],
    rng: random.Random,
    clock: Callable[[], float] = time.perf_counter,
) -> None:
    """Times every (still working) entry once, in a shuffled order: the context synchronized
    untimed before each batch, and the synchronize after it timed apart (the drain)."""
    order = [t for t in timed if t.error is None]
    rng.shuffle(order)
    for t in order:
        try:
            sync()
            start = clock()
            t.run()
            launched = clock()
            sync()
            drained = clock()
        except Exception as error:  # report it, drop this entry, go on with the others
            t.error = f"round {index}: {type(error).__name__}: {error}"
            log(f"{t.variant.name} at batch {t.batch}: {t.error}")
            try:
                sync()
            except Exception:
                pass
            continue
        t.seconds[index] = launched - start
        t.drain[index] = drained - launched


# ---------------------------------------------------------------------- the C floor


@dataclass
class Floor:
    """The Rust floor bench run as a subprocess between rounds."""

    binary: Path | None
    cases: Sequence[str]
    batches: int
    #: every run: {"batch", "after_round", "seconds", "results": [records], "error"?}
    runs: list[dict[str, Any]] = field(default_factory=list)
    #: why there is no C floor (no binary, no GPU for it, it kept failing)
    unavailable: str | None = None
    meta: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.binary is None or not self.binary.is_file():
            self.unavailable = (
                f"no floor binary ({self.binary or DEFAULT_FLOOR_BIN}; "
                "`make gpu-prepare` builds it into .gpu/bin and gpu-run.sh needs .gpu carried)"
            )

    def longest_run(self) -> float:
        return max((r["seconds"] for r in self.runs), default=0.0)

    def run(self, batch: int, after_round: int, timeout: float) -> None:
        if self.unavailable or self.binary is None:
            return
        command = [str(self.binary), "--bench", "--batches", str(self.batches)]
        command += ["--cases", ",".join(self.cases)]
        env = {**os.environ, "FASTLAUNCH_BENCH_BATCH": str(batch)}
        record: dict[str, Any] = {"batch": batch, "after_round": after_round, "results": []}
        started = time.monotonic()
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
                cwd=ROOT,
                check=False,
            )
            stdout, stderr, record["returncode"] = done.stdout, done.stderr, done.returncode
        except subprocess.TimeoutExpired:
            stdout, stderr = "", ""
            record["error"] = f"timed out after {timeout:.0f} s"
        except OSError as error:
            self.unavailable = f"floor binary failed to start: {error}"
            return
        record["seconds"] = round(time.monotonic() - started, 3)
        for line in stdout.splitlines():
            line = line.strip()
            if "no CUDA driver/GPU, skipped" in line:
                self.unavailable = f"the floor binary found no GPU: {line}"
                return
            try:
                item = json.loads(line) if line.startswith("{") else {}
            except ValueError:
                item = {}
            if item.get("kind") == "meta":
                self.meta = item
            elif item.get("kind") == "result" and item.get("grid") == 1:
                record["results"].append(item)
        if record.get("returncode") not in (0, None):
            record["error"] = f"exit {record['returncode']}: {stderr.strip()[-500:]}"
        if record.get("error"):
            log(f"floor run (batch {batch}): {record['error']}")
        self.runs.append(record)
        failed = [r for r in self.runs if r.get("error")]
        if len(failed) >= 2 and not any(r["results"] for r in self.runs):
            self.unavailable = f"the floor binary failed twice: {failed[-1]['error']}"

    def medians(self, case: str, batch: int, path: str = "floor") -> list[dict[str, Any]]:
        """The result record of every run of ``case`` on ``path`` at ``batch``."""
        return [
            {**r, "after_round": run["after_round"]}
            for run in self.runs
            if run["batch"] == batch
            for r in run["results"]
            if r["case"] == case and r["path"] == path
        ]


# ---------------------------------------------------------------------- the summary


def _quantiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(p10, median, p90), linear interpolation (NumPy's default, as harness.py)."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    return deciles[0], statistics.median(values), deciles[-1]


def summarize(timed: Sequence[Timed], floor: Floor | None) -> list[dict[str, Any]]:
    """One row per variant and batch size (and per C floor path, case and batch size):
    µs per launch median / p10 / p90, × the C floor, and × cuda.bindings and × the Rust loop
    (the two in-process floors) in the same round."""
    bindings = {
        (t.variant.case, t.batch): t.seconds
        for t in timed
        if t.variant.path == "cuda.bindings" and t.seconds
    }
    loops = {
        (t.variant.case, t.batch): t.seconds
        for t in timed
        if t.variant.mode == IN_PROCESS_FLOOR and t.seconds
    }
    rows: list[dict[str, Any]] = []
    for key in sorted({(t.variant.case, t.batch) for t in timed}):
        case, batch = key
        c_floor = None
        for path, label in FLOOR_ROWS.items():
            runs = floor.medians(case, batch, path) if floor else []
            if not runs:
                continue
            median = statistics.median(r["median_us"] for r in runs)
            if path == "floor":
                c_floor = median
            rows.append(
                {
                    "case": case,
                    "batch": batch,
                    "path": f"rust.{path}",
                    "label": label,
                    "source": "raw",
                    "mode": f"subprocess, {len(runs)} runs",
                    "spelling": "—",
                    "arrays": "fresh",
                    "median_us": median,
                    # the median over the runs of each run's own p10 and p90
                    "p10_us": statistics.median(r["p10_us"] for r in runs),
                    "p90_us": statistics.median(r["p90_us"] for r in runs),
                    "x_c_floor": median / c_floor if c_floor else None,
                    "runs_median_us": [r["median_us"] for r in runs],
                    "rounds": len(runs),
                }
            )
        for t in timed:
            if (t.variant.case, t.batch) != key:
                continue
            row: dict[str, Any] = {
                **t.variant.fields(),
                "batch": batch,
                "label": PATH_LABELS.get(t.variant.path, t.variant.path),
            }
            if t.error:
                row["error"] = t.error
            if t.seconds:
                row |= per_launch_stats(list(t.seconds.values()), batch)
                row["drain_us"] = statistics.median(t.drain.values()) * 1e6
                row["per_round_us"] = {i: s * 1e6 / batch for i, s in t.seconds.items()}
                if c_floor:
                    row["x_c_floor"] = row["median_us"] / c_floor
                for name, floors in (("x_bindings_paired", bindings), ("x_loop_paired", loops)):
                    ratio = _paired_ratio(t.seconds, floors.get(key))
                    if ratio is not None:
                        row[name] = ratio
            rows.append(row)
    return rows


def _paired_ratio(seconds: dict[int, float], floor: dict[int, float] | None) -> float | None:
    """The median over the rounds of ``seconds`` / ``floor`` in the same round."""
    ratios = [s / floor[i] for i, s in seconds.items() if floor and i in floor]
    return statistics.median(ratios) if ratios else None


def host_drift(timed: Sequence[Timed]) -> dict[str, float] | None:
    """How much slower or faster each round ran than usual: per round, the median over the
    variants of (this round's time / the variant's median); p10 / p90 over the rounds."""
    medians = {id(t): statistics.median(t.seconds.values()) for t in timed if t.seconds}
    by_round: dict[int, list[float]] = {}
    for t in timed:
        for i, s in t.seconds.items():
            by_round.setdefault(i, []).append(s / medians[id(t)])
    factors = [statistics.median(v) for _, v in sorted(by_round.items())]
    if len(factors) < 2:
        return None
    p10, median, p90 = _quantiles(factors)
    return {"p10": p10, "median": median, "p90": p90, "min": min(factors), "max": max(factors)}


def _sort_key(row: dict[str, Any]) -> tuple:
    path = row["path"]
    rank = (
        -1
        if path.startswith("rust.")
        else (PATH_ORDER.index(path) if path in PATH_ORDER else len(PATH_ORDER))
    )
    sources = ("raw", "numba", "cupy", "torch")
    return (
        rank,
        sources.index(row["source"]) if row["source"] in sources else 9,
        row["spelling"] != "inline",
        row["arrays"] != "views",
        row["path"],
    )


def _us(value: float | None) -> str:
    return (
        "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"
    )


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def render_markdown(report: dict[str, Any]) -> str:
    rows: list[dict[str, Any]] = report["rows"]
    settings = report["settings"]
    env = report.get("environment") or {}
    floor = report.get("floor") or {}
    cases = settings["cases"]
    title = f"Case{'s' if len(cases) > 1 else ''} {' and '.join(cases)}"
    out = [f"# {title}, interleaved", ""]
    out.append(f"Measured {env.get('date_utc', '?')} UTC with `{report.get('command', '')}`.")
    out.append("")
    for gpu in env.get("gpus") or []:
        out.append(f"- GPU: {gpu.get('name', '?')} (driver {gpu.get('driver_version', '?')})")
    if env:
        out.append(f"- CPU: {env.get('cpu', '?')}; Python {env.get('python', '?')}")
        versions = env.get("versions") or {}
        out.append("- Libraries: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
        out.append("")
    out += [
        "## Method",
        "",
        f"One process; every variant built once, then {report['rounds_done']} rounds "
        f"(of {settings['rounds']} asked{'; ' + report['stopped'] if report['stopped'] else ''})."
        " Each round runs every variant once at each batch size "
        f"({', '.join(str(b) for b in settings['batches'])} launches), in an order shuffled per "
        "round (seed "
        f"{settings['seed']}), the context synchronized untimed before each batch. µs per launch "
        "= batch time / batch size; median, p10 and p90 over the rounds. **× C floor**: the "
        "median over the C floor's runs (the Rust `launch-bench` in a subprocess between "
        "rounds, same case and batch size, `[1, 1]`; its p10 and p90 are the medians of each "
        "run's own). **× cuda.bindings**: the median over the "
        "rounds of this variant's time / the in-process `cuda.bindings` floor's time (packed "
        "once) in the same round. **× Rust loop**: the same, against the bound launch "
        "submitted from one Rust loop in this process (`_submit_repeatedly`, no Python per "
        "launch). **drain**: the synchronize after each batch, µs per batch "
        "(large when the GPU had a queue to work off).",
        "",
    ]
    notes = []
    if floor.get("unavailable"):
        notes.append(
            f"**No C floor**: {floor['unavailable']}. Read the × cuda.bindings column: the "
            "in-process floor (cuLaunchKernel from Python, parameters packed once) stands in."
        )
    for run in floor.get("runs") or []:
        if run.get("error"):
            notes.append(f"C floor run after round {run['after_round']}: {run['error']}")
    for name, why in report.get("skipped", {}).items():
        notes.append(f"skipped {name}: {why}")
    for row in rows:
        if row.get("error"):
            where = f"{row['case']} {row['label']} {row['source']} {row['arrays']}"
            notes.append(f"{where} at batch {row['batch']}: {row['error']}")
    if notes:
        out += ["## Notes", "", *[f"- {n}" for n in notes], ""]

    out += [
        "## µs per launch",
        "",
        "| case | batch | path | source | mode | spelling | arrays | µs median | p10 | p90 "
        "| × C floor | × cuda.bindings | × Rust loop | drain µs | rounds |",
        "|---|--:|---|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for case in settings["cases"]:
        for batch in settings["batches"]:
            here = [r for r in rows if r["case"] == case and r["batch"] == batch]
            for r in sorted(here, key=_sort_key):
                label = f"**{r['label']}**" if r["path"] == "fastlaunch" else r["label"]
                out.append(
                    f"| {case} | {batch} | {label} | {r['source']} | {r['mode']} "
                    f"| {r['spelling']} | {r['arrays']} | {_us(r.get('median_us'))} "
                    f"| {_us(r.get('p10_us'))} | {_us(r.get('p90_us'))} "
                    f"| {_ratio(r.get('x_c_floor'))} | {_ratio(r.get('x_bindings_paired'))} "
                    f"| {_ratio(r.get('x_loop_paired'))} "
                    f"| {_us(r.get('drain_us'))} | {r.get('rounds', 0)} |"
                )
    out.append("")

    if len(settings["batches"]) > 1:
        small, large = min(settings["batches"]), max(settings["batches"])
        out += [
            f"## Batch {small} against batch {large}",
            "",
            f"Per launch at {large} over per launch at {small}: above 1 where the host waited "
            "on the GPU's queue.",
            "",
            f"| case | path | source | spelling | arrays | µs at {small} | µs at {large} "
            f"| {large} / {small} | drain µs at {large} |",
            "|---|---|---|---|---|--:|--:|--:|--:|",
        ]
        keys = ("case", "path", "source", "spelling", "arrays")
        by_key: dict[tuple, dict[int, dict[str, Any]]] = {}
        for r in rows:
            if r.get("median_us") is not None:
                by_key.setdefault(tuple(r[k] for k in keys), {})[r["batch"]] = r

        def order(item: tuple[tuple, dict[int, dict[str, Any]]]) -> tuple:
            key, per_batch = item
            return settings["cases"].index(key[0]), _sort_key(next(iter(per_batch.values())))

        for key, per_batch in sorted(by_key.items(), key=order):
            if small not in per_batch or large not in per_batch:
                continue
            a, b = per_batch[small], per_batch[large]
            out.append(
                f"| {key[0]} | {b['label']} | {key[2]} | {key[3]} | {key[4]} "
                f"| {_us(a['median_us'])} | {_us(b['median_us'])} "
                f"| {_ratio(b['median_us'] / a['median_us'])} | {_us(b.get('drain_us'))} |"
            )
        out.append("")

    floor_rows = [r for r in rows if r["path"] == "rust.floor"]
    if floor_rows:
        out += [
            "## C floor, run by run",
            "",
            "The C floor's median in each of its runs, in order (before round 0, every "
            f"{settings['floor_every']} rounds, after the last).",
            "",
            "| case | batch | µs median of each run |",
            "|---|--:|---|",
        ]
        for r in floor_rows:
            each = ", ".join(_us(v) for v in r["runs_median_us"])
            out.append(f"| {r['case']} | {r['batch']} | {each} |")
        out.append("")
    drift = report.get("host_drift")
    if drift:
        out += [
            "## Host drift across rounds",
            "",
            "Per round, the median over all variants of (time this round / the variant's "
            f"median): p10 {drift['p10']:.3f}, median {drift['median']:.3f}, p90 "
            f"{drift['p90']:.3f} (min {drift['min']:.3f}, max {drift['max']:.3f}): how much the "
            "host's speed moved during the run, shared here by every variant.",
            "",
        ]
    return "\n".join(out)


# --------------------------------------------------------------------------- main


def _batch_list(text: str) -> list[int]:
    try:
        batches = sorted({int(b) for b in text.split(",") if b.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of counts: {text!r}") from None
    if not batches or min(batches) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be positive: {text!r}")
    return batches


def _name_list(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        wrong = [n for n in names if n not in allowed]
        if wrong or not names:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(allowed)}: {text!r}")
        return names

    return parse


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        epilog="The method is this file's docstring.",
    )
    ap.add_argument("--out", type=Path, help="where interleaved.md and interleaved.json go")
    ap.add_argument("--rounds", type=int, default=60, help="rounds (default 60)")
    ap.add_argument(
        "--seconds",
        type=float,
        default=120.0,
        help="budget for the whole run, set-up included; rounds stop when it runs out "
        "(default 120)",
    )
    ap.add_argument(
        "--batch",
        type=int,
        default=BATCH,
        help=f"launches per batch (default FASTLAUNCH_BENCH_BATCH or 256; now {BATCH})",
    )
    ap.add_argument(
        "--batches",
        type=_batch_list,
        help="several batch sizes timed in the same rounds, e.g. 64,256 (overrides --batch)",
    )
    ap.add_argument(
        "--cases",
        type=_name_list(CASE_IDS),
        default=list(CASE_IDS),
        help="D,B,C (default all three)",
    )
    ap.add_argument(
        "--sources",
        type=_name_list(SOURCES),
        default=list(SOURCES),
        help="array sources (default numba,cupy,torch: those installed)",
    )
    ap.add_argument(
        "--floor-every", type=int, default=10, help="rounds between C floor runs (default 10)"
    )
    ap.add_argument(
        "--floor-batches",
        type=int,
        default=50,
        help="batches per C floor run (default 50, the binary's least)",
    )
    ap.add_argument("--floor-bin", help=f"the Rust floor binary (default {DEFAULT_FLOOR_BIN})")
    ap.add_argument("--no-floor", action="store_true", help="no C floor runs")
    ap.add_argument("--seed", type=int, default=0, help="seed of the per-round shuffles")
    args = ap.parse_args(argv)
    args.batches = args.batches or [max(1, args.batch)]
    if args.rounds < 1 or args.floor_every < 1:
        ap.error("--rounds and --floor-every must be at least 1")
    return args


def build_all(
    cases: Sequence[str], sources: Sequence[str], batches: Sequence[int], sync: Callable
) -> tuple[list[Timed], dict[str, str]]:
    """Builds and warms up every variant at every batch size; returns the entries and the
    variants skipped (name: why)."""
    skipped: dict[str, str] = {}
    makers = array_makers(sources)
    for source in sources:
        if source not in makers:
            skipped[f"{source} arrays"] = f"{source} is not installed"
    timed: list[Timed] = []
    for case_id in cases:
        for variant in variants_for(CASES[case_id], makers):
            try:
                make, keep = variant.build()
                runs = {n: make(n) for n in batches}
                for run in runs.values():  # first calls compile and load; then one warm batch
                    run()
                    sync()
                    run()
                    sync()
            except Exception as error:  # report it and go on with the others
                skipped[variant.name] = f"{type(error).__name__}: {error}"
                log(f"skipped {variant.name}: {skipped[variant.name]}")
                try:
                    sync()
                except Exception:
                    pass
                continue
            timed += [Timed(variant, n, run, keep) for n, run in runs.items()]
            log(f"built {variant.name}")
    return timed, skipped


def interleave(
    args: argparse.Namespace,
    timed: Sequence[Timed],
    sync: Callable[[], Any],
    floor: Floor | None,
    deadline: float,
) -> dict[str, Any]:
    """The rounds (and the C floor runs between them) until ``args.rounds`` are done or the
    next would pass ``deadline`` (``time.monotonic()``); returns the report's measured part."""
    rng = random.Random(args.seed)

    def floor_runs(after_round: int) -> None:
        for n in args.batches if floor else ():
            floor.run(n, after_round, timeout=max(30.0, deadline - time.monotonic()))

    done, last_floor, round_seconds, stopped = 0, -1, 0.0, ""
    while done < args.rounds and timed:
        due = done % args.floor_every == 0
        # room for this round, the floor runs due now and the last ones after the last round
        reserve = (2 if due else 1) * floor.longest_run() * len(args.batches) if floor else 0.0
        if done and time.monotonic() + round_seconds + reserve > deadline:
            stopped = f"stopped by the {args.seconds:.0f} s budget"
            break
        if due:
            floor_runs(done)
            last_floor = done
        round_started = time.monotonic()
        one_round(timed, done, sync, rng)
        round_seconds = time.monotonic() - round_started
        done += 1
    if done and last_floor != done:
        floor_runs(done)
    return {
        "rounds_done": done,
        "stopped": stopped,
        "floor": (
            {
                "binary": str(floor.binary) if floor.binary else None,
                "unavailable": floor.unavailable,
                "meta": floor.meta,
                "runs": floor.runs,
            }
            if floor
            else {"unavailable": "--no-floor was given"}
        ),
        "rows": summarize(timed, floor),
        "host_drift": host_drift(timed),
    }


def write_report(report: dict[str, Any], out: Path | None) -> str:
    """``interleaved.json`` and ``interleaved.md`` into ``out`` (when given); the markdown."""
    markdown = render_markdown(report)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "interleaved.json").write_text(json.dumps(report, indent=1) + "\n")
        (out / "interleaved.md").write_text(markdown + "\n")
        log(f"wrote {out / 'interleaved.md'} and interleaved.json")
    return markdown


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
    apply_numpy_shim()
    import warnings

    from numba import cuda
    from numba.core.errors import NumbaPerformanceWarning

    warnings.simplefilter("ignore", NumbaPerformanceWarning)
    if not cuda.is_available():
        log("no CUDA GPU (numba.cuda.is_available() is False): nothing to time")
        return 77
    cuda.current_context()  # device 0's primary context, which every library here uses
    sync = cuda.synchronize
    report: dict[str, Any] = {
        "schema": 1,
        "command": shlex.join(["python3", "benchmarks/interleaved.py", *(argv or sys.argv[1:])]),
        "environment": environment(),
        "settings": {
            k: getattr(args, k)
            for k in ("rounds", "seconds", "batches", "cases", "sources", "floor_every", "seed")
        }
        | {"floor_batches": args.floor_batches},
    }
    timed, report["skipped"] = build_all(args.cases, args.sources, args.batches, sync)
    log(f"{len(timed)} entries built in {time.monotonic() - started:.0f} s")
    floor = None
    if not args.no_floor:
        floor = Floor(find_floor_binary(args.floor_bin), args.cases, args.floor_batches)
        if floor.unavailable:
            log(f"C floor: {floor.unavailable}")
    report |= interleave(args, timed, sync, floor, started + args.seconds)
    log(f"{report['rounds_done']} rounds in {time.monotonic() - started:.0f} s {report['stopped']}")
    print(write_report(report, args.out), flush=True)
    return 0 if report["rounds_done"] else 1


if __name__ == "__main__":
    sys.exit(main())
