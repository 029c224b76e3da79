"""GPU memory held by this process, as NVML reports it per process: unlike the device's free
memory, it does not move when another process uses the same GPU."""

from __future__ import annotations

import ctypes
import os


class _ProcessInfo(ctypes.Structure):
    # nvmlProcessInfo_t (the _v3 query's element)
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


def process_gpu_mib() -> float | None:
    """MiB of GPU memory this process holds on all GPUs, or None where NVML cannot tell
    (no NVML, or a PID namespace that hides this process's PID from it)."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        pid, found, used = os.getpid(), False, 0
        for index in range(count.value):
            handle = ctypes.c_void_p()
            if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
                return None
            entries = (_ProcessInfo * 256)()
            n = ctypes.c_uint(256)
            if nvml.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(n), entries):
                return None
            for entry in entries[: n.value]:
                if entry.pid == pid:
                    found = True
                    used += entry.usedGpuMemory
        return used / 2**20 if found else None
    finally:
        nvml.nvmlShutdown()
