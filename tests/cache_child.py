"""Run by tests/test_gpu_features.py in a fresh process: launches a ``cache=True`` kernel
through fastlaunch, checks its result, and prints numba's cache statistics as JSON.

numba's on-disk cache needs the kernel in a real source file (this one); the cache
directory comes from ``NUMBA_CACHE_DIR``, which the test sets to a temporary folder.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
from numba import cuda

import fastlaunch


@fastlaunch.jit(cache=True)
def scale_add(out, x, factor):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] * factor + i


def main() -> int:
    n = 1000
    x = np.arange(n, dtype=np.float32)
    d_x = cuda.to_device(x)
    d_out = cuda.to_device(np.zeros(n, np.float32))
    scale_add[(n + 127) // 128, 128](d_out, d_x, np.float32(2.5))
    fastlaunch.synchronize()
    ok = bool(np.array_equal(d_out.copy_to_host(), x * np.float32(2.5) + np.arange(n)))
    stats = scale_add.dispatcher.stats
    print(
        json.dumps(
            {
                "ok": ok,
                "hits": sum(stats.cache_hits.values()),
                "misses": sum(stats.cache_misses.values()),
                "cache_path": stats.cache_path,
                "cache_dir": os.environ.get("NUMBA_CACHE_DIR", ""),
                "signatures": [str(s) for s in scale_add.signatures],
                "numba_launches": scale_add.numba_launches,
                "miss_count": scale_add.miss_count,
            }
        )
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
