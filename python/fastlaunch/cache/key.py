"""A compiled kernel's key: everything that decides its code, and nothing that does not.

``overload_key(dispatcher, argtypes, cc)`` walks (``values.Walk``):

1. the toolchain (``toolchain.common()``): Python, numba, numba-cuda, llvmlite, NumPy,
   cuda-core, cuda-bindings, fastlaunch and the cache's format, NVVM and nvJitLink by version
   and build id, libdevice by its bytes;
2. numba-cuda's settings (``numba.cuda.core.config``: ``OPT``, ``CUDA_DEFAULT_PTX_CC``, ...);
3. the compute capability compiled for;
4. every numba extension registered outside numba (``extensions.py``);
5. the dispatcher's options (``fastmath``, ``debug``, ``lineinfo``, ``opt``, ``max_registers``,
   ``lto``, ``launch_bounds``, ``inline``, ..., the *contents* of ``link=`` files) and its
   compiler pipeline;
6. the argument types;
7. the kernel's function: its code, the values it freezes, and every function it calls,
   whatever module defines it (``values.Walk.function``); device functions by their own code
   and options.

Device functions that numba-cuda compiled earlier in the process are a special case: numba
compiles a device function once per signature and keeps that code, frozen globals and all, so
a kernel compiled now may link code compiled from older values. Each such overload that the
cache did not see compiled from the device function's current code and values
(``mark_compiled``) is keyed by its LLVM IR as well (never stale; at worst a miss).

Two digests come out: ``key`` (all of the above) names the entry; ``source`` leaves out those
LLVM IR parts, and is computed again after a compile (``save``): an entry is stored only if
nothing it was keyed by changed while it compiled."""

from __future__ import annotations

import hashlib
import os
import types
import weakref
from typing import Any

from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.cache import extensions, toolchain
from fastlaunch.cache.values import (
    Unkeyable,
    Walk,
    digest,
    is_library,
    is_library_function,
    token,
)

#: device function -> {argument types: source digest it was compiled from}, for overloads the
#: cache saw compiled (during a kernel's compile it keyed, or by fastlaunch.jit(device=True))
_compiled: weakref.WeakKeyDictionary[Any, dict[tuple, str]] = weakref.WeakKeyDictionary()
_IN_PROGRESS = "in progress"


class Key:
    """A kernel's key (``key``), its source digest (``source``), the device functions met
    (device function, its source digest, the overloads it had when keyed) and the
    ``LinkableCode`` objects met (``link=`` and declared functions' links) by content digest."""

    __slots__ = ("key", "source", "devices", "linkables")

    def __init__(
        self, key: str, source: str, devices: list[tuple[Any, str, frozenset]], linkables: dict
    ) -> None:
        self.key = key
        self.source = source
        self.devices = devices
        self.linkables = linkables


class KeyWalk(Walk):
    """A walk with two hashes: the key, and the key without the LLVM IR of device functions
    compiled out of the cache's sight (the source)."""

    def __init__(self, lines: bool) -> None:
        super().__init__(lines, _special)
        self._source = hashlib.blake2b(digest_size=32)
        self._key_only = False

    def feed(self, tag: str, *parts: Any) -> None:
        data = token(tag, parts)
        self._hash.update(data)
        if not self._key_only:
            self._source.update(data)

    def feed_key_only(self, tag: str, *parts: Any) -> None:
        self._key_only = True
        try:
            self.feed(tag, *parts)
        finally:
            self._key_only = False

    def feed_split(self, tag: str, key: str, source: str) -> None:
        self._hash.update(token(tag, (key,)))
        self._source.update(token(tag, (source,)))

    def source_hexdigest(self) -> str:
        return self._source.hexdigest()

    def callee(self, f: Any) -> None:
        """A Python function the code refers to (a ``register_jitable`` function, an
        ``@overload``'s implementation, ...): keyed on its own (``_callee``)."""
        if is_library_function(f) and not (f.__closure__ or f.__defaults__ or f.__kwdefaults__):
            self.function(f)
            return
        key, source = _callee(self, f)
        self.feed_split("P", key, source)

    def sub(self, lines: bool) -> KeyWalk:
        walk = KeyWalk(lines)
        walk.path, walk.found = self.path, self.found
        return walk


def overload_key(dispatcher: Any, argtypes: tuple, cc: tuple[int, int, str]) -> Key:
    """The key of ``dispatcher`` compiled for ``argtypes`` on compute capability ``cc``;
    raises ``Unkeyable`` naming what cannot be keyed."""
    options = dispatcher.targetoptions
    lines = bool(options.get("debug") or options.get("lineinfo"))
    walk = KeyWalk(lines)
    walk.found = {"devices": [], "digests": {}, "linkables": {}}
    walk.feed("fastlaunch kernel cache", _context())
    walk.feed("cc", *cc)
    walk.feed("extensions", extensions.digest(lambda: KeyWalk(False)))
    _options(walk, options)
    pipeline = numba_cuda.pipeline_class(dispatcher)
    if not is_library(pipeline.__module__):
        raise Unkeyable(f"a compiler pipeline of its own ({pipeline.__qualname__})")
    walk.feed("pipeline", pipeline.__module__, pipeline.__qualname__)
    walk.feed("args", len(argtypes))
    for argtype in argtypes:
        _type(walk, argtype, strict=True)
    walk.function(dispatcher.py_func)
    found = walk.found
    return Key(
        key=walk.hexdigest(),
        source=walk.source_hexdigest(),
        devices=found["devices"],
        linkables=found["linkables"],
    )


_context_memo: tuple[Any, list, str] | None = None


def _context() -> str:
    """The toolchain (``toolchain.common()``) and numba-cuda's settings, digested; again only
    when a setting changed."""
    global _context_memo
    tools = toolchain.common()
    names, values = numba_cuda.config_snapshot()
    memo = _context_memo
    if memo is not None and memo[0] is tools and memo[1] == values:
        return memo[2]
    walk = Walk(False)
    for name, value in tools:
        walk.feed("tool", name, value)
    for name, value in zip(names, values, strict=True):
        walk.feed("config", name, repr(value))
    found = walk.hexdigest()
    _context_memo = (tools, values, found)
    return found


def device_digest(dispatcher: Any) -> str:
    """A device function's source digest, as a kernel's key walks it (without line tables)."""
    walk = KeyWalk(False)
    walk.found = {"devices": [], "digests": {}, "linkables": {}}
    return _device(walk, dispatcher, False)[1]


def mark_compiled(dispatcher: Any, digest_: str, before: frozenset = frozenset()) -> None:
    """The overloads ``dispatcher`` (a device function) has now, but for ``before``, were
    compiled from the code and values of source digest ``digest_``."""
    known = _compiled.setdefault(dispatcher, {})
    for argtypes in numba_cuda.device_overloads(dispatcher):
        if argtypes not in before:
            known[argtypes] = digest_


# -- options -----------------------------------------------------------------------------------


def _options(walk: KeyWalk, options: dict) -> None:
    for name in sorted(options):
        value = options[name]
        walk.feed("option", name)
        if name == "link":
            walk.feed("link", len(value or ()))
            for item in value or ():
                _linked(walk, item)
        elif name == "extensions":
            if value:
                raise Unkeyable(
                    "extensions= (numba-cuda launches such kernels, rewriting their arguments)"
                )
            walk.feed("none")
        else:
            walk.value(value)


def _linked(walk: KeyWalk, item: Any) -> None:
    """A ``link=`` item by its contents: a file (its path as given, and its bytes) or a
    ``LinkableCode`` object (its kind, name, bytes and callbacks)."""
    if isinstance(item, str | os.PathLike):
        path = os.fspath(item)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise Unkeyable(f"the link= file {path!r} cannot be read ({e})") from None
        walk.feed("file", path, digest(data))
        return
    if isinstance(item, numba_cuda.linkable_code_class()):
        kind, data = numba_cuda.linkable_code_data(item)
        content = digest(data).hex()
        walk.feed("code", kind, str(getattr(item, "name", "")), bool(item.nrt), content)
        for callback in numba_cuda.linkable_code_callbacks(item):
            # Python run when the module loads, not compiled in: keyed by its code (it runs
            # with the values it reads then, cached or not)
            if isinstance(callback, types.FunctionType):
                walk.feed("callback", callback.__module__, callback.__qualname__)
                walk.code(callback.__code__)
            else:
                walk.feed("callback", type(callback).__qualname__ if callback else "none")
        walk.found["linkables"][content] = item
        return
    raise Unkeyable(f"a link= item of type {type(item).__qualname__}")


# -- numba-cuda's objects in a walk ------------------------------------------------------------


def _special(walk: Walk, value: Any) -> bool:
    assert isinstance(walk, KeyWalk)
    from fastlaunch.dispatcher import Kernel

    if isinstance(value, Kernel):
        value = value.dispatcher
    if isinstance(value, numba_cuda.dispatcher_types()):
        key, source = _device(walk, value, walk.lines)
        walk.feed_split("D", key, source)
        return True
    if isinstance(value, numba_cuda.numba_type_class()):
        _type(walk, value, strict=False)
        return True
    if isinstance(value, numba_cuda.extern_function_class()):
        walk.feed("extern", value.name, str(value.sig))
        links, cooperative = numba_cuda.extern_function_links(value)
        walk.feed("extern links", len(links), cooperative)
        for item in links:
            _linked(walk, item)
        return True
    if isinstance(value, numba_cuda.linkable_code_class()):
        _linked(walk, value)
        return True
    if isinstance(value, numba_cuda.intrinsic_class()):
        definition = numba_cuda.intrinsic_definition(value)
        walk.feed("intrinsic")
        walk.function(definition)
        return True
    return False


#: a Python function met as a callee -> its source digest when the cache first met it in this
#: process (numba compiles such functions once per process, keeping what they froze then)
_first_seen: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _callee(walk: KeyWalk, f: Any) -> tuple[str, str]:
    """A Python function a kernel refers to, walked on its own: (key digest, source digest).
    numba compiles a ``register_jitable`` function or an overload's implementation once per
    process and keeps that code, with the values it froze then; so one whose code or values
    changed since the cache first met it in this process is refused (``Unkeyable``): the
    kernel compiles as without a cache."""
    digests: dict[int, Any] = walk.found["digests"]
    known = digests.get(id(f))
    if known == _IN_PROGRESS:  # a recursive function
        cycle = f"cycle {f.__module__}.{f.__qualname__}"
        return cycle, cycle
    if known is not None:
        return known[1]
    digests[id(f)] = _IN_PROGRESS
    sub = walk.sub(walk.lines)
    sub.function(f)
    result = (sub.hexdigest(), sub.source_hexdigest())
    digests[id(f)] = (f, result)
    first = _first_seen.setdefault(f, result[1])
    if first != result[1]:
        raise Unkeyable(
            f"{f.__module__}.{f.__qualname__} (or a value it reads) changed since this process "
            "first used it: numba-cuda may keep code compiled from the earlier one"
        )
    return result


def _device(walk: KeyWalk, dispatcher: Any, lines: bool) -> tuple[str, str]:
    """A dispatcher met in a walk (a device function, or a kernel named in another's code):
    (key digest, source digest). A library's is keyed by its name (its version is in the
    key); a device function's overloads compiled out of the cache's sight add their LLVM IR
    to the key digest."""
    py_func = dispatcher.py_func
    module = getattr(py_func, "__module__", "") or ""
    if is_library_function(py_func) and not py_func.__closure__:
        name = f"{module}.{py_func.__qualname__}"
        return name, name
    digests: dict[int, Any] = walk.found["digests"]
    known = digests.get(id(dispatcher))
    if known == _IN_PROGRESS:  # a recursive device function
        cycle = f"cycle {module}.{py_func.__qualname__}"
        return cycle, cycle
    if known is not None:
        return known[1]
    digests[id(dispatcher)] = _IN_PROGRESS
    options = dispatcher.targetoptions
    sub = walk.sub(lines or bool(options.get("debug") or options.get("lineinfo")))
    sub.feed("dispatcher", numba_cuda.is_device_dispatcher(dispatcher))
    _options(sub, options)
    sub.function(py_func)
    source = sub.source_hexdigest()
    key_walk = sub.sub(False)
    key_walk.feed("device", sub.hexdigest())
    if numba_cuda.is_device_dispatcher(dispatcher):
        overloads = numba_cuda.device_overloads(dispatcher)
        seen = _compiled.get(dispatcher, {})
        for argtypes in sorted(overloads, key=str):
            if seen.get(argtypes) == source:
                continue  # compiled from what is keyed now
            key_walk.feed("compiled elsewhere", str(argtypes))
            key_walk.feed("llvm", digest(numba_cuda.overload_llvm(overloads[argtypes]).encode()))
        walk.found["devices"].append((dispatcher, source, frozenset(overloads)))
    result = (key_walk.hexdigest(), source)
    digests[id(dispatcher)] = (dispatcher, result)
    return result


def _type(walk: Walk, t: Any, strict: bool) -> None:
    """A numba type by what decides its code: arrays by dtype, dimensions, layout,
    mutability and alignment; records by their dtype; named tuples and enums with their
    classes; tuples by their members. ``strict`` (argument types): only those kinds, and
    numbers, booleans, datetimes and pointers; any other raises ``Unkeyable``."""
    nt = numba_cuda.types()
    cls = type(t)
    walk.feed("T", cls.__module__, cls.__qualname__)
    if isinstance(t, nt.Array):
        walk.feed("Ta", t.ndim, t.layout, t.mutable, t.aligned)
        _type(walk, t.dtype, strict)
    elif isinstance(t, nt.Record):
        walk.feed("Tr", t.aligned)
        walk.dtype(t.dtype)
    elif isinstance(t, nt.NamedTuple | nt.NamedUniTuple):
        walk.a_class(t.instance_class)
        walk.feed("Tn", len(t.types))
        for member in t.types:
            _type(walk, member, strict)
    elif isinstance(t, nt.EnumMember):
        walk.a_class(t.instance_class)
        _type(walk, t.dtype, strict)
    elif isinstance(t, nt.BaseTuple):
        walk.feed("Tt", len(t.types))
        for member in t.types:
            _type(walk, member, strict)
    elif isinstance(t, nt.CPointer):
        _type(walk, t.dtype, strict)
    elif not strict or isinstance(
        t, nt.Number | nt.Boolean | nt.NPDatetime | nt.NPTimedelta | nt.NoneType
    ):
        walk.feed("Tx", str(t))
    else:
        raise Unkeyable(f"an argument of type {t}, which the cache does not key")
