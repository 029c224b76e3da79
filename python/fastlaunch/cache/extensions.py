"""numba's extension registries, as part of every key.

A kernel that calls ``myfunc(x)`` is compiled from whatever ``@overload(myfunc)`` (or
``@intrinsic``, ``@lower_builtin``, ``@overload_method``, ``typeof_impl.register``,
``register_model``, ...) registered for it, wherever that code lives: the kernel's own code
names only ``myfunc``. Rather than guess which registrations a kernel uses, every key holds all
of them that are not numba's or numba-cuda's own (those are keyed by their versions): each by
the code of the functions that define it, walked as a kernel's code is (their globals and
closures included). Editing any extension then misses every kernel, which costs compiles,
never a stale result.

The registries only grow; their lengths tell when to walk them again (``digest``)."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.cache.values import Unkeyable, Walk, is_library_function

_memo: tuple[tuple, str | None, str | None] | None = None  # (lengths, digest, refusal)


def digest(make_walk: Callable[[], Walk]) -> str:
    """One digest of every extension registered by code outside numba and numba-cuda; raises
    ``Unkeyable`` if one of them cannot be keyed."""
    global _memo
    registries = numba_cuda.extension_registries()
    lengths = tuple((name, len(items)) for name, items in sorted(registries.items()))
    if _memo is not None and _memo[0] == lengths:
        if _memo[2] is not None:
            raise Unkeyable(_memo[2])
        assert _memo[1] is not None
        return _memo[1]
    try:
        found = _digest(registries, make_walk)
    except Unkeyable as refusal:
        _memo = (lengths, None, f"a numba extension: {refusal}")
        raise Unkeyable(_memo[2]) from None
    _memo = (lengths, found, None)
    return found


#: id(item) -> (item, digest of its user functions or None): registrations are walked once
_items: dict[int, tuple[Any, bytes | None]] = {}


def _digest(registries: dict[str, list], make_walk: Callable[[], Walk]) -> str:
    parts = []
    for kind, items in sorted(registries.items()):
        for item in items:
            known = _items.get(id(item))
            if known is None or known[0] is not item:
                known = (item, _item_digest(kind, item, make_walk))
                _items[id(item)] = known
            if known[1] is not None:
                parts.append(known[1])
    walk = make_walk()
    walk.feed("extensions", len(parts), *sorted(parts))  # registration order does not matter
    return walk.hexdigest()


def _item_digest(kind: str, item: Any, make_walk: Callable[[], Walk]) -> bytes | None:
    if kind == "typeof":
        item = item[1]  # the handler (the class it types is the argument's, not code)
    functions = _user_functions(item)
    if not functions:
        return None
    walk = make_walk()
    walk.feed("x", kind)
    for f in functions:
        walk.path.append(f"a {kind} registration")
        try:
            walk.function(f)
        finally:
            walk.path.pop()
    return walk.digest()


def _user_functions(item: Any) -> list[types.FunctionType]:
    """The Python functions, not numba's or numba-cuda's, that define a registration: a
    template class's (``_overload_func``, ``_definition_func``, its methods), a lowering
    entry's, a ``typeof`` handler, a data model's methods; and those one level inside the
    closures of numba's own decorators that wrap them (``type_callable``'s ``generic``)."""
    candidates: list[Any] = []
    if isinstance(item, tuple):
        candidates.extend(item)
    else:
        candidates.append(item)
    functions: list[types.FunctionType] = []
    for candidate in candidates:
        if isinstance(candidate, types.FunctionType):
            functions.append(candidate)
        elif isinstance(candidate, type):
            for value in vars(candidate).values():
                if isinstance(value, staticmethod | classmethod):
                    value = value.__func__
                if isinstance(value, types.FunctionType):
                    functions.append(value)
    found: list[types.FunctionType] = []
    for f in functions:
        if not is_library_function(f):
            found.append(f)
            continue
        for cell in f.__closure__ or ():
            try:
                inner = cell.cell_contents
            except ValueError:
                continue
            if isinstance(inner, types.FunctionType) and not is_library_function(inner):
                found.append(inner)
    unique = {id(f): f for f in found}
    return sorted(unique.values(), key=lambda f: (f.__module__ or "", f.__qualname__))
