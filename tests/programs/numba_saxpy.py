"""A plain numba-cuda program, not edited for fastlaunch: ``python -m fastlaunch run`` runs it
with fastlaunch installed (scripts/fresh-wheel.sh, tests/test_gpu_install.py).

It prints its result, the class of its kernel (``fastlaunch.dispatcher.Kernel`` when run
under fastlaunch, numba-cuda's ``CUDADispatcher`` otherwise) and exits 0 when the result is
right."""

import sys

import numpy as np
from numba import cuda


@cuda.jit
def saxpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


def main() -> int:
    n = 1 << 16
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, dtype=np.float32)
    d_out = cuda.device_array(n, np.float32)
    d_x, d_y = cuda.to_device(x), cuda.to_device(y)
    for _ in range(100):
        saxpy[(n + 255) // 256, 256](d_out, np.float32(2.0), d_x, d_y)
    out = d_out.copy_to_host()
    ok = np.array_equal(out, 2 * x + y)
    kind = f"{type(saxpy).__module__}.{type(saxpy).__qualname__}"
    print(f"saxpy n={n}: out[:4]={out[:4].tolist()} sum={float(out.sum()):.0f} ok={ok}")
    print(f"kernel class: {kind}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
