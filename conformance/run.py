"""Conformance: numba-cuda's own CUDA tests, as installed, plain and with fastlaunch installed.

Each module of ``numba.cuda.tests.cudapy``, ``numba.cuda.tests.doc_examples`` and
``numba.cuda.tests.cudadrv`` (the driver-level tests: device arrays, memory, streams, events,
contexts), all of them or a group of them (``--group K/N``), runs twice, each run in a fresh
process: ``plain`` (numba-cuda as it is) and ``installed`` (``fastlaunch.install()`` before
any test module is imported). The report lists, per module and mode, the pass/fail/error/skip
counts, and every test that passes plain but not installed.

usage:
  python3 conformance/run.py --out DIR [--group K/N | --modules a,b] [--jobs N] [--timeout S]
      (--modules takes modules and the names cudadrv and doc_examples: all of a package's)
                             [--budget S]
      writes DIR/conformance.md and DIR/conformance.json and prints the Markdown
  python3 conformance/run.py --merge A.json B.json ... --out DIR
      merges the JSON of several runs (one group each) into DIR/results.md and
      DIR/conformance.json
  python3 conformance/run.py --list [--group K/N]
      prints the modules (of the group)
  python3 conformance/run.py --mode installed|plain --module NAME --result-file FILE
      (child mode, started by the above) runs one module, one JSON line per test into FILE

Installing reaches the processes a test starts too (test_caching runs cached kernels in
fresh interpreters): the child puts a generated ``sitecustomize.py`` first on PYTHONPATH and
sets ``FASTLAUNCH_INSTALL=1``, so they install fastlaunch as soon as ``numba.cuda`` is
imported (fastlaunch's own start-up hook), then run any ``sitecustomize`` that was there.
Both modes get fastlaunch's NumPy 2.5 ``np.row_stack`` alias (numba-cuda 0.30 needs it).
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib.abc
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import unittest
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PACKAGE = "numba.cuda.tests.cudapy"
DOC_PACKAGE = "numba.cuda.tests.doc_examples"
#: numba-cuda's driver-level tests: device arrays, memory, streams, events, contexts.
DRIVER_PACKAGE = "numba.cuda.tests.cudadrv"
OTHER_PACKAGES = (DOC_PACKAGE, DRIVER_PACKAGE)


def discover() -> list[str]:
    """Every test module of the packages, without importing them: cudapy's by bare name,
    the others' dotted."""
    found = []
    for package in (PACKAGE, *OTHER_PACKAGES):
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        folder = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(folder.glob("test_*.py")):
            found.append(path.stem if package == PACKAGE else f"{package}.{path.stem}")
    return found


def group_of(modules: list[str], spec: str) -> list[str]:
    """``K/N``: the K-th (1-based) of N groups, dealt round-robin over the sorted modules by
    file size, so that each group gets a like share of big and small modules."""
    k, _, n = spec.partition("/")
    k_i, n_i = int(k), int(n)
    if not 1 <= k_i <= n_i:
        raise ValueError(f"--group {spec}: K must be 1..N")

    def size(module: str) -> int:
        dotted = module if "." in module else f"{PACKAGE}.{module}"
        spec_ = importlib.util.find_spec(dotted)
        try:
            return os.path.getsize(spec_.origin) if spec_ and spec_.origin else 0
        except OSError:
            return 0

    ordered = sorted(modules, key=lambda m: (-size(m), m))
    return [m for i, m in enumerate(ordered) if i % n_i == k_i - 1]


# Started first so that the slowest runs do not set the total wall time.
SLOW = ["test_caching", "test_dispatcher", "test_record_dtype", "test_sm", "test_inspect"]
MODES = ("plain", "installed")
PASSING = ("pass", "xfail")
# outcome -> report column (unexpected successes count as failures, expected failures pass)
COLUMN = {"pass": "pass", "xfail": "pass", "fail": "fail", "xpass": "fail"}
COLUMNS = ("pass", "fail", "error", "skip")

INSTALL_ENV = "FASTLAUNCH_INSTALL"  # read by fastlaunch's start-up hook (fastlaunch._installer)
SITECUSTOMIZE = """\
# Written by fastlaunch's conformance/run.py for the processes that a test run starts: both
# modes get the NumPy 2.5 np.row_stack alias; FASTLAUNCH_INSTALL=1 (the installed mode) also
# installs fastlaunch as soon as numba.cuda is imported.
import importlib.util as _util
import sys as _sys

_spec = _util.spec_from_file_location("_fastlaunch_conformance", {run_py!r})
_module = _util.module_from_spec(_spec)
_sys.modules[_spec.name] = _module
_spec.loader.exec_module(_module)
_module.site_hook({site_dir!r})
"""


# --------------------------------------------------------------------------------------------
# The two modes


def install() -> bool:
    """``fastlaunch.install()``: ``numba.cuda.jit`` makes fastlaunch kernels."""
    import fastlaunch

    fastlaunch.install()
    return fastlaunch.is_installed()


def site_hook(site_dir: str) -> None:
    """Run by the generated sitecustomize in every interpreter a test run starts."""
    from fastlaunch import _installer, _numpy_compat

    _numpy_compat.apply()
    _installer.install_at_startup()  # only where FASTLAUNCH_INSTALL=1 (the installed mode)
    # Chain to the sitecustomize this one shadows, if any.
    from importlib.machinery import PathFinder

    own = os.path.realpath(site_dir)
    rest = [p for p in sys.path if os.path.realpath(p or ".") != own]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


def _propagate(run_py: Path, under: Path, installed: bool) -> Path:
    """Makes the interpreters this process starts do as this one does."""
    site_dir = Path(tempfile.mkdtemp(prefix="site-", dir=under))
    text = SITECUSTOMIZE.format(run_py=str(run_py.resolve()), site_dir=str(site_dir))
    (site_dir / "sitecustomize.py").write_text(text)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(site_dir) + (os.pathsep + old if old else "")
    if installed:
        os.environ[INSTALL_ENV] = "1"
    else:
        os.environ.pop(INSTALL_ENV, None)
    return site_dir


# --------------------------------------------------------------------------------------------
# Child: one module, one mode


def _short_path(filename: str) -> str:
    for marker in ("/numba/cuda/", "/fastlaunch/", "/numba/"):
        i = filename.rfind(marker)
        if i >= 0:
            return filename[i + 1 :]
    return os.path.basename(filename)


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Warning|Exit|Interrupt)\b")
_FRAME_LINE = re.compile(r'^\s+File "([^"]+)", line (\d+)')


def _first_line(lines: list[str]) -> str:
    """The first non-empty line, and the next one when it ends with a colon."""
    lines = [line.strip() for line in lines if line.strip()]
    if not lines:
        return ""
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]


def _describe(err: Any) -> dict[str, str]:
    exctype, value, tb = err
    text = "".join(traceback.format_exception_only(exctype, value)).strip()
    lines = text.splitlines()
    first = _first_line(lines) or exctype.__name__
    frames = traceback.extract_tb(tb)
    where = f"{_short_path(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    if "Failed to import test module" in first:
        # unittest's stand-in for a module that failed to import: its message holds the
        # import's traceback; report the exception that ended it and where it was raised.
        last = max((i for i, line in enumerate(lines) if _EXCEPTION_LINE.match(line)), default=0)
        if last > 0:
            first = _first_line(lines[last:])
            frame_lines = [m for line in lines[:last] if (m := _FRAME_LINE.match(line))]
            if frame_lines:
                where = f"{_short_path(frame_lines[-1][1])}:{frame_lines[-1][2]}"
            first = f"import failed: {first}"
    full = "".join(traceback.format_exception(exctype, value, tb))
    if len(full) > 6000:
        full = full[:1500] + "\n[...]\n" + full[-4000:]
    return {"message": first[:500], "where": where, "traceback": full}


class Recorder(unittest.TestResult):
    """Writes one JSON line per test: id, outcome, seconds, and for a non-pass its error."""

    def __init__(self, sink: Any) -> None:
        super().__init__()
        self._sink = sink
        self._current: Any = None
        self._record: dict[str, Any] | None = None
        self._sub_failure: dict[str, Any] | None = None
        self._started = 0.0

    def _emit(self, test: Any, record: dict[str, Any]) -> None:
        record = {"kind": "test", "test": _test_name(test), **record}
        self._sink.write(json.dumps(record) + "\n")
        self._sink.flush()

    def _note(self, test: Any, record: dict[str, Any]) -> None:
        if test is not self._current:  # setUpClass/setUpModule errors and skips
            self._emit(test, record)
        elif self._record is None or self._record["outcome"] in (*PASSING, "skip"):
            self._record = record  # keep the first failure (a test and its tearDown can both)

    def startTest(self, test: Any) -> None:
        super().startTest(test)
        self._sink.write(json.dumps({"kind": "begin", "test": _test_name(test)}) + "\n")
        self._sink.flush()
        self._current, self._record, self._sub_failure = test, None, None
        self._started = time.perf_counter()

    def stopTest(self, test: Any) -> None:
        super().stopTest(test)
        record = self._record or self._sub_failure or {"outcome": "pass"}
        if self._sub_failure is not None and record["outcome"] in PASSING:
            record = self._sub_failure
        record["seconds"] = round(time.perf_counter() - self._started, 3)
        self._emit(test, record)
        self._current = self._record = self._sub_failure = None

    def addSuccess(self, test: Any) -> None:
        super().addSuccess(test)
        self._note(test, {"outcome": "pass"})

    def addFailure(self, test: Any, err: Any) -> None:
        super().addFailure(test, err)
        self._note(test, {"outcome": "fail", **_describe(err)})

    def addError(self, test: Any, err: Any) -> None:
        super().addError(test, err)
        self._note(test, {"outcome": "error", **_describe(err)})

    def addSkip(self, test: Any, reason: str) -> None:
        super().addSkip(test, reason)
        self._note(test, {"outcome": "skip", "message": str(reason)[:500]})

    def addExpectedFailure(self, test: Any, err: Any) -> None:
        super().addExpectedFailure(test, err)
        self._note(test, {"outcome": "xfail", "message": _describe(err)["message"]})

    def addUnexpectedSuccess(self, test: Any) -> None:
        super().addUnexpectedSuccess(test)
        self._note(test, {"outcome": "xpass", "message": "unexpected success"})

    def addSubTest(self, test: Any, subtest: Any, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        if err is None or self._sub_failure is not None:
            return
        outcome = "fail" if issubclass(err[0], test.failureException) else "error"
        described = _describe(err)
        described["message"] = f"{subtest._subDescription()}: {described['message']}"[:500]
        self._sub_failure = {"outcome": outcome, **described}


def _test_name(test: Any) -> str:
    """``Class.test_method`` for a test of the package; the full id otherwise."""
    name = test.id()
    prefix = PACKAGE + "."
    if name.startswith(prefix):
        name = name[len(prefix) :].partition(".")[2] or name
    return name.replace(f"({prefix}", "(")


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for dist in ("numba-cuda", "numba", "numpy", "fastlaunch"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def child(mode: str, module: str, result_file: Path) -> int:
    dotted = module if "." in module else f"{PACKAGE}.{module}"
    site_dir = None
    with result_file.open("a", encoding="utf-8") as sink:

        def write(record: dict[str, Any]) -> None:
            sink.write(json.dumps(record) + "\n")
            sink.flush()

        write({"kind": "start", "mode": mode, "module": module, "pid": os.getpid()})
        faulthandler.enable()  # a crash, or the parent's SIGUSR1 on a timeout, shows the stack
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        started = time.perf_counter()
        try:
            site_dir = _propagate(Path(__file__), result_file.parent, mode == "installed")
            from fastlaunch import _numpy_compat  # NumPy 2.5: both modes, before any compile

            _numpy_compat.apply()
            if mode == "installed" and not install():
                raise RuntimeError("fastlaunch.install() did not install")
        except BaseException as e:  # report why, then stop: running plain would mislead
            write({"kind": "fatal", "stage": "patch", **_describe(sys.exc_info())})
            print(f"conformance: {mode} set-up failed: {e!r}", file=sys.stderr)
            if site_dir is not None:
                shutil.rmtree(site_dir, ignore_errors=True)
            return 3
        finally:
            write({"kind": "versions", **_versions()})
        try:
            suite = unittest.defaultTestLoader.loadTestsFromName(dotted)
            result = Recorder(sink)
            suite.run(result)
        finally:
            from fastlaunch import _installer

            callers = _installer.installed_callers()
            write({"kind": "end", "seconds": time.perf_counter() - started, "jit_callers": callers})
            if site_dir is not None:
                shutil.rmtree(site_dir, ignore_errors=True)
    return 0


# --------------------------------------------------------------------------------------------
# Parent: all modules, both modes, the report


def _run_one(
    module: str, mode: str, timeout: float, deadline: float, workdir: Path
) -> dict[str, Any]:
    out: dict[str, Any] = {"status": "not run", "counts": dict.fromkeys(COLUMNS, 0), "tests": {}}
    left = deadline - time.monotonic()
    if left < 15:
        out["status"] = "not run (time budget spent)"
        return out
    limit = min(timeout, left)
    result_file = workdir / f"{module}.{mode}.jsonl"
    log_file = workdir / f"{module}.{mode}.log"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--mode", mode, "--module", module]
    cmd += ["--result-file", str(result_file)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop(INSTALL_ENV, None)
    # fastlaunch's compile cache (on by default) gets a folder per module run, so that no run
    # loads kernels an earlier run compiled (numba-cuda's tests watch compiles: warnings
    # given while compiling, statistics), and no run leaves kernels for another
    cache = workdir / f"{module}.{mode}.fastlaunch-cache"
    env.setdefault("FASTLAUNCH_CACHE_DIR", str(cache))
    started = time.monotonic()
    timed_out = False
    with log_file.open("wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:  # the child's faulthandler writes every thread's stack to the log
                os.kill(proc.pid, signal.SIGUSR1)
                proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        finally:
            try:  # the child's own process group: it and whatever its tests started
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
    out["seconds"] = round(time.monotonic() - started, 1)
    out["rc"] = proc.returncode
    records = []
    if result_file.exists():
        for line in result_file.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line cut short by a kill
    kinds = {r.get("kind") for r in records}
    running = None
    for r in records:
        kind = r.pop("kind", None)
        if kind == "begin":
            running = r["test"]
        elif kind == "test":
            name = r.pop("test")
            running = None if name == running else running
            if name in out["tests"]:  # the same id twice (a fixture error): keep both
                name = f"{name} #{sum(n.startswith(name) for n in out['tests']) + 1}"
            out["tests"][name] = r
            out["counts"][COLUMN.get(r["outcome"], r["outcome"])] += 1
        elif kind == "versions":
            out["versions"] = r
        elif kind == "fatal":
            out["fatal"] = r
        elif kind == "end":
            out["jit_callers"] = r.get("jit_callers", {})
    if timed_out:
        out["status"] = f"timeout after {limit:.0f} s"
    elif "fatal" in kinds:
        out["status"] = "set-up failed"
    elif "end" in kinds:
        out["status"] = "ok"
    else:
        out["status"] = f"crashed (exit {proc.returncode})"
    if running is not None and out["status"] != "ok":  # the test the run ended in
        out["tests"][running] = {"outcome": "error", "message": f"{out['status']} in this test"}
        out["counts"]["error"] += 1
    if out["status"] != "ok":
        log_text = log_file.read_text(encoding="utf-8", errors="replace")
        out["log_tail"] = log_text[-8000:]
    return out


def _gpu_name() -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return "none (no nvidia-smi)"
    return "; ".join(done.stdout.strip().splitlines()) or "none"


def _cell(run: dict[str, Any]) -> str:
    c = run["counts"]
    text = "/".join(str(c[k]) for k in COLUMNS)
    return text if run["status"] == "ok" else f"{text} ({run['status']})"


def _md(text: str, limit: int = 240) -> str:
    text = " ".join(str(text).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("|", "\\|").replace("`", "'")


def _internal(caller: str) -> bool:
    """A call from numba-cuda's own code (vectorize, reductions, ...), not from a test."""
    return caller.startswith("numba.") and not caller.startswith((PACKAGE, *OTHER_PACKAGES))


def compare(results: dict[str, dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """Tests that pass plain but not installed, and those that pass only installed."""
    worse, better = [], []
    for module, runs in results.items():
        before, after = runs["plain"], runs["installed"]
        for name in sorted(set(before["tests"]) | set(after["tests"])):
            b, a = before["tests"].get(name), after["tests"].get(name)
            b_ok = b is not None and b["outcome"] in PASSING
            a_ok = a is not None and a["outcome"] in PASSING
            if b_ok and not a_ok:
                if a is None:
                    a = {"outcome": "not run", "message": f"installed run: {after['status']}"}
                worse.append({"module": module, "test": name, **_brief(a)})
            elif a_ok and b is not None and not b_ok:
                better.append({"module": module, "test": name, **_brief(b)})
    return worse, better


def _brief(record: dict[str, Any]) -> dict[str, str]:
    keys = ("outcome", "message", "where", "traceback")
    return {k: record[k] for k in keys if k in record}


def report(results: dict[str, dict[str, Any]], meta: dict[str, Any]) -> tuple[str, dict]:
    worse, better = compare(results)
    lines = [
        "# numba-cuda conformance: plain vs `fastlaunch.install()`",
        "",
        f"numba-cuda's own tests (`{PACKAGE}.*`, `{DOC_PACKAGE}.*` and `{DRIVER_PACKAGE}.*`, "
        "the installed copy), "
        "each module run in a fresh process twice: plain numba-cuda, and with "
        "`fastlaunch.install()` called before the tests are imported (and in every Python "
        "process a test starts). Both modes get the NumPy 2.5 `np.row_stack` alias.",
        "",
    ]
    v = meta.get("versions", {})
    lines += [
        f"- versions: numba-cuda {v.get('numba-cuda', '?')}, numba {v.get('numba', '?')}, "
        f"numpy {v.get('numpy', '?')}, fastlaunch {v.get('fastlaunch', '?')}, "
        f"Python {v.get('python', '?')}",
        f"- GPU: {meta['gpu']}",
        f"- {meta['date']}; {meta['jobs']} jobs, {meta['timeout']:.0f} s per module run, "
        f"{meta['wall_s']:.0f} s in all"
        + (f"; merged from {meta['runs']} runs" if meta.get("runs", 1) > 1 else ""),
        "- counts are pass/fail/error/skip (expected failures count as passes, unexpected "
        "successes as failures); jit calls: calls of the installed `numba.cuda.jit` in the test "
        "process, those from numba-cuda itself (vectorize, reductions, ...) in brackets",
        "",
        "| module | numba-cuda | fastlaunch.install() | jit calls |",
        "| --- | --- | --- | --- |",
    ]
    totals = {mode: Counter() for mode in MODES}
    for module, runs in results.items():
        for mode in MODES:
            totals[mode].update(runs[mode]["counts"])
        callers = runs["installed"].get("jit_callers", {})
        internal = sum(n for c, n in callers.items() if _internal(c))
        calls = f"{sum(callers.values())}" + (f" ({internal})" if internal else "")
        if "jit_callers" not in runs["installed"]:
            calls = "?"
        row = [module, _cell(runs["plain"]), _cell(runs["installed"]), calls]
        lines.append("| " + " | ".join(_md(x, 400) for x in row) + " |")
    total_cells = ["/".join(str(totals[m][k]) for k in COLUMNS) for m in MODES]
    lines.append(f"| **total** | {total_cells[0]} | {total_cells[1]} | |")
    lines += ["", f"## Differences: pass with numba-cuda, not with fastlaunch ({len(worse)})", ""]
    if not worse:
        lines.append("None.")
    for d in worse:
        where = f" ({d['where']})" if d.get("where") else ""
        lines.append(
            f"- {d['module']} `{_md(d['test'], 160)}`: {d['outcome']}: "
            f"`{_md(d.get('message', ''))}`{_md(where)}"
        )
    if better:
        lines += ["", f"## Pass with fastlaunch, not with numba-cuda ({len(better)})", ""]
        for d in better:
            lines.append(
                f"- {d['module']} `{_md(d['test'], 160)}`: numba-cuda {d['outcome']}: "
                f"`{_md(d.get('message', ''))}`"
            )
    unfinished = [
        (module, mode, runs[mode]["status"])
        for module, runs in results.items()
        for mode in MODES
        if runs[mode]["status"] != "ok"
    ]
    if unfinished:
        lines += ["", "## Runs that did not finish", ""]
        for module, mode, status in unfinished:
            fatal = results[module][mode].get("fatal", {}).get("message", "")
            lines.append(f"- {module} {mode}: {status}" + (f": `{_md(fatal)}`" if fatal else ""))
        lines.append("")
        lines.append("Their output's last lines are under `log_tail` in conformance.json.")
    doc = {"meta": meta, "modules": results, "differences": worse, "installed_only": better}
    return "\n".join(lines) + "\n", doc


def _selected(args: argparse.Namespace) -> list[str]:
    """--modules (a package's name, such as ``cudadrv``, stands for all its modules), else
    every module (--group K/N: that group of them)."""
    if args.modules:
        packages = {p.rpartition(".")[2]: p for p in OTHER_PACKAGES}
        selected = []
        for name in (m.strip() for m in args.modules.split(",")):
            if name in packages:
                selected += [m for m in discover() if m.startswith(packages[name] + ".")]
            elif name:
                selected.append(name)
        return selected
    modules = discover()
    return group_of(modules, args.group) if args.group else modules


def merge(paths: list[str], out_dir: Path) -> int:
    """Several runs' conformance.json (one group each) into one results.md: the later run of
    a module wins."""
    results: dict[str, dict[str, Any]] = {}
    metas = []
    for path in paths:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        metas.append(doc["meta"])
        for module, runs in doc["modules"].items():
            for mode in MODES:
                if mode in runs:
                    runs[mode]["counts"] = Counter(runs[mode].get("counts", {}))
            results[module] = runs
    order = {m: i for i, m in enumerate(discover())}
    results = dict(sorted(results.items(), key=lambda kv: (order.get(kv[0], 10**6), kv[0])))
    last = metas[-1]
    meta = {
        **last,
        "date": ", ".join(sorted({m["date"] for m in metas})),
        "wall_s": sum(m.get("wall_s", 0) for m in metas),
        "runs": len(metas),
        "modules": list(results),
    }
    missing = [m for m in discover() if m not in results]
    markdown, doc = report(results, meta)
    if missing:
        markdown += f"\n## Not run yet ({len(missing)})\n\n" + ", ".join(missing) + "\n"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.md").write_text(markdown, encoding="utf-8")
    (out_dir / "conformance.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(markdown)
    return 0


def parent(args: argparse.Namespace) -> int:
    modules = _selected(args)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    deadline = began + args.budget
    order = sorted(modules, key=lambda m: SLOW.index(m) if m in SLOW else len(SLOW))
    jobs = [(m, mode) for m in order for mode in MODES]
    results: dict[str, dict[str, Any]] = {m: {} for m in modules}
    with tempfile.TemporaryDirectory(prefix="fastlaunch-conformance-") as tmp:
        workdir = Path(tmp)

        def work(job: tuple[str, str]) -> None:
            module, mode = job
            try:
                run = _run_one(module, mode, args.timeout, deadline, workdir)
            except Exception as e:  # the runner's own failure: report it, run the others
                counts = dict.fromkeys(COLUMNS, 0)
                run = {"status": f"runner error: {e!r}", "counts": counts, "tests": {}}
            results[module][mode] = run
            print(
                f"conformance: {module:38} {mode:9} {_cell(run)}  {run.get('seconds', 0)} s",
                file=sys.stderr,
                flush=True,
            )

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            list(pool.map(work, jobs))
    versions: dict[str, str] = {}
    for runs in results.values():
        for mode in reversed(MODES):  # the installed run also knows fastlaunch's version
            versions = versions or runs[mode].get("versions", {})
    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "gpu": _gpu_name(),
        "versions": versions,
        "jobs": args.jobs,
        "timeout": args.timeout,
        "wall_s": round(time.monotonic() - began, 1),
        "modules": modules,
    }
    markdown, doc = report(results, meta)
    (out_dir / "conformance.md").write_text(markdown, encoding="utf-8")
    (out_dir / "conformance.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(markdown)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="folder for conformance.md and conformance.json")
    p.add_argument("--modules", help="comma-separated modules (default: all of them)")
    p.add_argument("--group", help="K/N: run the K-th of N groups of all the modules")
    p.add_argument("--list", action="store_true", help="print the modules (of --group) and stop")
    p.add_argument("--merge", nargs="+", metavar="JSON", help="merge runs into OUT/results.md")
    p.add_argument("--jobs", type=int, default=4, help="module runs at a time (default 4)")
    p.add_argument("--timeout", type=float, default=240, help="seconds per module run")
    p.add_argument(
        "--budget",
        type=float,
        default=450,
        help="seconds for everything; runs not started by then are reported as not run",
    )
    p.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--module", help=argparse.SUPPRESS)
    p.add_argument("--result-file", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.mode:
        if not (args.module and args.result_file):
            p.error("--mode needs --module and --result-file")
        return child(args.mode, args.module, Path(args.result_file))
    if args.list:
        print("\n".join(_selected(args)))
        return 0
    if not args.out:
        p.error("--out is required")
    if args.merge:
        return merge(args.merge, Path(args.out))
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
