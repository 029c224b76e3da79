"""numba-cuda's memory API as ``install()`` found it: what fastlaunch's replacements hand the
cases they leave to numba-cuda. ``install.py`` records each replaced attribute here by its
owner (a module or a class) and name, and ``uninstall()`` forgets them; while nothing is
recorded, the attribute is read where it lives, which is numba-cuda's own."""

from __future__ import annotations

from typing import Any

_found: dict[tuple[Any, str], Any] = {}


def remember(owner: Any, name: str, value: Any) -> None:
    _found.setdefault((owner, name), value)


def forget_all() -> None:
    _found.clear()


def original(owner: Any, name: str) -> Any:
    """numba-cuda's ``owner.name``, as it was before fastlaunch replaced it."""
    found = _found.get((owner, name))
    return found if found is not None else getattr(owner, name)
