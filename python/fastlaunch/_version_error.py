"""``NumbaCudaVersionError``, on its own: the numba-cuda seam (``_numba_compat``) raises it, and
``errors`` builds its other classes from the seam, so the class lives below both (``errors``
re-exports it, under its public name ``fastlaunch.errors.NumbaCudaVersionError``)."""

from __future__ import annotations


class NumbaCudaVersionError(NotImplementedError):
    """A numba-cuda feature the installed numba-cuda lacks (``pre_launch_callbacks``, say, before
    0.30). ``feature`` names it; ``needed`` is the first numba-cuda that has it; ``installed``
    the version found."""

    def __init__(self, feature: str, needed: str, installed: str) -> None:
        super().__init__(
            f"{feature} needs numba-cuda {needed} or newer; numba-cuda {installed} is installed "
            f"(pip install 'numba-cuda>={needed}')"
        )
        self.feature = feature
        self.needed = needed
        self.installed = installed

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        # pickled with its three arguments (a worker's error reaching its parent)
        return type(self), (self.feature, self.needed, self.installed)


# shown and pickled as fastlaunch.errors.NumbaCudaVersionError, where users import it from
NumbaCudaVersionError.__module__ = "fastlaunch.errors"
