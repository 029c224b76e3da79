"""fastlaunch's exceptions. Rust raises these (one conversion, in ``rust/ext/src/errors.rs``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastlaunch._version_error import NumbaCudaVersionError


class CudaError(Exception):
    """Base class of every CUDA failure fastlaunch reports."""


class CudaUnavailableError(CudaError):
    """No usable CUDA: the driver library is missing, or there is no device."""


class LaunchConfigurationError(CudaError, ValueError):
    """A launch the GPU cannot run as configured: too many threads per block for the kernel
    or the device, too much shared memory, a grid or cluster beyond the device's limits, or a
    cooperative grid whose blocks cannot all be resident. The message names the limit and the
    value."""


class KernelArgumentError(TypeError):
    """A kernel argument cannot be passed: wrong kind, dtype, layout or value.

    ``position`` and ``name`` identify the argument (``name`` is the kernel's parameter
    name where known).
    """

    def __init__(self, message: str, position: int, name: str) -> None:
        super().__init__(message)
        self.position = position
        self.name = name


def _public(error_class: type) -> type:
    """A class built on first use, named as this module's own: shown as
    ``fastlaunch.errors.<name>``, and pickled by that name (a worker process's exception
    reaches its parent so)."""
    error_class.__module__ = __name__
    error_class.__qualname__ = error_class.__name__
    return error_class


def _driver_error_class() -> type:
    """``CudaDriverError``, built on first use: it is also a ``cuda.core`` ``CUDAError`` (what
    numba-cuda raises for failed launches) and numba-cuda's ``CudaAPIError`` (what its driver
    raises for every other failed call), so ``except CudaAPIError`` catches fastlaunch's
    failures too; importing cuda.core and numba-cuda's driver costs most of a second."""
    try:
        from cuda.core._utils.cuda_utils import CUDAError as core_error
    except ImportError:  # pragma: no cover - cuda.core comes with numba-cuda
        core_error = RuntimeError
    from fastlaunch import _numba_compat  # imports this module: not at the top

    bases: tuple[type, ...] = (CudaError, core_error)
    try:
        bases += (_numba_compat.api_error_class(),)
    except (ImportError, AttributeError):  # pragma: no cover - numba-cuda is a dependency
        pass  # (AttributeError: a numba this numba-cuda cannot import with)

    class CudaDriverError(*bases):  # type: ignore[misc]
        """A CUDA driver call failed. ``code`` is the ``CUresult`` (an int); ``name`` its
        name; ``during`` what was being done; ``msg`` the message (numba-cuda's
        ``CudaAPIError`` has it)."""

        def __init__(self, message: str, code: int, name: str, during: str) -> None:
            # not CudaAPIError.__init__(code, msg): args stay (message,), as before
            Exception.__init__(self, message)
            self.code = code
            self.msg = message
            self.name = name
            self.during = during

        # the message, not CudaAPIError's "[code] msg": it names the code already
        __str__ = Exception.__str__

        def __reduce__(self) -> tuple[Any, ...]:
            # pickled with all four arguments (a worker's error reaching its parent)
            arguments = (self.msg, self.code, self.name, self.during)
            return type(self), arguments, self.__dict__

    return _public(CudaDriverError)


def _launch_refused_class() -> type:
    """``LaunchRefusedError``: a launch the driver refused, explained by the limit it broke.
    Both a ``LaunchConfigurationError`` and a ``CudaDriverError`` (so also cuda.core's
    ``CUDAError``, which numba-cuda raises for the same launch)."""

    class LaunchRefusedError(LaunchConfigurationError, __getattr__("CudaDriverError")):  # type: ignore[misc]
        """The driver refused a launch; the message names the limit and the value."""

    return _public(LaunchRefusedError)


if TYPE_CHECKING:

    class CudaForkedError(CudaUnavailableError): ...

    class LaunchRefusedError(LaunchConfigurationError):
        code: int
        msg: str
        name: str
        during: str

        def __init__(self, message: str, code: int, name: str, during: str) -> None: ...

    class CudaDriverError(CudaError):
        code: int
        msg: str
        name: str
        during: str

        def __init__(self, message: str, code: int, name: str, during: str) -> None: ...


def _forked_error_class() -> type:
    """What fastlaunch raises in a child forked after its parent initialised CUDA: a
    ``CudaUnavailableError`` that is also numba-cuda's ``CudaDriverError`` (which numba-cuda
    raises there, "CUDA initialized before forking"), so code catching either catches it."""
    from fastlaunch import _numba_compat  # imports this module: not at the top

    try:
        numba_driver_error = _numba_compat.driver_error_class()
    except ImportError:  # pragma: no cover - numba-cuda is a dependency
        numba_driver_error = Exception

    class CudaForkedError(CudaUnavailableError, numba_driver_error):  # type: ignore[misc,valid-type]
        """CUDA used in a child forked after its parent initialised it."""

    return _public(CudaForkedError)


#: the classes built on first use, by name
_BUILT_ON_FIRST_USE = {
    "CudaForkedError": _forked_error_class,
    "CudaDriverError": _driver_error_class,
    "LaunchRefusedError": _launch_refused_class,
}


def __getattr__(name: str) -> Any:
    build = _BUILT_ON_FIRST_USE.get(name)
    if build is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # each built once (_launch_refused_class asks for CudaDriverError here): a second class
    # would not catch the first's instances, nor pickle by name; setdefault keeps the first
    # made when two threads build at once
    built = globals().get(name)
    return built if built is not None else globals().setdefault(name, build())


__all__ = [
    "CudaDriverError",
    "CudaForkedError",
    "CudaError",
    "CudaUnavailableError",
    "KernelArgumentError",
    "LaunchConfigurationError",
    "LaunchRefusedError",
    "NumbaCudaVersionError",
]
