"""SAXPY (``out = a * x + y``) on torch tensors, launched on torch's current stream.

Run: ``python examples/saxpy_torch.py``. Exits 0 when the result matches NumPy, 1 when it
does not, and 77 (skipped) without a GPU or without torch.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import cuda

import fastlaunch

SKIPPED = 77  # the exit code the example tests read as "skipped"
NO_GPU = "no CUDA GPU here (`python -m fastlaunch info` says why)"


@fastlaunch.jit
def saxpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


def skip(why: str) -> int:
    print(f"skipped: {why}", file=sys.stderr)
    return SKIPPED


def main() -> int:
    if not fastlaunch.is_available():
        return skip(NO_GPU)
    try:
        import torch
    except ImportError:
        return skip("needs torch (pip install torch)")
    if not torch.cuda.is_available():
        return skip("torch was built without CUDA or sees no GPU")

    n, threads = 1_000_003, 256  # not a multiple of the block size: the guard matters
    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(n, device="cuda", generator=generator)
    y = torch.rand(n, device="cuda", generator=generator)
    out = torch.empty_like(x)
    a = np.float32(2.5)

    blocks = (n + threads - 1) // threads
    saxpy[blocks, threads, torch.cuda.current_stream()](out, a, x, y)

    # .cpu() waits for torch's current stream, which the launch went to.
    expected = a * x.cpu().numpy() + y.cpu().numpy()
    if not np.allclose(out.cpu().numpy(), expected, rtol=1e-6, atol=0):
        print("saxpy_torch: MISMATCH against NumPy", file=sys.stderr)
        return 1
    print(
        f"saxpy_torch: out = {a} * x + y on {n} float32 torch elements "
        f"({blocks} blocks x {threads} threads): matches NumPy"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
