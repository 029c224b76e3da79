"""fastlaunch's exceptions. Rust raises these (one conversion, in ``rust/ext/src/errors.rs``)."""

from __future__ import annotations


class CudaError(Exception):
    """Base class of every CUDA failure fastlaunch reports."""


class CudaUnavailableError(CudaError):
    """No usable CUDA: the driver library is missing, or there is no device."""


class CudaDriverError(CudaError):
    """A CUDA driver call failed. ``code`` is the ``CUresult``; ``name`` its name."""

    def __init__(self, message: str, code: int, name: str, during: str) -> None:
        super().__init__(message)
        self.code = code
        self.name = name
        self.during = during


class KernelArgumentError(TypeError):
    """A kernel argument cannot be passed: wrong kind, dtype, layout or value.

    ``position`` and ``name`` identify the argument (``name`` is the kernel's parameter
    name where known).
    """

    def __init__(self, message: str, position: int, name: str) -> None:
        super().__init__(message)
        self.position = position
        self.name = name


__all__ = ["CudaDriverError", "CudaError", "CudaUnavailableError", "KernelArgumentError"]
