"""The memory API's fast paths against the general paths they skip, on the stand-in driver:
``transfers.plain_match`` (a plain contiguous NumPy array of the device array's very dtype,
shape and strides) in ``copy_to_device`` and ``copy_to_host``, a numba-cuda ``Stream``'s
handle read without its ``__cuda_stream__``, and the new host array of ``copy_to_host()``
made with NumPy's arguments by position. Each case runs twice, the fast path taken and
refused (``plain_match`` answering False): the same bytes, returned objects and errors."""

from __future__ import annotations

from test_cpu_memory_api import PRELUDE

COMPARE = """
from fastlaunch.memory import streams

def general(device, host):
    return False

fast_match = transfers.plain_match

def outcome(call, device):
    # what a call returns or raises, the device's bytes after it
    try:
        returned = call()
        result = ("returned", None if returned is None else (
            type(returned).__name__, returned.shape, returned.strides, str(returned.dtype),
            returned.tobytes(), returned.flags.writeable, type(returned.base).__name__))
    except Exception as error:
        result = ("raised", type(error).__name__, str(error))
    back = np.empty(device.alloc_size, np.uint8)
    _core.copy_to_host(back, device.device_ctypes_pointer.value or 0)
    return result, back.tobytes()

def both(make_call, make_device):
    # the outcome with the fast path taken, and refused; and whether it was taken
    taken = []
    def watching(device, host):
        answer = fast_match(device, host)
        taken.append(answer)
        return answer
    transfers.plain_match = watching
    device = make_device()
    fast = outcome(make_call(device), device)
    transfers.plain_match = general
    device = make_device()
    slow = outcome(make_call(device), device)
    transfers.plain_match = fast_match
    return fast == slow, any(taken)
"""


def test_copy_to_device_fast_path_does_what_the_general_path_does(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + COMPARE
        + """
class Sub(np.ndarray):
    pass

stream = streams.stream()
base = np.arange(24.0).reshape(4, 6)
cases = [
    ("c", base, lambda: fl.to_device(np.zeros((4, 6))), 0),
    ("f", np.asfortranarray(base), lambda: fl.to_device(np.asfortranarray(np.zeros((4, 6)))), 0),
    ("stream", base, lambda: fl.to_device(np.zeros((4, 6))), stream),
    ("int32", base.astype(np.int32), lambda: fl.to_device(np.zeros((4, 6), np.int32)), 0),
    ("complex", base + 1j, lambda: fl.to_device(np.zeros((4, 6), complex)), 0),
    ("other dtype", base.astype(np.int64), lambda: fl.to_device(np.zeros((4, 6))), 0),
    ("other shape", base.reshape(6, 4), lambda: fl.to_device(np.zeros((4, 6))), 0),
    ("other order", np.asfortranarray(base), lambda: fl.to_device(np.zeros((4, 6))), 0),
    ("too few", base[:3], lambda: fl.to_device(np.zeros((4, 6))), 0),
    ("strided", base[:, ::2], lambda: fl.to_device(np.zeros((4, 3))), 0),
    ("subclass", base.view(Sub), lambda: fl.to_device(np.zeros((4, 6))), 0),
    ("read-only", np.frombuffer(base.tobytes()).reshape(4, 6),
     lambda: fl.to_device(np.zeros((4, 6))), 0),
    ("datetime", np.arange(6).astype("datetime64[s]"),
     lambda: fl.to_device(np.zeros(6).astype("datetime64[s]")), 0),
    ("extent 1, zero stride", np.lib.stride_tricks.as_strided(np.arange(6.0), (1, 6), (0, 8)),
     lambda: fl.to_device(np.zeros((1, 6))), 0),
    ("int stream", base, lambda: fl.to_device(np.zeros((4, 6))), 5),
    ("list", [1.0, 2.0], lambda: fl.to_device(np.zeros(2)), 0),
]
for name, host, make_device, given in cases:
    same, taken = both(lambda d: lambda: transfers.copy_to_device(d, host, given), make_device)
    print(name, same, taken)
"""
    )
    assert lines == [
        "c True True",
        "f True True",
        "stream True True",
        "int32 True True",
        "complex True True",
        "other dtype True False",
        "other shape True False",
        "other order True False",
        "too few True False",
        "strided True False",
        "subclass True False",
        "read-only True True",  # a source may be read-only
        "datetime True False",
        "extent 1, zero stride True False",
        "int stream True True",  # numba-cuda's TypeError either way
        "list True False",
    ]


def test_copy_to_host_fast_path_does_what_the_general_path_does(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + COMPARE
        + """
class Sub(np.ndarray):
    pass

stream = streams.stream()
base = np.arange(24.0).reshape(4, 6)
read_only = np.zeros((4, 6))
read_only.flags.writeable = False
cases = [
    ("c", lambda: np.zeros((4, 6)), lambda: fl.to_device(base), 0),
    ("f", lambda: np.asfortranarray(np.zeros((4, 6))),
     lambda: fl.to_device(np.asfortranarray(base)), 0),
    ("stream", lambda: np.zeros((4, 6)), lambda: fl.to_device(base), stream),
    ("bound stream", lambda: np.zeros((4, 6)), lambda: fl.to_device(base, stream), 0),
    ("other dtype", lambda: np.zeros((4, 6), np.int64), lambda: fl.to_device(base), 0),
    ("other shape", lambda: np.zeros((6, 4)), lambda: fl.to_device(base), 0),
    ("squeezable", lambda: np.zeros((1, 4, 6)), lambda: fl.to_device(base), 0),
    ("subclass", lambda: np.zeros((4, 6)).view(Sub), lambda: fl.to_device(base), 0),
    ("read-only", lambda: read_only, lambda: fl.to_device(base), 0),
    ("int stream", lambda: np.zeros((4, 6)), lambda: fl.to_device(base), 7),
]
for name, make_host, make_device, given in cases:
    same, taken = both(
        lambda d: lambda: transfers.copy_to_host(d, make_host(), given), make_device
    )
    print(name, same, taken)
"""
    )
    assert lines == [
        "c True True",
        "f True True",
        "stream True True",
        "bound stream True True",
        "other dtype True False",
        "other shape True False",
        "squeezable True False",
        "subclass True False",
        "read-only True True",  # a layout that matches, refused as numba-cuda refuses it
        "int stream True True",
    ]


def test_new_host_arrays_are_what_numba_cudas_keywords_make(run_on_stand_in):
    """``copy_to_host()`` makes ``np.ndarray(shape=..., dtype=..., strides=...,
    buffer=bytes)`` as numba-cuda does, its arguments given by position."""
    lines = run_on_stand_in(
        PRELUDE
        + """
def described(a):
    return (type(a), a.shape, a.strides, a.dtype, a.tobytes(), str(a.flags),
            type(a.base), a.base.shape, a.base.dtype)

for host in (np.arange(6.0), np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4)),
             np.arange(24.0).reshape(2, 3, 4)[:, :, :1].copy()):
    d = fl.to_device(host)
    made = transfers.copy_to_host(d)
    raw = np.empty(shape=d.alloc_size, dtype=np.byte)
    _core.copy_to_host(raw, d.device_ctypes_pointer.value)
    numba_made = np.ndarray(shape=d.shape, dtype=d.dtype, strides=d.strides, buffer=raw)
    print(described(made) == described(numba_made))
"""
    )
    assert lines == ["True"] * 3


def test_numba_stream_handles_are_what_their_cuda_stream_gives(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
from fastlaunch.memory import objects, streams
from numba.cuda.cudadrv import driver as numba_driver

pooled = streams.stream()
null = numba_driver.Stream(objects.kinds().CUstream(0))
external = numba_driver.Stream(objects.kinds().CUstream(1234), external=True)
for stream in (pooled, null, external):
    print(transfers.stream_handle(stream) == _core.stream_handle(stream))

class Sub(numba_driver.Stream):
    def __cuda_stream__(self):
        return (0, 99)

print(transfers.stream_handle(Sub(objects.kinds().CUstream(1234))))
"""
    )
    assert lines == ["True", "True", "True", "99"]


def test_layouts_kept_per_numpy_dtype_serve_that_very_dtype(run_on_stand_in):
    """``device_array`` keeps the layout made for a NumPy dtype argument (what
    ``device_array_like`` passes); an equal dtype that is another object (one with metadata)
    is not answered from it: each array has the very dtype given, as the general path gives."""
    lines = run_on_stand_in(
        PRELUDE
        + """
from fastlaunch.memory import arrays

plain = np.dtype(np.float64)
tagged = np.dtype(np.float64, metadata={"unit": "m"})
print(plain == tagged, plain is tagged)
for dtype in (plain, tagged, plain, tagged):
    for _ in range(2):
        like = arrays.device_array_like(np.zeros(12, dtype))
        given = arrays.device_array((3, 4), dtype)
        print(like.dtype is dtype, given.dtype is dtype, like.dtype.metadata, given.strides)
print(arrays.device_array((3, 4), plain, order="F").strides)
"""
    )
    plain, tagged = "True True None (32, 8)", "True True {'unit': 'm'} (32, 8)"
    assert lines == ["True False"] + [plain, plain, tagged, tagged] * 2 + ["(8, 24)"]


def test_a_zero_dimensional_copy_takes_the_general_path(run_on_stand_in):
    """numba-cuda's `d[a:b] = scalar` on an array bound to a stream copies the scalar as a
    0-d array (`auto_device`): it has no strides, and the fast path's check must not fail on
    them (found by the threaded stress on the GPU: `min()` of no strides raised)."""
    lines = run_on_stand_in(
        PRELUDE
        + """
from fastlaunch.memory import install
install.install()
from numba import cuda
scalar = fl.to_device(np.array(2.5))
scalar.copy_to_device(np.array(4.0))
print(scalar.copy_to_host())
print(transfers.plain_match(scalar, np.array(1.0)))
"""
    )
    assert lines == ["4.0", "True"]


DEVICE_ARRAY_CALLS = """
from fastlaunch.memory import arrays, streams

made_stream = streams.stream()
tagged = np.dtype(np.float32, metadata={"unit": "m"})
calls = [
    ((8,), {}), ((8,), {}), (((2, 3),), {}), ((8, np.float32), {}), ((8, "int16"), {}),
    ((8,), {"dtype": tagged}), ((8,), {"dtype": np.dtype(np.float32)}),
    (((2, 3), np.int8), {"order": "F"}), (((2, 3),), {"order": "A"}),
    (((2, 3),), {"order": None}), ((8,), {"dtype": None}), ((8,), {"strides": None}),
    (((2, 3),), {"strides": (8, 16)}), ((8,), {"stream": made_stream}),
    ((8,), {"stream": 0}), ((8,), {"stream": None}), ((8,), {"stream": 5}),
    ((True,), {}), ((0,), {}), ((-3,), {}), ((2**70,), {}), (((2, 3.0),), {}),
    (([2, 3],), {}), ((8, "no such dtype"), {}), ((8, float, None, "C", 0, "extra"), {}),
] + [((n,), {}) for n in range(1, 12)]  # more shapes than the table keeps

def outcome(call, args, kwargs):
    try:
        d = call(*args, **kwargs)
    except Exception as error:
        # (the Python side's own name aside)
        message = str(error).replace("device_array_in_python(", "device_array(")
        return ("raised", type(error).__name__, message)
    given = kwargs.get("dtype", args[1] if len(args) > 1 else None)
    return (type(d).__name__, d.shape, d.strides, str(d.dtype), d.dtype.metadata,
            d.dtype is given, d.stream is kwargs.get("stream", 0), d.size, d.alloc_size)
"""


def test_device_array_from_its_table_is_what_the_python_side_makes(run_on_stand_in):
    """``device_array`` (Rust, ``device_array_call.rs``) against ``device_array_in_python``,
    call by call: the same array (shape, strides, the very dtype given, the stream object) or
    the same exception, for calls its table serves, calls it hands to Python (strides, an
    order or dtype of None, unusual shapes) and bad ones."""
    lines = run_on_stand_in(
        PRELUDE
        + DEVICE_ARRAY_CALLS
        + """
for args, kwargs in calls * 2:  # the second time from the table
    ours = outcome(arrays.device_array, args, kwargs)
    theirs = outcome(arrays.device_array_in_python, args, kwargs)
    if ours != theirs:
        print("differs", args, kwargs, ours, theirs)
print(len(calls))
"""
    )
    assert lines == ["36"]


def test_device_array_from_its_table_runs_no_python(run_on_stand_in):
    """A call the table serves makes no Python call: no frame of ``arrays.py``'s."""
    lines = run_on_stand_in(
        PRELUDE
        + """
import sys
from fastlaunch.memory import arrays

def python_calls(call):
    seen = []
    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == arrays.__file__:
            seen.append(frame.f_code.co_name)
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen

for _ in range(2):
    print(python_calls(lambda: arrays.device_array((4, 5), np.float32, order="F")))
print(python_calls(lambda: arrays.device_array((4, 5), np.float32, strides=(4, 16))))
"""
    )
    assert lines[0].startswith("['_contiguous_layout'")
    assert lines[1] == "[]"
    assert lines[2].startswith("['device_array_in_python'")
