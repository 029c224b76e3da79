"""``python -m fastlaunch info``: what a bug report needs (like ``numba -s``)."""

from __future__ import annotations

import importlib.metadata
import platform
import sys

import fastlaunch as fl
from fastlaunch import _core

DEVICE_ATTRIBUTES = [
    "MULTIPROCESSOR_COUNT",
    "MAX_THREADS_PER_BLOCK",
    "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "WARP_SIZE",
    "COOPERATIVE_LAUNCH",
    "CLUSTER_LAUNCH",
    "UNIFIED_ADDRESSING",
]


def _version(*distributions: str) -> str:
    for distribution in distributions:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            pass
    return "not installed"


def info() -> None:
    print(f"fastlaunch        {fl.__version__} ({_core.__file__})")
    print(f"Python            {sys.version.split()[0]} ({platform.platform()})")
    for name, *distributions in [
        ("numba-cuda",),
        ("numba",),
        ("numpy",),
        ("cuda-core",),
        ("cuda-bindings",),
        ("torch",),
        ("cupy", "cupy-cuda13x", "cupy-cuda12x"),
    ]:
        print(f"{name:17} {_version(name, *distributions)}")
    if not fl.is_available():
        print(f"CUDA              unavailable: {_core.unavailable_reason()}")
        return
    major, minor = fl.driver_version()
    print(f"CUDA driver       {major}.{minor}")
    print(
        f"ordering          {'on' if fl.ordering_enabled() else 'off'}; default stream "
        f"policy {fl.default_stream_policy()!r}; GIL released at launch: {_core.releases_gil()}"
    )
    for device in fl.gpus:
        cc = ".".join(map(str, device.compute_capability))
        print(
            f"device {device.id}          {device.name}, compute capability {cc}, "
            f"{device.total_memory / 2**30:.1f} GiB, {device.pci_bus_id}, {device.uuid}"
        )
        for name in DEVICE_ATTRIBUTES:
            print(f"  {name.lower():38} {device.attribute(name)}")


def main(argv: list[str]) -> int:
    if argv[1:] in ([], ["info"]):
        info()
        return 0
    print("usage: python -m fastlaunch [info]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
