"""Tests marked ``gpu`` are skipped when fastlaunch finds no usable CUDA device."""

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import fastlaunch  # lazily: collecting CPU-only tests never needs it

    if fastlaunch.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (fastlaunch.is_available() is False)")
    for item in gpu_items:
        item.add_marker(skip)
