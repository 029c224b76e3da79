"""Two builds of fastlaunch, timed alternately in one run: did a change move launch cost?

Between runs the host's speed varies by up to 2×, more than most changes move a launch, so a
before/after comparison across runs says little. This probe installs nothing itself: give it
two folders, each holding one build (``pip install --target DIR fastlaunch-*.whl``), and it
times cases B and D with numba, CuPy and torch arrays (what is installed of them) in child
processes, alternating the builds round by round, and prints the medians and their ratio.
Each is timed as the benchmark used to time it (a reused launcher over fresh arrays) and as
users write it (``kernel[1, 1](*args)`` inline, over views of one buffer).

    python3 benchmarks/ab_probe.py --before /tmp/old --after /tmp/new [--rounds 3]
    python3 benchmarks/ab_probe.py --build base=/tmp/a --build x=/tmp/b --build y=/tmp/c
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASE_IDS = ("B", "D")
SOURCES = ("numba", "cupy", "torch")


def child() -> None:
    """Times each case and source with the fastlaunch found first on sys.path; prints JSON."""
    sys.path.insert(0, str(HERE.parent))
    from benchmarks.harness import (
        BATCH,
        CASES,
        apply_numpy_shim,
        array_makers,
        make_batch,
        make_inline_batch,
        make_views,
        py_kernel,
    )

    apply_numpy_shim()
    from numba import cuda

    import fastlaunch

    makers = array_makers()
    results = {"fastlaunch": str(Path(fastlaunch.__file__).parent)}
    for case_id in CASE_IDS:
        case = CASES[case_id]
        for source, make in makers.items():
            kernel = fastlaunch.jit(py_kernel(f"empty_{case_id.lower()}"))
            fresh = [make(case.shape) for _ in range(case.n_arrays)] + list(case.scalars())
            views = make_views(make, case.n_arrays, case.shape) + list(case.scalars())
            batches = {
                "reused/fresh": make_batch(kernel[1, 1], fresh),
                "inline/views": make_inline_batch(kernel, (1, 1), views),
            }
            for variant, batch in batches.items():
                batch()
                cuda.synchronize()
                per_launch = []
                for _ in range(60):
                    started = time.perf_counter()
                    batch()
                    per_launch.append((time.perf_counter() - started) * 1e6 / BATCH)
                    cuda.synchronize()
                results[f"{case_id} {source} {variant}"] = statistics.median(per_launch)
    print(json.dumps(results))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", help="folder holding the build before")
    ap.add_argument("--after", help="folder holding the build after")
    ap.add_argument(
        "--build",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="a further build to time beside them (repeatable: several commits in one run)",
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child()
        return 0
    builds = [(label, folder) for label, folder in (("before", args.before), ("after", args.after))]
    builds = [(label, folder) for label, folder in builds if folder]
    builds += [tuple(spec.split("=", 1)) for spec in args.build]  # type: ignore[misc]
    if len(builds) < 2:
        ap.error("give at least two builds (--before/--after, --build LABEL=DIR)")
    medians: dict[str, dict[str, list[float]]] = {label: {} for label, _ in builds}
    for round_index in range(args.rounds):
        # each build goes first in turn: the first child of a round may run on a colder machine
        shift = round_index % len(builds)
        for label, folder in builds[shift:] + builds[:shift]:
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join([folder, os.environ.get("PYTHONPATH", "")]),
            }
            done = subprocess.run(
                [sys.executable, __file__, "--child"],
                capture_output=True,
                text=True,
                env=env,
                timeout=300,
                check=False,
            )
            if done.returncode != 0:
                print(done.stderr[-3000:])
                return 1
            got = json.loads(done.stdout.strip().splitlines()[-1])
            imported = got.pop("fastlaunch")
            if not imported.startswith(str(Path(folder).resolve())):
                print(f"the {label} run imported fastlaunch from {imported}, not {folder}")
                return 1
            for key, us in got.items():
                medians[label].setdefault(key, []).append(us)
    print(
        f"µs per launch, median of {args.rounds} alternating rounds (each a median of 60 batches)"
    )
    labels = [label for label, _ in builds]
    first = labels[0]
    print(f"{'case':26} " + " ".join(f"{label:>10}" for label in labels) + "  ratios to " + first)
    for key in medians[first]:
        values = [statistics.median(medians[label][key]) for label in labels]
        ratios = " ".join(f"{v / values[0]:6.2f}×" for v in values[1:])
        print(f"{key:26} " + " ".join(f"{v:10.2f}" for v in values) + f"  {ratios}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
