"""Type stubs for fastlaunch's Rust extension (``rust/ext``)."""

from collections.abc import Callable
from typing import Any, Protocol, final

from typing_extensions import disjoint_base

__all__ = [
    "__version__",
    "BoundLaunch",
    "CompiledKernel",
    "Event",
    "Graph",
    "GraphLaunch",
    "Stream",
    "default_stream_policy",
    "ordering_enabled",
    "set_default_stream_policy",
    "set_ordering",
    "stream_handle",
    "memory_stream_handle",
    "step_form",
    "HeldArgs",
    "DirectReplays",
    "follow_capture",
    "end_followed_capture",
    "followed_capture",
    "set_release_gil",
    "releases_gil",
    "Kernel",
    "Launcher",
    "classify",
    "ArrayDescription",
    "describe_births_of",
    "describe_birth",
    "_mark_forked_child",
    "_keep_submitted",
    "_submitted",
    "_remembered_launches",
    "_cupy_layout",
    "_cupy_current_stream",
    "_remembered_checks",
    "compute_capability",
    "current_context",
    "current_device",
    "describe",
    "device_attribute",
    "device_attribute_names",
    "device_count",
    "device_index",
    "device_name",
    "device_pci_bus_id",
    "device_total_memory",
    "device_uuid",
    "driver_version",
    "fingerprint",
    "is_available",
    "memory_info",
    "loaded_image_count",
    "pack",
    "pointer_device",
    "context_key",
    "current_context_key",
    "forget_context",
    "at_exit",
    "settle_export",
    "InterfaceProperty",
    "mem_alloc",
    "mem_free",
    "PoolRelease",
    "OwnerDeref",
    "pool_release",
    "deref_when_collected",
    "StreamReturn",
    "read_numba_streams",
    "pool_numba_streams",
    "numba_stream",
    "read_numba_memory_classes",
    "read_numba_contexts",
    "numba_pool_memory",
    "numba_device_array",
    "device_array",
    "give_device_array",
    "pool_array",
    "pool_array_from",
    "first_axis_view",
    "copy_to_device",
    "copy_to_host",
    "copy_device",
    "memset",
    "pool_release_threshold",
    "set_pool_release_threshold",
    "pool_usage",
    "pool_trim",
    "pinned_alloc",
    "pinned_free",
    "stream_create",
    "stream_destroy",
    "stream_synchronize",
    "stream_query",
    "stream_wait_event",
    "event_create",
    "event_destroy",
    "event_record",
    "event_synchronize",
    "event_query",
    "event_elapsed_ms",
    "context_synchronize",
    "pop_device",
    "primary_context",
    "push_device",
    "select_device",
    "synchronize",
    "unavailable_reason",
]

__version__: str

@final
class CompiledKernel:
    """A linked cubin loaded with the library API, and one kernel entry in it."""

    def __new__(cls, image: bytes, entry: str, cooperative: bool = False) -> CompiledKernel: ...
    @property
    def entry(self) -> str: ...
    @property
    def cooperative(self) -> bool: ...
    def attribute(self, name: str, device: int = 0) -> int: ...
    def set_attribute(self, name: str, value: int, device: int = 0) -> None: ...
    def max_active_blocks_per_multiprocessor(
        self, block_size: int, dynamic_shared_bytes: int
    ) -> int: ...

class _KernelHooks(Protocol):
    """The methods the Rust launch path calls by name on a ``Kernel`` subclass instance
    (``fastlaunch.Kernel`` in ``dispatcher.py`` defines them). Not at run time: a contract
    for type checkers."""

    def _on_miss(
        self,
        args: tuple[Any, ...],
        fingerprint: bytes,
        descriptors: list[tuple[Any, ...]],
        compute_capability: int,
        configuration: tuple[tuple[int, int, int], tuple[int, int, int], Any, int],
    ) -> tuple[tuple[Any, ...] | None, Callable[..., Any]]:
        """No overload matches: type ``descriptors`` (the decoded ``fingerprint``) with
        numba and compile. Returns ``(param_types, target)``, which Rust registers for
        ``fingerprint`` on ``compute_capability``:

        - ``param_types``: the compiled overload's numba parameter types
          (``signature.args``), one per argument. Rust builds the packing plan from them
          (arrays, records, booleans, integers, floats, complex numbers, datetimes and
          timedeltas, enum members, tuples of those); then it calls ``target(packed)``, where
          ``packed`` says whether fastlaunch packs every parameter, for what to launch: a
          ``CompiledKernel`` (only when packed), or a callable
          ``(args, griddim, blockdim, stream, sharedmem)`` through which numba-cuda launches.
        - ``None``: numba-cuda launches every such launch; ``target`` is that callable.
        """
    def _launch_with_numba(
        self,
        args: tuple[Any, ...],
        griddim: tuple[int, int, int],
        blockdim: tuple[int, int, int],
        stream: Any,
        sharedmem: int,
    ) -> None:
        """Launch through numba-cuda's own path (arguments fastlaunch does not pack)."""
    def _warn_low_occupancy(self, grid_size: int) -> None:
        """numba-cuda's low-occupancy warning, asked once per kernel."""
    def _current_launch_args(self) -> tuple[Any, ...] | None:
        """The arguments of the launch compiling on this thread (``Launcher.args``)."""
    def _pre_launch_callbacks(self, launcher: Launcher) -> list[Any]:
        """The callback list of ``launcher``'s configuration (``Launcher.pre_launch_callbacks``)."""
    def _run_pre_launch_callbacks(self, launcher: Launcher, args: tuple[Any, ...]) -> None:
        """Runs the callbacks of ``launcher``'s configuration (asked once the kernel has any
        callback list)."""

@disjoint_base
class Kernel:
    """The Rust side of ``fastlaunch.Kernel``: overload table and launch path."""

    def __new__(cls, *_args: Any, **_kwargs: Any) -> Kernel: ...
    def _set_parameter_names(self, names: list[str]) -> None: ...
    def _set_always_numba(self, always: bool) -> None: ...
    @property
    def miss_count(self) -> int: ...
    @property
    def overload_count(self) -> int: ...
    def _register(
        self,
        fingerprint: bytes,
        compute_capability: int,
        param_types: tuple[Any, ...] | None,
        target: CompiledKernel | Callable[..., Any],
    ) -> None:
        """Registers an overload packed by the plan of numba types ``param_types`` (tests
        and tools; launches register what ``_on_miss`` returns)."""
    def _clear_overloads(self) -> None: ...
    @property
    def _configuration_count(self) -> int: ...
    @property
    def _configuration_parses(self) -> int:
        """Configurations ``kernel[...]`` parsed in full (the others came from its cache)."""
    def _clear_configurations(self) -> None: ...
    def __getitem__(self, key: Any, /) -> Launcher: ...
    def configure(
        self,
        griddim: Any,
        blockdim: Any,
        stream: Any = None,
        sharedmem: Any = None,
        *,
        cluster: Any = None,
    ) -> Launcher: ...
    def _configured(
        self, griddim: Any, blockdim: Any, stream: Any, sharedmem: Any, cluster: Any
    ) -> Launcher: ...

@final
class Launcher:
    """``kernel[griddim, blockdim, stream, sharedmem]``; calling it launches."""

    def __call__(self, *args: Any) -> None: ...
    def bind(self, *args: Any) -> BoundLaunch: ...
    @property
    def griddim(self) -> tuple[int, int, int]: ...
    @property
    def blockdim(self) -> tuple[int, int, int]: ...
    @property
    def stream(self) -> Any: ...
    @property
    def stream_handle(self) -> int: ...
    @property
    def sharedmem(self) -> int: ...
    @property
    def cluster(self) -> tuple[int, int, int] | None: ...
    @property
    def args(self) -> tuple[Any, ...] | None:
        """The arguments of the launch compiling on this thread (numba-cuda's
        ``launch_config.args``); None outside a launch-triggered compile."""
    @property
    def pre_launch_callbacks(self) -> list[Callable[[Any, Launcher], None]]:
        """numba-cuda's ``pre_launch_callbacks``: ``callback(kernel, launch_config)``
        before each launch of this configuration."""
    @property
    def dispatcher(self) -> Kernel: ...
    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]: ...

@final
class BoundLaunch:
    """``kernel[...].bind(*args)``: arguments packed once; calling it launches again."""

    def __call__(self, *args: Any, **kwargs: Any) -> None: ...
    def _submit_repeatedly(self, times: int) -> None: ...
    def set_args(self, *args: Any) -> None: ...
    def set_arg(self, index: int, value: Any) -> None: ...
    @property
    def packed(self) -> bytes: ...

@final
class Graph:
    """A CUDA graph captured from a stream (``with graph:``), replayed with ``replay()``."""

    def __new__(cls, stream: Any, mode: str = "global") -> Graph: ...
    def __enter__(self) -> Graph: ...
    def __exit__(
        self, exc_type: Any = None, _exc_value: Any = None, _traceback: Any = None
    ) -> bool: ...
    def replay(self, stream: Any = None) -> None: ...
    @property
    def launches(self) -> list[GraphLaunch]: ...
    @property
    def node_count(self) -> int: ...
    @property
    def stream(self) -> Any: ...
    @property
    def captured(self) -> bool: ...

@final
class GraphLaunch:
    """One fastlaunch launch inside a captured graph; new arguments apply to later replays."""

    def set_args(self, *args: Any) -> None: ...
    def set_arg(self, index: int, value: Any) -> None: ...
    @property
    def kernel(self) -> Kernel: ...
    @property
    def args(self) -> tuple[Any, ...]: ...

@final
class Stream:
    """A CUDA stream (created here, or wrapping a handle owned elsewhere)."""

    @staticmethod
    def create(non_blocking: bool = False) -> Stream: ...
    @staticmethod
    def external(handle: int) -> Stream: ...
    @property
    def handle(self) -> int: ...
    def __cuda_stream__(self) -> tuple[int, int]: ...
    def __int__(self) -> int: ...
    def synchronize(self) -> None: ...
    def query(self) -> bool: ...
    def wait_event(self, event: Event) -> None: ...

@final
class Event:
    """A CUDA event, for ordering between streams and for timing."""

    def __new__(cls, timing: bool = True) -> Event: ...
    def record(self, stream: Any = None) -> None: ...
    def wait(self, stream: Any = None) -> None: ...
    def synchronize(self) -> None: ...
    def query(self) -> bool: ...
    def elapsed_time(self, end: Event) -> float: ...

def set_release_gil(release: bool) -> None: ...
def releases_gil() -> bool: ...
def set_ordering(enabled: bool) -> None: ...
def ordering_enabled() -> bool: ...
def set_default_stream_policy(policy: str) -> None: ...
def default_stream_policy() -> str: ...
def memory_stream_handle(stream: Any) -> int:
    """The handle of a stream argument of numba-cuda's memory API: 0 for a false value, an int
    refused (numba-cuda's ``TypeError``), else what ``stream_handle`` reads."""

def stream_handle(stream: Any) -> int:
    """The handle of a launch's stream: 0/None, an int handle, or ``__cuda_stream__``."""

def _keep_submitted(keep: bool) -> None: ...
def _submitted() -> bytes: ...
def _remembered_launches() -> tuple[int, int]: ...
def _cupy_layout() -> str: ...
def _cupy_current_stream() -> tuple[int, str]: ...
def _remembered_checks() -> list[str]: ...
def classify(obj: Any) -> tuple[Any, ...]: ...

@final
class ArrayDescription:
    """What a launch reads of one array fastlaunch's memory API made, carried by that array
    as ``_fastlaunch_description`` (``describe_birth``)."""

def describe_births_of(cls: type) -> None:
    """Lets instances of ``cls`` (numba-cuda's ``DeviceNDArray``) carry an
    ``ArrayDescription``; the class's own ``_fastlaunch_description`` is None."""

def describe_birth(
    array: Any, described: tuple[Any, ...], dtype: Any, gpu_data: Any, address: int | None
) -> ArrayDescription | None:
    """The description of ``array``, just made with the shape and strides of ``described``
    (an ``objects.layout`` tuple), ``dtype`` and ``gpu_data`` (at ``address``, where the
    caller knows it), as a launch reads it, for its ``_fastlaunch_description`` (an instance
    of exactly the class given to ``describe_births_of`` that a launch can read; else
    None)."""

def describe(fingerprint: bytes) -> list[tuple[Any, ...]]: ...
def pack(param_types: tuple[Any, ...], args: tuple[Any, ...]) -> bytes:
    """``args`` packed for an overload of numba parameter types ``param_types``."""

def fingerprint(args: tuple[Any, ...]) -> bytes: ...
def is_available() -> bool: ...
def unavailable_reason() -> str | None: ...
def driver_version() -> tuple[int, int]: ...
def _mark_forked_child() -> None: ...
def device_count() -> int: ...
def device_index(ordinal: int) -> int:
    """The device index `ordinal` names (negative counts from the end); IndexError if none."""

def device_name(ordinal: int) -> str: ...
def device_uuid(ordinal: int) -> str: ...
def device_pci_bus_id(ordinal: int) -> str: ...
def device_total_memory(ordinal: int) -> int: ...
def device_attribute(ordinal: int, name: str) -> int: ...
def device_attribute_names() -> list[str]: ...
def compute_capability(ordinal: int) -> tuple[int, int]: ...
def select_device(ordinal: int) -> None: ...
def current_device() -> int | None: ...
def current_context() -> int | None: ...
def primary_context(ordinal: int) -> int: ...
def push_device(ordinal: int) -> None: ...
def pop_device() -> int | None: ...
def synchronize() -> None: ...
def memory_info() -> tuple[int, int]: ...
def loaded_image_count() -> int: ...
def pointer_device(pointer: int) -> int | None: ...

# numba-cuda's memory API on the Rust core (rust/ext/src/memory/): fastlaunch's stream-ordered
# pool, staged copies, pinned memory. Each works in the thread's current context.
def mem_alloc(nbytes: int, stream: int = 0) -> int:
    """``nbytes`` from the current context's stream-ordered pool, ordered on ``stream`` (0: the
    legacy default stream), or a block the freed-block cache keeps for its size class; a null
    pointer for 0 bytes. While a stream capture refuses the pool's calls, ordinary device
    memory (``cuMemAlloc``)."""

def context_key() -> int:
    """The current context's unique id (device 0's primary context made current if none is)."""

def current_context_key() -> int | None:
    """The current context's key (``context_key``), or None when no context is current (none
    is made current)."""

def forget_context(key: int) -> None:
    """Releases what the memory API keeps for the context whose key is ``key`` (its staging
    ring, events and pool): numba-cuda is resetting it."""

def at_exit() -> None:
    """The interpreter is exiting: nothing dropped from now on is given back to the driver."""

def settle_export(array: Any, pointer: int) -> None:
    """Before ``array``'s interface goes to another library: waits, without the GIL and in the
    relaxed capture mode, for its own pending work on the legacy stream (at once, with no
    driver call, when none is), and marks its pool block exported (its free then waits for
    the whole context). ``pointer``: the interface's address, for memory not of the pool."""

def mem_free(pointer: int, stream: int = 0, context: int | None = None) -> None:
    """Frees ``pointer`` on ``stream``, after all work already enqueued there and the work on
    non-blocking streams since the last free, in the context whose key is ``context``
    (nothing, when it was destroyed since)."""

@final
class InterfaceProperty:
    """numba-cuda's ``__cuda_array_interface__`` property (``getter``), then
    ``settle_export``: what ``install()`` puts on numba-cuda's arrays. Read-only."""

    def __new__(cls, getter: Any) -> InterfaceProperty: ...
    def __get__(self, instance: Any, owner: Any = None, /) -> Any: ...
    def __set__(self, instance: Any, value: Any, /) -> None: ...
    @property
    def fget(self) -> Any:
        """numba-cuda's own getter."""

@final
class PoolRelease:
    """The finalizer of an ``AutoFreePointer`` over pool memory (``pool_release``): what
    ``MemoryPointer.free`` asks of numba-cuda's ``weakref.finalize``."""

    @property
    def alive(self) -> bool:
        """Whether the memory is still to be released."""

    def __call__(self, _collected: Any = None) -> None:
        """Releases the memory, once (again: nothing): out of the manager's ``allocations``,
        freed at once, or queued in its ``deallocations`` while ``cuda.defer_cleanup()``
        holds them."""

@final
class OwnerDeref:
    """numba-cuda's ``deref`` of one ``OwnedPointer`` (``deref_when_collected``), the
    callback of a weak reference to it."""

    def __call__(self, _collected: Any) -> None: ...

def pool_release(
    memory: Any, allocations: Any, deallocations: Any, address: int, context: int, nbytes: int
) -> PoolRelease:
    """The finalizer of ``memory``, an ``AutoFreePointer`` over ``nbytes`` of pool memory at
    ``address`` in the context whose key is ``context``, entered in the memory manager's
    ``allocations``: it releases the memory when called, or when ``memory`` is collected
    unreleased."""

@final
class StreamReturn:
    """Gives a pooled stream back to its idle list when it goes: held in the instance dict
    of the numba-cuda ``Stream`` handed out over the stream (``_fastlaunch_pooled``), so
    when that object is collected."""

def read_numba_streams(stream: type, handle: type, readable: bool) -> None:
    """Gives numba-cuda's ``Stream`` class and its handle's type; ``readable``: its
    ``__cuda_stream__`` returns ``int()`` of the handle, which launches then read without it."""

def pool_numba_streams(idle: dict[int, list[Stream]], first: Callable[[], list[Stream]]) -> None:
    """Gives ``numba_stream`` the idle streams by context key and ``first``, which returns the
    current context's idle list where it has none yet (or none is current). The first call
    counts."""

def numba_stream() -> Any:
    """numba-cuda's ``cuda.stream()``: a ``Stream`` over an idle stream of the current
    context's pool (a new one when none is idle), given back to the pool when collected."""

def read_numba_memory_classes(
    classes: Any, layouts: dict[tuple, tuple], layout: Callable[[tuple, tuple, int], tuple]
) -> None:
    """Gives the classes of ``classes`` (``_numba_compat.memory_classes()``),
    ``objects._layouts`` and ``objects.layout``. The first call counts."""

def read_numba_contexts(contexts: dict[int, Any], proxies: dict[int, Any]) -> None:
    """Gives ``allocation._contexts`` and ``allocation._proxies``. The first call counts."""

def numba_pool_memory(
    context: Any, address: int, nbytes: int, allocations: Any, deallocations: Any, key: int
) -> Any:
    """An ``AutoFreePointer`` over ``address`` (pool memory), entered in ``allocations`` and
    owned through an ``OwnedPointer`` (returned), with a ``PoolRelease`` as its finalizer."""

def numba_device_array(
    described: tuple, dtype: Any, stream: Any, gpu_data: Any, address: int | None = None
) -> Any:
    """``DeviceNDArray(shape, strides, dtype, stream=stream, gpu_data=gpu_data)`` for a
    non-empty array of the ``objects.layout`` ``described``."""

def device_array(
    shape: Any, dtype: Any = "float64", strides: Any = None, order: str = "C", stream: Any = 0
) -> Any:
    """numba-cuda's ``cuda.device_array``: the common call made here, every other by the
    Python side ``give_device_array`` gave."""

def give_device_array(in_python: Any, contiguous_layout: Any, allocate_in_python: Any) -> None:
    """Gives ``device_array`` its Python side (the first call counts)."""

def pool_array(described: tuple, dtype: Any, stream: Any, stream_handle: int) -> Any:
    """A ``DeviceNDArray`` of the ``objects.layout`` ``described`` over new memory from the
    current context's pool; None where Python is to make it."""

def pool_array_from(
    described: tuple, dtype: Any, stream: Any, stream_handle: int, host: Any
) -> Any:
    """``pool_array`` holding ``host``'s bytes (a contiguous buffer of the array's size),
    copied on ``stream_handle`` as ``copy_to_device`` copies them; None as for
    ``pool_array`` (nothing copied then)."""

def first_axis_view(array: Any, item: slice) -> Any:
    """``array[item]`` for ``item`` a slice of the first axis with step 1, made here where
    ``array`` is exactly a ``DeviceNDArray`` over an ``OwnedPointer`` with positive extents
    and strides and the view is not empty; else None (numba-cuda's ``_do_getitem`` is to make
    it)."""

def deref_when_collected(owned: Any, owner: Any, release: PoolRelease | None = None) -> None:
    """Runs numba-cuda's ``deref`` of ``owned`` (an ``OwnedPointer`` holding a reference on
    ``owner``, a weak proxy of the owning allocation) when ``owned`` is collected: the
    owner's reference count down and, at zero, ``release`` (the owner's, where it is pool
    memory) or the owner's ``free()``."""

def copy_to_device(pointer: int, host: Any, stream: int = 0, nbytes: int | None = None) -> None:
    """Copies a contiguous host buffer to ``pointer``; returns once the host bytes are taken."""

def copy_to_host(host: Any, pointer: int, stream: int = 0, nbytes: int | None = None) -> None:
    """Copies into a writable contiguous host buffer after the work on ``stream``; returns
    when the bytes are there."""

def copy_device(dst: int, src: int, nbytes: int, stream: int = 0) -> None: ...
def memset(pointer: int, value: int, nbytes: int, stream: int = 0) -> None: ...
def pool_release_threshold(device: int) -> int: ...
def set_pool_release_threshold(device: int, nbytes: int) -> None: ...
def pool_usage(device: int) -> tuple[int, int, int]:
    """``(used, reserved, cached)`` bytes of fastlaunch's pool on the device: handed out (the
    freed-block cache's blocks aside), reserved from the driver, kept by the freed-block
    cache."""

def pool_trim(device: int, keep_bytes: int = 0) -> None: ...
def pinned_alloc(nbytes: int) -> int: ...
def pinned_free(pointer: int) -> None: ...

# Streams and events by raw handle (rust/ext/src/memory/handles.rs), owned by the caller:
# each handle is destroyed once, and not used after.
def stream_create(non_blocking: bool = False) -> int:
    """A new stream in the current context (device 0's primary context when none is current);
    ``non_blocking``: not synchronized with the legacy default stream."""

def stream_destroy(handle: int) -> None:
    """Destroys a stream from ``stream_create``; work already on it still runs."""

def stream_synchronize(handle: int) -> None:
    """Waits (without the GIL) until all work submitted to the stream has finished."""

def stream_query(handle: int) -> bool:
    """Whether all work submitted to the stream has finished."""

def stream_wait_event(stream: int, event: int) -> None:
    """Makes later work on ``stream`` wait, on the GPU, for ``event``'s recorded work."""

def event_create(timing: bool = True) -> int:
    """A new event in the current context; ``timing=False`` is cheaper to record and wait on."""

def event_destroy(event: int) -> None: ...
def event_record(event: int, stream: int = 0) -> None:
    """Records ``event`` after the work submitted to ``stream`` so far."""

def event_synchronize(event: int) -> None:
    """Waits (without the GIL) for the work the event was last recorded after."""

def event_query(event: int) -> bool:
    """Whether the work the event was last recorded after has finished."""

def event_elapsed_ms(start: int, end: int) -> float:
    """Milliseconds from ``start`` to ``end``: timing events, both recorded and complete."""

def context_synchronize() -> None:
    """Waits for all work in the current context: ``synchronize()`` under another name."""

@final
class HeldArgs:
    """A graphed call's arguments, with what each tensor among them described then."""

    @property
    def args(self) -> tuple[Any, ...]: ...
    @property
    def tensor_count(self) -> int: ...
    def holds(self, args: tuple[Any, ...]) -> bool:
        """Whether ``args`` are the very objects held, on the same current device, every
        tensor among them has the memory, dtype, shape, strides and device it had, and every
        CuPy array the shape it had."""

@final
class DirectReplays:
    """A graphed step's last calls, each replayed again in one call when its very arguments
    come back (see ``fastlaunch.graphed``)."""

    def __new__(cls, missed: object) -> DirectReplays: ...
    def __call__(self, args: tuple[Any, ...]) -> Any:
        """Replays the graph of the remembered call whose arguments ``args`` are and returns
        that call's return value; ``missed`` when none is, or while this thread captures."""
    def remember_graph(
        self,
        held: HeldArgs,
        graph: Graph,
        handle: int,
        fill: Callable[[list[Any]], Any],
        leaves: list[Any],
        key: Any,
    ) -> None: ...
    def remember_framework(
        self,
        held: HeldArgs,
        replay: Callable[[], Any],
        fill: Callable[[list[Any]], Any],
        leaves: list[Any],
        key: Any,
        lock: Any,
    ) -> None: ...
    def take_hits(self, forget: bool = False) -> list[tuple[Any, int]]:
        """The keys of the graphs replayed since last asked, with how many times each was;
        ``forget=True`` also forgets every call remembered."""
    def __len__(self) -> int: ...
    @property
    def last_stream(self) -> int | None:
        """The stream of the step's last replay (None: torch's or CuPy's current stream)."""
    @last_stream.setter
    def last_stream(self, stream: int | None) -> None: ...

def step_form(
    args: tuple[Any, ...], kwargs: dict[str, Any] | None, device: int
) -> tuple[bytes, list[Any], list[int], HeldArgs | None]:
    """A graphed step's form: ``(key, leaves, kinds, held)``; see ``fastlaunch.graphed``."""

def follow_capture(stream: int) -> None: ...
def end_followed_capture() -> bool: ...
def followed_capture() -> int | None: ...
