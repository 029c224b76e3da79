"""Devices and contexts on the GPU: attributes agree with torch/CuPy/cuda.bindings,
the per-thread stack nests and unwinds, and torch's current context is ours."""

from __future__ import annotations

import threading

import pytest

import fastlaunch as fl
from fastlaunch import _core

pytestmark = pytest.mark.gpu


def test_device_list_and_attributes_agree_with_torch():
    torch = pytest.importorskip("torch")
    assert len(fl.gpus) == torch.cuda.device_count()
    for device in fl.gpus:
        props = torch.cuda.get_device_properties(device.id)
        assert device.name == props.name
        assert device.compute_capability == (props.major, props.minor)
        assert device.multiprocessor_count == props.multi_processor_count
        assert device.uuid.replace("GPU-", "") == str(props.uuid).replace("GPU-", "")
        assert device.total_memory == props.total_memory
        assert device.pci_bus_id.lower().endswith(
            f"{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        )


def test_attribute_numbers_agree_with_cuda_bindings():
    from cuda.bindings import driver

    device = fl.gpus[0]
    for name in _core.device_attribute_names():
        number = getattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        err, expected = driver.cuDeviceGetAttribute(number, 0)
        assert err == driver.CUresult.CUDA_SUCCESS
        assert getattr(device, name) == expected, name


def test_attributes_agree_with_cupy():
    cupy = pytest.importorskip("cupy")
    attributes = cupy.cuda.Device(0).attributes
    device = fl.gpus[0]
    assert device.MAX_THREADS_PER_BLOCK == attributes["MaxThreadsPerBlock"]
    assert device.WARP_SIZE == attributes["WarpSize"]
    assert device.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN == attributes["MaxSharedMemoryPerBlockOptin"]


def test_with_device_nests_and_unwinds_on_exceptions():
    before = _core.current_context()
    with fl.gpus[0] as outer:
        assert fl.gpus.current == outer
        depth_one = _core.current_context()
        with fl.gpus[0]:
            assert _core.current_context() == depth_one
        assert _core.current_context() == depth_one
        with pytest.raises(RuntimeError), fl.gpus[0]:
            raise RuntimeError("inside")
        assert _core.current_context() == depth_one
    assert _core.current_context() == before


def test_threads_keep_separate_stacks():
    seen = {}

    def worker():
        seen["initial"] = _core.current_context()
        with fl.gpus[0]:
            seen["inside"] = _core.current_context()
        seen["after"] = _core.current_context()

    fl.select_device(0)
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen["initial"] is None  # a new thread starts with an empty stack
    assert seen["inside"] == _core.primary_context(0)
    assert seen["after"] is None
    assert _core.current_context() == _core.primary_context(0)


def test_torch_current_context_is_the_one_fastlaunch_sees():
    torch = pytest.importorskip("torch")
    result = {}

    def worker():
        torch.zeros(1, device="cuda:0")  # torch makes the primary context current
        result["ctx"] = _core.current_context()
        result["device"] = fl.gpus.current

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert result["ctx"] == _core.primary_context(0)
    assert result["device"] == fl.gpus[0]


def test_select_device_does_not_grow_the_stack():
    # Relative to what is below: numba-cuda before 0.30 leaves its own contexts pushed.
    below = _core.current_context()
    _core.push_device(0)
    for _ in range(10):
        fl.select_device(0)  # replaces the top entry, never pushes
    assert fl.current_device() == fl.gpus[0]
    assert _core.pop_device() == 0
    assert _core.current_context() == below
    fl.select_device(0)


def test_driver_version_and_memory():
    major, _ = fl.driver_version()
    assert major >= 12
    free, total = _core.memory_info()
    assert 0 < free <= total
