"""A stand-in for torch's CUDA tensors on machines without torch or a GPU: a class that
offers the DLPack C exchange API (``__dlpack_c_exchange_api__``, its tensor reader a ctypes
callback that counts its reads), and can be changed in place as torch's can (``set_``,
``resize_``, ``as_strided_``, ``.data = ...``), with a ``torch``-like module around it for
``fastlaunch.graphed`` (``fake_torch``): its graphs count their replays and run nothing."""

from __future__ import annotations

import contextlib
import ctypes
import types
from typing import Any

KDL_CUDA = 2
FLOAT32 = (2, 32, 1)  # DLPack code, bits, lanes
COMPLEX64 = (5, 64, 1)


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("address", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("shape_at", ctypes.POINTER(ctypes.c_int64)),
        ("strides_at", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


READER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(DLTensor))


class ExchangeAPI(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("prev_api", ctypes.c_void_p),
        ("managed_tensor_allocator", ctypes.c_void_p),
        ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
        ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
        ("dltensor_from_py_object_no_sync", READER),
        ("current_work_stream", ctypes.c_void_p),
    ]


#: how many times the exchange API read a tensor (the direct replay reads each once)
reads = [0]


@READER
def _read(tensor: Any, out: Any) -> int:
    reads[0] += 1
    ctypes.memmove(out, ctypes.addressof(tensor), ctypes.sizeof(DLTensor))
    return 0


_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
_NAME = ctypes.create_string_buffer(b"dlpack_exchange_api")  # the capsule keeps the pointer
_KEEP: list[Any] = []


def _capsule(reader: Any) -> Any:
    api = ExchangeAPI(1, 3, None, None, None, None, reader, None)
    _KEEP.append(api)
    return _new_capsule(ctypes.addressof(api), ctypes.addressof(_NAME), None)


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= n
    return tuple(strides)


class Tensor(DLTensor):
    """A CUDA tensor as far as fastlaunch reads one (float32 unless told): its own memory is
    the ``DLTensor`` the exchange API hands out."""

    __dlpack_c_exchange_api__ = _capsule(_read)
    is_cuda = True

    def __init__(self, shape: tuple[int, ...], ptr: int, device: int = 0, dtype=FLOAT32):
        super().__init__()
        self.code, self.bits, self.lanes = dtype
        self.device_type, self.device_id = KDL_CUDA, device
        self._place(ptr, tuple(shape), _contiguous(tuple(shape)))

    def _place(self, ptr: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> None:
        self.address, self.ndim, self.byte_offset = ptr, len(shape), 0
        self._shape = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        self._strides = (ctypes.c_int64 * max(1, len(strides)))(*strides)
        self.shape_at = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        self.strides_at = ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._shape[: self.ndim])

    # -- what fastlaunch.graphed asks of a torch tensor
    def data_ptr(self) -> int:
        return self.address or 0

    def element_size(self) -> int:
        return self.bits // 8

    def stride(self) -> tuple[int, ...]:
        return tuple(self._strides[: self.ndim])

    # -- changes in place, as torch's
    def set_(self, other: Tensor) -> Tensor:
        self._place(other.data_ptr(), other.shape, other.stride())
        return self

    def resize_(self, *shape: int) -> Tensor:
        self._place(self.data_ptr(), shape, _contiguous(shape))
        return self

    def as_strided_(self, shape: tuple[int, ...], strides: tuple[int, ...]) -> Tensor:
        self._place(self.data_ptr(), tuple(shape), tuple(strides))
        return self

    @property
    def data(self) -> Tensor:
        return self

    @data.setter
    def data(self, other: Tensor) -> None:
        """Another tensor's memory, dtype and device under this identity."""
        self.code, self.bits, self.lanes = other.code, other.bits, other.lanes
        self.device_id = other.device_id
        self._place(other.data_ptr(), other.shape, other.stride())


# A reader in C for timing (benchmarks/graphed_torch_profile.py): a ctypes object's memory
# pointer follows its object header (CPython's CDataObject.b_ptr).
C_READER = r"""
#include <string.h>
int read_tensor(void *object, void *out) {
    memcpy(out, *(void **)((char *)object + 2 * sizeof(void *)), 48);
    return 0;
}
"""


def fast_tensor_class(library: str) -> type[Tensor]:
    """``Tensor`` read by ``C_READER`` compiled into ``library`` (no Python per read)."""
    reader = READER(("read_tensor", ctypes.CDLL(library)))
    _KEEP.append(reader)
    return type("FastTensor", (Tensor,), {"__dlpack_c_exchange_api__": _capsule(reader)})


class CUDAGraph:
    """Records nothing; counts replays."""

    def __init__(self) -> None:
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1

    def capture_begin(self, *args: Any, **kwargs: Any) -> None:
        pass

    def capture_end(self) -> None:
        pass


class _Stream:
    cuda_stream = 0x5000

    def wait_stream(self, other: Any) -> None:
        pass


@contextlib.contextmanager
def _graph(graph: CUDAGraph, stream: Any = None, capture_error_mode: str = "global"):
    yield


def fake_torch() -> types.ModuleType:
    """A module to put at ``sys.modules["torch"]``: enough of torch for ``graphed``'s capture
    by torch (the step's body runs as it is, nothing is captured)."""
    torch = types.ModuleType("torch")
    torch.Tensor = Tensor  # type: ignore[attr-defined]
    torch.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        CUDAGraph=CUDAGraph,
        Stream=_Stream,
        current_stream=lambda: _Stream(),
        graph=_graph,
        is_current_stream_capturing=lambda: False,
    )
    return torch
