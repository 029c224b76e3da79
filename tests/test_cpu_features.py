"""numba-cuda's dispatcher features through fastlaunch, on any machine (issue 5): every
compile option is accepted and recorded as numba-cuda records it, invalid ones are refused
as numba-cuda refuses them, and, without a GPU (the tests marked ``no_gpu``), what needs a
device (eager compiling, ``inspect_asm``, ``specialize``, launching) fails with a clear error
rather than a crash. On a machine with a GPU the ``no_gpu`` tests run in a child process with
the GPUs hidden (``tests/test_gpu_hidden.py``). The GPU side is in ``test_gpu_features.py``."""

from __future__ import annotations

import io
import re
import warnings

import pytest
from numba import cuda
from numba.cuda import types as nb_types
from numba.cuda.core.errors import NumbaInvalidConfigWarning
from numba.cuda.cudadrv.error import CudaSupportError
from numba.cuda.decorators import jit as numba_jit

import fastlaunch as fl

# What numba-cuda (or fastlaunch) says when a device is needed and there is none.
NO_DEVICE = (CudaSupportError, fl.CudaUnavailableError)
NO_DEVICE_MESSAGE = re.compile("driver", re.IGNORECASE)


def fill_index(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = i * 2


OPTIONS = [
    {"launch_bounds": 128},
    {"launch_bounds": (256,)},
    {"launch_bounds": (256, 2)},
    {"launch_bounds": (256, 2, 1)},
    {"max_registers": 40},
    {"shared_memory_carveout": "MaxShared"},
    {"shared_memory_carveout": "MaxL1"},
    {"shared_memory_carveout": "default"},
    {"shared_memory_carveout": 0},
    {"shared_memory_carveout": 100},
    {"shared_memory_carveout": -1},
    {"cache": True},
    {"lineinfo": True},
    {"fastmath": True},
    {"opt": False},
    {"opt": True},
    {"debug": True, "opt": False},
    {"debug": False},
    {"lto": False},
    {"forceinline": True},
    {"inline": "always"},
    {"launch_bounds": (128, 4), "max_registers": 32, "shared_memory_carveout": 50},
]


@pytest.mark.parametrize("options", OPTIONS, ids=repr)
@pytest.mark.parametrize("form", ["factory", "direct"])
def test_every_compile_option_is_accepted_and_recorded_as_numba_records_it(options, form):
    if form == "factory":
        kernel = fl.jit(**options)(fill_index)
        reference = numba_jit(**options)(fill_index)
    else:
        kernel = fl.jit(fill_index, **options)
        reference = numba_jit(fill_index, **options)
    assert type(kernel) is fl.Kernel
    assert kernel.targetoptions == reference.targetoptions
    for name, value in options.items():
        if name == "cache" or (name == "lto" and form == "factory"):
            # numba-cuda 0.30.4's decorator factory does not pass ``lto`` on (it is
            # re-derived from nvJitLink's presence); fastlaunch matches it either way.
            continue
        assert kernel.targetoptions[name] == value, name
    cached = options.get("cache", False)
    # numba-cuda's own file cache with cache=True; fastlaunch's compile cache otherwise
    assert type(kernel.dispatcher._cache).__name__ == ("CUDACache" if cached else "CompileCache")
    assert (kernel.miss_count, kernel.overload_count, kernel.signatures) == (0, 0, [])


def test_cache_enables_numbas_file_cache_with_empty_statistics():
    kernel = fl.jit(cache=True)(fill_index)
    stats = kernel.stats
    assert stats is not None
    assert dict(stats.cache_hits) == {} and dict(stats.cache_misses) == {}
    assert stats.cache_path  # numba found somewhere to keep the cache
    assert kernel.dispatcher.stats.cache_path == stats.cache_path


@pytest.mark.parametrize(
    "carveout, error",
    [("bogus", ValueError), (101, ValueError), (-2, ValueError), (2.5, TypeError)],
    ids=repr,
)
def test_invalid_carveouts_are_refused_as_numba_refuses_them(carveout, error):
    with pytest.raises(error) as numba_error:
        numba_jit(shared_memory_carveout=carveout)(fill_index)
    with pytest.raises(error, match=re.escape(str(numba_error.value))):
        fl.jit(shared_memory_carveout=carveout)(fill_index)
    with pytest.raises(error, match=re.escape(str(numba_error.value))):
        fl.jit(fill_index, shared_memory_carveout=carveout)


def test_debug_with_opt_and_debug_with_lineinfo_warn_as_numba_does():
    with pytest.warns(NumbaInvalidConfigWarning, match="debug=True with opt=True"):
        kernel = fl.jit(debug=True, opt=True)(fill_index)
    assert type(kernel) is fl.Kernel
    with pytest.warns(NumbaInvalidConfigWarning, match="debug and lineinfo are mutually exclusive"):
        fl.jit(fill_index, debug=True, opt=False, lineinfo=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fl.jit(fill_index, debug=True, opt=False)  # the supported combination is quiet


@pytest.mark.parametrize(
    "signatures",
    ["void(int64[::1])", ["void(int64[::1])"], ["void(int64[::1])", "void(float32[::1])"]],
    ids=repr,
)
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"launch_bounds": 128},
        {"max_registers": 32},
        {"cache": True},
        {"debug": True, "opt": False},
    ],
    ids=repr,
)
@pytest.mark.no_gpu
def test_eager_signatures_without_a_gpu_fail_clearly(signatures, options):
    # numba-cuda compiles eagerly for the current device, so without one it cannot.
    decorator = fl.jit(signatures, **options)
    assert callable(decorator) and not isinstance(decorator, fl.Kernel)
    with pytest.raises(NO_DEVICE, match=NO_DEVICE_MESSAGE):
        decorator(fill_index)
    kernel = fl.jit(fill_index, **options)  # lazy compiling still works afterwards
    assert type(kernel) is fl.Kernel


def test_inspection_before_compiling():
    kernel = fl.jit(fill_index)
    assert kernel.signatures == [] and dict(kernel.overloads) == {}
    assert kernel.inspect_llvm() == {}
    assert kernel.inspect_sass() == {}
    for getter in (
        "get_regs_per_thread",
        "get_shared_mem_per_block",
        "get_local_mem_per_thread",
        "get_const_mem_size",
        "get_max_threads_per_block",
    ):
        assert getattr(kernel, getter)() == {}, getter
    buffer = io.StringIO()
    kernel.inspect_types(file=buffer)
    assert buffer.getvalue() == ""


@pytest.mark.no_gpu
def test_inspect_asm_without_a_gpu_fails_clearly():
    kernel = fl.jit(fill_index)
    # inspect_asm asks for the current device's compute capability even with no overloads.
    with pytest.raises(NO_DEVICE, match=NO_DEVICE_MESSAGE):
        kernel.inspect_asm()


def test_numba_compiles_ptx_of_a_fastlaunch_kernel_with_its_options_without_a_gpu():
    kernel = fl.jit(launch_bounds=(128, 2), fastmath=True)(fill_index)
    ptx, restype = cuda.compile_ptx(
        kernel.py_func,
        (nb_types.int64[::1],),
        cc=(9, 0),
        launch_bounds=kernel.targetoptions["launch_bounds"],
        fastmath=kernel.targetoptions["fastmath"],
    )
    assert restype == nb_types.void
    assert ".target sm_90" in ptx
    assert re.search(r"\.maxntid\s+128\b", ptx)
    assert re.search(r"\.minnctapersm\s+2\b", ptx)


def test_forall_of_no_tasks_does_nothing_and_a_negative_count_is_refused():
    kernel = fl.jit(fill_index)
    assert kernel.forall(0)(1) is None  # no tasks: nothing to compile or launch
    with pytest.raises(ValueError, match="negative task count"):
        kernel.forall(-1)


@pytest.mark.no_gpu
def test_specialize_and_forall_without_a_gpu():
    kernel = fl.jit(fill_index)
    with pytest.raises(NO_DEVICE, match=NO_DEVICE_MESSAGE):
        kernel.specialize(1)
    with pytest.raises(NO_DEVICE, match=NO_DEVICE_MESSAGE):
        kernel.forall(10)(1)


def configured_with_200kb_of_shared_memory():
    kernel = fl.jit(fill_index)
    sharedmem = 200 * 1024
    launcher = kernel.configure(256, 64, 0, sharedmem)
    indexed = kernel[256, 64, None, sharedmem]
    return launcher, indexed


def test_configure_takes_dynamic_shared_memory_above_48kb():
    launcher, indexed = configured_with_200kb_of_shared_memory()
    assert (launcher.griddim, launcher.blockdim, launcher.sharedmem) == (
        (256, 1, 1),
        (64, 1, 1),
        200 * 1024,
    )
    assert indexed.sharedmem == 200 * 1024


@pytest.mark.no_gpu
def test_launching_a_configured_kernel_needs_a_gpu():
    launcher, indexed = configured_with_200kb_of_shared_memory()
    with pytest.raises(fl.CudaUnavailableError):
        launcher(1)
    with pytest.raises(fl.CudaUnavailableError):
        indexed(1)


def test_launch_configuration_error_class():
    error = fl.LaunchConfigurationError
    assert issubclass(error, fl.CudaError)
    assert issubclass(error, ValueError)
    assert "LaunchConfigurationError" in fl.__all__
    assert error.__module__ == "fastlaunch.errors"
