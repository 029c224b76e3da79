"""The API of graphs, clusters and pre-bound launches without a GPU: what is checked before
the driver is needed, and the clear error once it is."""

from __future__ import annotations

import pytest

import fastlaunch
from fastlaunch import CudaUnavailableError, LaunchConfigurationError, _core

#: checks behaviour without a GPU (with a GPU: run by test_gpu_hidden.py)
NO_GPU = pytest.mark.no_gpu


@fastlaunch.jit
def kernel(a, b):
    pass


# -- clusters: checked when configured ----------------------------------------------------


@pytest.mark.parametrize(
    ("grid", "cluster", "normalised"),
    [(8, 2, (2, 1, 1)), ((4, 6), (2, 3), (2, 3, 1)), ((2, 2, 2), [1, 1, 2], (1, 1, 2))],
)
def test_cluster_shapes_are_normalised(grid, cluster, normalised):
    launcher = kernel.configure(grid, 32, cluster=cluster)
    assert launcher.cluster == normalised
    assert kernel.configure(grid, 32).cluster is None
    assert kernel[grid, 32].cluster is None


@pytest.mark.parametrize(
    ("grid", "cluster", "message"),
    [
        (6, 4, r"griddim \(6, 1, 1\) is not a multiple of cluster \(4, 1, 1\) in x"),
        ((4, 5), (2, 2), r"griddim \(4, 5, 1\) is not a multiple of cluster \(2, 2, 1\) in y"),
    ],
)
def test_grids_must_be_whole_clusters(grid, cluster, message):
    with pytest.raises(LaunchConfigurationError, match=message) as info:
        kernel.configure(grid, 32, cluster=cluster)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("cluster", "error", "message"),
    [
        ((0,), ValueError, "cluster values must be positive"),
        ((1, 2, 3, 4), ValueError, "cluster must be a sequence of 1, 2 or 3 integers"),
        (1.5, TypeError, "cluster must be a sequence of integers"),
    ],
)
def test_bad_cluster_values(cluster, error, message):
    with pytest.raises(error, match=message):
        kernel.configure(8, 32, cluster=cluster)


# -- graphs: checked when made --------------------------------------------------------------


@pytest.mark.parametrize("stream", [0, 1, 2])
def test_default_streams_cannot_be_captured(stream):
    with pytest.raises(ValueError, match="a default stream cannot be captured"):
        fastlaunch.graph(stream)


def test_capture_modes():
    for mode in ("global", "thread_local", "relaxed"):
        graph = _core.Graph(0x1234, mode)
        assert not graph.captured
        assert "not captured" in repr(graph)
    with pytest.raises(ValueError, match="capture mode is 'global', 'thread_local' or"):
        _core.Graph(0x1234, "sometimes")


def test_a_graph_replays_only_after_capture():
    graph = _core.Graph(0x1234)
    with pytest.raises(ValueError, match="nothing was captured yet"):
        graph.replay()
    with pytest.raises(ValueError, match="nothing was captured yet"):
        graph.node_count  # noqa: B018
    assert graph.launches == []
    assert graph.stream == 0x1234


def test_graph_streams_are_checked_like_launch_streams():
    with pytest.raises(TypeError, match="stream must be 0 or None, an int handle"):
        fastlaunch.graph("stream")
    with pytest.raises(ValueError, match="cannot be negative"):
        fastlaunch.graph(-1)


# -- without a GPU: the driver is needed at capture, bind and launch -----------------------


@NO_GPU
@pytest.mark.parametrize(
    "call",
    [
        lambda: fastlaunch.graph(),  # makes a stream
        lambda: _core.Graph(0x1234).__enter__(),
        lambda: kernel[1, 1].bind(1, 2),
        lambda: kernel.configure(2, 32, cluster=2)(1, 2),
    ],
    ids=["graph()", "capture", "bind", "cluster-launch"],
)
def test_cuda_unavailable(call):
    with pytest.raises(CudaUnavailableError, match="^CUDA is unavailable: "):
        call()


@NO_GPU
def test_a_failed_capture_start_leaves_launches_unredirected():
    with pytest.raises(CudaUnavailableError):
        _core.Graph(0x1234).__enter__()
    # no capture stream was installed: launches still fail for the driver's reason only
    with pytest.raises(CudaUnavailableError):
        kernel[1, 1](1, 2)
