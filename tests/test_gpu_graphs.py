"""CUDA graphs (fastlaunch.graph), thread block clusters (configure(cluster=...)) and
pre-bound launches on the GPU: results checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from llvmlite import ir
from numba import cuda
from numba.cuda import types
from numba.cuda.extending import intrinsic

import fastlaunch as fl

pytestmark = pytest.mark.gpu


@fl.jit
def add_one(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] += 1


@fl.jit
def scale_into(out, a, factor):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] * factor


def test_graph_replays_captured_launches_in_order():
    a = cuda.to_device(np.zeros(1000, np.float32))
    out = cuda.device_array(1000, np.float32)
    add_one[8, 128](a)  # compiled before capture
    scale_into[8, 128](out, a, np.float32(2))
    fl.synchronize()
    g = fl.graph()
    with g:
        add_one[8, 128](a)  # no stream: goes to the capture stream
        scale_into[8, 128, g.stream](out, a, np.float32(3))
    assert g.captured and len(g.launches) == 2 and g.node_count == 2
    g.stream.synchronize()
    np.testing.assert_array_equal(a.copy_to_host(), 1)  # capture does not run anything
    for replay in range(1, 4):
        g.replay()
        g.stream.synchronize()
        np.testing.assert_array_equal(a.copy_to_host(), 1 + replay)
        np.testing.assert_array_equal(out.copy_to_host(), 3 * (1 + replay))
    assert add_one.miss_count == 1 and scale_into.miss_count == 1


def test_graph_launch_arguments_are_updated_in_place():
    a = cuda.to_device(np.arange(256, dtype=np.float32))
    b = cuda.to_device(np.full(256, 10, np.float32))
    out = cuda.device_array(256, np.float32)
    scale_into[2, 128](out, a, np.float32(1))
    fl.synchronize()
    with fl.graph() as g:
        scale_into[2, 128](out, a, np.float32(2))
    g.replay()
    g.stream.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), 2 * np.arange(256))
    (launch,) = g.launches
    launch.set_args(out, b, np.float32(5))
    g.replay()
    g.stream.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), 50)
    launch.set_arg(2, np.float32(7))
    g.replay()
    g.stream.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), 70)
    with pytest.raises(fl.KernelArgumentError, match="same type"):
        launch.set_arg(1, cuda.to_device(np.zeros(4, np.float64)))


def test_graph_on_a_given_stream_and_replay_elsewhere():
    s = fl.stream()
    other = fl.stream()
    a = cuda.to_device(np.zeros(64, np.float32))
    add_one[1, 64](a)
    fl.synchronize()
    with fl.graph(s, mode="thread_local") as g:
        add_one[1, 64, s](a)
    g.replay(other)
    other.synchronize()
    np.testing.assert_array_equal(a.copy_to_host(), 2)


def test_graph_errors():
    with pytest.raises(ValueError, match="default stream cannot be captured"):
        fl.graph(0)
    with pytest.raises(ValueError, match="capture mode"):
        fl.graph(mode="sometimes")
    g = fl.graph()
    with pytest.raises(ValueError, match="nothing was captured"):
        g.replay()
    a = cuda.to_device(np.zeros(4, np.float32))
    add_one[1, 4](a)
    fl.synchronize()
    inner = fl.graph()
    with pytest.raises(ValueError, match="do not nest"), g:
        with inner:
            pass
    # the failed body discarded the capture; launches work again afterwards
    add_one[1, 4](a)
    fl.synchronize()
    np.testing.assert_array_equal(a.copy_to_host(), 2)
    with pytest.raises(RuntimeError, match="boom"), fl.graph():
        add_one[1, 4](a)
        raise RuntimeError("boom")
    add_one[1, 4](a)
    fl.synchronize()
    np.testing.assert_array_equal(a.copy_to_host(), 3)


def test_graph_keeps_arguments_alive():
    import gc

    add_one[1, 32](cuda.to_device(np.zeros(32, np.float32)))
    fl.synchronize()
    a = cuda.to_device(np.zeros(32, np.float32))
    with fl.graph() as g:
        add_one[1, 32](a)
    pointer = a.device_ctypes_pointer.value
    del a
    gc.collect()
    g.replay()
    g.stream.synchronize()
    (launch,) = g.launches
    assert launch.kernel is add_one
    assert pointer  # the array lives in the graph's launch; replay ran without a fault


def test_launches_inside_torch_and_cupy_captures():
    torch = pytest.importorskip("torch")
    x = torch.zeros(128, device="cuda")
    add_one[1, 128](x)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        add_one[1, 128, torch.cuda.current_stream()](x)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert torch.equal(x, torch.full_like(x, 4))

    cupy = pytest.importorskip("cupy")
    y = cupy.zeros(128, dtype=cupy.float32)
    add_one[1, 128](y)
    cupy.cuda.Device().synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        add_one[1, 128, stream](y)
        cupy_graph = stream.end_capture()
    cupy_graph.launch(stream)
    cupy_graph.launch(stream)
    stream.synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(y), 3)


# ------------------------------------------------------------------------ clusters


def special_register(register):
    """An intrinsic reading a 32-bit PTX special register (inline PTX: numba-cuda's NVVM
    has no intrinsic for the cluster registers)."""

    @intrinsic
    def read(typingctx):
        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.IntType(32), [])
            return builder.asm(fnty, f"mov.u32 $0, %{register};", "=r", [], False)

        return types.int32(), codegen

    return read


cluster_rank = special_register("cluster_ctarank")  # this block's rank in its cluster
cluster_size = special_register("cluster_nctarank")  # blocks in this block's cluster


@fl.jit
def record_cluster(ranks, sizes):
    if cuda.threadIdx.x == 0:
        ranks[cuda.blockIdx.x] = cluster_rank()
        sizes[cuda.blockIdx.x] = cluster_size()


def _needs_hopper():
    if fl.gpus[0].compute_capability < (9, 0):
        pytest.skip("thread block clusters need compute capability 9.0")


@pytest.mark.parametrize("shape", [2, 4, 8, 16])
def test_cluster_launch_sets_cluster_rank(shape):
    _needs_hopper()
    blocks = 32
    ranks = cuda.device_array(blocks, np.int32)
    sizes = cuda.device_array(blocks, np.int32)
    record_cluster.configure(blocks, 32, cluster=shape)(ranks, sizes)
    fl.synchronize()
    np.testing.assert_array_equal(sizes.copy_to_host(), shape)
    np.testing.assert_array_equal(ranks.copy_to_host(), np.arange(blocks) % shape)
    # without a cluster, every block is a cluster of one
    record_cluster[blocks, 32](ranks, sizes)
    fl.synchronize()
    np.testing.assert_array_equal(sizes.copy_to_host(), 1)
    np.testing.assert_array_equal(ranks.copy_to_host(), 0)


def test_cluster_launch_bound_and_on_a_stream():
    _needs_hopper()
    s = fl.stream()
    ranks = cuda.device_array(8, np.int32)
    sizes = cuda.device_array(8, np.int32)
    launch = record_cluster.configure(8, 32, s, cluster=(4, 1, 1))
    assert launch.cluster == (4, 1, 1)
    bound = launch.bind(ranks, sizes)
    bound()
    s.synchronize()
    np.testing.assert_array_equal(ranks.copy_to_host(), [0, 1, 2, 3] * 2)


def test_cluster_errors():
    _needs_hopper()
    ranks = cuda.device_array(8, np.int32)
    with pytest.raises(fl.LaunchConfigurationError, match="not a multiple of cluster"):
        record_cluster.configure(6, 32, cluster=4)
    with pytest.raises(fl.LaunchConfigurationError, match="at most 16 blocks"):
        record_cluster.configure(32, 32, cluster=32)(ranks, ranks)
    with pytest.raises(ValueError, match="cluster"):
        record_cluster.configure(8, 32, cluster=(0,))
