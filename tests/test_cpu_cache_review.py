"""The launch-cache defects an outside review found (issue 32), on the stand-in driver:

1. mapped and managed numba arrays are NumPy arrays too, whose shape and dtype a program can
   assign in place: they are read on every launch, never proven unchanged by identity;
2. a kernel's configuration cache drops evicted launchers (and the streams they hold, whose
   finalizers run Python code that may let the GIL go) after releasing its lock;
4. the grid-size product does not overflow 32 bits;
and the suspected ones: CuPy is recognised by type, not by module name."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

PRELUDE = """
import struct
import numpy as np
from cuda.bindings import driver as bindings
from numba.cuda.cudadrv import driver as numba_driver
from numba.cuda.cudadrv.devicearray import ManagedNDArray, MappedNDArray
import fastlaunch as fl
from fastlaunch import _core
from fastlaunch.dispatcher import numba_type

COMPILED = _core.CompiledKernel(b"fake image", "fake_entry")
_core._keep_submitted(True)

def host_backed(kind, count=16, dtype=np.float64, pointer=0x7000_0000):
    # as numba-cuda's mapped_array / managed_array make them: a NumPy view of its class
    array = np.ndarray.view(np.zeros(count, dtype), type=kind)
    memory = numba_driver.MemoryPointer(None, bindings.CUdeviceptr(pointer), count * 8)
    array.device_setup(memory)
    return array

def described(args):
    return _core.describe(_core.fingerprint(args))

def register(kernel, args):
    fingerprint = _core.fingerprint(args)
    types = tuple(numba_type(d) for d in _core.describe(fingerprint))
    kernel._register(fingerprint, 90, types, COMPILED)
    return types

def launched_as_packed(kernel, args):
    types = register(kernel, args)
    kernel[1, 1](*args)
    return _core._submitted() == _core.pack(types, args)

@fl.jit
def one(a):
    pass
"""


def test_host_backed_numba_arrays_are_read_again_after_an_in_place_change(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
for kind in (MappedNDArray, ManagedNDArray):
    m = host_backed(kind)
    for _ in range(3):  # launched enough to be remembered, if anything is
        assert launched_as_packed(one, (m,))
    m.shape = (4, 4)
    print(kind.__name__, described((m,))[0][2], launched_as_packed(one, (m,)))
    m.dtype = np.int32
    print(kind.__name__, described((m,))[0][1], launched_as_packed(one, (m,)))
    print(_core._remembered_checks())
"""
    )
    assert lines == [
        "MappedNDArray 2 True",
        "MappedNDArray int32 True",
        "['read']",
        "ManagedNDArray 2 True",
        "ManagedNDArray int32 True",
        "['read']",
    ]


def test_a_graphed_steps_held_host_backed_array_does_not_hold_after_a_change(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
m = host_backed(MappedNDArray)
key, leaves, kinds, held = _core.step_form((m,), None, 0)
m.shape = (4, 4)
print(held is None or not held.holds((m,)), _core.step_form((m,), None, 0)[0] != key)
"""
    )
    assert lines == ["True True"]


# A stream object whose finalizer lets the GIL go (as numba-cuda's, whose clean-up calls
# cuStreamDestroy through cuda.bindings) or configures the kernel itself.
STREAMS = """
import threading, time
class GilReleasingStream:
    def __init__(self, handle):
        self.handle = handle
    def __cuda_stream__(self):
        return (0, self.handle)
    def __del__(self):
        time.sleep(0.0005)  # lets the GIL go

class ReconfiguringStream(GilReleasingStream):
    def __del__(self):
        one[1, 1, GilReleasingStream(self.handle + 1)]
"""


def test_two_threads_configuring_with_fresh_streams_do_not_deadlock(stand_in_driver):
    source = (
        PRELUDE
        + STREAMS
        + textwrap.dedent(
            """
        def configure(offset):
            for i in range(300):
                one[1, 1, GilReleasingStream(offset + i)]
        threads = [threading.Thread(target=configure, args=(1000 * t,)) for t in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("done")
        """
        )
    )
    assert run_child(stand_in_driver, source) == ["done"]


def test_a_finalizer_configuring_the_kernel_does_not_deadlock(stand_in_driver):
    source = (
        PRELUDE
        + STREAMS
        + textwrap.dedent(
            """
        for i in range(40):  # more than the 16 kept: each new one evicts the oldest
            one[1, 1, ReconfiguringStream(100 * i)]
        print("done")
        """
        )
    )
    assert run_child(stand_in_driver, source) == ["done"]


def run_child(stand_in_driver, source: str) -> list[str]:
    """`source` in a child process on the stand-in driver; a hang (a deadlock) fails."""
    import os

    env = {**os.environ, "FASTLAUNCH_CUDA_DRIVER": str(stand_in_driver)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", source], capture_output=True, text=True, timeout=60, env=env
        )
    except subprocess.TimeoutExpired as hang:
        raise AssertionError("configuring the kernel hung (a deadlock)") from hang
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_grid_over_two_to_the_32_blocks_gives_no_low_occupancy_warning(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
import warnings
warnings.simplefilter("error")
launcher = one[(131072, 32768), 1]  # 2**32 blocks: wrapped to 0 in 32 bits
print(launcher.griddim if hasattr(launcher, "griddim") else "configured")
"""
    )
    assert len(lines) == 1


def test_cupy_is_recognised_by_type_not_by_module_name(run_on_stand_in):
    """A class named like CuPy's is read through the CUDA Array Interface (its memory layout
    and CuPy's current stream are CuPy's alone); a subclass of `cupy.ndarray` is CuPy's."""
    lines = run_on_stand_in(
        PRELUDE
        + f"""
import sys, types
sys.path.insert(0, {str(Path(__file__).parent)!r})
from stand_in_cupy import fake_cupy

class Lookalike:
    data = property(lambda self: types.SimpleNamespace(ptr=0x5000_0000))
    __cuda_array_interface__ = property(lambda self: {{
        "shape": (8,), "strides": None, "typestr": "<f4",
        "data": (0x5000_0000, False), "version": 3,
    }})

Lookalike.__module__ = "cupy._core.core"  # and CuPy is not imported
for _ in range(2):
    assert launched_as_packed(one, (Lookalike(),))
print(_core._remembered_checks())

sys.modules["cupy"] = cupy = fake_cupy()
sys.modules["cupy.cuda"] = cupy.cuda
class Subclass(cupy.ndarray):
    pass
array = Subclass((8,), np.float32)
two = fl.jit(lambda a: None)
for _ in range(2):
    assert launched_as_packed(two, (array,))
print(_core._remembered_checks())
"""
    )
    assert lines == ["['read']", "['cupy array']"]
