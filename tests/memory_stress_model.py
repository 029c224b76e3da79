"""The memory API stress (issue 48) without CUDA: the seeded sequence generator and the NumPy
model of what one thread's arrays hold. ``tests/test_gpu_memory_stress.py`` runs the sequences
on the GPU (threads, plain numba-cuda and under ``fastlaunch.install()``);
``tests/test_cpu_memory_stress_model.py`` runs them on a CPU stand-in of the device that runs
each piece of work as late as CUDA allows.

One ``Model`` per thread. It holds the thread's device arrays (*slots*: a buffer, an offset, a
length and the stream the array is bound to, numba-cuda's ``d.stream``; views and ``bind``
clones are slots over the same buffer), the host arrays it copies from and into (pageable or
pinned, reused while no queued copy uses them), and what each stream may still be doing to
each buffer. ``next_op()`` draws the next operation, ``apply(op)`` moves the model past it and
returns the checks then due (each: a host array or result, the values it must hold, which of
them are defined). ``run_sequence`` drives a model and an executor together.

**Where the sequences synchronize: where a user of numba-cuda must, nowhere else.** A stream
is ``legacy`` (numba-cuda's default stream, stream 0), a blocking stream (``cuda.stream()``:
``blocking0#<generation>``, ``blocking1#...``) or a non-blocking one (``nb``: a cuda.bindings
stream through ``cuda.external_stream``; ``torch``: a torch side stream; ``cupy``: a CuPy
``non_blocking=True`` stream). Work on two streams is ordered when the streams are the same,
or one is ``legacy`` and the other blocking; nothing else is (two blocking streams are not,
whatever ran on the legacy stream between them: this model does not lean on it). Before an
operation on stream X reads or writes a buffer, every stream Y not ordered with X that may
still write it (or, for a write, still read it) is synchronized first (``sync`` ops of reason
``required``; ``cuda.synchronize()`` when Y is a blocking stream the thread has replaced).
What numba-cuda makes synchronous is complete when the call returns, and the host array may
be changed at once (the executors scribble NaN over it, to catch a copy that returned before
taking the bytes): ``cuda.to_device(a)`` and ``d.copy_to_device(a)`` with no stream on an
array bound to none, ``d.copy_to_host(...)`` likewise (which also returns after every earlier
piece of work on the legacy stream: the copy is queued behind it), and ``d[a:b] = ...`` on an
array bound to none (numba-cuda synchronizes the default stream after it). Everything else
(a stream given, or the array bound to one; kernel launches) is asynchronous: a host array an
asynchronous copy reads or writes is neither reused nor read until its stream is
synchronized, and the bytes of a copy back are checked then. Other libraries read a numba
array through ``__cuda_array_interface__``: CuPy synchronizes the stream the interface
exports (the array's bound stream; CUDA Array Interface v3), so that stream needs no
synchronization by the user; torch is not trusted to (every stream not ordered with torch's
side stream is synchronized first). What CuPy and torch read stays referenced until their
stream is synchronized (torch's ``record_stream`` rule). Frees (``del``, inside
``cuda.defer_cleanup()`` blocks or not) need no synchronization: numba-cuda's own frees wait
for the device.

Data: float32 integers in [-1000, 1000]; the kernel (and the CuPy and torch operations) is
``out = k - a``, exact in float32, so every result is compared value for value."""

from __future__ import annotations

import collections
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: float32 elements in one of fastlaunch's staging slots (1 MiB): copies up to it are staged
SLOT_ELEMENTS = 262144
#: array lengths (float32 elements) for new arrays: below, at and above a staging slot
SIZES = (1, 37, 1000, 16384, 65536, 262144, 262145, 393216, 786432)
SIZE_WEIGHTS = (2, 2, 3, 3, 3, 2, 3, 3, 3)
#: device bytes one thread keeps alive at most (then it frees before allocating)
MAX_BYTES = 24 << 20
MAX_SLOTS = 12
#: copies waiting for a synchronization, and host arrays in use by queued copies, at most
MAX_PENDING = 8
#: operations in one ``cuda.defer_cleanup()`` block at most, and the blocks' nesting
MAX_BLOCK_OPS = 6
MAX_DEPTH = 2

#: how often each operation is drawn (those of a missing library are left out)
WEIGHTS = {
    "to_device": 12,
    "device_array": 4,
    "copy_to_host": 16,
    "copy_to_device": 9,
    "view": 7,
    "setitem": 6,
    "kernel": 14,
    "bind": 4,
    "free": 9,
    "defer_enter": 2,
    "sync": 3,
    "new_stream": 1,
    "free_host": 1,
    "cupy_read": 4,
    "cupy_write": 3,
    "torch_read": 4,
    "torch_write": 3,
}
#: the features an operation needs (the executor's libraries)
NEEDS = {
    "cupy_read": "cupy",
    "cupy_write": "cupy",
    "torch_read": "torch",
    "torch_write": "torch_write",
}
#: every feature: CuPy, torch, and torch writing through the interface (its tensor shares the
#: numba array's memory)
FEATURES = frozenset({"cupy", "torch", "torch_write"})


def category(stream: str) -> str:
    """``legacy``, ``blocking`` or ``nonblocking``."""
    if stream == "legacy":
        return "legacy"
    if stream.startswith("blocking"):
        return "blocking"
    return "nonblocking"


def ordered(a: str, b: str) -> bool:
    """Whether work on stream ``b`` runs after earlier work on stream ``a`` (and the other way
    round) with no synchronization: the same stream, or the legacy stream and a blocking one."""
    return a == b or {category(a), category(b)} == {"legacy", "blocking"}


def host_data(seed: int, n: int) -> np.ndarray:
    """The values a host array is filled with: float32 integers in [-1000, 1000]."""
    rng = np.random.default_rng(seed)
    return rng.integers(-1000, 1001, n, dtype=np.int32).astype(np.float32)


def compare(expected: np.ndarray, known: np.ndarray, actual: Any) -> str | None:
    """None when ``actual`` holds ``expected`` wherever ``known``; else what differs, from the
    first differing index."""
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        return f"shape {actual.shape}, expected {expected.shape}"
    bad = np.flatnonzero(known & (actual != expected))  # NaN (a scribble) differs from all
    if bad.size == 0:
        return None
    i = int(bad[0])
    return (
        f"first differing index {i} of {expected.size}: expected {float(expected[i])!r}, got "
        f"{float(actual[i])!r} ({bad.size} of {int(known.sum())} checked elements differ)"
    )


@dataclass
class Op:
    """One operation: ``kind`` and its arguments (plain data, everything an executor needs)."""

    kind: str
    args: dict[str, Any] = field(default_factory=dict)
    #: host values the op copies (set by ``Model.apply``, so an executor need not make them)
    payload: np.ndarray | None = field(default=None, repr=False, compare=False)

    def describe(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.args.items() if v is not None)
        return f"{self.kind}({args})"


@dataclass
class Buffer:
    data: np.ndarray
    known: np.ndarray
    #: stream -> {"r", "w"}: what work queued there, not synchronized since, does to it
    pending: dict[str, set[str]] = field(default_factory=dict)
    slots: int = 0


@dataclass
class Slot:
    buffer: int
    lo: int
    n: int
    #: the stream the array is bound to (numba-cuda's ``d.stream``), None for none
    stream: str | None


@dataclass
class Host:
    kind: str  # "pageable" or "pinned"
    capacity: int
    #: the stream whose queued copy still reads or writes it
    busy: str | None = None


@dataclass
class Check:
    #: ("host", host id, n): the first n elements of a host array; ("result", id): a new
    #: array an operation returned
    target: tuple
    expected: np.ndarray
    known: np.ndarray
    step: int
    op: str
    #: due when this stream is synchronized ("now": at once)
    stream: str


def host_spec(host: Any) -> tuple[int, str, int] | None:
    """(id, kind, capacity) of an op's host argument, None for none or "new"."""
    return tuple(host) if isinstance(host, tuple | list) else None


class Model:
    """One thread's sequence and the NumPy model of its arrays (see the module's docstring)."""

    def __init__(
        self,
        thread: int,
        seed: int,
        features: frozenset[str] | set[str] = FEATURES,
        sizes: tuple[int, ...] = SIZES,
        size_weights: tuple[int, ...] | None = None,
        slot_elements: int = SLOT_ELEMENTS,
        max_bytes: int = MAX_BYTES,
        required_syncs: bool = True,
    ) -> None:
        self.thread = thread
        self.rng = random.Random(f"fastlaunch memory stress {seed} {thread}")
        self.features = frozenset(features)
        self.sizes = sizes
        self.size_weights = size_weights or (
            SIZE_WEIGHTS if sizes == SIZES else tuple(1 for _ in sizes)
        )
        self.slot_elements = slot_elements
        self.max_bytes = max_bytes
        #: False only to show the syncs are needed (the CPU test): none is drawn, none checked
        self.required_syncs = required_syncs
        self.capacities = tuple(sorted({max(1, slot_elements // 64), slot_elements, max(sizes)}))
        self.buffers: dict[int, Buffer] = {}
        self.slots: dict[int, Slot] = {}
        self.hosts: dict[int, Host] = {}
        self.checks: list[Check] = []
        self.generations = {"blocking0": 0, "blocking1": 0}
        self.depth = 0
        self.block_ops = 0
        self.step = 0
        self._next_id = 0
        self._newest = 0
        self._queue: list[Op] = []

    # --- streams ---------------------------------------------------------------------------

    def live_streams(self) -> list[str]:
        """The streams numba operations may be given now."""
        out = [f"{name}#{gen}" for name, gen in self.generations.items()] + ["nb"]
        out += [name for name in ("torch", "cupy") if name in self.features]
        return out

    def is_live(self, stream: str) -> bool:
        if stream.startswith("blocking"):
            name, gen = stream.split("#")
            return self.generations[name] == int(gen)
        return True

    def _stream(self, p_none: float) -> str | None:
        return None if self.rng.random() < p_none else self.rng.choice(self.live_streams())

    def _sync_op(self, stream: str, reason: str) -> Op:
        return Op("sync", {"stream": stream if self.is_live(stream) else "all", "reason": reason})

    # --- ordering --------------------------------------------------------------------------

    def _access(self, op: Op) -> tuple[str, list[tuple[int, str]], str | None] | None:
        """(stream, [(buffer, "r" | "w")], the stream the consumer synchronizes itself) of an
        operation that reads or writes existing device memory; None for others."""
        a = op.args
        kind = op.kind
        if kind in ("copy_to_host", "copy_to_device", "setitem"):
            mode = "r" if kind == "copy_to_host" else "w"
            return a["on"], [(self.slots[a["slot"]].buffer, mode)], None
        if kind == "kernel":
            accesses = [(self.slots[a["inp"]].buffer, "r"), (self.slots[a["out"]].buffer, "w")]
            return a["stream"] or "legacy", accesses, None
        if kind in ("cupy_read", "cupy_write", "torch_read", "torch_write"):
            library, verb = kind.split("_")
            slot = self.slots[a["slot"]]
            exempt = slot.stream if library == "cupy" else None
            return library, [(slot.buffer, "r" if verb == "read" else "w")], exempt
        return None

    def conflicts(
        self, stream: str, accesses: list[tuple[int, str]], exempt: str | None = None
    ) -> list[str]:
        """The streams to synchronize before ``accesses`` on ``stream``."""
        need: list[str] = []
        for buffer, mode in accesses:
            for other, modes in self.buffers[buffer].pending.items():
                if other == exempt or ordered(stream, other) or other in need:
                    continue
                if mode == "w" or "w" in modes:
                    need.append(other)
        return need

    def _touch(self, stream: str, accesses: list[tuple[int, str]]) -> None:
        for buffer, mode in accesses:
            self.buffers[buffer].pending.setdefault(stream, set()).add(mode)

    def _sync(self, stream: str) -> list[Check]:
        """The model past a synchronization of ``stream`` ("all": ``cuda.synchronize()``):
        the checks now due."""

        def match(s: str) -> bool:
            return stream == "all" or s == stream

        for buffer in self.buffers.values():
            for s in [s for s in buffer.pending if match(s)]:
                del buffer.pending[s]
        for host in self.hosts.values():
            if host.busy is not None and match(host.busy):
                host.busy = None
        due = [c for c in self.checks if match(c.stream)]
        self.checks = [c for c in self.checks if not match(c.stream)]
        return due

    # --- drawing ---------------------------------------------------------------------------

    def _id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _size(self) -> int:
        return self.rng.choices(self.sizes, weights=self.size_weights)[0]

    def _bytes(self) -> int:
        return sum(b.data.nbytes for b in self.buffers.values())

    def _pick_host(self, kind: str, n: int) -> tuple[int, str, int]:
        """A host array of ``kind`` that no queued copy uses, holding at least ``n``."""
        capacity = next(c for c in self.capacities if c >= n)
        free = [
            i
            for i, h in self.hosts.items()
            if h.kind == kind and h.capacity == capacity and h.busy is None
        ]
        if free and self.rng.random() < 0.85:
            return (self.rng.choice(free), kind, capacity)
        return (self._id(), kind, capacity)

    def _range(self, n: int) -> tuple[int, int]:
        if n == 1:
            return 0, 1
        r = self.rng
        if r.random() < 0.5:  # mostly the array: d[1:-1], d[:n - 3] ...
            lo = r.randrange(0, max(1, n // 4))
            hi = r.randrange(max(lo + 1, n - n // 4), n + 1)
        else:
            lo = r.randrange(n)
            hi = r.randrange(lo + 1, n + 1)
        return lo, hi

    def _slot(self) -> int:
        """A live slot: often the newest (fresh arrays used at once are where work that
        returned early shows), else any."""
        if self._newest in self.slots and self.rng.random() < 0.4:
            return self._newest
        return self.rng.choice(list(self.slots))

    def next_op(self) -> Op:
        """The next operation: one drawn, or a synchronization it needs first."""
        if not self._queue:
            op = self._draw()
            access = self._access(op)
            syncs: list[Op] = []
            if access is not None and self.required_syncs:
                for stream in self.conflicts(*access):
                    sync = self._sync_op(stream, "required")
                    if sync.args not in [s.args for s in syncs]:
                        syncs.append(sync)
            self._queue = [*syncs, op]
        return self._queue.pop(0)

    def ops(self, steps: int) -> Iterator[Op]:
        """``steps`` operations (``apply`` each before asking for the next), then the closing
        ones: the open ``defer_cleanup`` blocks closed, ``cuda.synchronize()``, every array
        copied back and checked."""
        while self.step < steps or self._queue:
            yield self.next_op()
        while self.depth:
            yield Op("defer_exit")
        yield Op("sync", {"stream": "all", "reason": "end"})
        for slot in list(self.slots):
            yield self._copy_to_host(slot, "new", None)
        yield Op("sync", {"stream": "all", "reason": "end"})

    def _draw(self) -> Op:
        r = self.rng
        if self.depth and (self.block_ops >= MAX_BLOCK_OPS or r.random() < 0.15):
            return Op("defer_exit")
        waiting = [c.stream for c in self.checks]
        waiting += [h.busy for h in self.hosts.values() if h.busy is not None]
        if len(waiting) > MAX_PENDING:
            return self._sync_op(r.choice(waiting), "pending")
        if not self.slots:
            return self._draw_to_device() if r.random() < 0.7 else self._draw_device_array()
        if len(self.slots) >= MAX_SLOTS or self._bytes() > self.max_bytes:
            return self._draw_free()
        kinds = [k for k in WEIGHTS if self._enabled(k)]
        kind = r.choices(kinds, weights=[WEIGHTS[k] for k in kinds])[0]
        return getattr(self, "_draw_" + kind)()

    def _enabled(self, kind: str) -> bool:
        if kind in NEEDS:
            return NEEDS[kind] in self.features
        if kind == "defer_enter":
            return self.depth < MAX_DEPTH
        if kind == "free_host":
            return any(h.busy is None for h in self.hosts.values())
        return True

    def _draw_to_device(self) -> Op:
        n = self._size()
        source = self.rng.choice(("pageable", "pinned"))
        return Op(
            "to_device",
            {
                "slot": self._id(),
                "buffer": self._id(),
                "n": n,
                "host": self._pick_host(source, n),
                "seed": self.rng.getrandbits(31),
                "stream": self._stream(0.65),
            },
        )

    def _draw_device_array(self) -> Op:
        n = self._size()
        return Op(
            "device_array",
            {"slot": self._id(), "buffer": self._id(), "n": n, "stream": self._stream(0.65)},
        )

    def _copy_to_host(self, slot_id: int, dest: str, stream: str | None) -> Op:
        slot = self.slots[slot_id]
        on = stream or slot.stream or "legacy"
        return Op(
            "copy_to_host",
            {
                "slot": slot_id,
                "n": slot.n,
                "dest": dest if dest == "new" else self._pick_host(dest, slot.n),
                "stream": stream,
                "on": on,
                "sync": on == "legacy",
                "result": self._id() if dest == "new" else None,
            },
        )

    def _draw_copy_to_host(self) -> Op:
        dest = self.rng.choice(("new", "pageable", "pinned"))
        return self._copy_to_host(self._slot(), dest, self._stream(0.6))

    def _draw_copy_to_device(self) -> Op:
        slot_id = self._slot()
        slot = self.slots[slot_id]
        stream = self._stream(0.6)
        on = stream or slot.stream or "legacy"
        return Op(
            "copy_to_device",
            {
                "slot": slot_id,
                "n": slot.n,
                "host": self._pick_host(self.rng.choice(("pageable", "pinned")), slot.n),
                "seed": self.rng.getrandbits(31),
                "stream": stream,
                "on": on,
                "sync": on == "legacy",
            },
        )

    def _draw_view(self) -> Op:
        of = self._slot()
        lo, hi = self._range(self.slots[of].n)
        return Op("view", {"slot": self._id(), "of": of, "lo": lo, "hi": hi})

    def _draw_setitem(self) -> Op:
        slot_id = self._slot()
        slot = self.slots[slot_id]
        lo, hi = (0, slot.n) if self.rng.random() < 0.35 else self._range(slot.n)
        on = slot.stream or "legacy"
        args: dict[str, Any] = {"slot": slot_id, "lo": lo, "hi": hi}
        if self.rng.random() < 0.65:
            kind = self.rng.choice(("pageable", "pinned"))
            args.update(host=self._pick_host(kind, hi - lo), seed=self.rng.getrandbits(31))
        else:
            args.update(value=float(self.rng.randint(-1000, 1000)))
        args.update(on=on, sync=on == "legacy")
        return Op("setitem", args)

    def _draw_kernel(self) -> Op:
        out_id = self._slot()
        out = self.slots[out_id]

        def usable(s: Slot) -> bool:  # no partial overlap: elementwise in place, or apart
            if s.buffer != out.buffer or s.lo == out.lo:
                return True
            return s.lo + s.n <= out.lo or out.lo + out.n <= s.lo

        others = [i for i, s in self.slots.items() if i != out_id and s.n == out.n and usable(s)]
        inp = self.rng.choice(others) if others and self.rng.random() < 0.7 else out_id
        return Op(
            "kernel",
            {
                "out": out_id,
                "inp": inp,
                "n": out.n,
                "k": float(self.rng.randint(-1000, 1000)),
                "stream": self._stream(0.45),
            },
        )

    def _draw_bind(self) -> Op:
        return Op("bind", {"slot": self._id(), "of": self._slot(), "stream": self._stream(0.4)})

    def _draw_free(self) -> Op:
        return Op("free", {"slot": self._slot()})

    def _draw_defer_enter(self) -> Op:
        return Op("defer_enter")

    def _draw_sync(self) -> Op:
        return self._sync_op(self.rng.choice([*self.live_streams(), "legacy", "all"]), "random")

    def _draw_new_stream(self) -> Op:
        name = self.rng.choice(sorted(self.generations))
        gen = self.generations[name]
        return Op("new_stream", {"name": name, "old": f"{name}#{gen}", "new": f"{name}#{gen + 1}"})

    def _draw_free_host(self) -> Op:
        free = [i for i, h in self.hosts.items() if h.busy is None]
        return Op("free_host", {"host": self.rng.choice(free)})

    def _library_op(self, kind: str) -> Op:
        slot_id = self._slot()
        args: dict[str, Any] = {"slot": slot_id, "n": self.slots[slot_id].n}
        args["k"] = float(self.rng.randint(-1000, 1000))
        if kind.endswith("read"):
            args["result"] = self._id()
        return Op(kind, args)

    def _draw_cupy_read(self) -> Op:
        return self._library_op("cupy_read")

    def _draw_cupy_write(self) -> Op:
        return self._library_op("cupy_write")

    def _draw_torch_read(self) -> Op:
        return self._library_op("torch_read")

    def _draw_torch_write(self) -> Op:
        return self._library_op("torch_write")

    # --- applying --------------------------------------------------------------------------

    def apply(self, op: Op) -> list[Check]:
        """The model past ``op`` (in program order); the checks due once it has run."""
        self.step += 1
        if self.depth:
            self.block_ops += 1
        access = self._access(op)
        if access is not None and self.required_syncs:
            left = self.conflicts(*access)
            assert not left, f"step {self.step} {op.describe()}: unsynchronized {left}"
        for spec in (host_spec(op.args.get("host")), host_spec(op.args.get("dest"))):
            if spec is not None and spec[0] not in self.hosts:
                self.hosts[spec[0]] = Host(spec[1], spec[2])
        return getattr(self, "_apply_" + op.kind)(op, **op.args) or []

    def _check(self, target: tuple, buffer: Buffer, lo: int, n: int, op: Op, stream: str):
        return Check(
            target,
            buffer.data[lo : lo + n].copy(),
            buffer.known[lo : lo + n].copy(),
            self.step,
            op.describe(),
            stream,
        )

    def _new_slot(self, slot: int, buffer: int, lo: int, n: int, stream: str | None) -> None:
        self.slots[slot] = Slot(buffer, lo, n, stream)
        self.buffers[buffer].slots += 1
        self._newest = slot

    def _apply_to_device(self, op, slot, buffer, n, host, seed, stream):
        op.payload = host_data(seed, n)
        self.buffers[buffer] = Buffer(op.payload.copy(), np.ones(n, bool))
        self._new_slot(slot, buffer, 0, n, stream)
        if stream is not None:
            self._touch(stream, [(buffer, "w")])
            self.hosts[host[0]].busy = stream

    def _apply_device_array(self, op, slot, buffer, n, stream):
        self.buffers[buffer] = Buffer(np.zeros(n, np.float32), np.zeros(n, bool))
        self._new_slot(slot, buffer, 0, n, stream)

    def _apply_copy_to_host(self, op, slot, n, dest, stream, on, sync, result):
        s = self.slots[slot]
        buffer = self.buffers[s.buffer]
        target = ("result", result) if dest == "new" else ("host", dest[0], n)
        if sync:  # numba-cuda: returns with the bytes, after the legacy stream's earlier work
            return [self._check(target, buffer, s.lo, n, op, "now"), *self._sync("legacy")]
        self._touch(on, [(s.buffer, "r")])
        if dest != "new":
            self.hosts[dest[0]].busy = on
        self.checks.append(self._check(target, buffer, s.lo, n, op, on))
        return []

    def _apply_copy_to_device(self, op, slot, n, host, seed, stream, on, sync):
        s = self.slots[slot]
        op.payload = host_data(seed, n)
        buffer = self.buffers[s.buffer]
        buffer.data[s.lo : s.lo + n] = op.payload
        buffer.known[s.lo : s.lo + n] = True
        if not sync:
            self._touch(on, [(s.buffer, "w")])
            self.hosts[host[0]].busy = on

    def _apply_setitem(self, op, slot, lo, hi, on, sync, host=None, seed=None, value=None):
        s = self.slots[slot]
        buffer = self.buffers[s.buffer]
        if host is not None:
            op.payload = host_data(seed, hi - lo)
            buffer.data[s.lo + lo : s.lo + hi] = op.payload
        else:
            buffer.data[s.lo + lo : s.lo + hi] = np.float32(value)
        buffer.known[s.lo + lo : s.lo + hi] = True
        self._touch(on, [(s.buffer, "w")])
        if sync:  # numba-cuda synchronizes the default stream after the assignment
            return self._sync("legacy")
        if host is not None:
            self.hosts[host[0]].busy = on
        return []

    def _apply_kernel(self, op, out, inp, n, k, stream):
        o, i = self.slots[out], self.slots[inp]
        source = self.buffers[i.buffer]
        values = np.float32(k) - source.data[i.lo : i.lo + n]
        known = source.known[i.lo : i.lo + n].copy()
        target = self.buffers[o.buffer]
        target.data[o.lo : o.lo + n] = values
        target.known[o.lo : o.lo + n] = known
        self._touch(stream or "legacy", [(i.buffer, "r"), (o.buffer, "w")])

    def _apply_view(self, op, slot, of, lo, hi):
        parent = self.slots[of]
        self._new_slot(slot, parent.buffer, parent.lo + lo, hi - lo, parent.stream)

    def _apply_bind(self, op, slot, of, stream):
        parent = self.slots[of]
        self._new_slot(slot, parent.buffer, parent.lo, parent.n, stream)

    def _apply_free(self, op, slot):
        s = self.slots.pop(slot)
        buffer = self.buffers[s.buffer]
        buffer.slots -= 1
        if not buffer.slots:
            del self.buffers[s.buffer]

    def _apply_sync(self, op, stream, reason):
        return self._sync(stream)

    def _apply_new_stream(self, op, name, old, new):
        self.generations[name] += 1

    def _apply_defer_enter(self, op):
        self.depth += 1
        self.block_ops = 0

    def _apply_defer_exit(self, op):
        self.depth -= 1
        self.block_ops = 0

    def _apply_free_host(self, op, host):
        del self.hosts[host]

    def _library_read(self, op, library, slot, n, k, result):
        s = self.slots[slot]
        buffer = self.buffers[s.buffer]
        self._touch(library, [(s.buffer, "r")])
        check = self._check(("result", result), buffer, s.lo, n, op, library)
        check.expected = np.float32(k) - check.expected
        self.checks.append(check)

    def _library_write(self, library, slot, n, k):
        s = self.slots[slot]
        buffer = self.buffers[s.buffer]
        buffer.data[s.lo : s.lo + n] = np.float32(k) - buffer.data[s.lo : s.lo + n]
        self._touch(library, [(s.buffer, "w")])

    def _apply_cupy_read(self, op, slot, n, k, result):
        self._library_read(op, "cupy", slot, n, k, result)

    def _apply_torch_read(self, op, slot, n, k, result):
        self._library_read(op, "torch", slot, n, k, result)

    def _apply_cupy_write(self, op, slot, n, k):
        self._library_write("cupy", slot, n, k)

    def _apply_torch_write(self, op, slot, n, k):
        self._library_write("torch", slot, n, k)


def tag(op: Op, slot_elements: int = SLOT_ELEMENTS) -> str:
    """What an operation exercises, for coverage counts: its kind, and for copies whether they
    are synchronous, what host memory, and whether a staging slot holds them."""
    a = op.args
    n = a.get("n")
    if op.kind == "setitem":
        n = a["hi"] - a["lo"]
    size = None if n is None else ("staged" if n <= slot_elements else "unstaged")
    if op.kind == "to_device":
        how = "sync" if a["stream"] is None else f"async-{category(a['stream'])}"
        return f"to_device/{how}/{a['host'][1]}/{size}"
    if op.kind in ("copy_to_host", "copy_to_device"):
        how = "sync" if a["sync"] else f"async-{category(a['on'])}"
        dest = a.get("dest", a.get("host"))
        kind = dest if dest == "new" else dest[1]
        return f"{op.kind}/{how}/{kind}/{size}"
    if op.kind == "setitem":
        what = "host" if a.get("host") is not None else "scalar"
        return f"setitem/{'sync' if a['sync'] else 'async'}/{what}/{size}"
    if op.kind == "kernel":
        return f"kernel/{category(a['stream'] or 'legacy')}"
    if op.kind == "sync":
        return f"sync/{a['reason']}"
    return op.kind


def run_sequence(
    model: Model,
    execute: Callable[[Op], Any],
    actual: Callable[[tuple], Any],
    steps: int,
    counts: collections.Counter | None = None,
    progress: dict | None = None,
) -> str | None:
    """Draws ``steps`` operations from ``model`` (then the closing ones), runs each with
    ``execute`` and checks what became due against ``actual(target)``. None when everything
    agreed; else the first disagreement: the thread, the step, the operation, the first
    differing index, and the last operations before it."""
    recent: collections.deque[str] = collections.deque(maxlen=6)
    for op in model.ops(steps):
        due = model.apply(op)
        where = f"thread {model.thread} step {model.step} {op.describe()}"
        recent.append(f"  {model.step}: {op.describe()}")
        if progress is not None:
            progress[model.thread] = where
        if counts is not None:
            counts[tag(op, model.slot_elements)] += 1
        try:
            execute(op)
        except Exception as error:
            return f"{where}: raised {type(error).__name__}: {error}\n" + "\n".join(recent)
        for check in due:
            try:
                problem = compare(check.expected, check.known, actual(check.target))
            except Exception as error:
                problem = f"reading it back raised {type(error).__name__}: {error}"
            if problem is not None:
                made = "" if check.step == model.step else f" (made at step {check.step})"
                return (
                    f"{where}: the bytes of {check.op}{made} differ: {problem}\n"
                    "last operations:\n" + "\n".join(recent)
                )
    return None
