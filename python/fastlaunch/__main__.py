"""``python -m fastlaunch info``: what a bug report needs (like ``numba -s``).

Paste its whole output into an issue. It reports fastlaunch's version and build, Python,
the versions of the libraries fastlaunch works with, the CUDA driver and every device,
numba-cuda's cache and settings, and the environment variables that change behaviour.
Without a usable GPU it says why and what to check. It never raises: a part that fails
prints the error in its place.
"""

from __future__ import annotations

import glob
import importlib.metadata
import json
import os
import platform
import re
import sys
from collections.abc import Callable, Iterator

import fastlaunch as fl
from fastlaunch import _core
from fastlaunch import _numba_compat as numba_cuda

WIDTH = 17  # label column: "fastlaunch        0.1.0"

# (label, attribute, format): the device attributes a bug report needs.
DEVICE_ATTRIBUTES: list[tuple[str, str, Callable[[int], str]]] = [
    ("multiprocessors", "MULTIPROCESSOR_COUNT", str),
    ("max threads/block", "MAX_THREADS_PER_BLOCK", str),
    ("max threads/SM", "MAX_THREADS_PER_MULTIPROCESSOR", str),
    ("max block dims", "", str),  # filled in from MAX_BLOCK_DIM_X/Y/Z
    ("max grid dims", "", str),  # filled in from MAX_GRID_DIM_X/Y/Z
    ("shared mem/block", "MAX_SHARED_MEMORY_PER_BLOCK", lambda v: f"{v // 1024} KiB"),
    ("shared mem opt-in", "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", lambda v: f"{v // 1024} KiB"),
    ("shared mem/SM", "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", lambda v: f"{v // 1024} KiB"),
    ("registers/block", "MAX_REGISTERS_PER_BLOCK", str),
    ("warp size", "WARP_SIZE", str),
    ("L2 cache", "L2_CACHE_SIZE", lambda v: f"{v / 2**20:.0f} MiB"),
    ("clock", "CLOCK_RATE", lambda v: f"{v / 1000:.0f} MHz" if v else "not reported"),
    ("memory clock", "MEMORY_CLOCK_RATE", lambda v: f"{v / 1000:.0f} MHz" if v else "not reported"),
    ("memory bus", "GLOBAL_MEMORY_BUS_WIDTH", lambda v: f"{v} bit"),
    ("compute mode", "COMPUTE_MODE", lambda v: COMPUTE_MODES.get(v, str(v))),
    ("ECC", "ECC_ENABLED", lambda v: "on" if v else "off"),
    ("cooperative", "COOPERATIVE_LAUNCH", lambda v: "yes" if v else "no"),
    ("clusters", "CLUSTER_LAUNCH", lambda v: "yes" if v else "no"),
    ("managed memory", "MANAGED_MEMORY", lambda v: "yes" if v else "no"),
    ("unified address", "UNIFIED_ADDRESSING", lambda v: "yes" if v else "no"),
]

COMPUTE_MODES = {0: "default", 1: "exclusive thread", 2: "prohibited", 3: "exclusive process"}

# (label, distribution names tried in order): versions read from installed metadata, so
# nothing is imported (importing torch alone takes seconds).
LIBRARIES: list[tuple[str, tuple[str, ...]]] = [
    ("numba-cuda", ("numba-cuda",)),
    ("numba", ("numba",)),
    ("llvmlite", ("llvmlite",)),
    ("numpy", ("numpy",)),
    ("cuda-core", ("cuda-core",)),
    ("cuda-bindings", ("cuda-bindings",)),
    ("nvrtc", ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu13", "nvidia-cuda-nvrtc-cu12")),
    ("torch", ("torch",)),
    ("cupy", ("cupy", "cupy-cuda13x", "cupy-cuda12x")),
    ("jax", ("jax",)),
]

ENV_PREFIXES = ("FASTLAUNCH_", "NUMBA_", "CUDA_", "NVIDIA_")
ENV_NAMES = ("LD_LIBRARY_PATH", "PYTORCH_CUDA_ALLOC_CONF", "CUPY_CACHE_DIR")


def row(label: str, value: object) -> None:
    print(f"{label:{WIDTH}} {value}")


def section(title: str) -> None:
    print(f"\n-- {title} --")


def guarded(label: str, read: Callable[[], object]) -> None:
    """Prints ``read()``, or the error it raised: the report goes on either way."""
    try:
        value = read()
    except Exception as e:  # noqa: BLE001 - a report must not stop at one failure
        value = f"error: {type(e).__name__}: {e}"
    row(label, value)


def _version(*distributions: str) -> str:
    for distribution in distributions:
        try:
            version = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
        return version if distribution == distributions[0] else f"{version} ({distribution})"
    return "not installed"


def _installed() -> str:
    """The installed distribution's version, wheel tag and origin."""
    try:
        dist = importlib.metadata.distribution("fastlaunch")
    except importlib.metadata.PackageNotFoundError:
        return "no installed distribution (imported from a source tree)"
    parts = [dist.version]
    wheel = dist.read_text("WHEEL") or ""
    tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
    if tags:
        parts.append(", ".join(tags))
    direct = dist.read_text("direct_url.json")
    if direct:
        info = json.loads(direct)
        editable = info.get("dir_info", {}).get("editable", False)
        parts.append(f"{'editable ' if editable else ''}from {info.get('url', '?')}")
    text = "; ".join(parts)
    if dist.version != fl.__version__:
        text += f"  <-- differs from the extension's {fl.__version__}: rebuild or reinstall"
    return text


def _startup_hook() -> str:
    """Where fastlaunch_install.pth is (it installs at start-up when FASTLAUNCH_INSTALL=1)."""
    import site

    folders = [*site.getsitepackages(), site.getusersitepackages(), *sys.path]
    found = next(
        (
            p
            for p in (os.path.join(f, "fastlaunch_install.pth") for f in folders)
            if os.path.isfile(p)
        ),
        None,
    )
    value = os.environ.get("FASTLAUNCH_INSTALL")
    state = f"FASTLAUNCH_INSTALL={value}" if value is not None else "FASTLAUNCH_INSTALL unset"
    return f"{found or 'fastlaunch_install.pth not in a site directory'}; {state}"


def _extension_build() -> str:
    name = os.path.basename(_core.__file__ or "")
    if ".abi3." in name:
        return f"{name}: CPython stable ABI (abi3), one build for CPython >= 3.11"
    return name


def _driver_library() -> str:
    """The libcuda this process loaded (from /proc/self/maps), or what was asked for."""
    configured = os.environ.get("FASTLAUNCH_CUDA_DRIVER")
    wanted = os.path.realpath(configured) if configured else None
    mapped = {
        fields[5].strip()
        for fields in (line.split(None, 5) for line in _read_lines("/proc/self/maps"))
        if len(fields) == 6
    }
    loaded = sorted(p for p in mapped if "libcuda.so" in p or p == wanted)
    if loaded:
        found = ", ".join(loaded)
    else:
        found = "not found in /proc/self/maps"
    if configured:
        found += f" (FASTLAUNCH_CUDA_DRIVER={configured})"
    return found


def _kernel_module_version() -> str:
    lines = _read_lines("/proc/driver/nvidia/version")
    if not lines:
        return "unknown (no /proc/driver/nvidia/version)"
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", lines[0])
    return match.group(1) if match else lines[0].strip()


def _read_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readlines()
    except OSError:
        return []


def _dims(ordinal: int, prefix: str) -> str:
    return " x ".join(str(_core.device_attribute(ordinal, f"{prefix}_{a}")) for a in "XYZ")


def _device_rows(device: fl.Device) -> Iterator[tuple[str, Callable[[], object]]]:
    i = device.id
    yield "name", lambda: device.name
    yield "compute cap.", lambda: ".".join(map(str, device.compute_capability))
    yield "memory", lambda: f"{device.total_memory / 2**30:.1f} GiB"
    for label, name, fmt in DEVICE_ATTRIBUTES:
        if label == "max block dims":
            yield label, lambda: _dims(i, "MAX_BLOCK_DIM")
        elif label == "max grid dims":
            yield label, lambda: _dims(i, "MAX_GRID_DIM")
        else:
            yield label, lambda name=name, fmt=fmt: fmt(_core.device_attribute(i, name))
    yield "PCI bus id", lambda: device.pci_bus_id
    yield "UUID", lambda: device.uuid


def _numba_cuda_settings() -> Iterator[tuple[str, Callable[[], object]]]:
    config = numba_cuda.config

    def version() -> str:
        text = f"{numba_cuda.version_string()}; fastlaunch supports {numba_cuda.supported_range()}"
        if not numba_cuda.is_supported():
            text += "  <-- outside the supported range"
        mismatch = numba_cuda.numba_mismatch()
        if mismatch is not None:
            text += f"  <-- {mismatch}"
        return text

    def launch_config_api() -> str:
        if numba_cuda.has_launch_config_api():
            return "yes (pre_launch_callbacks, launch_config.args, launchconfig)"
        needed = ".".join(map(str, numba_cuda.LAUNCH_CONFIG_API))
        return f"no: pre_launch_callbacks and launch_config.args need numba-cuda {needed}"

    def cache() -> str:
        cache_dir = config().CACHE_DIR
        if cache_dir:
            return f"{cache_dir} (NUMBA_CACHE_DIR)"
        user = numba_cuda.user_cache_dir()
        return f"__pycache__ beside each source file; where not writable, {user}"

    def compile_cache() -> str:
        from fastlaunch.cache import settings

        if not settings.enabled():
            return f"off ({settings.ENV_CACHE}=0)"
        return f"{settings.directory()} (python -m fastlaunch cache)"

    yield "version", version
    yield "launch-config API", launch_config_api
    yield "cache=True dir", cache
    yield "compile cache", compile_cache
    yield "per-thread stream", lambda: bool(config().CUDA_PER_THREAD_DEFAULT_STREAM)
    yield "CAI sync", lambda: bool(config().CUDA_ARRAY_INTERFACE_SYNC)
    yield "default PTX cc", lambda: ".".join(map(str, config().CUDA_DEFAULT_PTX_CC))


def _environment() -> list[tuple[str, str]]:
    return sorted(
        (name, value)
        for name, value in os.environ.items()
        if name.startswith(ENV_PREFIXES) or name in ENV_NAMES
    )


def _why_unavailable(reason: str) -> list[str]:
    hints = []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if "could be loaded" in reason:
        hints.append("no NVIDIA driver library (libcuda.so.1) on the loader path: install the")
        hints.append("NVIDIA driver, or in a container start it with GPU access (e.g. docker")
        hints.append("run --gpus all); FASTLAUNCH_CUDA_DRIVER=/path/libcuda.so.1 names one")
    elif "no device" in reason:
        hints.append("the driver loaded but sees no GPU: check nvidia-smi")
        if visible is not None:
            hints.append(f"CUDA_VISIBLE_DEVICES={visible!r} limits which GPUs are visible")
    elif " lacks " in reason:
        hints.append("the driver library lacks an entry point fastlaunch needs: a driver for")
        hints.append("CUDA 12.0 or newer is needed (NVIDIA 525 or later; `nvidia-smi` shows the")
        hints.append("version), or FASTLAUNCH_CUDA_DRIVER names the wrong library")
    nodes = glob.glob("/dev/nvidia[0-9]*")
    hints.append(f"device nodes: {', '.join(sorted(nodes)) if nodes else 'none (/dev/nvidia*)'}")
    return hints


def info() -> None:
    print("fastlaunch report (python -m fastlaunch info): paste all of it into bug reports")
    section("fastlaunch")
    row("fastlaunch", f"{fl.__version__} ({_core.__file__})")
    guarded("installed", _installed)
    guarded("extension", _extension_build)
    guarded("package", lambda: os.path.dirname(fl.__file__ or "?"))
    guarded("start-up hook", _startup_hook)

    section("Python")
    row("Python", f"{sys.version.split()[0]} ({platform.python_implementation()})")
    row("executable", sys.executable)
    row("platform", platform.platform())
    libc, libc_version = platform.libc_ver()
    row("machine", f"{platform.machine()}, {os.cpu_count()} CPUs, {libc} {libc_version}".strip())

    section("libraries")
    for label, distributions in LIBRARIES:
        row(label, _version(*distributions))

    section("numba-cuda")
    for label, read in _numba_cuda_settings():
        guarded(label, read)

    section("CUDA")
    if not fl.is_available():
        reason = _core.unavailable_reason() or "unknown"
        row("CUDA", f"unavailable: {reason}")
        for hint in _why_unavailable(reason):
            row("", hint)
    else:
        guarded("driver library", _driver_library)
        guarded("CUDA version", lambda: "{}.{}".format(*fl.driver_version()))
        row("kernel module", _kernel_module_version())
        row("devices", len(fl.gpus))
        guarded(
            "launch settings",
            lambda: (
                f"ordering {'on' if fl.ordering_enabled() else 'off'}; default stream "
                f"policy {fl.default_stream_policy()!r}; GIL released at launch: "
                f"{_core.releases_gil()}"
            ),
        )
        for device in fl.gpus:
            section(f"device {device.id}")
            for label, read in _device_rows(device):
                guarded(label, read)

    section("environment")
    variables = _environment()
    if not variables:
        row("", "no FASTLAUNCH_*, NUMBA_*, CUDA_* or NVIDIA_* variables set")
    for name, value in variables:
        row("", f"{name}={value}")


USAGE = """usage: python -m fastlaunch [info]
       python -m fastlaunch run [--report] [--no-children] script.py [args...]
       python -m fastlaunch run [--report] [--no-children] -m module [args...]
       python -m fastlaunch cache [info|clear]

  info   (the default) fastlaunch, Python, library, driver and device versions, settings
         and environment: what a bug report needs.
  run    runs a program unedited with fastlaunch installed (numba.cuda.jit makes
         fastlaunch kernels), as python -m cProfile runs one; run --help says more.
  cache  the compile cache: where it is, how large, its hits and misses, and the kernels it
         could not cache and why (info, the default); or deletes every entry (clear)."""


def cache(argv: list[str]) -> int:
    """``python -m fastlaunch cache [info|clear]`` (docs/cache.md)."""
    from fastlaunch import cache as compile_cache
    from fastlaunch.cache import settings

    if argv in ([], ["info"]):
        report = compile_cache.info()
        state = "on" if report["enabled"] else f"off ({settings.ENV_CACHE}=0)"
        row("cache", state)
        row("directory", f"{report['directory']} (from {report['directory_from']})")
        row(
            "size",
            f"{report['entries']} kernel(s), {report['bytes'] / 2**20:.1f} MiB of "
            f"{report['limit'] / 2**20:.0f} MiB ({settings.ENV_SIZE})",
        )
        total = report["total"]
        row(
            "hits / misses",
            f"{total['hits']} / {total['misses']}; {total['stores']} stored, "
            f"{total['unreadable']} unreadable entries compiled again",
        )
        uncachable = report["uncachable"]
        row("not cached", f"{len(uncachable)} kernel(s)" + (":" if uncachable else ""))
        for kernel, what in sorted(uncachable.items()):
            row("", f"{kernel}: {what.get('reason')}")
        return 0
    if argv == ["clear"]:
        removed = compile_cache.clear()
        print(f"removed {removed} cached kernel(s) from {compile_cache.directory()}")
        return 0
    print("usage: python -m fastlaunch cache [info|clear]", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    if argv[1:2] == ["run"]:
        from fastlaunch._run import run

        return run(argv[2:])
    if argv[1:2] == ["cache"]:
        return cache(argv[2:])
    if argv[1:] in ([], ["info"]):
        info()
        return 0
    if argv[1:] in (["-h"], ["--help"], ["help"]):
        print(USAGE)
        return 0
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
