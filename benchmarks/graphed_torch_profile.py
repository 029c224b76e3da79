"""The host cost fastlaunch adds around torch's replay when a graphed step's arguments are
torch tensors (the step torch captured, replayed with the same tensors), timed without a GPU
or torch: the tensors are ``tests/exchange_tensors.py``'s stand-ins, read through the DLPack
C exchange API by a C function (as torch's are), and the graph's replay does nothing.

    python benchmarks/graphed_torch_profile.py [--loops 200000]

Prints µs per call for: the step replayed directly (the same tensors again: one check of
their identity, memory, shape, strides, dtype and device); the same step when its tensors
changed in place each call (``set_`` to alternate memory: the form, computed, finds the
graph of that memory); a plain Python call of three arguments, for scale.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cpu_profile import on_stand_in_driver

TESTS = Path(__file__).resolve().parent.parent / "tests"


def per_call(fn, loops: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        best = min(best, (time.perf_counter() - start) / loops * 1e6)
    return best


def main() -> None:
    loops = on_stand_in_driver()
    sys.path.insert(0, str(TESTS))
    import exchange_tensors as et

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        sys.exit("graphed_torch_profile.py: needs a C compiler for the stand-in tensor reader")
    build = Path(tempfile.mkdtemp())
    (build / "reader.c").write_text(et.C_READER)
    library = build / "reader.so"
    subprocess.run(
        [compiler, "-O2", "-shared", "-fPIC", "-o", library, build / "reader.c"], check=True
    )
    Tensor = et.fast_tensor_class(str(library))
    torch = et.fake_torch()
    torch.Tensor = Tensor
    sys.modules["torch"] = torch  # fastlaunch.graphed finds torch tensors through sys.modules

    import fastlaunch as fl

    out, x, y = (Tensor((65536,), (i + 1) << 32) for i in range(3))
    other = Tensor((65536,), 9 << 32)
    original = Tensor((65536,), 2 << 32)

    @fl.graphed
    def step(out, x, y):  # type: ignore[no-untyped-def]
        pass

    def same() -> None:
        step(out, x, y)

    flip = [original, other]

    def moved() -> None:  # x given other memory in place on every call
        x.set_(flip[0])
        flip.reverse()
        step(out, x, y)

    def plain(out, x, y):  # type: ignore[no-untyped-def]
        pass

    for _ in range(6):
        same()
        moved()
    print(f"{'graphed, same tensors (direct replay)':44s} {per_call(same, loops):6.3f} µs per call")
    print(f"{'graphed, x.set_() between calls':44s} {per_call(moved, loops // 4):6.3f} µs per call")
    floor = per_call(lambda: plain(out, x, y), loops)
    print(f"{'a plain Python call, 3 arguments':44s} {floor:6.3f} µs")
    print(f"counters: {step.counters}")


if __name__ == "__main__":
    main()
