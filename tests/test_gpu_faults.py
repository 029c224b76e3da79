"""Faults, launches the GPU cannot run, arrays it cannot reach, fork, and unloading.

A kernel that faults corrupts its CUDA context for the rest of the process, so those
scenarios run in child processes; launches refused by the driver are not sticky and are
checked here, each followed by a launch that works."""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from arrays import FakeCAI
from numba import cuda
from process_memory import process_gpu_mib

import fastlaunch as fl

pytestmark = pytest.mark.gpu


def run_child(source: str, timeout: float = 120) -> str:
    """Runs ``source`` in a fresh interpreter; returns its output (it must exit 0)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


def test_a_faulting_kernel_is_reported_and_the_context_then_says_it_is_unusable():
    out = run_child(
        """
        import numpy as np
        from numba import cuda
        import fastlaunch as fl

        @fl.jit
        def write_far(a, offset):
            a[offset] = 1.0

        a = cuda.device_array(4, np.float32)
        write_far[1, 1](a, 0)
        fl.synchronize()
        write_far[1, 1](a, 1 << 40)  # far outside any allocation
        for attempt in ("synchronize", "launch", "synchronize again"):
            try:
                if attempt == "launch":
                    write_far[1, 1](a, 0)
                fl.synchronize()
                print(attempt, "NO ERROR")
            except fl.CudaDriverError as e:
                print(attempt, "->", e.name, "|", e)
        """
    )
    lines = [line for line in out.splitlines() if "->" in line or "NO ERROR" in line]
    assert len(lines) == 3, out
    assert "synchronize -> CUDA_ERROR_ILLEGAL_ADDRESS" in lines[0], out
    for line in lines:
        assert "NO ERROR" not in line, out
        assert "context is now unusable" in line, out
        assert "restart the process" in line, out


def test_a_launch_in_a_forked_child_fails_clearly_and_never_hangs():
    out = run_child(
        """
        import os
        import numpy as np
        from numba import cuda
        import fastlaunch as fl

        @fl.jit
        def fill(a):
            a[0] = 1

        a = cuda.device_array(1, np.float32)
        fill[1, 1](a)
        fl.synchronize()
        pid = os.fork()
        if pid == 0:
            try:
                fill[1, 1](a)
                print("child: NO ERROR")
            except fl.CudaUnavailableError as e:
                print("child:", type(e).__name__, e)
            except BaseException as e:
                print("child: other", type(e).__name__, e)
            os._exit(0)
        os.waitpid(pid, 0)
        fill[1, 1](a)  # the parent goes on
        fl.synchronize()
        print("parent ok")
        """,
        timeout=60,
    )
    assert "child: CudaForkedError" in out, out
    assert "forking" in out and "'spawn'" in out, out
    assert "parent ok" in out, out


# -------------------------------------------------- launches the GPU cannot run


@fl.jit
def fill(a, value):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = value


@fl.jit(launch_bounds=(128,))
def bounded(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = 1


@fl.jit
def dynamic_shared(a):
    buffer = cuda.shared.array(0, np.float32)
    buffer[cuda.threadIdx.x] = 1
    cuda.syncthreads()
    a[0] = buffer[0]


def _still_launches():
    a = cuda.device_array(64, np.float32)
    fill[1, 64](a, np.float32(3))
    fl.synchronize()
    np.testing.assert_array_equal(a.copy_to_host(), 3)


@pytest.mark.parametrize(
    ("grid", "block", "pattern"),
    [
        (1, 2048, r"blockdim \(2048, 1, 1\) is 2048 threads per block; device 0 runs at most 1024"),
        (1, (1, 1, 128), r"128 threads in z; device 0 allows at most 64 \(MAX_BLOCK_DIM_Z\)"),
        ((1, 70000), 1, r"70000 blocks in y; device 0 allows at most 65535 \(MAX_GRID_DIM_Y\)"),
    ],
)
def test_device_limits_are_named(grid, block, pattern):
    a = cuda.device_array(1, np.float32)
    with pytest.raises(fl.LaunchConfigurationError, match=pattern) as raised:
        fill[grid, block](a, np.float32(1))
    assert "CUDA_ERROR_INVALID_VALUE" in str(raised.value)
    _still_launches()


def test_the_kernels_own_thread_limit_is_named():
    a = cuda.device_array(256, np.float32)
    bounded[1, 128](a)
    with pytest.raises(fl.LaunchConfigurationError, match="this kernel runs at most 128"):
        bounded[1, 256](a)
    _still_launches()


def test_shared_memory_beyond_the_device_is_named():
    a = cuda.device_array(1, np.float32)
    limit = fl.gpus[0].MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    with pytest.raises(fl.LaunchConfigurationError, match="dynamic shared memory") as raised:
        dynamic_shared[1, 32, 0, limit + 1024](a)
    assert str(limit) in str(raised.value)
    dynamic_shared[1, 32, 0, limit](a)  # the whole opt-in limit works
    fl.synchronize()
    assert a.copy_to_host()[0] == 1
    _still_launches()


# ---------------------------------------------------- arrays the GPU cannot reach


def test_a_host_pointer_disguised_as_a_device_array_is_refused():
    host = np.zeros(16, np.float32)
    fake = FakeCAI((16,), "<f4", ptr=host.ctypes.data)
    with pytest.raises(fl.KernelArgumentError, match=r"argument 0 \(a\).*is not CUDA memory"):
        fill[1, 16](fake, np.float32(1))
    _still_launches()


def test_a_real_device_pointer_through_the_interface_is_fine():
    a = cuda.device_array(16, np.float32)
    view = FakeCAI((16,), "<f4", ptr=a.device_ctypes_pointer.value)
    fill[1, 16](view, np.float32(2))
    fl.synchronize()
    np.testing.assert_array_equal(a.copy_to_host(), 2)


class OnAnotherDevice:
    """A torch tensor whose DLPack capsule claims device ``device``."""

    def __init__(self, tensor, device):
        self.tensor = tensor
        self.device = device

    def __dlpack_device__(self):
        return (2, self.device)

    def __dlpack__(self, stream=None):
        capsule = self.tensor.__dlpack__(stream=stream)
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype = ctypes.c_void_p
        get.argtypes = [ctypes.py_object, ctypes.c_char_p]
        managed = get(capsule, b"dltensor")
        # DLTensor: data (8 bytes), then DLDevice {int32 device_type, int32 device_id}
        ctypes.c_int32.from_address(managed + 12).value = self.device
        return capsule


def test_an_array_on_another_device_is_refused_naming_both():
    torch = pytest.importorskip("torch")
    other = len(fl.gpus)  # a device this process cannot reach
    tensor = torch.zeros(16, device="cuda")
    with pytest.raises(
        fl.KernelArgumentError,
        match=rf"argument 0 \(a\): its memory is on device {other} \(the device its source "
        r"names\) but the launch is on device 0",
    ):
        fill[1, 16](OnAnotherDevice(tensor, other), np.float32(1))
    _still_launches()


# ------------------------------------------------------------------ unloading


def test_ten_thousand_kernel_images_load_launch_and_unload():
    """Each image loaded with cuLibraryLoadData is unloaded when its last kernel goes."""
    from fastlaunch import _core

    a = cuda.device_array(32, np.float32)
    fill[1, 32](a, np.float32(0))
    fl.synchronize()
    (kernel,) = fill.overloads.values()
    major, minor = fl.gpus[0].compute_capability
    code = major * 10 + minor
    cubin = bytes(kernel._codelibrary.get_cubin(cc=(major, minor, "a" if code >= 90 else "")).code)
    param_types = tuple(kernel.signature.args)
    args = (a, np.float32(5))
    fingerprint = _core.fingerprint(args)

    def load_and_launch():
        raw = _core.Kernel()
        raw._register(
            fingerprint, code, param_types, _core.CompiledKernel(cubin, kernel.entry_name)
        )
        raw[1, 32](*args)
        return raw

    def held():
        """(images loaded, MiB of GPU memory) held by this process, not the device."""
        fl.synchronize()
        gc.collect()
        return _core.loaded_image_count(), process_gpu_mib()

    start = held()
    for _ in range(10_000):
        load_and_launch()
    after_dropping = held()
    kept = [load_and_launch() for _ in range(2_000)]
    while_held = held()
    del kept
    after_release = held()
    print(
        "images loaded / GPU memory this process holds (MiB; None where NVML cannot see it): "
        f"start {start}, after 10k load/launch/drop {after_dropping}, 2k held {while_held}, "
        f"released {after_release}"
    )
    np.testing.assert_array_equal(a.copy_to_host(), 5)
    assert after_dropping[0] == start[0]
    assert while_held[0] == start[0] + 2_000
    assert after_release[0] == start[0]
    if start[1] is not None and after_release[1] is not None:
        assert after_dropping[1] - start[1] < 64
        assert after_release[1] - start[1] < 64


RELAUNCH_AFTER_RESET = """
import numpy as np
from numba import cuda
from numba.cuda.decorators import jit as numba_jit
import fastlaunch as fl

jit = {jit}

@jit
def add_one(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] += 1

for round in range(3):
    a = cuda.to_device(np.arange(64, dtype=np.float32))
    add_one[2, 32](a)
    add_one[2, 32](a)
    assert (a.copy_to_host() == np.arange(64) + 2).all(), round
    cuda.close()
print("relaunched after reset")
"""


def test_kernels_launch_again_after_numba_resets_the_context():
    # cuda.close() resets the primary context (cuDevicePrimaryCtxReset): fastlaunch's cached
    # kernel functions belong to the old context and must not be launched in the new one.
    # Where numba-cuda itself cannot relaunch after the reset, there is nothing to match.
    numba_alone = subprocess.run(
        [sys.executable, "-c", RELAUNCH_AFTER_RESET.format(jit="numba_jit")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if numba_alone.returncode != 0:
        last_line = (numba_alone.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"numba-cuda itself does not relaunch after cuda.close(): {last_line}")
    out = run_child(RELAUNCH_AFTER_RESET.format(jit="fl.jit"))
    assert "relaunched after reset" in out
