"""``fastlaunch.jit``: numba-cuda compiles, Rust launches.

A :class:`Kernel` wraps a numba-cuda dispatcher. Launches run in Rust
(``fastlaunch._core.Kernel``); only a launch with a new combination of argument
types comes here (:meth:`Kernel._on_miss`), where numba-cuda types and compiles; it
returns the overload's numba parameter types and target, and Rust builds the packing
plan from those types and registers the overload. Later launches with the same types never
enter Python.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastlaunch import _core
from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.cache import numba_cache
from fastlaunch.errors import KernelArgumentError

#: compiles, loads and launches through numba-cuda's path (never on the fast path)
_log = logging.getLogger("fastlaunch")


def numba_type(descriptor: tuple) -> Any:
    """The numba type of a fingerprint descriptor (see ``_core.describe``)."""
    import numpy as np

    types, numpy_support = numba_cuda.types(), numba_cuda.numpy_support()
    kind = descriptor[0]
    if kind == "array":
        _, dtype, ndim, layout, readonly = descriptor
        return types.Array(
            numpy_support.from_dtype(np.dtype(dtype)), ndim, layout, readonly=readonly
        )
    if kind == "tuple":
        return types.BaseTuple.from_types([numba_type(m) for m in descriptor[1]])
    if kind == "namedtuple":
        _, cls, members = descriptor
        return types.BaseTuple.from_types([numba_type(m) for m in members], cls)
    if kind == "enum":
        return numba_cuda.typeof(next(iter(descriptor[1])))
    if kind == "record":
        return numpy_support.from_dtype(descriptor[1])
    if kind == "datetime":
        return types.NPDatetime(descriptor[1])
    if kind == "timedelta":
        return types.NPTimedelta(descriptor[1])
    return getattr(types, descriptor[1])


def _check_argument(expected: Any, given: Any, position: int, name: str) -> None:
    """Refuses an argument an explicit signature cannot take (numba-cuda launches these
    silently with wrong data): arrays must match dtype, ndim and layout ('A' takes any
    layout), and a read-only array cannot go to a writable parameter."""
    types = numba_cuda.types()
    expected_tuple = isinstance(expected, types.BaseTuple)
    if expected_tuple and isinstance(given, types.BaseTuple) and len(expected) == len(given):
        for expected_member, given_member in zip(expected, given, strict=True):
            _check_argument(expected_member, given_member, position, name)
        return
    expected_array = isinstance(expected, types.Array)
    given_array = isinstance(given, types.Array)
    if expected_tuple or isinstance(given, types.BaseTuple):
        mismatch = True
    elif isinstance(expected, types.Record) or isinstance(given, types.Record):
        mismatch = expected != given  # the kernel reads the bytes with its own layout
    elif expected_array != given_array:
        mismatch = True
    elif expected_array:
        mismatch = (
            expected.dtype != given.dtype
            or expected.ndim != given.ndim
            or (expected.layout != "A" and expected.layout != given.layout)
            or (given.mutable is False and expected.mutable)
        )
    else:
        mismatch = False  # scalars convert as numba-cuda converts them (checked when packing)
    if mismatch:
        raise KernelArgumentError(
            f"argument {position} ({name}): the kernel's signature expects {expected}, got {given}",
            position,
            name,
        )


def _stream_for_numba(stream: Any) -> Any:
    """A launch's stream as numba-cuda's own launch path takes it: numba streams as they
    are, any other stream object by its handle (read by Rust, as the launch path reads it)."""
    from numba import cuda

    if numba_cuda.is_numba_stream(stream):
        return numba_cuda.core_stream(stream)
    handle = _core.stream_handle(stream)
    return numba_cuda.core_stream(cuda.external_stream(handle) if handle else 0)


class Kernel(_core.Kernel):
    """A kernel launched by fastlaunch: ``kernel[griddim, blockdim, stream, sharedmem](*args)``.

    Everything numba-cuda's dispatcher offers (``overloads``, ``signatures``,
    ``inspect_*``, ``get_regs_per_thread``, ...) is reachable as an attribute.
    """

    def __init__(self, dispatcher: Any) -> None:
        self._dispatcher = dispatcher
        self._compiled: dict[
            tuple[int, int], tuple[Any, _core.CompiledKernel | Callable[..., None]]
        ] = {}
        self._numba_path_logged = False
        self._compile_lock = threading.RLock()
        self.__wrapped__ = dispatcher.py_func
        self.__name__ = getattr(dispatcher.py_func, "__name__", "kernel")
        self.__qualname__ = getattr(dispatcher.py_func, "__qualname__", self.__name__)
        self.__doc__ = dispatcher.py_func.__doc__
        names = _parameter_names(dispatcher.py_func)
        if names is not None:
            self._set_parameter_names(names)
        self._names = names or []
        if dispatcher.targetoptions.get("extensions"):
            # Extensions rewrite arguments in Python (prepare_args) on every launch.
            self._set_always_numba(True)
        self.numba_launches = 0
        self._callbacks_by_configuration: dict[tuple, list] = {}
        numba_cache.attach(dispatcher)  # fastlaunch's compile cache, unless cache=True
        _compile_through(dispatcher, self)
        register_as_numba_dispatcher()

    @property
    def py_func(self) -> Callable[..., Any]:
        return self._dispatcher.py_func

    @property
    def dispatcher(self) -> Any:
        """The numba-cuda dispatcher that compiles this kernel."""
        return self._dispatcher

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes not found on the kernel: numba-cuda's API.
        if name.startswith("__") or name == "_dispatcher":
            raise AttributeError(name)
        return getattr(self._dispatcher, name)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        raise ValueError(numba_cuda.missing_launch_config_message())

    def __repr__(self) -> str:
        return f"<fastlaunch.Kernel {self.__qualname__}>"

    # -- numba-cuda's specialize / forall, launching through fastlaunch -----------------

    def specialize(self, *args: Any) -> Kernel:
        """numba-cuda's ``specialize``: a kernel compiled for these arguments' types only
        (cached per compute capability and types, as numba-cuda caches it), as a fastlaunch
        kernel."""
        if numba_cache.settings.enabled() and not numba_cuda.has_numba_cache(self._dispatcher):
            # numba-cuda's own, but for fastlaunch's cache put in before it compiles
            specialization = numba_cuda.specialize(self._dispatcher, args, numba_cache.attach)
        else:
            specialization = self._dispatcher.specialize(*args)
        made = specialization.__dict__.get("_fastlaunch_kernel")
        if made is None:
            made = Kernel(specialization)
            specialization._fastlaunch_kernel = made
        return made

    def recompile(self) -> None:
        """numba-cuda's ``recompile`` (every signature compiled afresh, its cache rewritten),
        and fastlaunch's overloads forgotten with numba-cuda's, so that the next launch
        takes the new code."""
        self._dispatcher.recompile()
        self._compiled.clear()
        self._clear_overloads()

    def forall(self, ntasks: int, tpb: int = 0, stream: Any = 0, sharedmem: int = 0) -> Any:
        """numba-cuda's ``forall`` (1-D launch over ``ntasks``; ``tpb=0`` asks the driver for
        a block size), launching the specialized kernel through fastlaunch. numba-cuda's
        ``vectorize`` and ``guvectorize`` launch their kernels this way."""
        return numba_cuda.forall(self, ntasks, tpb, stream, sharedmem)

    def _warn_low_occupancy(self, grid_size: int) -> None:
        """numba-cuda's low-occupancy warning (``NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS``), given
        by the launch path once per kernel rather than on every launch."""
        config = numba_cuda.config()
        if config.CUDA_LOW_OCCUPANCY_WARNINGS and not config.DISABLE_PERFORMANCE_WARNINGS:
            warnings.warn(
                numba_cuda.performance_warning(
                    f"Grid size {grid_size} will likely result in GPU under-utilization "
                    "due to low occupancy."
                ),
                stacklevel=3,
            )

    def _warn_implicit_copy(self) -> None:
        """numba-cuda's warning for a host array passed bare to a kernel, given by the launch
        path on each such launch, as numba-cuda gives it (``NUMBA_CUDA_WARN_ON_IMPLICIT_COPY``;
        not for ``cuda.In``/``Out``/``InOut``)."""
        config = numba_cuda.config()
        if config.CUDA_WARN_ON_IMPLICIT_COPY and not config.DISABLE_PERFORMANCE_WARNINGS:
            warnings.warn(
                numba_cuda.performance_warning(
                    "Host array used in CUDA kernel will incur copy overhead to/from device."
                ),
                stacklevel=3,
            )

    def __reduce__(self) -> tuple:
        # Pickled as its numba-cuda dispatcher (for multiprocessing); compiled again on use.
        return (Kernel, (self._dispatcher,))

    # -- numba-cuda's launch-configuration API (numba.cuda.launchconfig) ---------------

    def _compile_for_args(self, *args: Any, **kws: Any) -> Any:
        """numba-cuda's ``_compile_for_args``, which compiles on a launch. It is looked up
        here, so wrapping it on a fastlaunch kernel (as
        ``numba.cuda.launchconfig.capture_compile_config`` does) sees those compiles."""
        dispatcher = self._dispatcher
        return numba_cuda.unbound_compile_for_args(dispatcher)(dispatcher, *args, **kws)

    def mark_launch_config_sensitive(self) -> None:
        """Marks the compile in progress as depending on the launch configuration
        (numba-cuda's API, for code generated from the block size): launches of such a
        kernel then go through numba-cuda, which compiles it per configuration.
        numba-cuda 0.30 and newer."""
        launchconfig = numba_cuda.launchconfig("mark_launch_config_sensitive()")
        config = launchconfig.ensure_current_launch_config()
        if config.dispatcher is not self and config.dispatcher is not self._dispatcher:
            raise RuntimeError(
                "mark_launch_config_sensitive() must be called on the active "
                "launch configuration's dispatcher"
            )
        config._kernel_launch_config_sensitive = True

    def _current_launch_args(self) -> Any:
        """The arguments of the launch compiling on this thread (``launch_config.args``;
        numba-cuda 0.30 and newer)."""
        return numba_cuda.current_launch_args()

    def _pre_launch_callbacks(self, launcher: _core.Launcher) -> list:
        """The ``pre_launch_callbacks`` of a configuration: one list per grid, block, stream
        and shared memory, shared by every ``kernel[...]`` that configures them, as numba-cuda
        shares one cached configuration object. numba-cuda 0.30 and newer (before, numba-cuda
        has no callbacks: asking for the list raises ``NumbaCudaVersionError``)."""
        numba_cuda.require_launch_config_api("pre_launch_callbacks")
        key = (launcher.griddim, launcher.blockdim, launcher.stream_handle, launcher.sharedmem)
        return self._callbacks_by_configuration.setdefault(key, [])

    def _run_pre_launch_callbacks(self, launcher: _core.Launcher, args: tuple) -> None:
        """Runs a configuration's ``pre_launch_callbacks`` as numba-cuda does: after the
        arguments' overload is compiled, before the launch, with that overload (numba-cuda's
        ``_Kernel``) and the configuration. Rust calls this only once some configuration of
        this kernel has a callback list."""
        callbacks = list(self._pre_launch_callbacks(launcher))
        if not callbacks:
            return
        argtypes = tuple(self._argument_type(arg) for arg in args)
        configuration = (launcher.griddim, launcher.blockdim, launcher.stream, launcher.sharedmem)
        with numba_cuda.launch_args_current(args):
            del args  # see _select_overload
            kernel = self._select_overload(argtypes, configuration)
        for callback in callbacks:
            callback(kernel, launcher)

    def _argument_type(self, arg: Any) -> Any:
        """An argument's numba type as the launch types it: fastlaunch's reading where it
        packs the argument, numba-cuda's ``typeof`` where numba-cuda launches it."""
        try:
            return numba_type(_core.classify(arg))
        except (TypeError, ValueError):
            return self._dispatcher.typeof_pyval(arg)

    # -- the miss path: type, compile, register --------------------------------------

    def _on_miss(
        self,
        args: tuple,
        fingerprint: bytes,
        descriptors: list[tuple],
        compute_capability: int,
        configuration: tuple[tuple, tuple, Any, int],
    ) -> tuple[tuple | None, Callable[..., Any]]:
        """Called by the Rust launch path when no overload matches ``fingerprint``:
        ``descriptors`` are the arguments' types as Rust read them (see ``_core.describe``).
        Types them with numba and compiles. Returns ``(param_types, target)`` for Rust to
        register (see ``_core._KernelHooks``): the compiled overload's numba parameter types
        and ``target(packed)``, or ``(None, launch)`` for kernels numba-cuda launches."""
        if self._dispatcher.targetoptions.get("extensions"):
            # extensions added since the kernel was made (numba-cuda's dispatcher keeps the
            # list it was given, and they may append to it): numba-cuda launches from now on
            self._set_always_numba(True)
            return None, self._launch_with_numba
        argtypes = tuple(numba_type(d) for d in descriptors)
        # Not under the compile lock: numba-cuda's compiler lock serialises compiles, and
        # code run during a compile (launch-config-sensitive typing) may wait on another
        # thread's compile, as under numba-cuda.
        with numba_cuda.launch_args_current(args):
            del args  # see _select_overload
            kernel = self._select_overload(argtypes, configuration)
        if numba_cuda.is_launch_config_sensitive(kernel, self._dispatcher):
            return None, self._launch_config_sensitive()
        params = tuple(kernel.signature.args)
        for i, (expected, given) in enumerate(zip(params, argtypes, strict=True)):
            _check_argument(expected, given, i, self._name(i))

        def target(packed: bool) -> _core.CompiledKernel | Callable[..., None]:
            """What Rust launches: the loaded cubin (or, for debug kernels, numba-cuda's
            launch) when fastlaunch packs every parameter; numba-cuda's launch otherwise."""
            if _log.isEnabledFor(logging.DEBUG):
                _log.debug(
                    "%s(%s) on compute capability %d: %s",
                    self.__qualname__,
                    ", ".join(map(str, argtypes)),
                    compute_capability,
                    "packed by fastlaunch" if packed else "launched by numba-cuda",
                )
            if not packed:
                return self._numba_target(kernel)
            with self._compile_lock:
                return self._target(kernel, compute_capability)

        return params, target

    def _launch_with_numba(
        self, args: tuple, griddim: tuple, blockdim: tuple, stream: Any, sharedmem: int
    ) -> None:
        """numba-cuda's own launch, for arguments fastlaunch does not pack (host arrays that
        are not C- or F-contiguous or are ``ndarray`` subclasses, arrays of unstructured void
        or datetime multiples, ``cuda.In``/``Out``/``InOut`` around those, tuples holding
        them) and kernels with
        ``extensions``. Non-contiguous host arrays (which numba-cuda refuses) go
        through a contiguous copy that is written back after the launch."""
        import numpy as np

        self.numba_launches += 1
        if not self._numba_path_logged:
            self._numba_path_logged = True
            _log.info(
                "%s launches through numba-cuda's own path (arguments: %s)",
                self.__qualname__,
                ", ".join(type(a).__name__ for a in args),
            )
        prepared = []
        write_back = []
        for arg in args:
            if isinstance(arg, np.ndarray) and not (
                arg.flags.c_contiguous or arg.flags.f_contiguous
            ):
                contiguous = np.ascontiguousarray(arg)
                prepared.append(contiguous)
                write_back.append((arg, contiguous))
            else:
                prepared.append(arg)
        # numba-cuda's launch (`CUDADispatcher.call`), configured as fastlaunch's launches
        # are: the configuration's dispatcher is this kernel (`launchconfig`), and the
        # low-occupancy warning was given once already.
        config = _launch_configuration(self, griddim, blockdim, stream, sharedmem)
        numba_cuda.dispatcher_call(self._dispatcher, tuple(prepared), config)
        if write_back:
            config.stream.sync()
            for original, contiguous in write_back:
                original[...] = contiguous

    def _launch_config_sensitive(self) -> Callable[..., None]:
        """A kernel compiled for one launch configuration: numba-cuda keeps one compile per
        configuration (``_select_launch_config_dispatcher``), so it launches this kernel
        from now on (the overload's target is ``_launch_with_numba``)."""
        _log.info(
            "%s is launch-config sensitive: numba-cuda launches it, compiling per configuration",
            self.__qualname__,
        )
        self._set_always_numba(True)
        return self._launch_with_numba

    def _numba_target(self, kernel: Any) -> Callable[..., None]:
        """An overload launched by numba-cuda's ``_Kernel.launch`` (parameter types Rust does
        not pack, such as ``CPointer``)."""

        def target(args, griddim, blockdim, stream, sharedmem, _kernel=kernel):
            _kernel.launch(args, griddim, blockdim, _stream_for_numba(stream), sharedmem)

        return target

    def _name(self, position: int) -> str:
        return self._names[position] if position < len(self._names) else f"arg{position}"

    def _select_overload(
        self, argtypes: tuple, configuration: tuple[tuple, tuple, Any, int]
    ) -> Any:
        """numba-cuda's overload for these argument types, compiling when allowed, with the
        launch's arguments current (``launch_args_current``). No frame of the compile holds
        the arguments themselves: its frames may outlive it (a library that keeps an exception
        raised there, as pytest's hook for exceptions in finalizers does, keeps its
        traceback's frames and their locals), and the launch must not keep its arguments."""
        dispatcher = self._dispatcher
        if dispatcher.specialized:
            # One signature given as a string (or specialize()): numba-cuda launches its one
            # overload without matching the arguments; fastlaunch does too, and then refuses
            # arrays that do not fit it (_check_argument) where numba-cuda passes wrong data.
            return next(iter(dispatcher.overloads.values()))
        exact = dispatcher.overloads.get(argtypes)
        if exact is not None:
            return exact
        if numba_cuda.can_compile(dispatcher):
            started = time.perf_counter()
            kernel = self._compile_for_launch(argtypes, configuration)
            _log.debug(
                "compiled (or loaded from the compile cache) %s(%s) in %.0f ms",
                self.__qualname__,
                ", ".join(map(str, argtypes)),
                (time.perf_counter() - started) * 1e3,
            )
            return kernel
        # numba-cuda's rule with compiling disabled (a list of signatures): the
        # signature whose conversions from the argument types rate best (fewest unsafe, then
        # safe, then promoting ones); ambiguity and no match raise. numba's C dispatcher
        # applies the same rating to numba's own argument types.
        signature = dispatcher.typingctx.resolve_overload(
            dispatcher.py_func, dispatcher.nopython_signatures, argtypes, {}, allow_ambiguous=False
        )
        if signature is None:
            raise TypeError(
                "No matching definition for argument type(s) " + ", ".join(map(str, argtypes))
            )
        return dispatcher.overloads[tuple(signature.args)]

    def _compile_for_launch(
        self, argtypes: tuple, configuration: tuple[tuple, tuple, Any, int]
    ) -> Any:
        """Compiles as numba-cuda's own launch does: through its C dispatcher, with the
        launch configuration current (``numba.cuda.launchconfig.current_launch_config()``,
        whose ``dispatcher`` is this kernel; the caller made the launch's arguments
        ``launch_config.args``). numba types fastlaunch's argument types, not the objects
        (which may be kinds only fastlaunch reads, such as DLPack-only tensors)."""
        config = _launch_configuration(self, *configuration)
        typed = tuple(_Typed(t) for t in argtypes)
        kernel = numba_cuda.compile_with_c_dispatcher(self._dispatcher, typed, config)
        # Callbacks the compile added to the current configuration run before the launch
        # that compiled (numba-cuda runs that configuration's list then; before 0.30,
        # nothing adds any).
        for callback in config.pre_launch_callbacks:
            callback(kernel, config)
        return kernel

    def _target(self, kernel: Any, compute_capability: int) -> Any:
        """What Rust launches for a numba ``_Kernel``: its linked cubin, loaded once; or,
        for kernels that need numba-cuda's own launch (debug error readback, module
        callbacks of linked code), a callable."""
        key = (id(kernel), compute_capability)
        known = self._compiled.get(key)
        if known is not None and known[0] is kernel:
            return known[1]
        target: _core.CompiledKernel | Callable[..., None]
        if kernel.debug or numba_cuda.has_module_callbacks(kernel):
            # numba-cuda reads back the error code after each launch of a debug kernel, and
            # runs the callbacks of linked code when it loads its module
            target = self._numba_target(kernel)
        else:
            major, minor = divmod(compute_capability, 10)
            cc = (major, minor, "a" if compute_capability >= 90 else "")
            cubin = numba_cuda.cubin(kernel, cc)
            target = _core.CompiledKernel(
                bytes(cubin.code), kernel.entry_name, cooperative=bool(kernel.cooperative)
            )
            # numba-cuda parses the option on each overload and sets it on its own function
            carveout = getattr(kernel, "shared_memory_carveout", None)
            if carveout is not None:
                for ordinal in range(_core.device_count()):
                    if _core.compute_capability(ordinal) == (major, minor):
                        target.set_attribute("preferred_shared_memory_carveout", carveout, ordinal)
            _log.debug(
                "loaded %s (%d bytes of cubin for sm_%d)",
                kernel.entry_name,
                len(cubin.code),
                compute_capability,
            )
        self._compiled[key] = (kernel, target)
        return target


class _Typed:
    """Stands for an argument of a known numba type (numba's typeof reads ``_numba_type_``)."""

    __slots__ = ("_numba_type_",)

    def __init__(self, numba_type: Any) -> None:
        self._numba_type_ = numba_type


def _launch_configuration(
    kernel: Kernel, griddim: tuple, blockdim: tuple, stream: Any, sharedmem: int
) -> Any:
    """numba-cuda's ``_LaunchConfiguration`` for a launch fastlaunch hands to numba-cuda (to
    compile, or to launch), with this kernel as its ``dispatcher``. Built without its
    ``__init__``, which would warn of low occupancy again (fastlaunch already has, once)."""
    return numba_cuda.launch_configuration(
        kernel, griddim, blockdim, _stream_for_numba(stream), sharedmem
    )


def _compile_through(dispatcher: Any, kernel: Kernel) -> None:
    """Makes numba-cuda's dispatcher compile through ``kernel._compile_for_args``: numba's C
    dispatcher looks the method up on its own dispatcher, and a wrapper set on the fastlaunch
    kernel must see compiles all the same. A weak reference: the kernel owns the dispatcher."""
    kernel_ref = weakref.ref(kernel)
    unwrapped = numba_cuda.unbound_compile_for_args(dispatcher)

    def compile_for_args(*args: Any, **kws: Any) -> Any:
        owner = kernel_ref()
        if owner is None:
            return unwrapped(dispatcher, *args, **kws)
        return owner._compile_for_args(*args, **kws)

    dispatcher._compile_for_args = compile_for_args


_registered = False


def register_as_numba_dispatcher() -> None:
    """Makes ``isinstance(kernel, numba.cuda.dispatcher.CUDADispatcher)`` true for fastlaunch
    kernels (and ``numba.cuda.extending.is_jitted``), as libraries check: CUDADispatcher is an
    ABC, so Kernel is registered as a virtual subclass (it has the dispatcher's API through
    ``__getattr__``). Once per process."""
    global _registered
    if not _registered:
        numba_cuda.dispatcher_class().register(Kernel)
        _registered = True


def _parameter_names(func: Callable[..., Any]) -> list[str] | None:
    """Positional parameter names, or None for functions taking ``*args``."""
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return None
    names = []
    for p in parameters:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            return None
        names.append(p.name)
    return names


def jit(func_or_sig: Any = None, *signatures: Any, **options: Any) -> Any:
    """A drop-in for ``numba.cuda.jit``: the same forms and options.

    ``@jit``, ``@jit(**options)``, ``@jit("void(float32[::1])")``, ``@jit([sig, ...])``,
    and ``jit(existing_numba_kernel)``. ``device=True`` returns numba-cuda's own device
    function.
    """
    # numba-cuda's own decorator, not the `numba.cuda.jit` attribute: that one may be
    # fastlaunch.jit itself (the conformance runner patches it in).
    numba_jit = numba_cuda.numba_jit()
    dispatcher_class = numba_cuda.dispatcher_class()

    if isinstance(func_or_sig, Kernel):
        return func_or_sig
    if isinstance(func_or_sig, dispatcher_class):
        if signatures or options:
            raise TypeError("jit(existing_kernel) takes no further signatures or options")
        return Kernel(func_or_sig)
    if options.get("device"):
        return numba_cache.observe_device(numba_jit(func_or_sig, *signatures, **options))
    if not signatures and _cached_signatures(func_or_sig, options):
        return _compiling_signatures(func_or_sig, options)
    return _wrap(numba_jit(func_or_sig, *signatures, **options), dispatcher_class)


def _cached_signatures(func_or_sig: Any, options: dict) -> bool:
    """Whether ``jit(func_or_sig, **options)`` compiles signatures that fastlaunch's cache
    should serve: signatures given, the cache on, and no ``cache=True`` (numba-cuda's own)."""
    if options.get("cache") or not numba_cache.settings.enabled():
        return False
    if isinstance(func_or_sig, list):
        return all(numba_cuda.is_signature(sig) for sig in func_or_sig)
    return func_or_sig is not None and numba_cuda.is_signature(func_or_sig)


def _compiling_signatures(func_or_sig: Any, options: dict) -> Callable[[Any], Any]:
    """``jit(signatures, **options)``, as numba-cuda's: a decorator that makes the dispatcher
    and compiles each signature, but with fastlaunch's cache in place before those compiles
    (numba-cuda compiles in its decorator, before a cache could be put in)."""
    single = not isinstance(func_or_sig, list)
    signatures = [func_or_sig] if single else list(func_or_sig)
    numba_jit = numba_cuda.numba_jit()

    def decorate(func: Any) -> Any:
        made = numba_jit(func, **options)
        if not isinstance(made, numba_cuda.dispatcher_class()):
            return made  # the simulator's kernel
        kernel = Kernel(made)
        numba_cuda.compile_signatures(made, signatures, specialized=single)
        return kernel

    return decorate


def _wrap(made: Any, dispatcher_class: type) -> Any:
    """Wraps what ``numba.cuda.jit`` made: a dispatcher, or a decorator that makes one."""
    if isinstance(made, dispatcher_class):
        return Kernel(made)
    if callable(made):
        return lambda func: _wrap(made(func), dispatcher_class)
    return made


__all__ = ["Kernel", "jit", "numba_type", "register_as_numba_dispatcher"]


if TYPE_CHECKING:
    # The Rust launch path calls these methods by name: Kernel must provide them.
    _hooks: type[_core._KernelHooks] = Kernel
