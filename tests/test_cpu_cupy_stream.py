"""CuPy's current stream, which launches with CuPy arrays order after (`cupy_stream.rs`): read
through the C function CuPy's Cython modules export (`cupy_backends.cuda.stream.__pyx_capi__`)
when its signature is the expected one and it agrees with `cupy.cuda.get_current_stream()`
the first time; else through that Python call. Checked against stand-in modules, each case in
a fresh process (the choice is made once per process)."""

from __future__ import annotations

import subprocess
import sys

import pytest

STAND_IN = """
import ctypes, sys, types

current = {{"c": {c_value}, "python": {python_value}}}

def get_current_stream():
    return types.SimpleNamespace(ptr=current["python"])

cupy, cuda = types.ModuleType("cupy"), types.ModuleType("cupy.cuda")
cuda.get_current_stream = get_current_stream
cupy.cuda = cuda
sys.modules["cupy"], sys.modules["cupy.cuda"] = cupy, cuda

# What Cython exports: a capsule holding the function's address, named by its signature.
exported = ctypes.CFUNCTYPE(ctypes.c_ssize_t)(lambda: current["c"])
new_capsule = ctypes.pythonapi.PyCapsule_New
new_capsule.restype = ctypes.py_object
new_capsule.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
signature = ctypes.create_string_buffer({signature!r})
stream_module = types.ModuleType("cupy_backends.cuda.stream")
stream_module.__pyx_capi__ = {{
    "get_current_stream_ptr": new_capsule(ctypes.cast(exported, ctypes.c_void_p), signature, None)
}}
for name in ("cupy_backends", "cupy_backends.cuda"):
    sys.modules[name] = types.ModuleType(name)
sys.modules["cupy_backends.cuda.stream"] = stream_module

from fastlaunch import _core
print(*_core._cupy_current_stream())
current["c"] = current["python"] = 0x5000  # `with cupy.cuda.Stream(): ...`
print(*_core._cupy_current_stream())
"""


def run(c_value: int, python_value: int, signature: bytes) -> list[str]:
    source = STAND_IN.format(c_value=c_value, python_value=python_value, signature=signature)
    done = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize("signature", [b"intptr_t (void)", b"intptr_t (void) except? -1"])
def test_the_exported_function_is_called_when_its_signature_and_value_agree(signature):
    assert run(0, 0, signature) == ["0 exported", f"{0x5000} exported"]


def test_a_function_of_another_signature_is_not_called():
    assert run(0, 0, b"intptr_t (int)") == ["0 python", f"{0x5000} python"]


def test_a_function_that_disagrees_with_cupy_the_first_time_is_not_called():
    assert run(0x700, 0, b"intptr_t (void)") == ["0 python", f"{0x5000} python"]
