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


# -- the compile cache (fastlaunch.cache) ------------------------------------------------------
#
# fastlaunch's cache plugs into numba-cuda's own hook for one: a dispatcher's ``_cache``, which
# ``CUDADispatcher.compile`` asks (``load_overload``) before compiling and tells
# (``save_overload``) after. A hit is numba-cuda's ``_Kernel`` rebuilt from the stored linked
# cubin, LLVM IR and PTX, as numba-cuda's own cache rebuilds it, without its typing pass.


def uses_null_cache(dispatcher: Any) -> bool:
    """Whether a dispatcher has numba-cuda's ``NullCache`` (no ``cache=True``)."""
    return type(getattr(dispatcher, "_cache", None)).__name__ == "NullCache"


def has_numba_cache(dispatcher: Any) -> bool:
    """Whether a dispatcher has numba-cuda's own file cache (``cache=True``)."""
    return type(getattr(dispatcher, "_cache", None)).__name__ == "CUDACache"


def set_cache(dispatcher: Any, cache: Any) -> None:
    dispatcher._cache = cache


def normalize_argtypes(sig: Any) -> tuple:
    """The argument types of what ``CUDADispatcher.compile`` is given (types or a signature)."""
    from numba.cuda.core import sigutils

    argtypes, _ = sigutils.normalize_signature(sig)
    return tuple(argtypes)


def count_cache_hit_as_miss(dispatcher: Any, sig: Any) -> None:
    """numba-cuda counts a loaded overload as a hit of its ``cache=True`` cache
    (``stats.cache_hits``); one of fastlaunch's cache is counted as the compile it stands for,
    so ``stats`` read as without it."""
    dispatcher._cache_misses[sig] += 1
    dispatcher._cache_hits[sig] -= 1


@functools.cache
def dispatcher_types() -> tuple[type, ...]:
    """The classes of numba-cuda's dispatchers (kernels and device functions)."""
    from numba.cuda.dispatcher import CUDADispatcher

    return (CUDADispatcher,)


@functools.cache
def _extern_and_linkable() -> tuple[type, type, type]:
    from numba.cuda.compiler import ExternFunction
    from numba.cuda.cudadrv.linkable_code import LinkableCode
    from numba.cuda.extending import _Intrinsic

    return ExternFunction, LinkableCode, _Intrinsic


def extern_function_class() -> type:
    """``cuda.declare_device``'s objects (``ExternFunction``)."""
    return _extern_and_linkable()[0]


def linkable_code_class() -> type:
    """``LinkableCode`` (``PTXSource``, ``CUSource``, ... for ``link=``)."""
    return _extern_and_linkable()[1]


def intrinsic_class() -> type:
    """``@intrinsic``'s objects."""
    return _extern_and_linkable()[2]


def intrinsic_definition(intrinsic: Any) -> Any:
    """The Python function an ``@intrinsic`` was made from."""
    return intrinsic._defn


def numba_type_class() -> type:
    from numba.cuda import types

    return types.Type


def extern_function_links(extfn: Any) -> tuple[list, bool]:
    """What ``cuda.declare_device`` gave a declared function to link, and whether it needs a
    cooperative launch: from the implementation it put in the target context."""
    from numba.cuda.descriptor import cuda_target

    links: list = []
    cooperative = False
    selector = cuda_target.target_context._defns.get(extfn)
    for impl, _ in getattr(selector, "versions", []):
        for library in getattr(impl, "libs", ()):
            links.extend(sorted(library._linking_files, key=repr))
            cooperative = cooperative or bool(getattr(library, "use_cooperative", False))
    return links, cooperative


def linkable_code_data(code: Any) -> tuple[str, bytes]:
    """A ``LinkableCode`` object's kind and bytes."""
    data = code.data
    if isinstance(data, str):
        data = data.encode()
    return type(code).__name__, bytes(data)


def linkable_code_callbacks(code: Any) -> tuple[Any, Any]:
    return code.setup_callback, code.teardown_callback


def device_overloads(dispatcher: Any) -> dict:
    """A device function's compiled overloads (argument types -> compile result)."""
    return dict(dispatcher.overloads)


def overload_llvm(compiled: Any) -> str:
    """The LLVM IR of a compiled device function (and what it links)."""
    return compiled.library.get_llvm_str()


def is_device_dispatcher(dispatcher: Any) -> bool:
    return bool(dispatcher.targetoptions.get("device"))


def pipeline_class(dispatcher: Any) -> type:
    return dispatcher._compiler.pipeline_class


@functools.cache
def _config_names() -> tuple[str, ...]:
    skip = {"CACHE_DIR", "DEBUG_CACHE", "CACHE_LOCATOR_CLASSES"}
    return tuple(sorted(n for n in vars(config()) if n.isupper() and n not in skip and n[0] != "_"))


def config_snapshot() -> tuple[tuple[str, ...], list]:
    """numba-cuda's settings (``numba.cuda.core.config``) by name, as ``config_values``; the
    values themselves (compared cheaply against an earlier snapshot)."""
    names = _config_names()
    settings = config()
    return names, [getattr(settings, name, None) for name in names]


def config_values() -> list[tuple[str, str]]:
    """numba-cuda's settings (``numba.cuda.core.config``), all of them: some decide the code
    (``OPT``, ``CUDA_DEFAULT_PTX_CC``, ``CUDA_ENABLE_NRT``, ``FORCE_CUDA_CC``, ...), and a
    setting that does not costs only a miss when it changes. The cache's own are left out.
    Each by its ``repr``."""
    settings = config()
    skip = {"CACHE_DIR", "DEBUG_CACHE", "CACHE_LOCATOR_CLASSES"}
    values = []
    for name in sorted(vars(settings)):
        if not name.isupper() or name in skip or name.startswith("_"):
            continue
        values.append((name, repr(getattr(settings, name))))
    return values


def library_versions() -> list[tuple[str, str]]:
    import llvmlite
    import numba
    import numpy

    found = [
        ("numba", numba.__version__),
        ("numba-cuda", version_string()),
        ("llvmlite", llvmlite.__version__),
        ("numpy", numpy.__version__),
    ]
    for name, module in (("cuda-core", "cuda.core"), ("cuda-bindings", "cuda.bindings")):
        try:
            found.append((name, str(__import__(module, fromlist=["_"]).__version__)))
        except (ImportError, AttributeError):
            found.append((name, "none"))
    return found


def _loaded_path(libname: str, fragment: str) -> str | None:
    """Where a CUDA library this process loaded is: cuda.pathfinder's answer (cached there once
    loaded), else the process's own map."""
    try:
        import cuda.pathfinder as pathfinder

        return str(pathfinder.load_nvidia_dynamic_lib(libname).abs_path)
    except Exception:
        pass
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1]
                if fragment in path.rsplit("/", 1)[-1]:
                    return path
    except OSError:
        pass
    return None


def nvvm_library() -> tuple[str | None, str]:
    """NVVM: the library file numba-cuda compiles with, and its version and IR version
    (loads it)."""
    from numba.cuda.cudadrv import nvvm

    library = nvvm.NVVM()
    version = f"{library.get_version()} ir {library.get_ir_version()}"
    return _loaded_path("nvvm", "libnvvm"), version


def libdevice_path() -> str | None:
    try:
        import cuda.pathfinder as pathfinder

        return str(pathfinder.find_bitcode_lib("device"))
    except Exception:
        from numba.cuda.cudadrv import libs

        return str(libs.get_libdevice())


def linker_library() -> tuple[str | None, str]:
    """The linker numba-cuda links with: nvJitLink (its file and version), else the driver's
    (its version)."""
    from numba.cuda.cudadrv import driver

    if driver._have_nvjitlink():
        from cuda.bindings import nvjitlink

        return _loaded_path("nvJitLink", "libnvJitLink"), f"nvjitlink {nvjitlink.version()}"
    from fastlaunch import _core

    return None, f"driver {_core.driver_version()}"


def nvrtc_library() -> tuple[str | None, str]:
    from numba.cuda.cudadrv import nvrtc

    read = getattr(nvrtc, "_get_nvrtc_version", None) or getattr(nvrtc, "get_version", None)
    version = read() if read is not None else "?"
    return _loaded_path("nvrtc", "libnvrtc"), f"nvrtc {version}"


def include_paths() -> str:
    """What NVRTC compiles CUDA C++ against: the include path setting and the versions of the
    NVIDIA packages installed (their headers)."""
    import os

    packages = set()
    for folder in sys.path:
        try:
            names = os.listdir(folder or ".")
        except OSError:
            continue
        packages.update(
            name
            for name in names
            if name.endswith(".dist-info") and name.lower().startswith(("nvidia_", "cuda_"))
        )
    return f"{config().CUDA_INCLUDE_PATH} {' '.join(sorted(packages))}"


def cudadevrt_path() -> str | None:
    try:
        import cuda.pathfinder as pathfinder

        return str(pathfinder.find_static_lib("cudadevrt"))
    except Exception:
        from numba.cuda.cudadrv import libs

        return str(libs.get_cudalib("cudadevrt", static=True))


#: (which registries, what extension_registries found in them, the registries held alive)
_registries_memo: tuple[tuple, dict[str, list[list]], list] | None = None


def extension_registries() -> dict[str, list[list]]:
    """The registries numba-cuda types and lowers with, by kind, as the lists they hold
    (not copied: they only grow): typing templates (``functions``, ``attributes``), typed
    globals, lowering implementations, ``typeof`` handlers and data models. Where user code
    registers ``@overload``, ``@intrinsic``, ``@lower_builtin``, ``typeof_impl.register``,
    ``register_model``, ..."""
    global _registries_memo
    from numba.cuda.core import imputils
    from numba.cuda.typing import templates

    typing_registries = [templates.builtin_registry]
    lowering_registries = [imputils.builtin_registry]
    try:
        from numba.cuda.descriptor import cuda_target

        typing_registries += list(getattr(cuda_target.typing_context, "_registries", {}))
        lowering_registries += list(getattr(cuda_target.target_context, "_registries", {}))
    except Exception:
        pass
    which = (tuple(map(id, typing_registries)), tuple(map(id, lowering_registries)))
    if _registries_memo is not None and _registries_memo[0] == which:
        return _registries_memo[1]  # the same registries: their lists, as they are now
    found: dict[str, list[list]] = {"typing": [], "globals": [], "lowering": []}
    seen: set[int] = set()
    for registry in typing_registries:
        if id(registry) in seen:
            continue
        seen.add(id(registry))
        found["typing"] += [getattr(registry, "functions", []), getattr(registry, "attributes", [])]
        found["globals"].append(getattr(registry, "globals", []))
    for registry in lowering_registries:
        if id(registry) in seen:
            continue
        seen.add(id(registry))
        for name in ("functions", "getattrs", "setattrs", "casts", "constants"):
            found["lowering"].append(getattr(registry, name, []))
    try:
        from numba.cuda.typing.typeof import typeof_impl

        found["typeof"] = [typeof_impl.registry]  # a mapping: its items are read
    except Exception:
        pass
    try:
        from numba.cuda import models

        found["models"] = [getattr(models.cuda_data_manager, "_handlers", {})]
    except Exception:
        pass
    _registries_memo = (which, found, typing_registries + lowering_registries)
    return found


def kernel_record(kernel: Any, cc: tuple[int, int, str]) -> dict:
    """What rebuilds a compiled kernel (``_Kernel``): its flags, and its code library's LLVM
    IR, PTX and linked cubin for ``cc``, its link inputs and options. Raises ``ValueError``
    naming what cannot be stored."""
    library = kernel._codelibrary
    cubin = library._cubin_cache.get(cc)
    if cubin is None:
        raise ValueError(f"no cubin for compute capability {cc} was linked")
    exceptions = call_helper_record(getattr(kernel, "call_helper", None), bool(kernel.debug))
    if getattr(kernel, "extensions", None):
        raise ValueError("the kernel has extensions (launched by numba-cuda)")
    if getattr(library, "referenced_objects", None):
        raise ValueError("the kernel references global device arrays")
    if not getattr(library, "_finalized", False):
        raise ValueError("the code library is not finalized")
    return {
        "cooperative": bool(kernel.cooperative),
        "entry_name": str(kernel.entry_name),
        "debug": bool(kernel.debug),
        "lineinfo": bool(kernel.lineinfo),
        "shared_memory_carveout": kernel.shared_memory_carveout,
        "launch_config_sensitive": bool(getattr(kernel, "launch_config_sensitive", False)),
        "signature": str(kernel.signature),
        "library_name": str(library.name),
        "library_entry_name": library._entry_name,
        "llvm": list(library.llvm_strs),
        "ptx": list(library._ptx_cache.get(cc, [])),
        "cubin": bytes(cubin.code),
        "linkerinfo": str(library._linkerinfo_cache.get(cc, "")),
        "max_registers": library._max_registers,
        "nvvm_options": dict(library._nvvm_options),
        "needs_cudadevrt": bool(library.needs_cudadevrt),
        "use_cooperative": bool(library.use_cooperative),
        "lto": library._lto,
        "linking": list(library._linking_files),
        "exceptions": exceptions,
        "setup_functions": len(library._setup_functions),
        "teardown_functions": len(library._teardown_functions),
    }


def call_helper_record(helper: Any, debug: bool) -> list | None:
    """A kernel's table of the exceptions its code raises (numba-cuda's call helper: code ->
    class, arguments, source location), which a ``debug=True`` launch reads back: as JSON
    (classes by module and name). ``ValueError`` for a debug kernel whose table cannot be
    written so; a kernel without debug never reads it (an empty table then)."""
    if helper is None:
        return None
    exceptions = getattr(helper, "exceptions", None)
    if type(helper).__name__ != "_MinimalCallHelper" or not isinstance(exceptions, dict):
        raise ValueError(f"the kernel's call helper is a {type(helper).__qualname__}")
    table = []
    for code, (cls, args, location) in exceptions.items():
        entry = [code, cls.__module__, cls.__qualname__, _json_plain(args), _json_plain(location)]
        storable = _class_named(cls.__module__, cls.__qualname__) is cls and None not in entry
        if not storable:
            if debug:
                raise ValueError(f"its {cls.__qualname__} (raised in the kernel) cannot be stored")
            return []
        table.append(entry)
    return table


def _class_named(module: str, qualname: str) -> Any:
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found


def _json_plain(value: Any) -> Any:
    """``value`` as JSON holds it (tuples as ``{"t": [...]}``), or None."""
    if value is None or isinstance(value, bool | int | float | str):
        return {"v": value}
    if isinstance(value, tuple | list):
        items = [_json_plain(v) for v in value]
        if any(item is None for item in items):
            return None
        return {"t" if isinstance(value, tuple) else "l": items}
    return None


def _from_json(value: Any) -> Any:
    if "v" in value:
        return value["v"]
    items = [_from_json(v) for v in value.get("t", value.get("l", []))]
    return tuple(items) if "t" in value else items


def rebuild_call_helper(table: list | None) -> Any:
    """numba-cuda's call helper from ``call_helper_record``'s table (classes found by module
    and name; ``LookupError`` if one is not there)."""
    if table is None:
        return None
    from numba.cuda.core.callconv import _MinimalCallHelper

    helper = _MinimalCallHelper()
    for code, module, qualname, args, location in table:
        cls = _class_named(module, qualname)
        if not isinstance(cls, type):
            raise LookupError(f"exception class {module}.{qualname} not found")
        helper.exceptions[code] = (cls, _from_json(args), _from_json(location))
    return helper


def nrt_library() -> Any:
    from numba.cuda.dispatcher import NRT_LIBRARY

    return NRT_LIBRARY


def rebuild_kernel(dispatcher: Any, argtypes: tuple, record: dict, linking: list) -> Any:
    """numba-cuda's ``_Kernel`` for ``argtypes`` from a stored ``record`` (see
    ``kernel_record``), linking ``linking`` (paths and the live ``LinkableCode`` objects)
    if another compute capability asks for its cubin. Its type annotation (``inspect_types``)
    is compiled when first asked for."""
    from numba.cuda import types as numba_types
    from numba.cuda.codegen import CUDACodeLibrary

    try:
        from cuda.core import ObjectCode
    except ImportError:  # cuda-core before 1.0
        from cuda.core.experimental import ObjectCode

    cc = tuple(record["cc"])
    states = {
        "codegen": dispatcher.targetctx.codegen(),
        "name": record["library_name"],
        "entry_name": record["library_entry_name"],
        "llvm_strs": list(record["llvm"]),
        "ptx_cache": {cc: list(record["ptx"])} if record["ptx"] else {},
        "cubin_cache": {cc: ObjectCode.from_cubin(record["cubin"])},
        "linkerinfo_cache": {cc: record["linkerinfo"]},
        "max_registers": record["max_registers"],
        "nvvm_options": dict(record["nvvm_options"]),
        "needs_cudadevrt": record["needs_cudadevrt"],
        "nrt": False,
        "use_cooperative": record["use_cooperative"],
        "lto": record["lto"],
    }
    library = CUDACodeLibrary._rebuild(**_accepted(CUDACodeLibrary._rebuild, states))
    for item in linking:
        library.add_linking_file(item)
    signature = numba_types.void(*argtypes)
    kernel_states = {
        "cooperative": record["cooperative"],
        "name": record["entry_name"],
        "signature": signature,
        "codelibrary": library,
        "debug": record["debug"],
        "lineinfo": record["lineinfo"],
        "call_helper": rebuild_call_helper(record["exceptions"]),
        "extensions": [],
        "shared_memory_carveout": record["shared_memory_carveout"],
        "launch_config_sensitive": False,
    }
    from numba.cuda.dispatcher import _Kernel

    kernel = _Kernel._rebuild(**_accepted(_Kernel._rebuild, kernel_states))
    # what _Kernel.__init__ sets and _rebuild (made for unpickling) does not: the dispatcher
    # reads them of every overload (``nopython_signatures``: ``objectmode``)
    kernel.objectmode = False
    kernel.py_func = dispatcher.py_func
    kernel.argtypes = tuple(argtypes)
    kernel.launch_bounds = dispatcher.targetoptions.get("launch_bounds")
    kernel.lifted = []
    kernel._referenced_environments = []
    kernel.__class__ = _cached_kernel_class()
    kernel.target_context = dispatcher.targetctx  # as a compiled kernel's (bind reads it)
    kernel._fastlaunch_source = (dispatcher.py_func, argtypes, dict(dispatcher.targetoptions))
    return kernel


def bind_if_needed(kernel: Any) -> None:
    """What numba-cuda's compile does after it compiles (``kernel.bind()``: the module loaded
    in its context, the setup callbacks of linked code run, NRT statistics set up), for a
    kernel loaded from the cache, where it has an effect beyond loading its module: where
    linked code has module callbacks, or NRT statistics are on."""
    library = kernel._codelibrary
    nrt_stats = config().CUDA_NRT_STATS and getattr(kernel.target_context, "enable_nrt", False)
    if library._setup_functions or library._teardown_functions or nrt_stats:
        kernel.bind()


def _accepted(method: Any, states: dict) -> dict:
    """The states a ``_rebuild`` of this numba-cuda version takes; raises ``ValueError`` if
    it needs one not given."""
    import inspect as inspect_module

    parameters = inspect_module.signature(method).parameters
    missing = [
        name
        for name, p in parameters.items()
        if name not in states and p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD
    ]
    if missing:
        raise ValueError(f"numba-cuda's {method.__qualname__} needs {missing}")
    return {name: value for name, value in states.items() if name in parameters}


@functools.cache
def _cached_kernel_class() -> type:
    """numba-cuda's ``_Kernel``, whose type annotation is compiled when first asked for
    (a kernel loaded from numba-cuda's own cache has none)."""
    from numba.cuda.dispatcher import _Kernel

    class _CachedKernel(_Kernel):
        @property
        def _type_annotation(self) -> Any:
            annotation = self.__dict__.get("_fastlaunch_annotation")
            if annotation is None:
                source = self.__dict__.get("_fastlaunch_source")
                if source is None:
                    return None
                py_func, argtypes, options = source
                annotation = _Kernel(py_func, argtypes, **options)._type_annotation
                self.__dict__["_fastlaunch_annotation"] = annotation
            return annotation

        @_type_annotation.setter
        def _type_annotation(self, value: Any) -> None:
            if value is not None:
                self.__dict__["_fastlaunch_annotation"] = value

    _CachedKernel.__name__ = _CachedKernel.__qualname__ = "_Kernel"
    _CachedKernel.__module__ = _Kernel.__module__
    return _CachedKernel


def compile_signatures(dispatcher: Any, signatures: list, specialized: bool) -> Any:
    """What ``numba.cuda.jit(signatures)(func)`` does once it has made its dispatcher:
    compile each signature (a kernel's return type must be void), then mark the dispatcher
    specialized (one signature given alone) and close it to further compiles. fastlaunch
    makes the dispatcher itself first (``jit(func, **options)``), so its cache is in place
    before these compiles."""
    from numba.cuda import types as numba_types
    from numba.cuda.core import sigutils

    for sig in signatures:
        argtypes, restype = sigutils.normalize_signature(sig)
        if restype and restype != numba_types.void:
            raise TypeError("CUDA kernel must have void return type.")
        dispatcher.compile(argtypes)
    dispatcher._specialized = specialized
    dispatcher.disable_compile()
    return dispatcher


def is_signature(value: Any) -> bool:
    from numba.cuda.core import sigutils

    return bool(sigutils.is_signature(value))


def specialize(dispatcher: Any, args: tuple, prepare: Any) -> Any:
    """numba-cuda's ``CUDADispatcher.specialize``: a new dispatcher compiled for ``args``'
    types only, remembered per compute capability and types, with ``prepare(new)`` called
    before it compiles (fastlaunch's cache goes in there)."""
    from numba.cuda.dispatcher import CUDADispatcher

    cc = api().get_current_device().compute_capability
    argtypes = tuple(dispatcher.typeof_pyval(a) for a in args)
    if dispatcher.specialized:
        raise RuntimeError("Dispatcher already specialized")
    specialization = dispatcher.specializations.get((cc, argtypes))
    if specialization:
        return specialization
    specialization = CUDADispatcher(dispatcher.py_func, targetoptions=dispatcher.targetoptions)
    prepare(specialization)
    specialization.compile(argtypes)
    specialization.disable_compile()
    specialization._specialized = True
    dispatcher.specializations[cc, argtypes] = specialization
    return specialization
