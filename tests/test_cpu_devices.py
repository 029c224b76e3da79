"""Device lookup against the stand-in driver (one device), without a GPU: one range check
(the driver's ``device_index``) serves ``fastlaunch.gpus[i]`` and every ``_core`` function
that takes an ordinal, with one message. The GPU side is in ``test_gpu_devices.py``."""

from __future__ import annotations


def test_device_ordinals_are_checked_in_one_place(run_on_stand_in):
    out = run_on_stand_in(
        """
import fastlaunch as fl
from fastlaunch import _core
print(fl.gpus[0].id, fl.gpus[-1].id, _core.device_index(-1))
for call in (lambda: fl.gpus[1], lambda: fl.gpus[-2], lambda: _core.device_name(3),
             lambda: _core.compute_capability(-1), lambda: _core.select_device(7)):
    try:
        call()
    except IndexError as error:
        print(type(error).__name__, error)
"""
    )
    assert out[0] == "0 0 0"
    assert out[1:] == [
        "IndexError device 1 does not exist: there are 1 CUDA devices",
        "IndexError device -2 does not exist: there are 1 CUDA devices",
        "IndexError device 3 does not exist: there are 1 CUDA devices",
        "IndexError device -1 does not exist: there are 1 CUDA devices",
        "IndexError device 7 does not exist: there are 1 CUDA devices",
    ]
