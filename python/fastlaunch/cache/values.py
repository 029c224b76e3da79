"""The walk behind a kernel's key: a function's code and everything it freezes, fed to a hash.

numba compiles a kernel from its code and from the values it reads at compile time: the
globals and closure variables it loads (numbers, tuples, arrays are frozen in as constants),
the attributes of modules it reads (``config.N``, ``helpers.device_fn``), and the functions it
calls, whatever module defines them. :class:`Walk` feeds all of that to one hash:

- a code object by everything that decides what it does (bytecode, constants, names,
  argument counts, flags, exception table), nested code objects too; its line table and file
  name only where debug or line information is compiled in (``lines``);
- the globals and closure cells it loads, found in its bytecode (``LOAD_GLOBAL`` / ``LOAD_NAME``
  / ``LOAD_DEREF``); a module is followed along the attribute chain the code reads from it
  (``helpers.scale.factor``) to the value at its end;
- values by content: numbers exactly (floats by ``float.hex``), strings, bytes, tuples,
  named tuples and enums with their classes, NumPy arrays by dtype, shape, layout, flags and
  bytes, NumPy scalars and dtypes;
- functions by their code and what they load, recursively; functions, classes and objects of
  numba, numba-cuda, NumPy, llvmlite and the standard math modules by their qualified name (the
  versions of those libraries are in the key);
- numba-cuda's objects (device functions, types, intrinsics, declared functions, linkable code)
  through ``special``, given by :mod:`fastlaunch.cache.key`.

Anything else raises :class:`Unkeyable` naming the value and where it was found: such a kernel
is compiled as before and not cached (a wrong key must be impossible, not unlikely)."""

from __future__ import annotations

import dis
import enum
import functools
import hashlib
import os
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

#: top-level packages whose functions, classes and constants are keyed by name: their versions
#: are in every key (``toolchain.py``)
LIBRARY_ROOTS = frozenset(
    {
        "numba",
        "numba_cuda",
        "numpy",
        "llvmlite",
        "math",
        "cmath",
        "operator",
        "_operator",
        "builtins",
        "cuda",
    }
)

_MISSING = object()
_BUILTINS: dict[str, Any] = vars(__import__("builtins"))


class Unkeyable(Exception):
    """A value the key cannot stand for; the message says which, where, and why."""


@functools.lru_cache(maxsize=4096)
def is_library(module: str | None) -> bool:
    """Whether ``module`` belongs to a library keyed by its version: numba, numba-cuda, NumPy,
    llvmlite, cuda-python, or Python's standard library (the Python version is keyed)."""
    if not module:
        return False
    root = module.split(".", 1)[0]
    if root in LIBRARY_ROOTS:
        return True
    if root not in sys.stdlib_module_names:
        return False
    loaded = sys.modules.get(root)
    path = getattr(loaded, "__file__", None)
    if loaded is None or path is None:
        return loaded is not None or root in sys.builtin_module_names
    return os.path.realpath(path).startswith(_stdlib())


@functools.cache
def _stdlib() -> str:
    import sysconfig

    return os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep


def is_library_function(f: types.FunctionType) -> bool:
    """Whether a function is a library's (``is_library``): by its module, or, for one made
    without a module (``exec``), by the file its code came from."""
    module = getattr(f, "__module__", None)
    if module:
        return is_library(module)
    return _library_file(f.__code__.co_filename)


@functools.lru_cache(maxsize=4096)
def _library_file(filename: str) -> bool:
    if not os.path.isabs(filename):
        return False
    path = os.path.realpath(filename)
    if path.startswith(_stdlib()):
        return True
    for root in LIBRARY_ROOTS:
        package = sys.modules.get(root)
        for folder in getattr(package, "__path__", None) or ():
            if path.startswith(os.path.realpath(folder) + os.sep):
                return True
    return False


def digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


def token(tag: str, parts: tuple) -> bytes:
    """The bytes a ``Walk.feed(tag, *parts)`` hashes: the tag, then each part's length and
    bytes (text as UTF-8, anything else by ``repr``), then ``;``."""
    chunks = [tag.encode()]
    for part in parts:
        if type(part) is bytes:
            data = part
        elif type(part) is str:
            data = part.encode("utf-8", "surrogatepass")
        else:
            data = repr(part).encode()
        chunks.append(len(data).to_bytes(4, "little"))
        chunks.append(data)
    chunks.append(b";")
    return b"".join(chunks)


# -- what a code object loads ------------------------------------------------------------------

#: id(code) -> (code, {(kind, name): {attribute chains}}); the code is held so the id stays its
_loads_cache: dict[int, tuple[types.CodeType, dict[tuple[str, str], set[tuple[str, ...]]]]] = {}

_ROOT_LOADS = {"LOAD_GLOBAL": "g", "LOAD_NAME": "g", "LOAD_DEREF": "d", "LOAD_CLASSDEREF": "d"}
_ATTRIBUTE_LOADS = {"LOAD_ATTR", "LOAD_METHOD"}


def loads(code: types.CodeType) -> dict[tuple[str, str], set[tuple[str, ...]]]:
    """The globals (``("g", name)``) and closure variables (``("d", name)``) ``code`` and the
    code nested in it load, each with the attribute chains read from it (``("a", "b")`` for
    ``x.a.b``; ``()`` for ``x`` itself)."""
    known = _loads_cache.get(id(code))
    if known is not None and known[0] is code:
        return known[1]
    found: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    _scan(code, found)
    if len(_loads_cache) > 4096:
        _loads_cache.clear()
    _loads_cache[id(code)] = (code, found)
    return found


def _scan(code: types.CodeType, found: dict[tuple[str, str], set[tuple[str, ...]]]) -> None:
    root: tuple[str, str] | None = None
    chain: list[str] = []
    for instruction in dis.get_instructions(code):
        name = instruction.opname
        if name in _ATTRIBUTE_LOADS and root is not None:
            chain.append(str(instruction.argval))
            continue
        if root is not None:
            found.setdefault(root, set()).add(tuple(chain))
            root = None
        kind = _ROOT_LOADS.get(name)
        if kind is not None:
            root, chain = (kind, str(instruction.argval)), []
    if root is not None:
        found.setdefault(root, set()).add(tuple(chain))
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            _scan(constant, found)


# -- the walk ----------------------------------------------------------------------------------


class Walk:
    """One key's walk: ``feed`` tokens, ``value`` any value, ``function`` a Python function.

    ``special(walk, value)`` handles numba-cuda's objects (returns True when it did).
    Functions, containers and numba objects met twice are fed as a reference to their first
    place, so cycles end and a shared callee counts once."""

    def __init__(
        self,
        lines: bool,
        special: Callable[[Walk, Any], bool] | None = None,
    ) -> None:
        self.lines = lines
        self.special = special
        self._hash = hashlib.blake2b(digest_size=32)
        self._seen: dict[int, int] = {}
        self._held: list[Any] = []  # keeps seen objects alive, so their ids stay theirs
        self.path: list[str] = []  # where the walk is (for Unkeyable's message)
        #: what the numba side collects along the way (device functions, linkable code, ...)
        self.found: dict[str, list[Any]] = {}

    def sub(self, lines: bool) -> Walk:
        """A walk of its own (its own digest) sharing this one's path and findings."""
        walk = Walk(lines, self.special)
        walk.path, walk.found = self.path, self.found
        return walk

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def digest(self) -> bytes:
        return self._hash.digest()

    # tokens: a tag and length-prefixed parts, so no two sequences feed the same bytes
    def feed(self, tag: str, *parts: Any) -> None:
        self._hash.update(token(tag, parts))

    def refuse(self, what: str) -> Unkeyable:
        where = " in ".join(reversed(self.path)) if self.path else "the kernel"
        return Unkeyable(f"{what} ({where})")

    def once(self, obj: Any) -> bool:
        """True the first time ``obj`` is met in this walk; later, feeds a reference to it."""
        index = self._seen.get(id(obj))
        if index is not None:
            self.feed("@", index)
            return False
        self._seen[id(obj)] = len(self._seen)
        self._held.append(obj)
        return True

    # -- values --------------------------------------------------------------------------------

    def value(self, v: Any) -> None:
        t = type(v)
        if v is None or v is Ellipsis or v is NotImplemented:
            self.feed("n", repr(v))
        elif t is bool:
            self.feed("b", "1" if v else "0")
        elif t is int:
            self.feed("i", str(v))
        elif t is float:
            self.feed("f", v.hex())
        elif t is complex:
            self.feed("c", v.real.hex(), v.imag.hex())
        elif t is str:
            self.feed("s", v)
        elif t is bytes:
            self.feed("y", v)
        elif t is tuple:
            self.feed("(", len(v))
            for item in v:
                self.value(item)
        elif t is frozenset or t is set:
            self._unordered("{", v)
        elif isinstance(v, enum.Enum):
            self.feed("e", v.name)
            self.a_class(t)
            self.value(v.value)
        elif isinstance(v, tuple) and hasattr(t, "_fields"):
            self.feed("t", len(v))
            self.a_class(t)
            for item in v:
                self.value(item)
        elif self._numpy(v):
            pass
        elif self.special is not None and self.special(self, v):
            pass
        elif isinstance(v, types.FunctionType):
            self.callee(v)
        elif isinstance(v, types.ModuleType):
            self.feed("M", v.__name__)
        elif isinstance(v, type):
            self.a_class(v)
        elif isinstance(v, types.BuiltinFunctionType | types.BuiltinMethodType):
            self._builtin(v)
        elif isinstance(v, types.MethodType):
            self.feed("m", v.__func__.__name__)
            self.value(v.__func__)
            self.value(v.__self__)
        elif t is list:
            if self.once(v):
                self.feed("[", len(v))
                for item in v:
                    self.value(item)
        elif t is dict:
            if self.once(v):
                self._unordered("d", v.items())
        elif hasattr(t, "__cuda_array_interface__"):
            raise self.refuse(
                f"a device array ({t.__qualname__}): numba-cuda freezes its address into the code"
            )
        else:
            raise self.refuse(
                f"a {t.__module__}.{t.__qualname__} object, which the cache cannot key"
            )

    def _unordered(self, tag: str, items: Iterable[Any]) -> None:
        """A set's or dict's items in an order of their own digests (not of iteration)."""
        keyed = []
        for item in items:
            sub = self.sub(self.lines)
            sub._seen, sub._held = self._seen, self._held  # (cycles end in the sub-walks too)
            sub.value(item)
            keyed.append(sub.digest())
        keyed.sort()
        self.feed(tag, len(keyed), *keyed)

    def _numpy(self, v: Any) -> bool:
        np = sys.modules.get("numpy")
        if np is None:
            return False
        if isinstance(v, np.ndarray):
            if type(v) is not np.ndarray:
                raise self.refuse(f"an ndarray subclass ({type(v).__qualname__})")
            if v.dtype.hasobject:
                raise self.refuse("a NumPy array of Python objects")
            self.feed("A", v.shape, v.strides, v.flags.c_contiguous, v.flags.f_contiguous)
            self.feed("Af", v.flags.writeable, v.flags.aligned)
            self.dtype(v.dtype)
            self.feed("Ab", np.ascontiguousarray(v).tobytes())
            return True
        if isinstance(v, np.generic):
            if isinstance(v, np.object_ | np.void) and v.dtype.hasobject:
                raise self.refuse("a NumPy object scalar")
            self.feed("g")
            self.dtype(v.dtype)
            self.feed("gb", np.asarray(v).tobytes())
            return True
        if isinstance(v, np.dtype):
            self.dtype(v)
            return True
        if isinstance(v, np.ufunc):
            if getattr(np, v.__name__, None) is not v:
                raise self.refuse(f"the ufunc {v.__name__}, not NumPy's own")
            self.feed("U", v.__name__)
            return True
        return False

    def dtype(self, dtype: Any) -> None:
        """A NumPy dtype: its descriptor, size, alignment and fields."""
        self.feed("D", dtype.str, dtype.itemsize, dtype.alignment, dtype.isalignedstruct)
        self.feed("Dd", repr(dtype.descr) if dtype.fields is not None else dtype.name)
        if dtype.subdtype is not None:
            self.dtype(dtype.subdtype[0])
            self.feed("Ds", dtype.subdtype[1])
        for name, field in (dtype.fields or {}).items():
            self.feed("Df", name, field[1], field[2] if len(field) > 2 else None)
            self.dtype(field[0])

    def a_class(self, cls: type) -> None:
        """A class: a library's by name; a named tuple by its fields; an enum by its members;
        any other by its name, the names of its bases and the plain values it holds (numbers,
        strings, tuples of them: what code reading ``Cls.X`` could freeze); numba types objects
        of user classes only through extensions, which the key covers separately."""
        module = getattr(cls, "__module__", "") or ""
        self.feed("K", module, cls.__qualname__)
        if is_library(module) or not self.once(cls):
            return
        self.feed("Kb", *(f"{b.__module__}.{b.__qualname__}" for b in cls.__mro__[1:]))
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):
            self.feed("Kf", *cls._fields)
        elif issubclass(cls, enum.Enum):
            for member in cls:
                self.feed("Km", member.name)
                self.value(member.value)
        else:
            for base in cls.__mro__[:-1]:
                if is_library(getattr(base, "__module__", "")):
                    continue
                for name, value in sorted(vars(base).items()):
                    if not name.startswith("__") and _plain(value):
                        self.feed("Ka", base.__qualname__, name)
                        self.value(value)

    def _builtin(self, v: Any) -> None:
        owner = getattr(v, "__self__", None)
        module = getattr(v, "__module__", None)
        if module is None and isinstance(owner, types.ModuleType):
            module = owner.__name__
        if module is None and owner is not None:
            module = type(owner).__module__
        if not is_library(module):
            raise self.refuse(f"the built-in {v.__qualname__} from {module or 'a C extension'}")
        self.feed("B", module, v.__qualname__)

    # -- functions -----------------------------------------------------------------------------

    def callee(self, f: types.FunctionType) -> None:
        """A function met as a value (not the kernel itself): walked where it is met here;
        ``key.KeyWalk`` keys it on its own, and refuses one that changed in the process."""
        self.function(f)

    def function(self, f: types.FunctionType, lines: bool | None = None) -> None:
        """A Python function: a library's by name; any other by its code, its defaults, and
        the closure variables and globals it loads."""
        module = getattr(f, "__module__", None) or ""
        if is_library_function(f):
            # a library's function by name (its version is keyed), but for what it closes
            # over: numba-cuda's reductions close over the user's function
            self.feed("L", module, f.__qualname__)
            if (f.__closure__ or f.__defaults__ or f.__kwdefaults__) and self.once(f):
                self.value(f.__defaults__)
                self.value(f.__kwdefaults__)
                for name, cell in zip(f.__code__.co_freevars, f.__closure__ or (), strict=True):
                    self.feed("V", name)
                    try:
                        self.value(cell.cell_contents)
                    except ValueError:
                        self.feed("V0")
            return
        if not self.once(f):
            return
        self.path.append(f"{module}.{f.__qualname__}")
        saved = self.lines
        if lines is not None:
            self.lines = lines
        try:
            self.feed("F", module, f.__qualname__)
            code = f.__code__
            self.code(code)
            self.value(f.__defaults__)
            self.value(f.__kwdefaults__)
            loaded = loads(code)
            cells = dict(zip(code.co_freevars, f.__closure__ or (), strict=True))
            for name in code.co_freevars:
                self.feed("V", name)
                try:
                    contents = cells[name].cell_contents
                except ValueError:
                    self.feed("V0")
                    continue
                self.root(contents, loaded.get(("d", name), {()}))
            globals_ = f.__globals__
            builtins_ = getattr(f, "__builtins__", _BUILTINS)
            for kind, name in sorted(loaded):
                if kind != "g":
                    continue
                value = globals_.get(name, _MISSING)
                if value is _MISSING:
                    value = builtins_.get(name, _MISSING)
                self.feed("G", name)
                if value is _MISSING:
                    self.feed("G0")  # numba's typing raises for it: nothing is compiled
                    continue
                self.root(value, loaded[(kind, name)])
        finally:
            self.lines = saved
            self.path.pop()

    def root(self, value: Any, chains: Iterable[tuple[str, ...]]) -> None:
        """A loaded global or closure variable: a module along each attribute chain read from
        it, any other value as a whole."""
        if not isinstance(value, types.ModuleType):
            self.value(value)
            return
        self.feed("M", value.__name__)
        for chain in sorted(chains):
            obj: Any = value
            used = []
            for attribute in chain:
                if not isinstance(obj, types.ModuleType):
                    break
                used.append(attribute)
                obj = getattr(obj, attribute, _MISSING)
                if obj is _MISSING:
                    break
            self.feed("Mc", *used)
            if obj is _MISSING:
                self.feed("M0")
            elif obj is not value:
                self.value(obj)

    def code(self, code: types.CodeType) -> None:
        self.feed(
            "C",
            code.co_name,
            getattr(code, "co_qualname", ""),
            code.co_argcount,
            code.co_posonlyargcount,
            code.co_kwonlyargcount,
            code.co_nlocals,
            code.co_flags,
            code.co_code,
            code.co_names,
            code.co_varnames,
            code.co_freevars,
            code.co_cellvars,
            getattr(code, "co_exceptiontable", b""),
        )
        for constant in code.co_consts:
            if isinstance(constant, types.CodeType):
                self.code(constant)
            else:
                self.value(constant)
        if self.lines:
            self.feed("Cl", code.co_filename, code.co_firstlineno, _line_table(code))


def _plain(value: Any) -> bool:
    """Whether a value is a number, a string, bytes, None or a tuple of those."""
    if value is None or type(value) in (bool, int, float, complex, str, bytes):
        return True
    return type(value) is tuple and all(_plain(v) for v in value)


def _line_table(code: types.CodeType) -> bytes:
    table = getattr(code, "co_linetable", None)
    if table is None:  # pragma: no cover - before 3.10
        table = code.co_lnotab
    return bytes(table)
