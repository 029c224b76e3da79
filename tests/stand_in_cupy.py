"""A stand-in for CuPy on machines without CuPy or a GPU: arrays fastlaunch reads as CuPy's
(``ndarray``, read through CuPy's attributes), and a ``cupy.cuda`` with what
``fastlaunch.graphed``'s capture by CuPy uses: streams made current with ``with``, their
``begin_capture`` / ``end_capture``, graphs that count their launches, events, memory pools
over a base allocator, ``using_allocator``. Nothing runs; ``op`` stands for a CuPy
operation: it takes a temporary from the current allocator on the current stream and logs
both, so a test sees where a step's CuPy work went and whose memory it used."""

from __future__ import annotations

import contextlib
import itertools
import types
from typing import Any

import numpy as np

_addresses = itertools.count(0x7_0000_0000, 0x100_0000)
_stream_handles = itertools.count(0x9000, 0x10)


class MemoryPointer:
    def __init__(self, mem: Memory, offset: int) -> None:
        self.mem = mem
        self.ptr = mem.ptr + offset


class ndarray:  # noqa: N801 (CuPy's name)
    """A C-contiguous CuPy array as fastlaunch reads it (pointer, dtype, shape)."""

    def __init__(self, shape: tuple[int, ...], dtype: Any = np.float32, memptr: Any = None):
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.ndim = len(self.shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize
        self.strides = tuple(
            int(np.prod(self.shape[i + 1 :], dtype=np.int64)) * self.dtype.itemsize
            for i in range(self.ndim)
        )
        self._c_contiguous = True
        self._data = memptr if memptr is not None else MemoryPointer(Memory(self.nbytes), 0)

    @property
    def data(self) -> MemoryPointer:  # a descriptor of the class, as CuPy's: read as CuPy's
        return self._data

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": self.shape,
            "strides": None,
            "typestr": self.dtype.str,
            "data": (self.data.ptr, False),
            "version": 3,
        }


ndarray.__module__ = "cupy._core.core"


class Memory:
    """``cudaMalloc``: logged in ``cuda.mallocs`` with the capture state it was made in."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.ptr = next(_addresses) if size else 0
        if size:
            cuda.mallocs.append((size, cuda.capturing_streams(), cuda.exchanged_mode[0]))


class MemoryPool:
    """Free blocks reused by size; new ones from the base allocator."""

    def __init__(self, allocator: Any = None) -> None:
        self.allocator = allocator or (lambda size: MemoryPointer(Memory(size), 0))
        self.free: dict[int, list[Any]] = {}
        self.total = 0
        self.given: list[Any] = []  # every pointer handed out

    def malloc(self, size: int) -> Any:
        if size == 0:
            return MemoryPointer(Memory(0), 0)
        blocks = self.free.get(size)
        pointer = blocks.pop() if blocks else None
        if pointer is None:
            pointer = self.allocator(size)
            self.total += size
        self.given.append(pointer)
        return pointer

    def release(self, pointer: Any) -> None:  # a temporary dropped
        self.free.setdefault(pointer.mem.size, []).append(pointer)

    def free_all_blocks(self) -> None:
        for blocks in self.free.values():
            self.total -= sum(b.mem.size for b in blocks)
        self.free.clear()

    def total_bytes(self) -> int:
        return self.total


class Event:
    def __init__(self, stream: Stream) -> None:
        self.stream = stream


class Graph:
    def __init__(self, stream: Stream) -> None:
        self.captured_on = stream
        self.launches: list[int] = []  # the stream of each launch

    def launch(self, stream: Any = None) -> None:
        self.launches.append((stream or cuda.get_current_stream()).ptr)


class Stream:
    def __init__(self, null: bool = False, non_blocking: bool = False) -> None:
        self.ptr = 0 if null else next(_stream_handles)
        self.non_blocking = non_blocking
        self.capture_mode: int | None = None  # while capturing
        self.begun_mode: int | None = None  # the mode begin_capture was given
        self.invalidate = False  # end_capture raises, as CUDA's for an invalidated capture
        self.waited: list[Stream] = []
        self.synchronized = 0

    def __enter__(self) -> Stream:
        cuda.stack.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        cuda.stack.pop()

    def begin_capture(self, mode: int | None = None) -> None:
        assert self.ptr not in (0, 1) and self.capture_mode is None
        self.begun_mode = mode
        self.capture_mode = cuda.runtime.streamCaptureModeRelaxed if mode is None else mode
        cuda.captures.append(self)

    def end_capture(self) -> Graph:
        assert self.capture_mode is not None
        self.capture_mode = None
        if self.invalidate or cuda.invalidate_next:
            cuda.invalidate_next = False
            raise RuntimeError("cudaErrorStreamCaptureInvalidated: operation failed")
        return Graph(self)

    def is_capturing(self) -> bool:
        return self.capture_mode is not None

    def record(self) -> Event:
        return Event(self)

    def wait_event(self, event: Event) -> None:
        self.waited.append(event.stream)

    def synchronize(self) -> None:
        self.synchronized += 1


class _Cuda(types.SimpleNamespace):
    def capturing_streams(self) -> list[int]:
        return [s.ptr for s in self.captures if s.capture_mode is not None]

    def get_current_stream(self) -> Stream:
        return self.stack[-1] if self.stack else self.null

    @contextlib.contextmanager
    def using_allocator(self, allocator: Any):
        previous, self.allocator = self.allocator, allocator
        try:
            yield
        finally:
            self.allocator = previous

    def alloc(self, size: int) -> Any:
        return self.allocator(size)


cuda = _Cuda()


def reset() -> None:
    cuda.__dict__.update(
        Stream=Stream,
        Event=Event,
        Memory=Memory,
        MemoryPointer=MemoryPointer,
        MemoryPool=MemoryPool,
        runtime=types.SimpleNamespace(
            streamCaptureModeGlobal=0, streamCaptureModeThreadLocal=1, streamCaptureModeRelaxed=2
        ),
        null=Stream(null=True),
        stack=[],
        captures=[],  # streams begin_capture was called on
        mallocs=[],  # (size, streams capturing then, this thread's exchanged capture mode)
        exchanged_mode=["global"],  # the thread's mode (CUDA starts threads in global)
        invalidate_next=False,
        log=[],  # op: (stream handle, temporary's pointer, the pool it came from)
    )
    cuda.default_pool = MemoryPool()
    cuda.allocator = cuda.default_pool.malloc


def op(out: ndarray) -> ndarray:
    """A CuPy operation on ``out``: a temporary from the current allocator (logged, with the
    current stream), returned (a step may drop it, or return it)."""
    pointer = cuda.alloc(out.nbytes)
    pool = getattr(cuda.allocator, "__self__", None)
    cuda.log.append((cuda.get_current_stream().ptr, pointer.ptr, pool))
    return ndarray(out.shape, out.dtype, memptr=pointer)


def fake_cupy() -> types.ModuleType:
    """A module to put at ``sys.modules["cupy"]`` (fresh state each time)."""
    reset()
    cupy = types.ModuleType("cupy")
    cupy.ndarray = ndarray  # type: ignore[attr-defined]
    cupy.cuda = cuda  # type: ignore[attr-defined]
    return cupy
