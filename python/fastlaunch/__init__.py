"""fastlaunch: launch Numba CUDA kernels at the CPU cost of a bare ``cuLaunchKernel``.

Change ``@cuda.jit`` to ``@fastlaunch.jit``; everything else stays numba-cuda's.
"""

from __future__ import annotations

import atexit
from typing import TYPE_CHECKING, Any

from fastlaunch import _capture_hooks, _core, _fork, _numpy_compat, errors
from fastlaunch._core import driver_version, is_available, synchronize
from fastlaunch._installer import install, is_installed, uninstall
from fastlaunch.devices import Device, DeviceList, current_device, gpus, select_device
from fastlaunch.dispatcher import Kernel, jit
from fastlaunch.errors import (
    CudaError,
    CudaUnavailableError,
    KernelArgumentError,
    LaunchConfigurationError,
)
from fastlaunch.graphed import GraphCaptureWarning, GraphedCheckError, GraphedStep, graphed
from fastlaunch.graphs import Graph, GraphLaunch, graph
from fastlaunch.memory import (
    device_array,
    device_array_like,
    pinned_array,
    pinned_array_like,
    set_pool_release_threshold,
    to_device,
)
from fastlaunch.streams import (
    Event,
    Stream,
    default_stream,
    default_stream_policy,
    event,
    external_stream,
    legacy_default_stream,
    ordering_enabled,
    per_thread_default_stream,
    set_default_stream_policy,
    set_ordering,
    stream,
)
from fastlaunch.torch_ops import TorchOp, torch_op

__version__: str = _core.__version__

_fork.watch_forks()  # a child forked after numba-cuda initialised CUDA raises, never crashes
_numpy_compat.apply()  # NumPy 2.5 lacks np.row_stack, which numba-cuda 0.30 names
_capture_hooks.install()  # launches follow torch's and CuPy's graph captures
atexit.register(_core.at_exit)  # objects collected at exit leave the driver alone

if TYPE_CHECKING:
    from fastlaunch.errors import CudaDriverError, LaunchRefusedError


def __getattr__(name: str) -> Any:
    # CudaDriverError and LaunchRefusedError are built on first use (see fastlaunch.errors).
    if name in ("CudaDriverError", "LaunchRefusedError"):
        return getattr(errors, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CudaDriverError",
    "CudaError",
    "CudaUnavailableError",
    "Device",
    "Event",
    "Stream",
    "default_stream",
    "default_stream_policy",
    "event",
    "external_stream",
    "legacy_default_stream",
    "ordering_enabled",
    "per_thread_default_stream",
    "set_default_stream_policy",
    "set_ordering",
    "stream",
    "DeviceList",
    "Kernel",
    "KernelArgumentError",
    "LaunchConfigurationError",
    "LaunchRefusedError",
    "Graph",
    "GraphCaptureWarning",
    "GraphLaunch",
    "GraphedCheckError",
    "GraphedStep",
    "graph",
    "graphed",
    "install",
    "is_installed",
    "uninstall",
    "__version__",
    "current_device",
    "driver_version",
    "gpus",
    "is_available",
    "jit",
    "select_device",
    "synchronize",
    "device_array",
    "device_array_like",
    "pinned_array",
    "pinned_array_like",
    "set_pool_release_threshold",
    "to_device",
    "TorchOp",
    "torch_op",
]
