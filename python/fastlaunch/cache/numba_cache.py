"""The object fastlaunch puts in a numba-cuda dispatcher as its ``_cache``.

numba-cuda's ``CUDADispatcher.compile(sig)`` asks its cache for the overload before it
compiles (``load_overload``) and hands it every kernel it compiles (``save_overload``); its
``cache=True`` cache and its ``NullCache`` answer there. fastlaunch's answers for every
dispatcher without ``cache=True``, so every route to a compile goes through it: a launch with
new argument types, explicit signatures, ``specialize()`` and ``forall`` (CUDA ufuncs,
gufuncs), ``cuda.reduce``'s kernels, ``kernel.compile(sig)``.

- ``load_overload``: the key (``key.overload_key``) and the entry under it; on a hit, numba-cuda's
  ``_Kernel`` rebuilt from it: numba-cuda adds it as an overload as if it had compiled it, and
  fastlaunch's launch path loads its cubin as after a compile. The kernel's statistics
  (``dispatcher.stats``) count it as the compile it stands for.
- ``save_overload``: the key again (nothing may have changed while it compiled), then the
  entry. Launch-configuration-sensitive kernels (compiled per launch configuration) are not
  stored.
- ``flush`` (numba-cuda's ``recompile()``): later loads of this dispatcher miss, as numba-cuda's
  own cache's do after a flush.

Any failure inside is a miss: numba-cuda compiles as it would without a cache."""

from __future__ import annotations

import logging
import time
import weakref
from typing import TYPE_CHECKING, Any

from fastlaunch import _core
from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.cache import settings

if TYPE_CHECKING:
    from fastlaunch.cache import key as keys

# The key, the store and what they need are imported at the first compile (``_parts``), so
# that ``import fastlaunch`` stays light.

_log = logging.getLogger("fastlaunch.cache")


def current_cc() -> tuple[int, int, str]:
    """The compute capability numba-cuda compiles for now (its current device's: the thread's
    current context's device, else device 0), as its code library names cubins."""
    ordinal = _core.current_device()
    major, minor = _core.compute_capability(0 if ordinal is None else ordinal)
    return major, minor, "a" if (major, minor) >= (9, 0) else ""


def kernel_name(dispatcher: Any) -> str:
    py_func = dispatcher.py_func
    return f"{getattr(py_func, '__module__', '?')}.{getattr(py_func, '__qualname__', '?')}"


def _parts() -> Any:
    """The cache's working modules, imported on first use."""
    from fastlaunch.cache import entry, stats, store, toolchain, values
    from fastlaunch.cache import key as keys_module

    return entry, stats, store, toolchain, values, keys_module


class CompileCache:
    """A dispatcher's ``_cache`` (numba-cuda's cache protocol)."""

    def __init__(self, dispatcher: Any) -> None:
        self._dispatcher = weakref.ref(dispatcher)
        self._pending: dict[tuple, tuple[keys.Key, tuple[int, int, str], str] | None] = {}
        self._bypass = False
        #: what this dispatcher's compiles did: loaded, compiled (a miss or not cached), stored
        self.hits = self.misses = self.stores = 0
        self.refusal: str | None = None  # why the last compile was not cached
        self.last_hit: dict[str, float] | None = None  # the steps of the last hit (s)

    # numba-cuda reads these
    cache_path = None  # as its NullCache: fastlaunch's folder is not numba-cuda's cache path

    def enable(self) -> None:
        pass

    def disable(self) -> None:
        pass

    def flush(self) -> None:
        self._bypass = True

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        dispatcher = self._dispatcher()
        if dispatcher is None or self._bypass or not settings.enabled():
            return None
        started = time.perf_counter()
        _, stats, store, _, values, keys = _parts()
        Unkeyable = values.Unkeyable
        try:
            argtypes = numba_cuda.normalize_argtypes(sig)
            cc = current_cc()
            root = settings.directory()
        except Exception as e:  # noqa: BLE001 - any failure: compile as without a cache
            _log.debug("cache: no key for %s: %r", kernel_name(dispatcher), e)
            return None
        try:
            key = keys.overload_key(dispatcher, argtypes, cc)
        except Unkeyable as refusal:
            self._pending[argtypes] = None
            self.misses += 1
            self.refusal = str(refusal)
            stats.uncachable(kernel_name(dispatcher), str(refusal), root)
            _log.info("cache: %s is not cached: %s", kernel_name(dispatcher), refusal)
            return None
        except Exception as e:  # noqa: BLE001
            self._pending[argtypes] = None
            stats.uncachable(kernel_name(dispatcher), f"keying failed: {e!r}", root)
            _log.debug("cache: keying %s failed", kernel_name(dispatcher), exc_info=True)
            return None
        keyed = time.perf_counter()
        stats.timed("key", keyed - started)
        self._pending[argtypes] = (key, cc, root)
        data = store.read(root, key.key)
        read = time.perf_counter()
        stats.timed("read", read - keyed)
        if data is None:
            self.misses += 1
            stats.count("misses", root)
            return None
        try:
            kernel = _rebuild(dispatcher, argtypes, key, cc, data)
        except Exception as e:  # noqa: BLE001 - a corrupt, foreign or stale-format entry
            _log.info("cache: entry for %s unusable (%s): compiling", kernel_name(dispatcher), e)
            stats.count("unreadable", root)
            stats.count("misses", root)
            self.misses += 1
            return None
        rebuilt = time.perf_counter()
        stats.timed("rebuild", rebuilt - read)
        store.touch(root, key.key)
        self._pending.pop(argtypes, None)
        self.last_hit = {"key": keyed - started, "read": read - keyed, "rebuild": rebuilt - read}
        self.hits += 1
        stats.count("hits", root)
        numba_cuda.count_cache_hit_as_miss(dispatcher, sig)
        _log.debug("cache: hit %s%s", kernel_name(dispatcher), argtypes)
        return kernel

    def save_overload(self, sig: Any, kernel: Any) -> None:
        dispatcher = self._dispatcher()
        if dispatcher is None:
            return
        try:
            argtypes = numba_cuda.normalize_argtypes(sig)
        except Exception:  # noqa: BLE001
            return
        pending = self._pending.pop(argtypes, None)
        if pending is None:
            return
        started = time.perf_counter()
        _, stats, store, _, values, keys = _parts()
        Unkeyable = values.Unkeyable
        key, cc, root = pending
        name = kernel_name(dispatcher)
        try:
            if getattr(kernel, "launch_config_sensitive", False):
                raise Unkeyable(
                    "it is launch-configuration sensitive (numba-cuda compiles it per launch "
                    "configuration)"
                )
            if tuple(kernel.signature.args) != tuple(argtypes):
                raise Unkeyable(f"it compiled as {kernel.signature}, not for {argtypes}")
            after = keys.overload_key(dispatcher, argtypes, cc)
            if after.source != key.source:
                raise Unkeyable("a value it depends on changed while it compiled")
            for device, source, before in key.devices:
                keys.mark_compiled(device, source, before)
            data = _encode(kernel, key, cc)
        except Unkeyable as refusal:
            self.refusal = str(refusal)
            stats.uncachable(name, str(refusal), root)
            _log.info("cache: %s is not cached: %s", name, refusal)
            return
        except Exception as e:  # noqa: BLE001
            stats.uncachable(name, f"storing failed: {e!r}", root)
            _log.debug("cache: storing %s failed", name, exc_info=True)
            return
        if store.write(root, key.key, data):
            self.stores += 1
            stats.count("stores", root)
        stats.timed("save", time.perf_counter() - started)


def attach(dispatcher: Any) -> None:
    """Puts fastlaunch's cache in a numba-cuda dispatcher that has none of its own (not
    ``cache=True``), when the cache is on."""
    if settings.enabled() and numba_cuda.uses_null_cache(dispatcher):
        numba_cuda.set_cache(dispatcher, CompileCache(dispatcher))


def observe_device(made: Any) -> Any:
    """A device function fastlaunch.jit made: the overloads compiled now (explicit signatures)
    were compiled from its current code and values (``key.mark_compiled``). A decorator
    (``jit("sig", device=True)``) is wrapped to do it once it has made the function."""
    if isinstance(made, numba_cuda.dispatcher_types()):
        keys = _parts()[5]
        try:
            keys.mark_compiled(made, keys.device_digest(made))
        except Exception:  # noqa: BLE001 - unkeyable: its overloads stay keyed by their IR
            pass
        return made
    if callable(made) and not isinstance(made, type):

        def decorator(func: Any) -> Any:
            return observe_device(made(func))

        return decorator
    return made


# -- entries -----------------------------------------------------------------------------------


def _encode(kernel: Any, key: keys.Key, cc: tuple[int, int, str]) -> bytes:
    entry, _, _, toolchain, values, _ = _parts()
    Unkeyable, digest = values.Unkeyable, values.digest
    try:
        record = numba_cuda.kernel_record(kernel, cc)
    except ValueError as e:
        raise Unkeyable(str(e)) from None
    # (module callbacks come back with the link= objects that carry them)
    record["nvvm_options"] = {
        name: {"set": sorted(map(str, value))} if isinstance(value, set | frozenset) else value
        for name, value in record["nvvm_options"].items()
    }
    linking = []
    requires: dict[str, str] = {}
    nrt = numba_cuda.nrt_library()
    for item in record.pop("linking"):
        if isinstance(item, str):
            with open(item, "rb") as f:
                linking.append({"path": item, "digest": digest(f.read()).hex()})
            if item.endswith(".cu") or item == nrt:
                requires["nvrtc"] = toolchain.requirement("nvrtc")
        elif isinstance(item, numba_cuda.linkable_code_class()):
            kind, data = numba_cuda.linkable_code_data(item)
            content = digest(data).hex()
            if content not in key.linkables:
                raise Unkeyable(f"it links a {kind} object the key did not see")
            linking.append({"object": kind, "digest": content})
            if kind == "CUSource":
                requires["nvrtc"] = toolchain.requirement("nvrtc")
        else:
            raise Unkeyable(f"it links a {type(item).__qualname__}")
    if record["needs_cudadevrt"]:
        requires["cudadevrt"] = toolchain.requirement("cudadevrt")
    blobs = [("cubin", record.pop("cubin"))]
    blobs += [("llvm", text.encode()) for text in record.pop("llvm")]
    blobs += [("ptx", text.encode()) for text in record.pop("ptx")]
    blobs.append(("linkerinfo", record.pop("linkerinfo").encode()))
    header = {**record, "cc": list(cc), "linking": linking, "requires": requires}
    return entry.encode(toolchain.FORMAT, key.key, header, blobs)


def _rebuild(dispatcher: Any, argtypes: tuple, key: keys.Key, cc: tuple, data: bytes) -> Any:
    entry, _, _, toolchain, values, _ = _parts()
    digest = values.digest
    header, blobs = entry.decode(toolchain.FORMAT, key.key, data)
    if tuple(header["cc"]) != tuple(cc):
        raise ValueError("another compute capability's entry")
    for name, identity in header["requires"].items():
        if toolchain.requirement(name) != identity:
            raise ValueError(f"{name} differs from the one it was linked with")
    linking: list[Any] = []
    for item in header["linking"]:
        if "path" in item:
            try:
                with open(item["path"], "rb") as f:
                    current = digest(f.read()).hex()
            except OSError:
                current = None
            if current != item["digest"]:
                raise ValueError(f"linked file {item['path']} changed")
            linking.append(item["path"])
        else:
            found = key.linkables.get(item["digest"])
            if found is None:
                raise ValueError(f"a linked {item['object']} object is gone")
            linking.append(found)
    record = {
        **header,
        "nvvm_options": {
            name: set(value["set"]) if isinstance(value, dict) else value
            for name, value in header["nvvm_options"].items()
        },
        "cubin": blobs["cubin"][0],
        "llvm": [b.decode() for b in blobs.get("llvm", [])],
        "ptx": [b.decode() for b in blobs.get("ptx", [])],
        "linkerinfo": blobs["linkerinfo"][0].decode(),
    }
    kernel = numba_cuda.rebuild_kernel(dispatcher, argtypes, record, linking)
    if str(kernel.signature) != header["signature"]:
        raise ValueError(f"rebuilt as {kernel.signature}, stored as {header['signature']}")
    numba_cuda.bind_if_needed(kernel)  # (linked code's setup callbacks run, as after a compile)
    return kernel
