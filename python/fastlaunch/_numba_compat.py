"""numba-cuda's private internals, in one place (as ``_numpy_compat`` is for NumPy).

fastlaunch reaches past numba-cuda's public API for compiling, typing and handing launches
back to numba-cuda. Every such use goes through an accessor here, so a numba-cuda upgrade
touches this module alone. Each accessor imports on first use: ``import fastlaunch`` imports
no numba-cuda and needs no GPU.

Supported: numba-cuda 0.26 to 0.30 (``SUPPORTED``). What differs over that range and how:

- 0.30.0 added the launch-configuration API (``numba.cuda.launchconfig``,
  ``_LaunchConfiguration.pre_launch_callbacks`` and ``.args``, ``mark_launch_config_sensitive``,
  per-configuration compiles) and changed ``CUDADispatcher.call(args, griddim, blockdim,
  stream, sharedmem)`` to ``call(args, launch_config)``; its C dispatcher's ``_cuda_call``
  takes the configuration (``__numba_cuda_launch_config__``). Before 0.30 those features raise
  :class:`fastlaunch.errors.NumbaCudaVersionError` (``require_launch_config_api``), and
  launches and compiles are handed to numba-cuda in the older form.
- 0.26 to 0.29 need cuda-core < 1.0 and 0.30.2 takes cuda-core 1.0; fastlaunch launches with
  the driver itself and reads cuda.core objects by attribute, so that difference stays inside
  numba-cuda.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import sys
from collections.abc import Iterator
from typing import Any

from fastlaunch._version_error import NumbaCudaVersionError

#: numba-cuda versions fastlaunch supports: at least the first, below the second
SUPPORTED: tuple[tuple[int, int], tuple[int, int]] = ((0, 26), (0, 31))

#: the first numba-cuda with the launch-configuration API (launchconfig, pre_launch_callbacks)
LAUNCH_CONFIG_API: tuple[int, int] = (0, 30)


# -- versions ---------------------------------------------------------------------------------


@functools.cache
def version_string() -> str:
    """The numba-cuda version that is imported (``numba_cuda`` holds only its version)."""
    import numba_cuda

    return str(numba_cuda.__version__)


@functools.cache
def version() -> tuple[int, int, int]:
    """The numba-cuda version as ``(major, minor, micro)``."""
    numbers = [
        int("".join(itertools.takewhile(str.isdigit, part)) or 0)
        for part in version_string().split(".")[:3]
    ]
    numbers += [0] * (3 - len(numbers))
    return numbers[0], numbers[1], numbers[2]


def supported_range() -> str:
    """The supported range, as a pip requirement spells it."""
    (lo_major, lo_minor), (hi_major, hi_minor) = SUPPORTED
    return f">={lo_major}.{lo_minor},<{hi_major}.{hi_minor}"


def is_supported() -> bool:
    return SUPPORTED[0] <= version()[:2] < SUPPORTED[1]


#: numba-cuda before 0.30 reads NPDatetime from numba.core.types.scalars, which numba 0.66 moved
NUMBA_BEFORE_LAUNCH_CONFIG_API = (0, 66)


def numba_mismatch() -> str | None:
    """Why the installed numba cannot run this numba-cuda, or None: numba-cuda before 0.30
    fails to import with numba 0.66 or newer (``module 'numba.cuda.types' has no attribute
    'NPDatetime'``), and neither declares it. Read from metadata: nothing is imported."""
    import importlib.metadata

    if has_launch_config_api():
        return None
    try:
        numba = importlib.metadata.version("numba")
    except importlib.metadata.PackageNotFoundError:
        return None
    if tuple(int(p) for p in numba.split(".")[:2] if p.isdigit()) < NUMBA_BEFORE_LAUNCH_CONFIG_API:
        return None
    limit = ".".join(map(str, NUMBA_BEFORE_LAUNCH_CONFIG_API))
    return (
        f"numba-cuda {version_string()} needs numba < {limit} (numba {numba} is installed): "
        f"pip install 'numba<{limit}', or numba-cuda 0.30 or newer"
    )


def has_launch_config_api() -> bool:
    """Whether numba-cuda has the launch-configuration API (0.30 and newer)."""
    return version()[:2] >= LAUNCH_CONFIG_API


def require_launch_config_api(feature: str) -> None:
    """Refuses ``feature`` (part of the launch-configuration API) before numba-cuda 0.30."""
    if not has_launch_config_api():
        needed = ".".join(map(str, LAUNCH_CONFIG_API))
        raise NumbaCudaVersionError(feature, needed, version_string())


# -- typing -----------------------------------------------------------------------------------


def types() -> Any:
    """``numba.cuda.types``."""
    from numba.cuda import types

    return types


def numpy_support() -> Any:
    """``numba.cuda.np.numpy_support`` (``from_dtype``)."""
    from numba.cuda.np import numpy_support

    return numpy_support


def typeof(value: Any) -> Any:
    """numba-cuda's type of a Python value (``numba.cuda.typing.typeof.typeof``)."""
    from numba.cuda.typing.typeof import typeof

    return typeof(value)


# -- dispatchers and compiled kernels ---------------------------------------------------------


def dispatcher_class() -> type:
    """``numba.cuda.dispatcher.CUDADispatcher``."""
    from numba.cuda.dispatcher import CUDADispatcher

    return CUDADispatcher


def numba_jit() -> Any:
    """numba-cuda's own ``jit`` decorator (``numba.cuda.decorators.jit``), which stays
    numba-cuda's while ``numba.cuda.jit`` is replaced. Refuses a numba this numba-cuda cannot
    import with (``numba_mismatch``) rather than failing inside numba-cuda."""
    mismatch = numba_mismatch()
    if mismatch is not None:
        raise ImportError(mismatch)
    from numba.cuda.decorators import jit

    return jit


def unbound_compile_for_args(dispatcher: Any) -> Any:
    """The dispatcher class's ``_compile_for_args`` (compiles for a launch's arguments)."""
    return type(dispatcher)._compile_for_args


def can_compile(dispatcher: Any) -> bool:
    """Whether the dispatcher may compile new overloads (``_can_compile``)."""
    return bool(dispatcher._can_compile)


def is_launch_config_sensitive(kernel: Any, dispatcher: Any) -> bool:
    """Whether an overload (or its dispatcher) compiles per launch configuration (0.30+;
    never before)."""
    return bool(
        getattr(kernel, "launch_config_sensitive", False)
        or getattr(dispatcher, "_launch_config_sensitive", False)
    )


def cubin(kernel: Any, cc: tuple[int, int, str]) -> Any:
    """An overload's linked cubin for ``cc`` (a cuda.core ``ObjectCode``; ``.code`` is bytes)."""
    return kernel._codelibrary.get_cubin(cc=cc)


def forall(kernel: Any, ntasks: int, tpb: int, stream: Any, sharedmem: int) -> Any:
    """numba-cuda's ``ForAll`` over ``kernel``."""
    from numba.cuda.dispatcher import ForAll

    return ForAll(kernel, ntasks, tpb=tpb, stream=stream, sharedmem=sharedmem)


# -- launch configurations and handing launches to numba-cuda ---------------------------------


def missing_launch_config_message() -> str:
    """numba-cuda's message for a kernel called without ``[grid, block]``."""
    from numba.cuda.errors import missing_launch_config_msg

    return str(missing_launch_config_msg)


def is_numba_stream(stream: Any) -> bool:
    from numba.cuda.cudadrv import driver

    return isinstance(stream, driver.Stream)


def core_stream(stream: Any) -> Any:
    """A numba stream (or 0) as numba-cuda's launch takes it (a cuda.core ``Stream``)."""
    from numba.cuda.cudadrv import driver

    return driver._to_core_stream(stream)


def launch_configuration(
    dispatcher: Any, griddim: tuple, blockdim: tuple, stream: Any, sharedmem: int
) -> Any:
    """numba-cuda's ``_LaunchConfiguration`` with ``dispatcher`` as its dispatcher, built
    without its ``__init__`` (which warns of low occupancy). ``pre_launch_callbacks`` is an
    empty list in every version (before 0.30 nothing adds to it)."""
    from numba.cuda.dispatcher import _LaunchConfiguration

    config = _LaunchConfiguration.__new__(_LaunchConfiguration)
    config.dispatcher = dispatcher
    config.griddim = griddim
    config.blockdim = blockdim
    config.stream = stream
    config.sharedmem = sharedmem
    config.pre_launch_callbacks = []
    config._kernel_launch_config_sensitive = None
    return config


def dispatcher_call(dispatcher: Any, args: tuple, config: Any) -> None:
    """numba-cuda's own launch: ``CUDADispatcher.call`` in the form this version takes."""
    if has_launch_config_api():
        dispatcher.call(args, config)
    else:
        dispatcher.call(args, config.griddim, config.blockdim, config.stream, config.sharedmem)


@contextlib.contextmanager
def launch_args_current(args: tuple) -> Iterator[None]:
    """While inside, ``args`` are the current launch's arguments (``launch_config.args``,
    numba-cuda's thread-local, which ``_LaunchConfiguration._push_args`` swaps), as during
    numba-cuda's own launch; before 0.30 there are none to set."""
    if not has_launch_config_api():
        yield
        return
    from numba.cuda.cext import _dispatcher

    previous = _dispatcher.swap_current_launch_args(args)
    try:
        yield
    finally:
        _dispatcher.swap_current_launch_args(previous)


def compile_with_c_dispatcher(dispatcher: Any, typed_args: tuple, config: Any) -> Any:
    """The overload numba's C dispatcher selects (compiling if needed) for ``typed_args``,
    as numba-cuda's launch does: from 0.30 with ``config`` current
    (``launchconfig.current_launch_config()``)."""
    from numba.cuda.cext import _dispatcher

    if not has_launch_config_api():
        return _dispatcher.Dispatcher._cuda_call(dispatcher, *typed_args)
    return _dispatcher.Dispatcher._cuda_call(
        dispatcher, *typed_args, __numba_cuda_launch_config__=config
    )


def current_launch_args() -> Any:
    """The arguments of the launch compiling on this thread (``launch_config.args``, 0.30+)."""
    require_launch_config_api("launch_config.args")
    from numba.cuda.cext import _dispatcher

    return _dispatcher.get_current_launch_args()


def launchconfig(feature: str) -> Any:
    """``numba.cuda.launchconfig`` (0.30+), for ``feature``."""
    require_launch_config_api(feature)
    from numba.cuda import launchconfig

    return launchconfig


# -- settings and warnings --------------------------------------------------------------------


def config() -> Any:
    """numba-cuda's settings (``numba.cuda.core.config``)."""
    from numba.cuda.core import config

    return config


def performance_warning(message: str) -> Warning:
    """A ``NumbaPerformanceWarning``, numba-cuda's class for it."""
    from numba.cuda.core import errors

    return errors.NumbaPerformanceWarning(message)


def user_cache_dir() -> str:
    """Where numba-cuda caches kernels whose source folder is not writable."""
    from numba.cuda.misc.appdirs import AppDirs

    return str(AppDirs(appname="numba", appauthor=False).user_cache_dir)


def device_array_class_if_imported() -> type | None:
    """``DeviceNDArray``, or None while numba-cuda's device arrays are not imported (then no
    argument can be one)."""
    devicearray = sys.modules.get("numba.cuda.cudadrv.devicearray")
    return None if devicearray is None else devicearray.DeviceNDArray


def initialized_cuda() -> bool:
    """Whether numba-cuda's driver initialised CUDA in this process (never imports it)."""
    driver = sys.modules.get("numba.cuda.cudadrv.driver")
    return driver is not None and getattr(driver.driver, "pid", None) is not None


# -- the memory API (fastlaunch.memory) ----------------------------------------------------


@functools.cache
def cudadrv_driver() -> Any:
    """``numba.cuda.cudadrv.driver``: its memory pointers, errors, memory managers, and the
    module-level transfer functions (``host_to_device`` ...) that ``fastlaunch.memory``
    replaces while installed."""
    from numba.cuda.cudadrv import driver

    return driver


@functools.cache
def devicearray() -> Any:
    """``numba.cuda.cudadrv.devicearray`` (``DeviceNDArray`` and its checks)."""
    from numba.cuda.cudadrv import devicearray

    return devicearray


@functools.cache
def api() -> Any:
    """``numba.cuda.api``, where ``numba.cuda``'s memory functions are defined."""
    from numba.cuda import api

    return api


def numba_context() -> Any:
    """numba-cuda's ``Context`` object for the current context (made if needed): slow (a few
    µs), so ``fastlaunch.memory`` asks once per context."""
    from numba.cuda.cudadrv import devices

    return devices.get_context()


@functools.cache
def _prepare_shape_strides_dtype() -> Any:
    from numba.cuda.api_util import prepare_shape_strides_dtype as prepare

    return prepare


def prepare_shape_strides_dtype(shape: Any, strides: Any, dtype: Any, order: str) -> Any:
    """numba-cuda's normalisation of ``device_array``'s arguments (its errors included)."""
    return _prepare_shape_strides_dtype()(shape, strides, dtype, order)


def uses_numbas_memory_manager(context: Any) -> bool:
    """Whether ``context`` allocates with numba-cuda's own memory manager, not an External
    Memory Management plugin (RMM's ``RMMNumbaManager``, ``cuda.set_memory_manager``)."""
    return type(context.memory_manager).__name__ == "NumbaCUDAMemoryManager"


def device_pointer(address: int) -> Any:
    """The pointer object numba-cuda's ``MemoryPointer`` holds (a ``CUdeviceptr``)."""
    return cudadrv_driver().binding.CUdeviceptr(address)


@functools.cache
def out_of_memory_code() -> int:
    return int(cudadrv_driver().binding.CUresult.CUDA_ERROR_OUT_OF_MEMORY)


def driver_error_class() -> type:
    """numba-cuda's ``CudaDriverError`` (what its driver raises in a forked child)."""
    from numba.cuda.cudadrv.error import CudaDriverError

    return CudaDriverError


def api_error_class() -> type:
    """numba-cuda's ``CudaAPIError`` (what its driver raises for a failed call)."""
    from numba.cuda.cudadrv.driver import CudaAPIError

    return CudaAPIError


def cuda_api_error(code: int, message: str) -> Exception:
    """numba-cuda's ``CudaAPIError``, as its driver raises it for a failed call."""
    driver = cudadrv_driver()
    return driver.CudaAPIError(driver.binding.CUresult(code), message)


def has_module_callbacks(kernel: Any) -> bool:
    """Whether a compiled kernel links code with module setup or teardown callbacks
    (``CUSource(..., setup_callback=...)``): numba-cuda runs them when it loads its own module,
    so such kernels are launched by numba-cuda."""
    library = getattr(kernel, "_codelibrary", None)
    return bool(
        getattr(library, "_setup_functions", None) or getattr(library, "_teardown_functions", None)
    )


@functools.cache
def memory_classes() -> Any:
    """What ``fastlaunch.memory.objects`` builds numba-cuda's objects from, looked up once:
    ``DeviceNDArray``, ``MemoryPointer``, ``AutoFreePointer``, ``OwnedPointer``, the
    ``CUdeviceptr`` they hold and the ctypes type of their ``device_ctypes_pointer``,
    ``Stream`` and its ``CUstream``, ``dummyarray.Array.from_desc`` (cached per layout by
    numba-cuda, 0.26 to 0.30), ``memory_size_from_info`` and numba-cuda's own memory manager
    class (``NumbaCUDAMemoryManager``, which no EMM plugin's memory manager is). Their
    attributes, which ``objects`` sets as their constructors do, are the same in 0.26 to
    0.30."""
    import types

    from numba.cuda.cudadrv import devicearray, dummyarray

    driver = cudadrv_driver()
    # the ctypes type of device_ctypes_pointer: c_size_t in 0.30, drvapi.cu_device_ptr in 0.26
    probe = object.__new__(driver.MemoryPointer)
    probe.device_pointer = driver.binding.CUdeviceptr(0)
    return types.SimpleNamespace(
        device_ctypes_pointer=type(probe.device_ctypes_pointer),
        DeviceNDArray=devicearray.DeviceNDArray,
        MemoryPointer=driver.MemoryPointer,
        AutoFreePointer=driver.AutoFreePointer,
        OwnedPointer=driver.OwnedPointer,
        CUdeviceptr=driver.binding.CUdeviceptr,
        Stream=driver.Stream,
        Event=driver.Event,
        # the handle type its Events hold: binding.CUevent in 0.30, drvapi.cu_event in 0.26
        CUevent=getattr(getattr(driver, "drvapi", None), "cu_event", None)
        or driver.binding.CUevent,
        # the handle type its Streams hold: binding.CUstream in 0.30, drvapi.cu_stream in 0.26
        # (create_external_stream uses no context)
        CUstream=type(driver.Context.create_external_stream(None, 0).handle),
        from_desc=dummyarray.Array.from_desc,
        memory_size_from_info=driver.memory_size_from_info,
        NumbaCUDAMemoryManager=driver.NumbaCUDAMemoryManager,
    )


def handle_value(handle: Any) -> int:
    """The raw value of a numba-cuda stream or event handle: ``int(handle)`` of a
    ``cuda.bindings`` handle (0.30), ``handle.value`` of a ctypes one (0.26)."""
    value = getattr(handle, "value", handle)
    return int(value or 0)


@functools.cache
def _stream_handle_reader() -> Any:
    return cudadrv_driver()._stream_handle


def numba_stream_handle(stream: Any) -> Any:
    """numba-cuda's reading of a stream argument (``driver._stream_handle``: 0, a numba-cuda
    ``Stream``, a ``cuda.core`` stream; its ``TypeError`` for anything else)."""
    return _stream_handle_reader()(stream)


# -- ufuncs, gufuncs and reductions (fastlaunch.ufuncs) ----------------------------------------


@functools.cache
def ufunc_classes() -> tuple[type, type, type]:
    """numba-cuda's ``CUDAUFuncDispatcher`` (what ``vectorize(target="cuda")`` makes),
    ``CUDAGeneralizedUFunc`` (``guvectorize(target="cuda")``) and ``Reduce``
    (``cuda.reduce``), whose ``__call__`` ``fastlaunch.ufuncs`` replaces."""
    from numba.cuda.kernels.reduction import Reduce
    from numba.cuda.vectorizers import CUDAGeneralizedUFunc, CUDAUFuncDispatcher

    return CUDAUFuncDispatcher, CUDAGeneralizedUFunc, Reduce


def ufunc_loop(typemap: Any, args: tuple) -> tuple[tuple, Any, Any, tuple]:
    """numba-cuda's choice for a ufunc call over ``args``: the loop's argument dtypes, its
    result dtype, its kernel, and the broadcast shape of the call. Raises what numba-cuda's
    ``CUDAUFuncMechanism`` raises for arguments it refuses (no loop, ambiguous scalars,
    shapes that do not broadcast)."""
    from numba.cuda import deviceufunc
    from numba.cuda.vectorizers import CUDAUFuncMechanism

    # get_arguments() without its last step, which makes broadcast views of the arrays
    mechanism = CUDAUFuncMechanism(typemap, args)
    mechanism._fill_arrays()
    mechanism._fill_argtypes()
    mechanism._resolve_signature()
    shapes = [
        (1,) if i in mechanism.scalarpos else tuple(array.shape)
        for i, array in enumerate(mechanism.arrays)
    ]
    shape = deviceufunc._multi_broadcast(*shapes)
    result_dtype, kernel = mechanism.get_function()
    return tuple(mechanism.argtypes), result_dtype, kernel, tuple(shape)


def forall_block_size(dispatcher: Any, argtypes: tuple, sharedmem: int) -> int:
    """The block size numba-cuda's ``forall`` gives ``dispatcher`` compiled for ``argtypes``:
    the driver's occupancy query (``cuOccupancyMaxPotentialBlockSize``) with the same limit,
    which ``forall`` makes on every call."""
    from numba.cuda.cudadrv.devices import get_context

    kernel = dispatcher.compile(argtypes)
    _, blocksize = get_context().get_max_potential_block_size(
        func=kernel._codelibrary.get_cufunc(), b2d_func=0, memsize=sharedmem, blocksizelimit=1024
    )
    return int(blocksize)


def reduce_block_size() -> int:
    """The block size of ``cuda.reduce``'s kernels (four warps)."""
    from numba.cuda.kernels import reduction

    return reduction._NUMWARPS * reduction._WARPSIZE
