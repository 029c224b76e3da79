"""Helpers shared by the GPU tests."""

from __future__ import annotations

import numpy as np


def to_host(array) -> np.ndarray:
    """A NumPy copy of a numba, CuPy or torch device array."""
    if hasattr(array, "copy_to_host"):
        return array.copy_to_host()
    if hasattr(array, "get"):
        return array.get()
    return array.cpu().numpy()
