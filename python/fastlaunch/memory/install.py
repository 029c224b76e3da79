"""Puts ``fastlaunch.memory``'s functions in place of numba-cuda's while fastlaunch is
installed (``fastlaunch.install()``, ``python -m fastlaunch run``, ``FASTLAUNCH_INSTALL=1``),
and numba-cuda's back on ``uninstall()``. Replaced: ``numba.cuda.<name>`` (and
``numba.cuda.api.<name>``) for the API functions, ``DeviceNDArray``'s ``copy_to_host``,
``copy_to_device``, ``__getitem__``, ``__setitem__``, ``reshape``, ``ravel`` and
``get_ipc_handle``, ``Event``'s ``record``, ``synchronize``, ``wait``, ``query`` and
``elapsed_time``, ``Stream.synchronize`` (the classes stay numba-cuda's), every device
array's ``__cuda_array_interface__`` (it waits for fastlaunch's pending copies first),
``Context.reset`` (it also releases what fastlaunch kept for the context), and the
module-level copies of ``numba.cuda.cudadrv.driver`` that numba-cuda's other paths use."""

from __future__ import annotations

import sys
from typing import Any

from fastlaunch import _numba_compat as numba_cuda
from fastlaunch.memory import (
    arrays,
    closing,
    events,
    ipc,
    originals,
    streams,
    transfers,
    views,
)

#: numba.cuda's API functions and their replacements
API = {
    "to_device": transfers.to_device,
    "device_array": arrays.device_array,
    "device_array_like": arrays.device_array_like,
    "pinned_array": arrays.pinned_array,
    "pinned_array_like": arrays.pinned_array_like,
    "stream": streams.stream,
    "synchronize": streams.synchronize,
    "event": events.event,
}
#: DeviceNDArray's methods and their replacements
METHODS = {
    "copy_to_host": transfers.copy_to_host,
    "copy_to_device": transfers.copy_to_device,
    "__getitem__": views.getitem,
    "__setitem__": transfers.setitem,
    "reshape": views.reshape,
    "ravel": views.ravel,
    "get_ipc_handle": ipc.get_ipc_handle,
}
#: numba.cuda.cudadrv.driver's copy functions and their replacements
DRIVER = {
    "host_to_device": transfers.host_to_device,
    "device_to_host": transfers.device_to_host,
    "device_to_device": transfers.device_to_device,
}


def _places() -> list[tuple[Any, str, Any]]:
    """(object, attribute, replacement) for everything replaced."""
    cuda = sys.modules["numba.cuda"]
    api = numba_cuda.api()
    driver = numba_cuda.cudadrv_driver()
    device_array_class = numba_cuda.devicearray().DeviceNDArray
    places = [(module, name, new) for name, new in API.items() for module in (cuda, api)]
    places += [(driver, name, new) for name, new in DRIVER.items()]
    places += [(device_array_class, name, new) for name, new in METHODS.items()]
    base = numba_cuda.devicearray().DeviceNDArrayBase
    places.append((base, "__cuda_array_interface__", transfers.interface_property()))
    places.append((driver.Context, "reset", closing.reset))
    places += [(driver.Event, name, new) for name, new in events.EVENT_METHODS.items()]
    places += [(driver.Stream, name, new) for name, new in events.STREAM_METHODS.items()]
    return places


#: what was replaced: (object, attribute) -> whether it was the object's own attribute,
#: and the value it had (a class may have inherited it: then it is deleted again)
_saved: dict[tuple[Any, str], tuple[bool, Any]] = {}


def _replacement(owner: Any, name: str) -> Any:
    """What install() put in place of ``owner.name``."""
    for place, attribute, new in _places():
        if place is owner and attribute == name:
            return new
    return None


def install() -> None:
    """Replaces numba-cuda's memory API with fastlaunch's (idempotent)."""
    if _saved:
        return
    for owner, name, new in _places():
        own = name in vars(owner)
        old = getattr(owner, name)
        _saved[(owner, name)] = (own, vars(owner).get(name))
        originals.remember(owner, name, old)
        setattr(owner, name, new)


def uninstall() -> None:
    """Puts numba-cuda's memory API back, where fastlaunch's is still in place."""
    for (owner, name), (own, old) in list(_saved.items()):
        if vars(owner).get(name) is not _replacement(owner, name):
            continue  # replaced again since: left alone
        if own:
            setattr(owner, name, old)
        else:
            delattr(owner, name)
    _saved.clear()
    originals.forget_all()
