"""numba's extension registries, as part of every key.

A kernel that calls ``myfunc(x)`` is compiled from whatever ``@overload(myfunc)`` (or
``@intrinsic``, ``@lower_builtin``, ``@overload_method``, ``typeof_impl.register``,
``register_model``, ...) registered for it, wherever that code lives: the kernel's own code
names only ``myfunc``. Rather than guess which registrations a kernel uses, every key holds all
of them that are not numba's or numba-cuda's own (those are keyed by their versions): each by
the code of the functions that define it, walked as a kernel's code is (their globals and
closures included). Editing any extension then misses every kernel, which costs compiles,
never a stale result.

The registries only grow; their lengths tell when to look through them again for registrations
not numba's (``digest``). numba compiles an overload's implementation once per process, keeping
the values it froze then: a registration whose code or values changed since the process first
keyed it makes kernels uncachable for the rest of the process."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.cache.values import Unkeyable, Walk, is_library, is_library_function

FunctionType = types.FunctionType

#: (the registries' lengths, the registrations not numba's: (kind, their user functions))
_scan: tuple[tuple, list[tuple[str, Any, list[types.FunctionType]]]] | None = None
#: id(item) -> (item, its user functions): which registrations are not numba's is found once
_items: dict[int, tuple[Any, list[types.FunctionType]]] = {}
#: id(registration) -> (it, its digest when first walked in this process)
_first_seen: dict[int, tuple[Any, bytes]] = {}


def digest(make_walk: Callable[[], Walk]) -> str:
    """One digest of every extension registered by code outside numba and numba-cuda; raises
    ``Unkeyable`` if one of them cannot be keyed, or changed since this process first used
    it."""
    global _scan
    registries = numba_cuda.extension_registries()
    lengths = tuple(
        (name, tuple(len(part) for part in parts)) for name, parts in sorted(registries.items())
    )
    if _scan is None or _scan[0] != lengths:
        _scan = (lengths, _registrations(registries))
    try:
        parts = [
            _item_digest(kind, item, functions, make_walk) for kind, item, functions in _scan[1]
        ]
    except Unkeyable as refusal:
        raise Unkeyable(f"a numba extension: {refusal}") from None
    walk = make_walk()
    walk.feed("extensions", len(parts), *sorted(parts))  # registration order does not matter
    return walk.hexdigest()


def _registrations(
    registries: dict[str, list[Any]],
) -> list[tuple[str, Any, list[types.FunctionType]]]:
    found = []
    for kind, parts in sorted(registries.items()):
        items = [
            item
            for part in parts
            for item in (list(part.items()) if hasattr(part, "items") else part)
        ]
        for item in items:
            known = _items.get(id(item))
            if known is None or known[0] is not item:
                known = (item, _user_functions(item[1] if kind == "typeof" else item))
                _items[id(item)] = known
            if known[1]:
                found.append((kind, item, known[1]))
    return found


def _item_digest(kind: str, item: Any, functions: list, make_walk: Callable[[], Walk]) -> bytes:
    """A registration's user functions, walked; refused (``Unkeyable``) if they changed since
    this process first walked them: numba compiles an overload's implementation once per
    process, keeping what it froze then."""
    walk = make_walk()
    walk.feed("x", kind)
    for f in functions:
        walk.path.append(f"a {kind} registration")
        try:
            walk.function(f)
        finally:
            walk.path.pop()
    found = walk.digest()
    first = _first_seen.setdefault(id(item), (item, found))
    if first[0] is item and first[1] != found:
        f = functions[0]
        raise Unkeyable(
            f"{f.__module__}.{f.__qualname__} changed since this process first used it: "
            "numba-cuda may keep code compiled from the earlier one"
        )
    return found


def _user_functions(item: Any) -> list[types.FunctionType]:
    """The Python functions, not numba's or numba-cuda's, that define a registration: a
    template class's (``_overload_func``, ``_definition_func``, its methods), a lowering
    entry's, a ``typeof`` handler, a data model's methods; and those one level inside the
    closures of numba's own decorators that wrap them (``type_callable``'s ``generic``).
    A class defined in numba's own source (not made by its template factories, whose classes
    say ``abc``) holds numba's methods only. Thousands of numba's registrations pass through
    here once per process: it is kept lean."""
    found: dict[int, types.FunctionType] | None = None
    for candidate in item if type(item) is tuple else (item,):
        kind = type(candidate)
        if kind is FunctionType:
            functions: Any = (candidate,)
        elif isinstance(candidate, type):
            module = candidate.__dict__.get("__module__")
            if type(module) is str and module != "abc" and is_library(module):
                continue
            functions = candidate.__dict__.values()
        else:
            continue
        for f in functions:
            if type(f) is not FunctionType:
                if type(f) not in (staticmethod, classmethod):
                    continue
                f = f.__func__
                if type(f) is not FunctionType:
                    continue
            if not is_library_function(f):
                found = found or {}
                found[id(f)] = f
                continue
            for cell in f.__closure__ or ():
                try:
                    inner = cell.cell_contents
                except ValueError:
                    continue
                if type(inner) is FunctionType and not is_library_function(inner):
                    found = found or {}
                    found[id(inner)] = inner
    if not found:
        return []
    return sorted(found.values(), key=lambda f: (f.__module__ or "", f.__qualname__))
