"""Errors without a GPU: bad arguments, bad launch configurations, no CUDA driver, and the
``fastlaunch.jit`` forms.

Every bad input gets an exact exception type and message. Argument errors are
``fastlaunch.KernelArgumentError`` (a ``TypeError``) carrying ``.position``.
"""

from __future__ import annotations

import enum
import importlib.metadata
import re
import subprocess
import sys

import numpy as np
import pytest
from numba import cuda
from numba.cuda import types
from numba.cuda.dispatcher import CUDADispatcher
from numba.cuda.errors import missing_launch_config_msg
from numba.cuda.typing.typeof import Purpose, typeof

import fastlaunch
from fastlaunch import CudaError, CudaUnavailableError, KernelArgumentError, _core
from fastlaunch.dispatcher import numba_type

#: checks behaviour without a usable CUDA driver (with a GPU: run by test_gpu_hidden.py)
NO_GPU = pytest.mark.no_gpu
PTR = 0x7F00_0000_1000


class FakeCAI:
    """A device array as far as the CUDA Array Interface goes (v3); never dereferenced."""

    def __init__(self, shape=(3,), typestr="<f4", strides=None, ptr=PTR, readonly=False, **more):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "strides": strides,
            "typestr": typestr,
            "data": (ptr, readonly),
            "version": 3,
            **more,
        }


class Interface:
    """An object whose ``__cuda_array_interface__`` is exactly ``interface``."""

    def __init__(self, interface):
        self.__cuda_array_interface__ = interface


def valid_interface(**changes):
    interface = {"shape": (3,), "strides": None, "typestr": "<f4", "data": (PTR, False)}
    interface["version"] = 3
    interface.update(changes)
    return interface


def without(key):
    interface = valid_interface()
    del interface[key]
    return interface


def argument_error(message: str, position: int = 0):
    """pytest.raises for a KernelArgumentError whose whole message is ``message``."""
    return pytest.raises(KernelArgumentError, match=f"^argument {position}: {re.escape(message)}$")


# -- unsupported objects -----------------------------------------------------------------

UNSUPPORTED_TAIL = (
    " is not a supported kernel argument (expected a device array with "
    "__cuda_array_interface__ or __dlpack__, or a bool, int, float, complex or NumPy scalar)"
)


class Thing:
    pass


class Color(enum.IntEnum):
    RED = 1


class Label(enum.Enum):
    """Values numba cannot pass as numbers: its own path handles (or refuses) them."""

    ONE = "one"


@pytest.mark.parametrize(
    ("obj", "name"),
    [
        ("text", "str"),
        (b"bytes", "bytes"),
        ([1, 2], "list"),
        ({"a": 1}, "dict"),
        (None, "NoneType"),
        (object(), "object"),
        (Thing(), f"{__name__}.Thing"),
        (memoryview(b"x"), "memoryview"),
    ],
    ids=lambda v: type(v).__name__,
)
def test_unsupported_objects(obj, name):
    with argument_error(name + UNSUPPORTED_TAIL) as info:
        _core.classify(obj)
    assert info.value.position == 0
    assert isinstance(info.value, TypeError)


NUMBA_PATH_MESSAGE = "these arguments are passed by numba-cuda's own launch path"


def numba_path():
    """Kinds fastlaunch hands to numba-cuda's own launch path (which copies host arrays,
    honours cuda.In/Out/InOut, passes records and datetime arrays)."""
    return pytest.raises(TypeError, match=re.escape(NUMBA_PATH_MESSAGE))


@pytest.mark.parametrize(
    ("make", "descriptor"),
    [
        (lambda: np.zeros(3, "float32"), ("array", "float32", 1, "C", False)),
        (lambda: np.zeros((2, 3), "int8", order="F"), ("array", "int8", 2, "F", False)),
        (lambda: np.zeros((), "complex128"), ("array", "complex128", 0, "C", False)),
        (lambda: np.zeros(0, "bool"), ("array", "bool", 1, "C", False)),
        (lambda: np.frombuffer(b"abcd", np.uint8), ("array", "uint8", 1, "C", True)),
    ],
    ids=["1d", "2d-F", "0d", "empty", "read-only"],
)
def test_contiguous_host_numpy_arrays_are_classified_as_numba_types_them(make, descriptor):
    """Packed by fastlaunch (over device copies the launch stages): the descriptor is what
    numba-cuda's typeof says of the host array."""
    array = make()
    assert _core.classify(array) == descriptor
    expected = typeof(array, Purpose.argument)
    assert numba_type(descriptor) == expected


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.zeros(4)[::2],
        lambda: np.matrix([[1.0]]),
        lambda: np.zeros(3, "V8"),
        lambda: np.zeros(3, "datetime64[10s]"),
    ],
    ids=["strided", "matrix", "unstructured-void", "datetime-multiple"],
)
@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix
def test_other_host_numpy_arrays(make):
    with numba_path():
        _core.classify(make())


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.zeros(3).view(np.recarray),
        lambda: np.ma.masked_array(np.zeros(3)),
        lambda: np.zeros(3).view(type("Quantity", (np.ndarray,), {})),
    ],
    ids=["recarray", "masked", "user-subclass"],
)
def test_host_numpy_array_subclasses(make):
    with numba_path():
        _core.classify(make())


@pytest.mark.parametrize(
    "value",
    [
        (1, np.zeros(4)[::2]),
        ((1, (2, np.zeros(4)[::2])),),
        tuple(range(256)),
        Label.ONE,
        np.void(b"x"),
        Interface(valid_interface(typestr="<V8")),
        Interface(valid_interface(typestr="<M8[10ns]")),
        Interface(valid_interface(typestr=">m8[s]")),
    ],
    ids=repr,
)
def test_numba_only_kinds(value):
    with numba_path():
        _core.classify(value)


@pytest.mark.parametrize(
    "value",
    [
        np.longdouble(1),
        np.clongdouble(1),
        np.str_("x"),
        np.bytes_(b"x"),
    ],
    ids=repr,
)
def test_unsupported_numpy_scalars(value):
    with argument_error(f"NumPy scalars of dtype {value.dtype} are not supported"):
        _core.classify(value)


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 10**30, -(10**30)])
def test_ints_beyond_64_bits(value):
    with argument_error(f"int value is too large for 64 bits: {value}"):
        _core.classify(value)


@pytest.mark.parametrize("value", [2**64 - 1, 2**63, -(2**63)])
def test_ints_at_the_64_bit_limits_are_fine(value):
    assert _core.classify(value)[0] == "scalar"


def test_error_position_counts_arguments():
    args = (1, FakeCAI(), "three", 4.0)
    for call in (lambda: _core.fingerprint(args), lambda: _core.pack((types.int64,) * 4, args)):
        with argument_error("str" + UNSUPPORTED_TAIL, position=2) as info:
            call()
        assert info.value.position == 2
        assert info.value.name == ""


# -- malformed __cuda_array_interface__ --------------------------------------------------

CAI_ERRORS = [
    (
        valid_interface(mask=object()),
        "masked arrays (__cuda_array_interface__ 'mask') are not supported",
    ),
    (
        valid_interface(mask=FakeCAI()),
        "masked arrays (__cuda_array_interface__ 'mask') are not supported",
    ),
    *(
        (valid_interface(typestr=t), f'__cuda_array_interface__ typestr "{t}" is not supported')
        for t in [
            ">f4",
            ">i8",
            ">c16",
            "|O",
            "<U3",
            "|S4",
            "<f16",
            "<b2",
            "<i16",
            "<u3",
            "<f",
            "f4",
            "",
            "float32",
        ]
    ),
    (valid_interface(typestr=4), "__cuda_array_interface__ 'typestr' must be a str"),
    (valid_interface(typestr=np.dtype("f4")), "__cuda_array_interface__ 'typestr' must be a str"),
    (without("shape"), "__cuda_array_interface__ lacks the required key 'shape'"),
    (without("typestr"), "__cuda_array_interface__ lacks the required key 'typestr'"),
    (without("data"), "__cuda_array_interface__ lacks the required key 'data'"),
    (
        valid_interface(shape=(3, 4), strides=(4,)),
        "__cuda_array_interface__ has 2 dimensions but 1 strides",
    ),
    (
        valid_interface(shape=(3,), strides=(4, 4)),
        "__cuda_array_interface__ has 1 dimensions but 2 strides",
    ),
    (
        valid_interface(shape=(), strides=(4,)),
        "__cuda_array_interface__ has 0 dimensions but 1 strides",
    ),
    (valid_interface(shape=(-1,)), "array shape has a negative extent -1"),
    (valid_interface(shape=(3, -2)), "array shape has a negative extent -2"),
    (valid_interface(shape=(0, -2)), "array shape has a negative extent -2"),
    (valid_interface(shape=(3, -2), strides=(-8, 4)), "array shape has a negative extent -2"),
    (
        valid_interface(data=(0, False)),
        "__cuda_array_interface__ has a null data pointer for a non-empty array",
    ),
    (
        valid_interface(shape=(), data=(0, True)),
        "__cuda_array_interface__ has a null data pointer for a non-empty array",
    ),
    (
        valid_interface(shape=(2, 3), strides=(12, 4), data=(0, False)),
        "__cuda_array_interface__ has a null data pointer for a non-empty array",
    ),
    (
        valid_interface(data=PTR),
        "__cuda_array_interface__ 'data' must be a (pointer, read-only) tuple",
    ),
    (
        valid_interface(data=(PTR,)),
        "__cuda_array_interface__ 'data' must be a (pointer, read-only) tuple",
    ),
    (
        valid_interface(data=(-1, False)),
        "__cuda_array_interface__ 'data' must be a (pointer, read-only) tuple",
    ),
    (
        valid_interface(data=(2**64, False)),
        "__cuda_array_interface__ 'data' must be a (pointer, read-only) tuple",
    ),
    (
        valid_interface(data=None),
        "__cuda_array_interface__ 'data' must be a (pointer, read-only) tuple",
    ),
    (valid_interface(shape=[3]), "shape must be a tuple of ints, got list"),
    (valid_interface(shape=3), "shape must be a tuple of ints, got int"),
    (valid_interface(shape=None), "shape must be a tuple of ints, got NoneType"),
    (valid_interface(shape=(1.5,)), "shape must be a tuple of ints, got (1.5,)"),
    (valid_interface(shape=(2**63,)), "shape must be a tuple of ints, got (9223372036854775808,)"),
    (valid_interface(strides=[4]), "strides must be a tuple of ints, got list"),
    (valid_interface(strides=("4",)), "strides must be a tuple of ints, got ('4',)"),
    (valid_interface(shape=(2**62, 2**62)), "array shape overflows 64 bits"),
    (valid_interface(shape=(1,) * 65), "arrays of 65 dimensions are not supported (at most 64)"),
    ([("shape", (3,))], "__cuda_array_interface__ must be a dict"),
    (None, "__cuda_array_interface__ must be a dict"),
]


@pytest.mark.parametrize(
    ("interface", "message"),
    CAI_ERRORS,
    ids=[m[:40] + f"-{i}" for i, (_, m) in enumerate(CAI_ERRORS)],
)
def test_malformed_cuda_array_interface(interface, message):
    with argument_error(message) as info:
        _core.classify(Interface(interface))
    assert info.value.position == 0


@pytest.mark.parametrize(
    "interface",
    [
        valid_interface(mask=None),  # no mask
        valid_interface(shape=(0,), data=(0, False)),  # empty arrays may have no memory
        valid_interface(shape=(3, 0), strides=(0, 0), data=(0, False)),
        valid_interface(shape=(1,) * 64),  # NumPy's limit
        valid_interface(version=2),
        valid_interface(version=3, stream=1),
        valid_interface(descr=[("", "<f4")]),
    ],
    ids=["mask-None", "empty-null", "empty-2d-null", "64-dims", "v2", "stream", "descr"],
)
def test_acceptable_cuda_array_interfaces(interface):
    assert _core.classify(Interface(interface))[0] == "array"


def test_interface_attribute_that_disappears():
    """A type seen before as a CAI producer whose attribute now raises AttributeError."""

    class Flaky:
        fail = False

        @property
        def __cuda_array_interface__(self):
            if self.fail:
                raise AttributeError("gone")
            return valid_interface()

    assert _core.classify(Flaky())[0] == "array"
    flaky = Flaky()
    flaky.fail = True
    with pytest.raises(
        KernelArgumentError,
        match=r"^argument 0: .*Flaky\.__cuda_array_interface__ failed: AttributeError: gone$",
    ):
        _core.classify(flaky)


def test_interface_attribute_errors_propagate():
    class Broken:
        fail = False

        @property
        def __cuda_array_interface__(self):
            if self.fail:
                raise RuntimeError("producer failed")
            return valid_interface()

    assert _core.classify(Broken())[0] == "array"
    broken = Broken()
    broken.fail = True
    with pytest.raises(RuntimeError, match="^producer failed$"):
        _core.classify(broken)


# -- launch configuration ----------------------------------------------------------------


@fastlaunch.jit
def kernel(a, b):
    pass


@fastlaunch.jit
def variadic(*args):
    pass


class Stream:
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


MISSING = "must specify at least the griddim and blockdim"


@pytest.mark.parametrize(
    ("config", "error", "message"),
    [
        (1, ValueError, MISSING),
        ((1,), ValueError, MISSING),
        ((1, 2, 3, 4, 5), ValueError, MISSING),
        ([1, 1], ValueError, MISSING),
        (
            (1, (1, 2, 3, 4)),
            ValueError,
            "blockdim must be a sequence of 1, 2 or 3 integers, got [1, 2, 3, 4]",
        ),
        ((1, 1.5), TypeError, "blockdim must be a sequence of integers, got [1.5]"),
        ((1, (2, 1.5)), TypeError, "blockdim must be a sequence of integers, got [2, 1.5]"),
        (
            (np.float64(2), 1),
            TypeError,
            "griddim must be a sequence of integers, got [np.float64(2.0)]",
        ),
        (("2", 1), TypeError, "griddim must be a sequence of integers, got ['2']"),
        (((0,), 1), ValueError, "LaunchConfig.grid values must be >= 1 (got (0, 1, 1))"),
        ((1, -1), ValueError, "LaunchConfig.block values must be >= 1 (got (-1, 1, 1))"),
        (
            (2**32, 1),
            ValueError,
            "griddim values must be positive and below 2**32, got [4294967296]",
        ),
        ((1, (1, 1, 0)), ValueError, "LaunchConfig.block values must be >= 1 (got (1, 1, 0))"),
        ((None, 1), ValueError, missing_launch_config_msg.split("\n\nSee")[0].lstrip("\n")),
        (
            (1, 1, "stream"),
            TypeError,
            "stream must be 0 or None, an int handle, or an object with "
            "__cuda_stream__ (numba, torch, CuPy, cuda.core streams); got str",
        ),
        (
            (1, 1, 1.0),
            TypeError,
            "stream must be 0 or None, an int handle, or an object with "
            "__cuda_stream__ (numba, torch, CuPy, cuda.core streams); got float",
        ),
        ((1, 1, -1), ValueError, "a stream handle cannot be negative, got -1"),
        ((1, 1, 0, -1), ValueError, "sharedmem must be between 0 and 2**32, got -1"),
        ((1, 1, 0, 2**32), ValueError, "sharedmem must be between 0 and 2**32, got 4294967296"),
        ((1, 1, 0, 1.5), TypeError, "sharedmem must be an int, got 1.5"),
        ((1, 1, 0, "1"), TypeError, "sharedmem must be an int, got 1"),
    ],
    ids=repr,
)
def test_bad_launch_configurations(config, error, message):
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        kernel[config]
    if isinstance(config, tuple) and 2 <= len(config) <= 4:
        with pytest.raises(error, match=f"^{re.escape(message)}$"):
            kernel.configure(*config)


@pytest.mark.parametrize(
    "config",
    [(2**64, 1), (1, (1, 2**70)), (1, 1, 2**64), (1, 1, 0, 2**64)],
    ids=repr,
)
def test_launch_configuration_ints_beyond_64_bits(config):
    with pytest.raises(
        ValueError, match="below 2\\*\\*32|cannot be|between 0 and 2\\*\\*32|must fit in 64 bits"
    ):
        kernel[config]


@pytest.mark.parametrize(
    ("config", "griddim", "blockdim", "handle", "sharedmem"),
    [
        ((np.int64(4), (2, 3), None, 0), (4, 1, 1), (2, 3, 1), 0, 0),
        (([2, 2], [4]), (2, 2, 1), (4, 1, 1), 0, 0),
        (((1, 2, 3), (4, 5, 6)), (1, 2, 3), (4, 5, 6), 0, 0),
        ((1, 1, Stream(1234)), (1, 1, 1), (1, 1, 1), 1234, 0),
        ((1, 1, Stream(2**64 - 1), 0), (1, 1, 1), (1, 1, 1), 2**64 - 1, 0),
        ((1, 1, 5678, 1024), (1, 1, 1), (1, 1, 1), 5678, 1024),
        ((1, 1, 0, np.int32(48)), (1, 1, 1), (1, 1, 1), 0, 48),
        ((1, 1, None, None), (1, 1, 1), (1, 1, 1), 0, 0),
        ((2**32 - 1, (np.uint8(7), np.int16(8))), (2**32 - 1, 1, 1), (7, 8, 1), 0, 0),
        ((1, 1, 0, 2**32 - 1), (1, 1, 1), (1, 1, 1), 0, 2**32 - 1),
    ],
    ids=repr,
)
def test_launch_configurations(config, griddim, blockdim, handle, sharedmem):
    for launcher in (kernel[config], kernel.configure(*config)):
        assert launcher.griddim == griddim
        assert launcher.blockdim == blockdim
        assert launcher.stream_handle == handle
        assert launcher.sharedmem == sharedmem
        stream = config[2] if len(config) > 2 else None
        assert launcher.stream is stream


def test_calling_a_kernel_without_configuration():
    with pytest.raises(ValueError) as info:
        kernel(1, 2)
    assert str(info.value) == missing_launch_config_msg


def test_argument_count_is_checked_before_launching():
    with pytest.raises(
        TypeError, match=r"^kernel takes 2 positional arguments \(a, b\) but 1 were given$"
    ):
        kernel[1, 1](1)
    with pytest.raises(
        TypeError, match=r"^kernel takes 2 positional arguments \(a, b\) but 3 were given$"
    ):
        kernel[1, 1](1, 2, 3)


# -- without a GPU -----------------------------------------------------------------------

UNAVAILABLE = r"^CUDA is unavailable: "


@NO_GPU
def test_is_available_is_false():
    assert fastlaunch.is_available() is False
    assert _core.is_available() is False
    assert re.match(UNAVAILABLE, _core.unavailable_reason())


@NO_GPU
@pytest.mark.parametrize(
    "call",
    [
        lambda: kernel[1, 1](1, 2),
        lambda: kernel[1, 1]("not checked before the driver", None),
        lambda: variadic[1, 1](),
        lambda: kernel.configure(1, 1)(FakeCAI(), 2.0),
        lambda: fastlaunch.gpus[0],
        lambda: len(fastlaunch.gpus),
        lambda: list(fastlaunch.gpus),
        lambda: fastlaunch.gpus.current,
        lambda: fastlaunch.driver_version(),
        lambda: fastlaunch.synchronize(),
        lambda: fastlaunch.current_device(),
        lambda: fastlaunch.select_device(0),
        lambda: _core.CompiledKernel(b"", "entry"),
        lambda: _core.device_count(),
        lambda: _core.memory_info(),
    ],
    ids=[
        "launch",
        "launch-bad-args",
        "launch-variadic",
        "configure-launch",
        "gpus[0]",
        "len(gpus)",
        "list(gpus)",
        "gpus.current",
        "driver_version",
        "synchronize",
        "current_device",
        "select_device",
        "CompiledKernel",
        "device_count",
        "memory_info",
    ],
)
def test_cuda_unavailable(call):
    with pytest.raises(CudaUnavailableError, match=UNAVAILABLE) as info:
        call()
    assert isinstance(info.value, CudaError)
    assert not isinstance(info.value, TypeError)


@NO_GPU
def test_device_list_repr_without_cuda():
    assert repr(fastlaunch.gpus) == "<DeviceList (no CUDA)>"


def test_import_is_light():
    """``import fastlaunch`` works anywhere and imports neither numba nor NumPy."""
    code = (
        "import sys, fastlaunch; "
        "assert 'numba' not in sys.modules and 'numpy' not in sys.modules, sorted(sys.modules); "
        "print(fastlaunch.__version__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == fastlaunch.__version__


def test_version():
    assert isinstance(fastlaunch.__version__, str)
    assert fastlaunch.__version__ == _core.__version__
    assert fastlaunch.__version__ == importlib.metadata.version("fastlaunch")


def test_exception_hierarchy():
    assert issubclass(KernelArgumentError, TypeError)
    assert issubclass(CudaUnavailableError, CudaError)
    assert issubclass(fastlaunch.CudaDriverError, CudaError)
    # a launch the driver refused is what numba-cuda raises (cuda.core's CUDAError, via
    # CudaDriverError) and a ValueError naming the limit
    from cuda.core._utils.cuda_utils import CUDAError

    refused = fastlaunch.LaunchRefusedError
    for base in (fastlaunch.LaunchConfigurationError, fastlaunch.CudaDriverError, CUDAError):
        assert issubclass(refused, base)
    assert issubclass(fastlaunch.LaunchConfigurationError, ValueError)
    r = refused("blockdim (2048, 1, 1) ...", 1, "CUDA_ERROR_INVALID_VALUE", "launching a kernel")
    assert (r.code, r.name, r.during) == (1, "CUDA_ERROR_INVALID_VALUE", "launching a kernel")
    assert repr(refused) == "<class 'fastlaunch.errors.LaunchRefusedError'>"
    e = KernelArgumentError("argument 1 (x): bad", 1, "x")
    assert (str(e), e.position, e.name) == ("argument 1 (x): bad", 1, "x")


# -- the jit forms -----------------------------------------------------------------------


def body(a):
    """A kernel's docstring."""


def test_bare_decorator():
    k = fastlaunch.jit(body)
    assert type(k) is fastlaunch.Kernel
    assert isinstance(k.dispatcher, CUDADispatcher)
    assert k.py_func is body
    assert k.__wrapped__ is body
    assert k.__name__ == "body"
    assert k.__qualname__ == "body"
    assert k.__doc__ == "A kernel's docstring."
    assert repr(k) == "<fastlaunch.Kernel body>"
    assert (k.miss_count, k.overload_count) == (0, 0)


def test_decorator_with_options():
    decorator = fastlaunch.jit(fastmath=True, lineinfo=True, debug=False)
    assert not isinstance(decorator, fastlaunch.Kernel)
    k = decorator(body)
    assert type(k) is fastlaunch.Kernel
    assert k.targetoptions["fastmath"] is True
    assert k.targetoptions["lineinfo"] is True
    assert fastlaunch.jit()(body).targetoptions["fastmath"] is False


@pytest.mark.parametrize("signatures", ["void(float32[::1])", ["void(float32[::1])"]], ids=repr)
def test_signature_forms_return_a_decorator(signatures):
    decorator = fastlaunch.jit(signatures)
    assert callable(decorator)
    assert not isinstance(decorator, (fastlaunch.Kernel, CUDADispatcher))


def test_device_functions_are_numbas_own():
    for made in (fastlaunch.jit(device=True)(body), fastlaunch.jit(body, device=True)):
        assert isinstance(made, CUDADispatcher)
        assert not isinstance(made, fastlaunch.Kernel)
        assert made.targetoptions["device"] is True


def test_wrapping_a_numba_kernel():
    numba_kernel = cuda.jit(body)
    k = fastlaunch.jit(numba_kernel)
    assert type(k) is fastlaunch.Kernel
    assert k.dispatcher is numba_kernel
    assert k.py_func is body
    assert fastlaunch.jit(k) is k
    with pytest.raises(
        TypeError, match=r"^jit\(existing_kernel\) takes no further signatures or options$"
    ):
        fastlaunch.jit(numba_kernel, fastmath=True)
    with pytest.raises(
        TypeError, match=r"^jit\(existing_kernel\) takes no further signatures or options$"
    ):
        fastlaunch.jit(numba_kernel, "void(float32[::1])")


def test_numba_attributes_are_reachable():
    k = fastlaunch.jit(fastmath=True)(body)
    assert k.py_func is body
    assert k.targetoptions is k.dispatcher.targetoptions
    assert k.targetoptions["fastmath"] is True
    assert k.signatures == []
    assert dict(k.overloads) == {}
    assert k.specialized is False
    assert k.inspect_types is not None  # a bound numba method
    with pytest.raises(AttributeError):
        k.__not_a_dunder__  # noqa: B018
    with pytest.raises(AttributeError, match="no_such_attribute"):
        k.no_such_attribute  # noqa: B018


def test_parameter_names_are_set_once():
    k = fastlaunch.jit(body)
    with pytest.raises(RuntimeError, match="^parameter names are already set$"):
        k._set_parameter_names(["x"])


def test_register_checks_plan_and_target():
    k = fastlaunch.jit(body)
    fingerprint = _core.fingerprint((FakeCAI(),))
    vector = (types.float32[:],)
    with pytest.raises(ValueError, match="does not fit the argument's kind"):
        k._register(fingerprint, 90, (types.int32,), lambda *a: None)
    with pytest.raises(
        TypeError, match="^an overload's target must be a CompiledKernel or a callable$"
    ):
        k._register(fingerprint, 90, vector, 42)
    k._register(fingerprint, 90, vector, lambda *a: None)
    k._register(fingerprint, 90, vector, lambda *a: None)  # already there: kept once
    k._register(fingerprint, 80, vector, lambda *a: None)
    assert k.overload_count == 2
    k._clear_overloads()
    assert k.overload_count == 0


def run_info(**env: str) -> str:
    import os

    done = subprocess.run(
        [sys.executable, "-m", "fastlaunch", "info"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def test_info_command_reports_without_a_gpu():
    out = run_info(FASTLAUNCH_TEST_SETTING="shown", NUMBA_CUDA_TEST_SETTING="1")
    assert f"fastlaunch        {fastlaunch.__version__}" in out
    for section in ["fastlaunch", "Python", "libraries", "numba-cuda", "CUDA", "environment"]:
        assert f"\n-- {section} --\n" in out
    assert f"numba-cuda        {importlib.metadata.version('numba-cuda')}\n" in out
    assert f"numpy             {np.__version__}\n" in out
    assert "cache=True dir" in out
    assert "FASTLAUNCH_TEST_SETTING=shown" in out and "NUMBA_CUDA_TEST_SETTING=1" in out
    if not fastlaunch.is_available():
        assert "CUDA              unavailable: CUDA is unavailable" in out
        assert "device nodes:" in out
        assert "-- device 0 --" not in out


def test_info_command_reports_devices(stand_in_driver):
    """Against the stand-in driver (tests/stand_in_driver): the device part of the report."""
    out = run_info(FASTLAUNCH_CUDA_DRIVER=str(stand_in_driver))
    if "CUDA              unavailable: " in out:
        reason = out.split("CUDA              unavailable: ", 1)[1].splitlines()[0]
        pytest.skip(f"the stand-in driver does not load: {reason}")
    assert f"driver library    {stand_in_driver}" in out
    assert "CUDA version      " in out and "unavailable" not in out
    assert "-- device 0 --\nname              " in out
    for label in ["compute cap.", "multiprocessors", "shared mem opt-in", "clock", "PCI bus id"]:
        assert f"\n{label:17} " in out
    assert "UUID              GPU-" in out
    assert "error:" not in out


def test_kernels_pickle_as_their_numba_dispatcher():
    import pickle

    from numba import cuda

    @fastlaunch.jit
    def store(a):
        a[cuda.grid(1)] = 1

    again = pickle.loads(pickle.dumps(store))
    assert isinstance(again, fastlaunch.Kernel)
    assert again.__name__ == "store" and again.miss_count == 0


class BrokenStream:
    def __cuda_stream__(self):
        return "closed"


class ClosedStream:
    def __cuda_stream__(self):
        raise RuntimeError("stream is closed")


def test_stream_objects_that_do_not_answer_are_refused_clearly():
    @fastlaunch.jit
    def nothing(a):
        pass

    with pytest.raises(
        TypeError, match=r"__cuda_stream__\(\) must return \(version, handle\) ints"
    ):
        nothing[1, 1, BrokenStream()]
    with pytest.raises(RuntimeError, match="stream is closed"):
        nothing[1, 1, ClosedStream()]
    with pytest.raises(TypeError, match="got object"):
        nothing[1, 1, object()]


@NO_GPU
def test_streams_and_events_need_a_driver():
    for make in (fastlaunch.stream, fastlaunch.event, lambda: fastlaunch.external_stream(5)):
        with pytest.raises(fastlaunch.CudaUnavailableError, match="CUDA is unavailable"):
            make()


def test_ordering_and_policy_switches():
    assert fastlaunch.ordering_enabled()
    fastlaunch.set_ordering(False)
    assert not fastlaunch.ordering_enabled()
    fastlaunch.set_ordering(True)
    fastlaunch.set_default_stream_policy("follow")
    assert fastlaunch.default_stream_policy() == "follow"
    fastlaunch.set_default_stream_policy("legacy")
    with pytest.raises(ValueError, match="'legacy' or 'follow'"):
        fastlaunch.set_default_stream_policy("current")
