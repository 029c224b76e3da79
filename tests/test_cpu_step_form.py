"""``_core.step_form``: a graphed step's guard key, computed in Rust with the launch's own
classifier (``classify::source_of`` / ``read_arg``), without a GPU.

The key's contract is ``docs/graphed.md``'s: arrays by their form (dtype, shape, strides,
read-only flag, device) and aliasing, scalars by exact bits, plain values by value,
sequences recursively, streams by handle, anything else by identity. The source an array
is read through is the one a launch reads it through, in the launch's order."""

from __future__ import annotations

import enum

import numpy as np
import pytest
from arrays import PTR, FakeCAI

import fastlaunch
from fastlaunch import _core

ARRAY, STREAM, OBJECT = 3, 4, 5


def form(*args, **kwargs):
    return _core.step_form(args, kwargs, 0)


def key(*args, **kwargs):
    return form(*args, **kwargs)[0]


def test_arrays_enter_by_form_and_aliasing_not_identity():
    a, b = FakeCAI((4, 4), "<f4"), FakeCAI((4, 4), "<f4", ptr=PTR + 4096)
    k, leaves, kinds, held = form(a, b, 2.0)
    assert leaves == [a, b] and kinds == [ARRAY, ARRAY] and held is None
    assert key(b, a, 2.0) == k  # other arrays, same form
    assert key(a, a, 2.0) != k  # aliasing
    assert key(a, FakeCAI((4, 5), "<f4"), 2.0) != k  # shape
    assert key(a, FakeCAI((4, 4), "<f8"), 2.0) != k  # dtype
    assert key(a, FakeCAI((4, 4), "<f4", strides=(4, 16)), 2.0) != k  # strides
    assert key(a, FakeCAI((4, 4), "<f4", readonly=True), 2.0) != k  # read-only flag


def test_scalars_enter_by_exact_bits():
    assert key(1.0) == key(1.0) != key(2.0)
    assert key(0.0) != key(-0.0)
    assert key(float("nan")) == key(float("nan"))
    assert key(1) != key(1.0) != key(True) != key(1 + 0j)
    assert key(2**70) == key(2**70) != key(2**70 + 1)
    assert key(np.float32(1)) != key(np.float64(1)) != key(1.0)
    assert key(np.float32(-0.0)) != key(np.float32(0.0))
    assert key(np.float16(1.5)) == key(np.float16(1.5)) != key(np.float16(2.5))
    # NumPy scalars fastlaunch does not pack: by dtype and bytes
    assert key(np.datetime64(1, "s")) != key(np.datetime64(1, "ms"))
    assert key(np.datetime64(1, "s")) == key(np.datetime64(1, "s"))
    _, leaves, _, held = form(1.0, np.int8(3), "mode", None)
    assert leaves == [] and held is not None


def test_subclasses_of_numbers_enter_by_value_and_type():
    class Meters(float):
        pass

    assert key(Meters(1.0)) == key(Meters(1.0)) != key(1.0)
    assert key(Meters(0.0)) != key(Meters(-0.0))


def test_values_sequences_and_keywords():
    class Mode(enum.Enum):
        A = 1
        B = 2

    assert key("mode") != key("other") and key(b"x") != key("x")
    assert key(Mode.A) == key(Mode.A) != key(Mode.B)
    assert key((1, 2.0)) != key((1, 3.0)) and key((1, 2.0)) != key([1, 2.0])
    assert key(scale=1.0, n=2) == key(n=2, scale=1.0) != key(scale=2.0, n=2)
    assert key(scale=1.0) != key(1.0)
    a = FakeCAI((4,), "<f4")
    k, leaves, kinds, held = form([a, (a, 2)], out=a)
    assert leaves == [a] and kinds == [ARRAY] and held is None  # each object once
    assert key([a, (FakeCAI((4,), "<f4"), 2)], out=a) != k


def test_streams_by_handle_objects_by_identity():
    class TorchLikeStream:
        def __init__(self, handle):
            self.handle = handle

        def __cuda_stream__(self):
            return (0, self.handle)

    s = TorchLikeStream(0x1234)
    k, leaves, kinds, held = form(s)
    assert leaves == [s] and kinds == [STREAM] and held is not None
    assert key(TorchLikeStream(0x1234)) == k != key(TorchLikeStream(0x5678))
    config, other = object(), object()
    assert key(config) == key(config) != key(other)
    host = np.zeros(4, np.float32)  # launched through numba-cuda: an object, by identity
    assert form(host)[2] == [OBJECT] and key(host) != key(np.zeros(4, np.float32))


def test_a_list_that_contains_itself_is_refused_by_name():
    loop: list = [1]
    loop.append(loop)
    with pytest.raises(ValueError, match="argument 0 of the graphed step nests sequences"):
        form(loop)


# -- the source order is the launch's ---------------------------------------------------------


class TorchLike:
    """Speaks the CUDA Array Interface and ``__dlpack__``: launches read the interface
    first, so the form follows it and never asks ``__dlpack__``."""

    def __init__(self, shape):
        self.shape = shape

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": "<f4", "data": (PTR, False), "version": 3}

    def __dlpack__(self, **_kwargs):
        raise AssertionError("the form read __dlpack__, which launches do not")

    def __dlpack_device__(self):
        return (2, 0)


def test_an_object_with_both_protocols_is_read_as_launches_read_it():
    x = TorchLike((8,))
    k, _, kinds, _ = form(x)
    assert kinds == [ARRAY]
    assert key(TorchLike((8,))) == k != key(TorchLike((9,)))
    assert _core.classify(x)[0] == "array"  # launches take it, by the same interface


def test_a_cuda_core_view_that_speaks_dlpack_is_read_through_its_attributes():
    pytest.importorskip("cuda.core")
    from test_cpu_core_objects import device_view

    writable = device_view(np.zeros(8, np.float32))
    readonly_array = np.zeros(8, np.float32)
    readonly_array.flags.writeable = False
    readonly = device_view(readonly_array)
    assert hasattr(writable, "__dlpack__") or hasattr(type(writable), "__dlpack_c_exchange_api__")
    # the read-only flag comes from the view's attributes (a DLPack tensor has none), as a
    # launch reads it: the two forms differ as the two launches' numba types do
    assert form(writable)[2] == [ARRAY]
    assert key(writable) == key(device_view(np.zeros(8, np.float32)))
    assert key(writable) != key(readonly)
    assert _core.classify(writable) != _core.classify(readonly)


def test_numba_arrays_keep_their_form_and_say_so():
    pytest.importorskip("numba.cuda")
    from cuda.bindings import driver as bindings
    from numba.cuda.cudadrv import driver as numba_driver
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    def numba_array(n):
        pointer = numba_driver.MemoryPointer(None, bindings.CUdeviceptr(PTR), 4 * n)
        return DeviceNDArray((n,), (4,), np.float32, gpu_data=numba_driver.OwnedPointer(pointer))

    a, b = numba_array(16), numba_array(16)
    k, leaves, kinds, held = form(a, b, 0.5)
    assert leaves == [a, b] and kinds == [ARRAY, ARRAY] and held is not None
    assert key(b, a, 0.5) == k != key(a, numba_array(17), 0.5)


def test_the_current_device_is_part_of_the_key():
    a = FakeCAI((4,), "<f4")
    assert _core.step_form((a,), {}, 0)[0] != _core.step_form((a,), {}, 1)[0]


def test_graphed_form_is_the_rust_one():
    from fastlaunch.graphed import _form

    a = FakeCAI((4,), "<f4")
    k, leaves, kinds = _form((a, 1.0), {})
    assert (leaves, kinds) == ([a], [ARRAY]) and isinstance(k, bytes)
    assert fastlaunch.graphed(print).counters["eager"] == 0
