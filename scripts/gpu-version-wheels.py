#!/usr/bin/env python3
"""The wheels the GPU machine needs to run against older numba-cuda (scripts/gpu-run.sh
--numba-cuda V): .whl-versions/V/ holds numba-cuda V, .whl-versions/common/ what every
numba-cuda before 0.30 needs beside the image's (Python 3.12, numba 0.68, NumPy 2.5, cuda-core
1.x, cuda-bindings 13):

- numba < 0.66: numba-cuda before 0.30 reads ``NPDatetime`` from numba.core.types.scalars,
  which numba 0.66 moved (0.30 reads it from its new place). numba 0.65 runs on the image's
  llvmlite 0.50 (numba checks only a minimum), so llvmlite (56 MB) need not travel;
- NumPy 2.4: numba 0.65 refuses NumPy 2.5 at import;
- cuda-core 0.7 (numba-cuda before 0.30 needs cuda-core < 1.0). Its wheel holds a CUDA 12 and a
  CUDA 13 build (31 MB); the image's cuda-bindings is 13, so the CUDA 12 half is left out (the
  device machine takes 64 MiB a call).

usage: python3 scripts/gpu-version-wheels.py DIR VERSION...   (e.g. .whl-versions 0.26.0 0.28.2)
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

COMMON = ["numba==0.65.1", "numpy==2.4.6", "cuda-core==0.7.0"]
PLATFORM = [
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    *[
        arg
        for tag in ["manylinux_2_28", "manylinux_2_27", "manylinux_2_24", "manylinux_2_17"]
        for arg in ("--platform", f"{tag}_x86_64")
    ],
    "--platform",
    "manylinux2014_x86_64",
]
#: cuda-core's CUDA 12 build, which the image (cuda-bindings 13) never loads
CUDA12_PART = "cuda/core/cu12/"


def download(folder: Path, requirement: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    name = requirement.split("==")[0].replace("-", "_")
    for old in folder.glob(f"{name}-*.whl"):
        old.unlink()
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
        + PLATFORM
        + ["-d", str(folder), requirement],
        check=True,
    )
    (wheel,) = folder.glob(f"{name}-*.whl")
    return wheel


def without_cuda12(wheel: Path) -> None:
    """Rewrites cuda-core's wheel without its CUDA 12 build (and those lines of RECORD)."""
    slim = wheel.with_suffix(".slim")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(slim, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename.startswith(CUDA12_PART):
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(x for x in lines if not x.startswith(CUDA12_PART)).encode()
            dst.writestr(info, data)
    slim.replace(wheel)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    root, versions = Path(argv[0]), argv[1:]
    for requirement in COMMON:
        wheel = download(root / "common", requirement)
        if requirement.startswith("cuda-core"):
            without_cuda12(wheel)
    for version in versions:
        short = ".".join(version.split(".")[:2])
        download(root / short, f"numba-cuda=={version}")
    for wheel in sorted(root.glob("*/*.whl")):
        print(f"{wheel.stat().st_size / 2**20:6.1f} MiB  {wheel}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
