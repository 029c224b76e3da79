"""The plans a ufunc, gufunc or reduction object remembers, by call key: kept on the object
itself (so they go with it), at most ``MAX_PLANS``; past that the oldest half is dropped. A key
starts with the current device (a plan's kernel and block size are the device's)."""

from __future__ import annotations

from typing import Any

from fastlaunch import _core

MAX_PLANS = 256
#: what ``find`` returns for a key with no plan yet
UNPLANNED: Any = object()


def find(owner: Any, key: Any, make: Any, *make_args: Any) -> Any:
    """``owner``'s plan for ``key``: the one remembered, or ``make(*make_args)``'s, remembered
    (None, a call numba-cuda's own code takes, is remembered too)."""
    remembered = owner.__dict__.get("_fastlaunch_plans")  # (``of``, without its frame)
    if remembered is None:
        remembered = of(owner)
    plan = remembered.get(key, UNPLANNED)
    if plan is UNPLANNED:
        plan = make(*make_args)
        remember(remembered, key, plan)
    return plan


def of(owner: Any) -> dict:
    """``owner``'s plans (made on first use)."""
    plans = owner.__dict__.get("_fastlaunch_plans")
    if plans is None:
        plans = owner._fastlaunch_plans = {}
    return plans


def remember(plans: dict, key: Any, plan: Any) -> None:
    if len(plans) >= MAX_PLANS:
        for old in list(plans)[: MAX_PLANS // 2]:
            plans.pop(old, None)  # another thread may have dropped it first
    plans[key] = plan


def device() -> Any:
    """The current device, the first part of every key."""
    return _core.current_device()
