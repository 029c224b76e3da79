"""benchmarks/interleaved.py without a GPU: its rounds, the C floor runs between them and the
report, driven with stand-in variants (plain Python callables) and a stand-in floor binary (a
script printing what ``launch-bench`` prints). The variants themselves need a GPU."""

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "interleaved.py"

FAKE_FLOOR = """\
import json, os, sys
args = sys.argv[1:]
cases = args[args.index("--cases") + 1].split(",")
batch = int(os.environ["FASTLAUNCH_BENCH_BATCH"])
print(json.dumps({"kind": "meta", "device": "stand-in", "batch": batch}))
print("launch bench: a line that is not JSON")
for case in cases:
    for path in ("floor", "floor_kernel", "floor_stream", "packer"):
        for grid in (1, 128):
            us = {"B": 4.0, "D": 5.0}[case] + (0.5 if path == "packer" else 0.0)
            print(json.dumps({"kind": "result", "case": case, "path": path, "grid": grid,
                              "median_us": us, "p10_us": us - 0.1, "p90_us": us + 0.1,
                              "batch": batch}))
"""


@pytest.fixture(scope="module")
def interleaved():
    spec = importlib.util.spec_from_file_location("interleaved_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


@pytest.fixture
def floor_binary(tmp_path):
    path = tmp_path / "launch-bench"
    path.write_text(f"#!{sys.executable}\n{FAKE_FLOOR}")
    path.chmod(0o755)
    return path


def entries(interleaved, batches, calls):
    """Stand-in entries of case D: each batch appends its name to ``calls``; the in-process
    floors (cuda.bindings, the Rust loop) are fastest, one fastlaunch variant raises in its
    third round."""
    made = []
    for path, source, mode, cost in [
        ("cuda.bindings", "raw", "m", 1),
        ("fastlaunch.bind", "numba", interleaved.IN_PROCESS_FLOOR, 1),
        ("fastlaunch", "numba", "m", 2),
        ("fastlaunch", "cupy", "m", 3),
    ]:
        variant = interleaved.Variant("D", path, source, mode, "inline", "views", build=None)
        for n in batches:

            def run(name=f"{path}/{source}/{n}", cost=cost * n):
                calls.append(name)
                if name.startswith("fastlaunch/cupy/64") and calls.count(name) == 3:
                    raise RuntimeError("stand-in failure")
                end = time.perf_counter() + cost * 1e-6
                while time.perf_counter() < end:
                    pass

            made.append(interleaved.Timed(variant, n, run))
    return made


def test_help_runs_without_a_gpu():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "--batches" in done.stdout and "--seconds" in done.stdout


def test_rounds_floor_runs_and_report(interleaved, floor_binary, tmp_path):
    args = interleaved.parse_args(
        ["--rounds", "5", "--floor-every", "2", "--batches", "256,64", "--cases", "D"]
    )
    assert args.batches == [64, 256]
    calls, syncs = [], []
    timed = entries(interleaved, args.batches, calls)
    floor = interleaved.Floor(floor_binary, args.cases, 50)
    assert floor.unavailable is None
    report = interleaved.interleave(
        args, timed, lambda: syncs.append(1), floor, time.monotonic() + 60
    )
    assert report["rounds_done"] == 5 and not report["stopped"]
    # every entry once per round, in a shuffled order, a synchronize before and after each
    rounds = [calls[i : i + 8] for i in range(0, 16, 8)]
    assert sorted(rounds[0]) == sorted(rounds[1]) and rounds[0] != rounds[1]
    assert len(syncs) == 2 * len(calls)
    failed = [t for t in timed if t.error]
    assert len(failed) == 1 and "round 2: RuntimeError: stand-in failure" in failed[0].error
    assert len(failed[0].seconds) == 2
    assert all(len(t.seconds) == 5 for t in timed if not t.error)
    # the floor before rounds 0, 2 and 4 and after the last, at both batch sizes
    assert [(r["after_round"], r["batch"]) for r in floor.runs] == [
        (k, n) for k in (0, 2, 4, 5) for n in (64, 256)
    ]
    assert all(len(r["results"]) == 4 and "error" not in r for r in floor.runs)  # grid 1 only

    rows = {(r["path"], r["source"], r["batch"]): r for r in report["rows"]}
    assert rows[("rust.floor", "raw", 64)]["median_us"] == 5.0
    assert rows[("rust.packer", "raw", 256)]["median_us"] == 5.5
    fast = rows[("fastlaunch", "numba", 256)]
    assert fast["rounds"] == 5
    assert fast["x_c_floor"] == pytest.approx(fast["median_us"] / 5.0)
    assert fast["x_bindings_paired"] > 1.0
    assert rows[("cuda.bindings", "raw", 256)]["x_bindings_paired"] == 1.0
    assert fast["x_loop_paired"] > 1.0
    assert rows[("fastlaunch.bind", "numba", 256)]["x_loop_paired"] == 1.0

    report |= {"settings": vars(args) | {"cases": ["D"]}, "skipped": {"D torch": "not here"}}
    markdown = interleaved.write_report(report, tmp_path / "out")
    assert (tmp_path / "out" / "interleaved.md").read_text() == markdown + "\n"
    saved = json.loads((tmp_path / "out" / "interleaved.json").read_text())
    assert saved["rounds_done"] == 5
    assert "| D | 256 | **fastlaunch** | numba |" in markdown
    assert "| × cuda.bindings | × Rust loop |" in markdown
    assert "## Batch 64 against batch 256" in markdown
    assert "stand-in failure" in markdown and "skipped D torch: not here" in markdown
    assert "No C floor" not in markdown


def test_the_budget_stops_rounds_and_a_missing_floor_is_said(interleaved, tmp_path):
    args = interleaved.parse_args(["--rounds", "50", "--seconds", "0", "--cases", "D"])
    timed = entries(interleaved, args.batches, [])
    floor = interleaved.Floor(tmp_path / "no-such-binary", args.cases, 50)
    report = interleaved.interleave(args, timed, lambda: None, floor, time.monotonic())
    assert report["rounds_done"] == 1  # at least one round, then the budget stops them
    assert "budget" in report["stopped"]
    report |= {"settings": vars(args), "skipped": {}}
    markdown = interleaved.render_markdown(report)
    assert "**No C floor**: no floor binary" in markdown
    assert "| — | 1.00× |" in markdown  # no × C floor; the paired cuda.bindings ratio is there
