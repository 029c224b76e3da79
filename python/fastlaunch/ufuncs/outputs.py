"""The output a plan allocates on every call: what ``numba.cuda.device_array(shape, dtype,
stream=stream)`` gives, its arguments normalised once, when the plan is made. Under
fastlaunch's memory API the array is made straight from its layout
(``allocation.allocate_array``, as ``device_array`` itself does after its argument checks);
otherwise (``FASTLAUNCH_MEMORY_API=0``, or ``device_array`` replaced since) the call goes to
whatever ``numba.cuda.device_array`` is then."""

from __future__ import annotations

import sys
from typing import Any

from fastlaunch.memory import arrays
from fastlaunch.memory.allocation import allocate_array
from fastlaunch.memory.transfers import stream_handle

_memory_api_device_array = arrays.device_array


class Output:
    """One output of a plan: its shape and NumPy dtype."""

    __slots__ = ("shape", "dtype", "layout")

    def __init__(self, shape: tuple[int, ...], dtype: Any) -> None:
        self.shape = shape
        self.dtype = dtype
        # ``(dtype, layout)``, or None for an empty shape (``device_array``'s own path)
        self.layout = arrays.contiguous_layout(shape, dtype)

    def new(self, stream: Any) -> Any:
        """A new ``DeviceNDArray`` of this output's shape and dtype, for use on ``stream``."""
        device_array = sys.modules["numba.cuda"].device_array
        layout = self.layout
        if device_array is _memory_api_device_array and layout is not None:
            handle = stream_handle(stream) if stream else 0
            return allocate_array(layout[1], layout[0], stream, handle)
        return device_array(self.shape, self.dtype, stream=stream)
