"""Launches like the last (`rust/ext/src/repeat.rs`): a launch passing the same arrays again
reuses the last launch's packed parameters, rewriting only what can differ. Checked on the
stand-in driver, which ignores parameters: `_core._keep_submitted(True)` keeps the slots of
each submitted launch, and each launch's slots must equal what `_core.pack` packs for its
arguments from scratch, whatever was remembered."""

from __future__ import annotations

PRELUDE = """
import gc, struct
import numpy as np
from cuda.bindings import driver as bindings
from numba.cuda.cudadrv import driver as numba_driver
from numba.cuda.cudadrv.devicearray import DeviceNDArray
import fastlaunch as fl
from fastlaunch import _core
from fastlaunch.dispatcher import numba_type

COMPILED = _core.CompiledKernel(b"fake image", "fake_entry")
_core._keep_submitted(True)

def device_array(shape, pointer, dtype=np.float32):
    dtype = np.dtype(dtype)
    strides = tuple(dtype.itemsize * int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    memory = numba_driver.MemoryPointer(None, bindings.CUdeviceptr(pointer), 1 << 20)
    return DeviceNDArray(shape, strides, dtype, gpu_data=numba_driver.OwnedPointer(memory))

def kernel_for(count):
    names = ", ".join(f"a{i}" for i in range(count))
    namespace = {}
    exec(f"def k({names}):\\n    pass\\n", namespace)
    return fl.jit(namespace["k"])

def register(kernel, args, types=None, compiled=COMPILED):
    fingerprint = _core.fingerprint(args)
    if types is None:
        types = tuple(numba_type(d) for d in _core.describe(fingerprint))
    kernel._register(fingerprint, 90, types, compiled)
    return types

def launched_as_packed(kernel, args, types):
    kernel[1, 1](*args)
    assert _core._submitted() == _core.pack(types, args), args
    return True

def hits():
    return _core._remembered_launches()[1]
"""


def run(run_on_stand_in, body: str) -> list[str]:
    return run_on_stand_in(PRELUDE + body)


def test_the_same_arrays_again_are_launched_from_the_remembered_launch(run_on_stand_in):
    lines = run(
        run_on_stand_in,
        """
arrays = [device_array((8, 4), 0x1000_0000 + 0x1000 * i) for i in range(26)]
kernel = kernel_for(26)
types = register(kernel, tuple(arrays))
before = hits()
for _ in range(5):
    launched_as_packed(kernel, tuple(arrays), types)
print(hits() - before)
""",
    )
    assert lines == ["4"]  # the first launch is remembered, the next four match it


def test_each_argument_is_checked_the_cheapest_way_it_can_be(run_on_stand_in):
    """numba arrays are proven unchanged by identity, scalars have their value rewritten, and
    only what can change unseen (a CUDA Array Interface object) is read again."""
    lines = run(
        run_on_stand_in,
        """
class Interface:
    def __init__(self):
        self.__cuda_array_interface__ = {
            "shape": (8,), "strides": None, "typestr": "<f4", "data": (0x5000_0000, False),
            "version": 3,
        }
u, v = device_array((8,), 0x1000_0000), device_array((8,), 0x2000_0000)
args = (u, 2.5, Interface(), np.float32(1), v)
kernel = kernel_for(len(args))
types = register(kernel, args)
for _ in range(2):
    launched_as_packed(kernel, args, types)
print(*_core._remembered_checks(), sep=",")
""",
    )
    assert lines == ["numba array,scalar,read,scalar,numba array"]


def test_swapped_arrays_match_the_other_remembered_launch(run_on_stand_in):
    lines = run(
        run_on_stand_in,
        """
u, v = device_array((64,), 0x2000_0000), device_array((64,), 0x3000_0000)
kernel = kernel_for(3)
types = register(kernel, (u, v, 0.5))
before = hits()
for step in range(6):
    launched_as_packed(kernel, (u, v, 0.25 * step), types)
    u, v = v, u
print(hits() - before)
""",
    )
    assert lines == ["4"]  # two remembered (one per order), then each order matches


def test_scalars_are_rewritten_with_each_launch(run_on_stand_in):
    lines = run(
        run_on_stand_in,
        """
a = device_array((16,), 0x4000_0000)
kernel = kernel_for(6)
first = (a, 1.0, 1, True, 1j, np.float32(1))
types = tuple(numba_type(d) for d in _core.describe(_core.fingerprint(first)))
types = (types[0], numba_type(("scalar", "float32")), *types[2:])  # a float to float32
register(kernel, first, types)
values = [(0.1 * i, i - 3, i % 2 == 0, complex(i, -i), np.float32(i / 3)) for i in range(8)]
before = hits()
for scalars in values:
    launched_as_packed(kernel, (a, *scalars), types)
print(hits() - before)
""",
    )
    assert lines == ["7"]


def test_what_does_not_match_takes_the_full_path(run_on_stand_in):
    lines = run(
        run_on_stand_in,
        """
kernel = kernel_for(2)
a, b = device_array((16,), 0x5000_0000), device_array((4, 4), 0x6000_0000)
as_float = register(kernel, (a, 1.5))
as_int = register(kernel, (a, 1))
as_2d = register(kernel, (b, 1.5))
calls = [((a, 1.5), as_float), ((a, 7), as_int), ((b, 2.5), as_2d), ((a, 3.5), as_float),
         ((a, 2**62), as_int), ((device_array((16,), 0x5100_0000), 1.5), as_float)]
for args, types in calls * 2:
    launched_as_packed(kernel, args, types)
try:
    kernel[1, 1](a, "text")
except Exception as error:
    print(type(error).__name__)
print("ok")
""",
    )
    assert lines[-1] == "ok"
    assert lines[0] in {"TypeError", "ValueError", "ArgumentError", "KernelArgumentError"}


def test_a_new_array_at_a_dead_arrays_address_is_read(run_on_stand_in):
    lines = run(
        run_on_stand_in,
        """
kernel = kernel_for(1)
types = register(kernel, (device_array((16,), 0x7000_0000),))
addresses = set()
for i in range(300):
    array = device_array((16,), 0x7000_0000 + 0x1000 * i)
    addresses.add(id(array))
    launched_as_packed(kernel, (array,), types)
    launched_as_packed(kernel, (array,), types)
    del array  # freed at once: its address is free for the next
print("ok", len(addresses) < 300)
""",
    )
    assert lines == ["ok True"]  # addresses were reused, so the checks meant something


def test_a_cleared_kernel_forgets_its_remembered_launches(run_on_stand_in):
    lines = run(
        run_on_stand_in,
        """
kernel = kernel_for(2)
a = device_array((16,), 0x8000_0000)
as_double = register(kernel, (a, 1.5))
launched_as_packed(kernel, (a, 1.5), as_double)
launched_as_packed(kernel, (a, 1.5), as_double)
kernel._clear_overloads()
as_single = register(kernel, (a, 1.5), (a._numba_type_, numba_type(("scalar", "float32"))))
launched_as_packed(kernel, (a, 1.5), as_single)  # float32 slots, not the remembered float64
print("ok")
""",
    )
    assert lines == ["ok"]


def test_cupy_arrays_are_checked_for_a_shape_assigned_in_place(run_on_stand_in):
    lines = run(
        run_on_stand_in,
        f"""
import sys
sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parent)!r})
import types
from test_cpu_cupy_arrays import FakeCupyArray
# CuPy's current stream counts for a launch with CuPy arrays: a stand-in's (the null stream)
stream_reads = []
fake_cuda = types.ModuleType("cupy.cuda")
fake_cuda.get_current_stream = lambda: stream_reads.append(1) or types.SimpleNamespace(ptr=0)
sys.modules["cupy"] = types.ModuleType("cupy")
sys.modules["cupy"].ndarray = FakeCupyArray  # CuPy is recognised by type
sys.modules["cupy.cuda"] = fake_cuda
kernel = kernel_for(1)
array = FakeCupyArray((128,), "float32")
flat = register(kernel, (array,))
launched_as_packed(kernel, (array,), flat)
launched_as_packed(kernel, (array,), flat)
array.shape = (8, 16)
square = register(kernel, (array,))
launched_as_packed(kernel, (array,), square)
array.shape = (16, 8)
launched_as_packed(kernel, (array,), square)
array.shape = (128,)
launched_as_packed(kernel, (array,), flat)
print("ok", len(stream_reads))
""",
    )
    assert lines == ["ok 5"]  # CuPy's current stream read on every launch, remembered or not


def test_a_dead_kernels_remembered_launch_keeps_no_image_loaded(run_on_stand_in):
    lines = run(
        run_on_stand_in,
        """
a = device_array((16,), 0x9000_0000)
start = _core.loaded_image_count()
for _ in range(40):
    kernel = kernel_for(1)
    register(kernel, (a,), (a._numba_type_,), _core.CompiledKernel(b"fake image", "fake_entry"))
    kernel[1, 1](a)
    kernel[1, 1](a)  # remembered, and launched from it
del kernel
gc.collect()
print(_core.loaded_image_count() - start)
""",
    )
    assert lines == ["0"]


def test_tensors_changed_in_place_are_read_again(run_on_stand_in):
    lines = run(
        run_on_stand_in,
        f"""
import sys
sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parent)!r})
from exchange_tensors import Tensor, reads
kernel = kernel_for(3)
x, y = Tensor((64,), 0x1_0000_0000), Tensor((64,), 0x2_0000_0000)
flat = register(kernel, (x, y, 1.5))
square = register(kernel, (Tensor((8, 8), 0x3_0000_0000), y, 1.5))
before = hits()
launched_as_packed(kernel, (x, y, 1.5), flat)
launched_as_packed(kernel, (x, y, 2.5), flat)
y.set_(Tensor((64,), 0x4_0000_0000))  # the same object, other memory
launched_as_packed(kernel, (x, y, 2.5), flat)
x.resize_(8, 8)
launched_as_packed(kernel, (x, y, 3.5), square)
x.as_strided_((8, 8), (1, 8))  # now F-ordered: another fingerprint
f_ordered = register(kernel, (x, y, 1.5))
launched_as_packed(kernel, (x, y, 3.5), f_ordered)
x.data = Tensor((64,), 0x5_0000_0000)
launched_as_packed(kernel, (x, y, 4.5), flat)
launched_as_packed(kernel, (x, y, 5.5), flat)
print(hits() - before)
""",
    )
    assert lines == ["2"]  # the second launch, and the last; the rest changed in between


def test_new_arrays_each_launch_match_a_remembered_launch_with_their_own_values(run_on_stand_in):
    """A loop making new arrays for each launch: once the kernel has two launches remembered,
    the most recent takes new arrays of the same kinds, read and repacked (and reads them from
    then on: its slots no longer hold the first arrays', which must be packed again when they
    come back)."""
    lines = run(
        run_on_stand_in,
        f"""
import sys
sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parent)!r})
import types
from exchange_tensors import Tensor
from test_cpu_cupy_arrays import FakeCupyArray
fake_cuda = types.ModuleType("cupy.cuda")
fake_cuda.get_current_stream = lambda: types.SimpleNamespace(ptr=0)
sys.modules["cupy"] = types.ModuleType("cupy")
sys.modules["cupy"].ndarray = FakeCupyArray
sys.modules["cupy.cuda"] = fake_cuda
def new_args(step):
    return (
        device_array((8, 4), 0x1000_0000 + 0x1000 * step),
        FakeCupyArray((64,), "float32"),
        Tensor((16,), 0x2_0000_0000 + 0x1000 * step),
        0.5 * step,
    )
kernel = kernel_for(4)
first = new_args(0)
packed_as = register(kernel, first)
before = hits()
for step in range(8):
    launched_as_packed(kernel, new_args(step), packed_as)
print(hits() - before, *_core._remembered_checks(), sep=",")
launched_as_packed(kernel, first, packed_as)  # the first arrays again
launched_as_packed(kernel, (first[0], *new_args(9)[1:]), packed_as)
print(hits() - before)
""",
    )
    # the first two launches are remembered, the next six match the second
    assert lines == ["6,read,read,same layout,scalar", "8"]


def test_new_tensors_each_launch_are_each_asked_their_negative_bit_and_kept_nowhere(
    run_on_stand_in,
):
    """A producer with lazy negation (torch): a tensor not checked before is asked
    ``is_neg()`` (a negated one is refused, new or not), but during a run of new tensors the
    answer is not remembered (a weak reference each, for objects never seen again); a tensor
    launched again after the run is remembered within a few launches and then not asked."""
    lines = run(
        run_on_stand_in,
        f"""
import sys
sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parent)!r})
from exchange_tensors import Tensor
asked = [0]
class Lazy(Tensor):
    negated = False
    def is_conj(self):
        return False
    def is_neg(self):
        asked[0] += 1
        return self.negated
kernel = kernel_for(1)
packed_as = register(kernel, (Lazy((16,), 0x2_0000_0000),))
asked[0], before = 0, hits()
for step in range(40):
    kernel[1, 1](Lazy((16,), 0x2_0000_0000 + 0x1000 * step))
print(asked[0], hits() - before, sep=",")
launched_as_packed(kernel, (Lazy((16,), 0x2_8000_0000),), packed_as)
negated = Lazy((16,), 0x3_0000_0000)
negated.negated = True
try:
    kernel[1, 1](negated)
except fl.KernelArgumentError as e:
    print("refused", "resolve_neg" in str(e))
kept = Lazy((16,), 0x4_0000_0000)
asked[0] = 0
kernel[1, 1](kept)
kernel[1, 1](kept)
print(asked[0])  # still in the run of new tensors: asked again
for _ in range(18):
    kernel[1, 1](kept)
settled = asked[0]
for _ in range(20):
    kernel[1, 1](kept)
print(settled <= 17, asked[0] - settled)
launched_as_packed(kernel, (kept,), packed_as)
""",
    )
    # each new tensor asked once; all but the first two launches matched a remembered one
    assert lines == ["40,38", "refused True", "2", "True 0"]


def test_an_interface_changed_between_launches_is_read_as_it_is_now(run_on_stand_in):
    """A CUDA Array Interface object is read again on every launch, its dict changed in place
    or replaced: each launch packs what the interface says then, or refuses it."""
    lines = run(
        run_on_stand_in,
        """
class Interface:
    def __init__(self, **changes):
        self.__cuda_array_interface__ = {
            "shape": (8,), "strides": None, "typestr": "<f4", "data": (0x5000_0000, False),
            "version": 3, **changes,
        }
obj = Interface()
kernel = kernel_for(1)
as_f4 = register(kernel, (obj,))
as_read_only = register(kernel, (Interface(data=(0x5000_0000, True)),))
as_strided = register(kernel, (Interface(strides=(8,)),))
as_i4 = register(kernel, (Interface(typestr="<i4"),))
cai = obj.__cuda_array_interface__
changes = [
    ({}, as_f4),
    ({"data": (0x6000_0000, False)}, as_f4),
    ({"shape": (16,)}, as_f4),
    ({"strides": (4,)}, as_f4),
    ({"strides": (8,)}, as_strided),
    ({"strides": None, "data": (0x6000_0000, True)}, as_read_only),
    ({"data": (0x7000_0000, False), "typestr": "<i4"}, as_i4),
    ({"typestr": "<f4", "stream": None, "mask": None}, as_f4),
]
for change, types in changes:
    cai.update(change)
    launched_as_packed(kernel, (obj,), types)
    launched_as_packed(kernel, (obj,), types)
obj.__cuda_array_interface__ = cai = dict(cai, shape=(4,), data=(0x7100_0000, False))
launched_as_packed(kernel, (obj,), as_f4)
for change in [{"stream": 0}, {"mask": object()}, {"data": (0, False)}, {"shape": [4]}]:
    kept = dict(cai)
    cai.update(change)
    try:
        kernel[1, 1](obj)
    except Exception as error:
        print(str(error).split(": ", 1)[-1])
    cai.clear()
    cai.update(kept)
    launched_as_packed(kernel, (obj,), as_f4)
print("ok")
""",
    )
    assert lines == [
        "__cuda_array_interface__ 'stream' must not be 0 (ambiguous)",
        "masked arrays (__cuda_array_interface__ 'mask') are not supported",
        "__cuda_array_interface__ has a null data pointer for a non-empty array",
        "shape must be a tuple of ints, got list",
        "ok",
    ]


def test_a_new_array_at_a_dead_arrays_address_is_read_with_its_own_shape_dtype_and_pointer(
    run_on_stand_in,
):
    """Arrays made and dropped one per launch land at the same addresses: each is read afresh,
    whatever the last one there was (its dtype, shape, strides and pointer)."""
    lines = run(
        run_on_stand_in,
        """
kernel = kernel_for(2)
makers = [
    lambda i: device_array((16,), 0x7000_0000 + 0x1000 * i),
    lambda i: device_array((16,), 0x7000_0000 + 0x2000 * i, np.int32),
    lambda i: device_array((4, 4), 0x7000_0000 + 0x3000 * i),
    lambda i: device_array((2 + i % 5,), 0x7000_0000 + 0x100 * i, np.float64),
]
overloads = [register(kernel, (make(0), 1.0)) for make in makers]
kinds_at = {}
for i in range(400):
    which = (i * 7) % len(makers)  # not in step with the remembered launches
    array = makers[which](i)
    kinds_at.setdefault(id(array), set()).add(which)
    launched_as_packed(kernel, (array, 0.5 * i), overloads[which])
    del array
print("ok", sum(len(kinds) > 1 for kinds in kinds_at.values()) > 10)
""",
    )
    assert lines == ["ok True"]


def test_a_new_array_each_launch_is_not_remembered_but_one_that_comes_back_is(
    run_on_stand_in,
):
    """An argument that is a new array launch after launch is read without being remembered
    in the table of arrays read before (but every 16th launch), which would cost a weak
    reference each; an array passed again is remembered (its weak reference shows it)."""
    lines = run(
        run_on_stand_in,
        """
import weakref
kernel = kernel_for(1)
types = register(kernel, (device_array((16,), 0x7000_0000),))
remembered = []
for i in range(64):  # (`_core.pack`, which reads the arrays too, would remember them)
    array = device_array((16,), 0x7000_0000 + 0x1000 * i)
    kernel[1, 1](array)
    remembered.append(weakref.getweakrefcount(array))
    del array
print(sum(remembered[8:]))
kept = device_array((16,), 0x7100_0000)
for i in range(16):
    kernel[1, 1](kept)
    kernel[1, 1](device_array((16,), 0x7200_0000 + 0x1000 * i))
print(weakref.getweakrefcount(kept))
""",
    )
    assert lines == ["3", "1"]  # launches 16, 32 and 48 of the 56 after the eighth


def test_new_tensors_of_the_last_layout_rewrite_their_data_slot_and_others_are_read(
    run_on_stand_in,
):
    """A new tensor each launch, of the layout read last (type, dtype, shape, strides,
    device): only its data slot is rewritten (`classify/same_layout.rs`), to what packing it
    in full gives, byte offset included. A tensor differing in any of these is read in full
    and packed as it is; one on a device the launch cannot reach is refused as the full read
    refuses it, after a run of tensors that could."""
    lines = run(
        run_on_stand_in,
        f"""
import sys
sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parent)!r})
from exchange_tensors import Tensor

INT32 = (0, 32, 1)
def strided(pointer, shape=(4, 8), strides=(16, 1), **kw):
    tensor = Tensor(shape, pointer, **kw)
    return tensor.as_strided_(shape, strides)
kernel = kernel_for(2)
floats = register(kernel, (strided(0x2_0000_0000), 1.0))
ints = register(kernel, (strided(0x2_0000_0000, dtype=INT32), 1.0))
for step in range(6):
    launched_as_packed(kernel, (strided(0x2_0000_0000 + 0x1000 * step), 1.0), floats)
print(*_core._remembered_checks(), sep=",")
offset = strided(0x3_0000_0000)
offset.byte_offset = 64
others = [
    (strided(0x3_0000_1000), floats),
    (offset, floats),
    (strided(0x3_0000_2000, shape=(2, 8)), floats),
    (strided(0x3_0000_3000, strides=(32, 1)), floats),
    (strided(0x3_0000_4000, dtype=INT32), ints),
    (strided(0x3_0000_5000), floats),
]
for tensor, packed_as in others:
    launched_as_packed(kernel, (tensor, 2.0), packed_as)
    launched_as_packed(kernel, (strided(tensor.address + 0x100, (tensor.shape), tensor.stride(),
                                        dtype=(tensor.code, tensor.bits, tensor.lanes)), 2.0),
                       packed_as)
print(*_core._remembered_checks(), sep=",")
try:
    kernel[1, 1](strided(0x4_0000_0000, device=1), 3.0)
except Exception as e:
    print(type(e).__name__, "device" in str(e))
launched_as_packed(kernel, (strided(0x5_0000_0000), 4.0), floats)
""",
    )
    assert lines == [
        "same layout,scalar",
        "same layout,scalar",
        "KernelArgumentError True",
    ]


def test_new_described_arrays_of_the_last_layout_rewrite_their_data_slot(run_on_stand_in):
    """Arrays made by fastlaunch's memory API carry their description (`born.rs`); a new one
    each launch, of the layout read last, rewrites the data slot alone; one of another shape,
    dtype or order, a view, or an array whose memory was assigned after its birth is read in
    full. Each launch packs what packing its arguments from scratch packs."""
    lines = run(
        run_on_stand_in,
        f"""
import sys
sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parent.parent)!r})
from benchmarks.stand_in import stand_in_context
stand_in_context()

kernel = kernel_for(2)
floats = register(kernel, (fl.device_array((4, 8), np.float32), 1.0))
ints = register(kernel, (fl.device_array((4, 8), np.int32), 1.0))
fortran = register(kernel, (fl.device_array((4, 8), np.float32, order="F"), 1.0))
for step in range(6):
    launched_as_packed(kernel, (fl.device_array((4, 8), np.float32), 1.0), floats)
print(*_core._remembered_checks(), sep=",")
moved = fl.device_array((4, 8), np.float32)
moved.gpu_data = fl.device_array((4, 8), np.float32).gpu_data
others = [
    (fl.device_array((2, 8), np.float32), floats),
    (fl.device_array((4, 8), np.int32), ints),
    (fl.device_array((4, 8), np.float32, order="F"), fortran),
    # views, without numba-cuda's `require_context` (no CUDA context on the stand-in)
    (fl.device_array((4, 16), np.float32)._do_getitem((slice(None), slice(None, None, 2))), None),
    (fl.device_array((5, 8), np.float32)._do_getitem(slice(1, None)), floats),
    (moved, floats),
]
for array, packed_as in others:
    if packed_as is None:
        packed_as = register(kernel, (array, 1.0))
    for _ in range(2):
        launched_as_packed(kernel, (array, 2.0), packed_as)
        launched_as_packed(kernel, (fl.device_array((4, 8), np.float32), 2.0), floats)
print(*_core._remembered_checks(), sep=",")
""",
    )
    assert lines == ["same layout,scalar", "same layout,scalar"]
