"""The compile cache's key (``fastlaunch.cache.key``), in this process: what changes it and what
does not. numba-cuda's dispatchers are made but never compiled here (no device needed);
``test_cpu_cache_invalidation.py`` proves the same across processes with real compiles."""

from __future__ import annotations

import enum
import textwrap
import types as pytypes
from collections import namedtuple

import numpy as np
import pytest
from numba.cuda import types

import fastlaunch as fl
from fastlaunch import _numba_compat
from fastlaunch.cache import key as keys
from fastlaunch.cache.values import Unkeyable, Walk

CC = (9, 0, "a")
F32 = (types.float32[::1], types.float32)


def kernel_from(source: str, namespace: dict | None = None, filename: str = "<test>", **options):
    """A fastlaunch kernel made from ``source`` (defining ``k``) executed in ``namespace``."""
    namespace = {"cuda": __import__("numba").cuda, "np": np, "__name__": "m", **(namespace or {})}
    exec(compile(textwrap.dedent(source), filename, "exec"), namespace)
    return fl.jit(**options)(namespace["k"]), namespace


def key_of(kernel, argtypes=F32, cc=CC) -> str:
    return keys.overload_key(kernel.dispatcher, argtypes, cc).key


BODY = """
def k(a, x):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = x * SCALE
"""


def test_the_same_code_and_values_give_the_same_key_wherever_the_lines_are():
    one, _ = kernel_from(BODY, {"SCALE": 2.0}, filename="a.py")
    two, _ = kernel_from("\n" * 40 + BODY, {"SCALE": 2.0}, filename="b.py")
    assert key_of(one) == key_of(two)


def test_lines_and_file_count_where_line_information_is_compiled_in():
    for options in ({"lineinfo": True}, {"debug": True, "opt": False}):
        one, _ = kernel_from(BODY, {"SCALE": 2.0}, filename="a.py", **options)
        two, _ = kernel_from("\n" + BODY, {"SCALE": 2.0}, filename="a.py", **options)
        three, _ = kernel_from(BODY, {"SCALE": 2.0}, filename="b.py", **options)
        assert len({key_of(one), key_of(two), key_of(three)}) == 3


def test_a_frozen_global_changes_the_key_by_value_and_type():
    kernel, namespace = kernel_from(BODY, {"SCALE": 2.0})
    before = key_of(kernel)
    namespace["SCALE"] = 3.0
    assert key_of(kernel) != before
    namespace["SCALE"] = 2  # an int: another constant type, another key
    assert key_of(kernel) != before
    namespace["SCALE"] = 2.0
    assert key_of(kernel) == before
    namespace["UNUSED"] = object()  # a global the kernel does not load: not in the key
    assert key_of(kernel) == before


def test_argument_types_and_compute_capability_are_in_the_key():
    kernel, _ = kernel_from(BODY, {"SCALE": 2.0})
    found = {
        key_of(kernel),
        key_of(kernel, (types.float32[:], types.float32)),
        key_of(kernel, (types.float64[::1], types.float32)),
        key_of(kernel, (types.Array(types.float32, 1, "C", readonly=True), types.float32)),
        key_of(kernel, (types.float32[::1], types.float64)),
        key_of(kernel, F32, (8, 6, "")),
    }
    assert len(found) == 6


def test_record_arguments_are_keyed_by_their_layout():
    kernel, _ = kernel_from(BODY, {"SCALE": 2.0})
    packed = np.dtype([("a", np.float32), ("b", np.int8)])
    aligned = np.dtype([("a", np.float32), ("b", np.int8)], align=True)
    record = _numba_compat.numpy_support().from_dtype
    one = key_of(kernel, (types.Array(record(packed), 1, "C"), types.float32))
    two = key_of(kernel, (types.Array(record(aligned), 1, "C"), types.float32))
    assert one != two


def test_a_closure_variable_is_in_the_key():
    made = {}
    for value in (1.5, 2.5, 1.5):
        namespace: dict = {"cuda": __import__("numba").cuda}
        exec(
            "def make(v):\n    def k(a, x):\n        a[0] = x * v\n    return k\n",
            namespace,
        )
        made.setdefault(value, []).append(key_of(fl.jit(namespace["make"](value))))
    assert made[1.5][0] == made[1.5][1] != made[2.5][0]


def test_numpy_globals_by_their_bytes_dtype_and_layout():
    source = "def k(a, x):\n    a[0] = TABLE[1] * x\n"
    table = np.arange(8, dtype=np.float32)
    kernel, namespace = kernel_from(source, {"TABLE": table})
    before = key_of(kernel)
    table[1] = 7  # the same array object, other bytes
    assert key_of(kernel) != before
    table[1] = 1
    assert key_of(kernel) == before
    namespace["TABLE"] = table.astype(np.float64)
    assert key_of(kernel) != before
    namespace["TABLE"] = np.asfortranarray(np.arange(8, dtype=np.float32).reshape(2, 4))
    fortran = key_of(kernel)
    namespace["TABLE"] = np.arange(8, dtype=np.float32).reshape(2, 4)
    assert key_of(kernel) not in (before, fortran)


def test_a_module_attribute_the_kernel_reads_is_in_the_key_and_others_are_not():
    settings = pytypes.ModuleType("settings")
    settings.N = 4
    settings.OTHER = object()  # unkeyable, but never read
    kernel, _ = kernel_from("def k(a, x):\n    a[0] = x * settings.N\n", {"settings": settings})
    before = key_of(kernel)
    settings.N = 5
    assert key_of(kernel) != before
    settings.N = 4
    settings.OTHER = object()
    assert key_of(kernel) == before


def test_a_device_function_in_another_module_is_keyed_by_its_code_and_values():
    helpers = pytypes.ModuleType("helpers")
    exec(
        "from numba import cuda\nK = 2.0\n@cuda.jit(device=True)\ndef f(x):\n    return x * K\n",
        helpers.__dict__,
    )
    kernel, _ = kernel_from("def k(a, x):\n    a[0] = helpers.f(x)\n", {"helpers": helpers})
    before = key_of(kernel)
    helpers.K = 3.0  # a global of the device function
    assert key_of(kernel) != before
    helpers.K = 2.0
    assert key_of(kernel) == before
    exec(  # another body
        "@cuda.jit(device=True)\ndef f(x):\n    return x * K + 1\n",
        helpers.__dict__,
    )
    assert key_of(kernel) != before


def test_compile_options_and_link_contents_are_in_the_key(tmp_path):
    linked = tmp_path / "ext.cu"
    linked.write_text("// one")
    found = set()
    for options in (
        {},
        {"fastmath": True},
        {"max_registers": 32},
        {"opt": False},
        {"lineinfo": True},
        {"launch_bounds": 128},
        {"link": [str(linked)]},
    ):
        kernel, _ = kernel_from(BODY, {"SCALE": 2.0}, **options)
        found.add(key_of(kernel))
    assert len(found) == 7
    kernel, _ = kernel_from(BODY, {"SCALE": 2.0}, link=[str(linked)])
    before = key_of(kernel)
    linked.write_text("// two")
    assert key_of(kernel) != before


def test_numba_settings_are_in_the_key(monkeypatch):
    kernel, _ = kernel_from(BODY, {"SCALE": 2.0})
    before = key_of(kernel)
    monkeypatch.setattr(_numba_compat.config(), "CUDA_DEFAULT_PTX_CC", (8, 0))
    assert key_of(kernel) != before


def test_named_tuples_and_enums_with_their_classes():
    Point = namedtuple("Point", "x y")
    Other = namedtuple("Other", "x y")

    class Color(enum.IntEnum):
        RED = 1

    source = "def k(a, x):\n    a[0] = x * P.x + C\n"
    found = set()
    for p, c in ((Point(1, 2), Color.RED), (Other(1, 2), Color.RED), (Point(1, 2), 1)):
        kernel, _ = kernel_from(source, {"P": p, "C": c})
        found.add(key_of(kernel))
    assert len(found) == 3


def test_unordered_constants_are_keyed_in_one_order():
    one, two = Walk(False), Walk(False)
    one.value(frozenset(f"s{i}" for i in range(20)))
    two.value(frozenset(reversed([f"s{i}" for i in range(20)])))
    assert one.digest() == two.digest()


def test_what_cannot_be_keyed_is_refused_naming_it():
    class Opaque:
        pass

    kernel, _ = kernel_from("def k(a, x):\n    a[0] = x * O.v\n", {"O": Opaque()})
    with pytest.raises(Unkeyable, match=r"Opaque object.*m\.k"):
        key_of(kernel)

    class DeviceArrayLike:
        __cuda_array_interface__ = {}

    kernel, _ = kernel_from("def k(a, x):\n    a[0] = G[0]\n", {"G": DeviceArrayLike()})
    with pytest.raises(Unkeyable, match="device array"):
        key_of(kernel)


def test_user_extensions_are_in_every_key():
    from numba.cuda.extending import overload

    kernel, _ = kernel_from(BODY, {"SCALE": 2.0})
    before = key_of(kernel)

    def not_called(x):
        return x

    @overload(not_called, target="cuda")
    def ol_not_called(x):
        def impl(x):
            return x + 1

        return impl

    assert key_of(kernel) != before  # registered by code outside numba: in every key
    assert key_of(kernel) == key_of(kernel)


def test_the_key_does_not_depend_on_the_process_state_of_unrelated_objects():
    kernel, _ = kernel_from(BODY, {"SCALE": 2.0})
    before = key_of(kernel)
    kernel_from(BODY.replace("SCALE", "3.0"))  # another kernel made meanwhile
    assert key_of(kernel) == before


CHANGED_IN_PROCESS = """
from numba.cuda.extending import overload, register_jitable
import fastlaunch as fl
from fastlaunch.cache import key as keys
from fastlaunch.cache.values import Unkeyable
from numba.cuda import types

SHIFT = 1.0

def shifted(x):
    return x

if WHICH == "overload":
    @overload(shifted, target="cuda")
    def ol_shifted(x):
        def impl(x):
            return x + SHIFT
        return impl
else:
    @register_jitable
    def shifted(x):
        return x + SHIFT

def k(a, x):
    a[0] = shifted(x)

kernel = fl.jit(k)
argtypes = (types.float32[::1], types.float32)
first = keys.overload_key(kernel.dispatcher, argtypes, (9, 0, "a")).key
print(first == keys.overload_key(kernel.dispatcher, argtypes, (9, 0, "a")).key)
SHIFT = 2.0
try:
    keys.overload_key(kernel.dispatcher, argtypes, (9, 0, "a"))
except Unkeyable as refusal:
    print("refused:", refusal)
"""


@pytest.mark.parametrize("which", ["overload", "register_jitable"])
def test_an_extension_that_changed_in_this_process_makes_kernels_uncachable(which):
    """numba compiles an overload's implementation (and a ``register_jitable`` function, an
    overload too) once per process and keeps it: after a value it reads changes, kernels
    compile as without a cache for the rest of the process (in a child process: the refusal
    lasts)."""
    import subprocess
    import sys

    source = f"WHICH = {which!r}\n" + CHANGED_IN_PROCESS
    done = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "True"
    assert lines[1].startswith("refused: a numba extension: __main__.")
    assert "changed since this process first used it" in lines[1]


def test_a_user_class_is_keyed_with_the_plain_values_it_holds():
    class Limits:
        TOP = 4

    kernel, _ = kernel_from("def k(a, x):\n    a[0] = x * L.TOP\n", {"L": Limits})
    before = key_of(kernel)
    Limits.TOP = 5
    assert key_of(kernel) != before
