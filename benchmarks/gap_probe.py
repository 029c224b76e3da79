"""Why does a launch like the last cost more over a bound launch in ``interleaved.py`` (0.9 µs
for case D with numba arrays) than in ``stages.py`` (0.3 µs)? One process, case D with numba
arrays, reused launcher against bound launch, timed four ways (median µs per launch over 60
rounds of batches of 256, and the median of the paired differences):

1. the pair alone, ``fastlaunch.synchronize`` between batches (as stages.py);
2. the pair alone, numba-cuda's ``cuda.synchronize`` between batches (as interleaved.py);
3. the pair with the ``cuda.bindings`` floor in each round, shuffled (as interleaved.py);
4. as 1, with a 2 ms sleep before each batch (a core that went idle).

    python3 benchmarks/gap_probe.py
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import CASES, apply_numpy_shim, array_makers  # noqa: E402
from benchmarks.interleaved import _bindings_build, _fastlaunch_build  # noqa: E402

ROUNDS = 60
BATCH = 256


def main() -> None:
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
    apply_numpy_shim()
    from numba import cuda

    import fastlaunch as fl

    cuda.current_context()
    case = CASES["D"]
    make = array_makers(("numba",))["numba"]
    built = {
        "reused": _fastlaunch_build(case, make, "reused", "fresh")(),
        "bound": _fastlaunch_build(case, make, "bound", "fresh")(),
        "raw": _bindings_build(case, make)(),
    }  # (make a batch, what must stay alive), kept for the whole run
    reused, bound, raw = (built[name][0](BATCH) for name in ("reused", "bound", "raw"))

    def timed(batches, sync, pause=0.0, rounds=ROUNDS):
        samples = {name: [] for name in batches}
        rng = random.Random(0)
        for _ in range(rounds):
            order = list(batches)
            rng.shuffle(order)
            for name in order:
                sync()
                if pause:
                    time.sleep(pause)
                start = time.perf_counter()
                batches[name]()
                samples[name].append((time.perf_counter() - start) / BATCH * 1e6)
        sync()
        gaps = [r - b for r, b in zip(samples["reused"], samples["bound"], strict=True)]
        medians = {name: statistics.median(s) for name, s in samples.items()}
        return medians, statistics.median(gaps)

    pair = {"reused": reused, "bound": bound}
    ways = {
        "1 pair, fastlaunch.synchronize": (pair, fl.synchronize, 0.0),
        "2 pair, numba cuda.synchronize": (pair, cuda.synchronize, 0.0),
        "3 pair + cuda.bindings, numba sync": ({**pair, "raw": raw}, cuda.synchronize, 0.0),
        "4 pair, 2 ms idle before each batch": (pair, fl.synchronize, 0.002),
    }
    for _ in range(2):  # warm up every way once, then report the second pass
        results = {label: timed(*way) for label, way in ways.items()}
    for label, (medians, gap) in results.items():
        figures = "  ".join(f"{name} {us:5.2f}" for name, us in medians.items())
        print(f"{label:40} {figures}  reused-bound (paired) {gap:5.2f}")


if __name__ == "__main__":
    main()
