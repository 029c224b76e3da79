"""numba-cuda's dispatcher features through fastlaunch, on the GPU (issue 5, full parity):
specialize, configure, forall, overloads and signatures, inspection, resource usage,
cooperative launches, launch bounds, register limits, the shared-memory carveout, dynamic
shared memory above 48 KB, the on-disk cache, exceptions, and grid-stride helpers.

Where a kernel runs, its result is checked against NumPy. Where numba-cuda reports a value
(registers, shared memory, ...), fastlaunch's kernel must report the same as a
``numba.cuda.jit`` kernel of the same function, and the same as the function fastlaunch
itself loaded and launches.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from arrays import to_host
from numba import cuda
from numba.cuda import float32, float64, int32
from numba.cuda import types as nb_types
from numba.cuda.decorators import jit as numba_jit

import fastlaunch as fl

pytestmark = pytest.mark.gpu

F32_C = nb_types.Array(nb_types.float32, 1, "C")
F64_C = nb_types.Array(nb_types.float64, 1, "C")
F32_A = nb_types.Array(nb_types.float32, 1, "A")


def _only_overload(kernel):
    overloads = list(kernel.overloads.values())
    assert len(overloads) == 1, f"expected one overload, got {len(overloads)}"
    return overloads[0]


def _loaded(kernel, overload):
    """The function fastlaunch loaded for a numba overload (a ``_core.CompiledKernel``)."""
    major, minor = fl.gpus[0].compute_capability
    known = kernel._compiled.get((id(overload), major * 10 + minor))
    assert known is not None and known[0] is overload, "fastlaunch has not loaded this overload"
    return known[1]


def _numba_dispatcher(kernel):
    return kernel.dispatcher if isinstance(kernel, fl.Kernel) else kernel


def _launch_configuration_error():
    return getattr(fl, "LaunchConfigurationError")  # noqa: B009 - not in every build yet


# -- kernels (plain functions, so fastlaunch and numba-cuda can both compile them) -------


def add_one(out, x):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + 1


def double_into(out, x):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] * 2


def reverse_in_block(out, x):
    buf = cuda.shared.array(0, dtype=float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < x.size:
        buf[t] = x[i]
    cuda.syncthreads()
    if i < x.size:
        out[i] = buf[cuda.blockDim.x - 1 - t]


CONSTANTS = np.arange(64, dtype=np.float64) * 0.5


def uses_resources(out, x, k):
    c = cuda.const.array_like(CONSTANTS)
    local = cuda.local.array(32, dtype=float64)
    tile = cuda.shared.array(128, dtype=float64)
    i = cuda.grid(1)
    t = cuda.threadIdx.x
    for j in range(32):
        local[j] = x[(i + j) % x.size] * j
    tile[t] = local[k % 32] + c[t % 64]
    cuda.syncthreads()
    if i < out.size:
        out[i] = tile[(t + 1) % cuda.blockDim.x]


def uses_resources_expected(x, k, block):
    n = x.size
    idx = np.arange(n)
    value = x[(idx + k % 32) % n] * (k % 32) + CONSTANTS[(idx % block) % 64]
    partner = (idx // block) * block + (idx % block + 1) % block
    return value[partner]


def many_registers(out, x):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        acc = 0.0
        for j in range(16):
            acc += math.sin(v * j) * math.cos(v + j)
        out[i] = acc


def many_registers_expected(x):
    j = np.arange(16)
    return (np.sin(x[:, None] * j) * np.cos(x[:, None] + j)).sum(axis=1)


def fill_index(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = i * 2


def static_and_dynamic_shared(out, n):
    dynamic = cuda.shared.array(0, dtype=int32)
    static = cuda.shared.array(256, dtype=int32)
    t = cuda.threadIdx.x
    b = cuda.blockIdx.x
    if t < 256:
        static[t] = t * 7
    for j in range(t, n, cuda.blockDim.x):
        dynamic[j] = 2 * j + b
    cuda.syncthreads()
    for j in range(t, n, cuda.blockDim.x):
        out[b, j] = dynamic[n - 1 - j] + static[j % 256]


def static_and_dynamic_expected(blocks, n):
    j = np.arange(n)
    return np.stack([2 * (n - 1 - j) + b + 7 * (j % 256) for b in range(blocks)]).astype(np.int32)


def grid_two_phase(a, out):
    g = cuda.cg.this_grid()
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    n = a.size
    for j in range(start, n, stride):
        a[j] = 3 * j + 1
    g.sync()  # every block's writes are visible past here
    for j in range(start, n, stride):
        out[j] = 2 * a[n - 1 - j] + a[j]


def sequential_rows(m):
    # numba-cuda's test_cooperative_groups kernel: each row reads the previous row as
    # written by the "opposite" thread, so a missing grid sync gives a wrong answer.
    col = cuda.grid(1)
    g = cuda.cg.this_grid()
    rows = m.shape[0]
    cols = m.shape[1]
    for row in range(1, rows):
        opposite = cols - col - 1
        m[row, col] = m[row - 1, opposite] + 1
        g.sync()


# -- specialize, configure, forall ----------------------------------------------------------


def test_specialize_launches_for_its_types_and_refuses_double_specialization():
    kernel = fl.jit(double_into)
    x32 = cuda.to_device(np.arange(100, dtype=np.float32))
    o32 = cuda.device_array(100, np.float32)
    spec = kernel.specialize(o32, x32)
    assert spec.specialized is True
    assert kernel.specialized is False
    assert list(spec.overloads) == [(F32_C, F32_C)]
    assert _numba_dispatcher(kernel.specialize(o32, x32)) is _numba_dispatcher(spec)

    spec[1, 128](o32, x32)
    fl.synchronize()
    np.testing.assert_array_equal(to_host(o32), 2 * np.arange(100, dtype=np.float32))

    with pytest.raises(RuntimeError, match="Dispatcher already specialized"):
        spec.specialize(o32, x32)
    signature_kernel = fl.jit("void(float32[::1], float32[::1])")(double_into)
    with pytest.raises(RuntimeError, match="Dispatcher already specialized"):
        signature_kernel.specialize(o32, x32)

    # On fastlaunch's launch path, the specialization refuses other types (as an explicit
    # signature does); numba-cuda's specialized dispatcher would pass them unchecked.
    fast = fl.jit(_numba_dispatcher(spec))
    o32.copy_to_device(np.zeros(100, np.float32))
    fast[1, 128](o32, x32)
    fl.synchronize()
    np.testing.assert_array_equal(to_host(o32), 2 * np.arange(100, dtype=np.float32))
    x64 = cuda.to_device(np.arange(100, dtype=np.float64))
    o64 = cuda.device_array(100, np.float64)
    with pytest.raises(fl.KernelArgumentError, match=r"argument 0 \(out\).*float64"):
        fast[1, 128](o64, x64)

    # The unspecialized kernel still compiles other types.
    kernel[1, 128](o64, x64)
    fl.synchronize()
    np.testing.assert_array_equal(to_host(o64), 2 * np.arange(100, dtype=np.float64))


def test_configure_grid_block_stream_and_sharedmem():
    kernel = fl.jit(reverse_in_block)
    n, block = 256, 64
    x = np.arange(n, dtype=np.float32)
    d_x = cuda.to_device(x)
    out = cuda.to_device(np.zeros(n, np.float32))
    stream = fl.stream()
    launcher = kernel.configure(n // block, block, stream, block * 4)
    assert launcher.griddim == (n // block, 1, 1)
    assert launcher.blockdim == (block, 1, 1)
    assert launcher.sharedmem == block * 4
    assert launcher.stream_handle == stream.handle
    indexed = kernel[n // block, block, stream, block * 4]
    assert (indexed.griddim, indexed.blockdim, indexed.sharedmem, indexed.stream_handle) == (
        launcher.griddim,
        launcher.blockdim,
        launcher.sharedmem,
        launcher.stream_handle,
    )
    launcher(out, d_x)
    stream.synchronize()
    np.testing.assert_array_equal(to_host(out), x.reshape(-1, block)[:, ::-1].ravel())

    two_d = kernel.configure((2, 3), (8, 4))
    assert (two_d.griddim, two_d.blockdim, two_d.sharedmem) == ((2, 3, 1), (8, 4, 1), 0)


def test_forall_runs_over_n_elements():
    kernel = fl.jit(add_one)
    n = 1000
    x = np.arange(n, dtype=np.float32)
    d_x = cuda.to_device(x)

    out = cuda.to_device(np.zeros(n, np.float32))
    kernel.forall(n)(out, d_x)
    np.testing.assert_array_equal(to_host(out), x + 1)

    out = cuda.to_device(np.zeros(n, np.float32))
    kernel.forall(n, tpb=64)(out, d_x)
    np.testing.assert_array_equal(to_host(out), x + 1)

    stream = cuda.stream()
    out = cuda.to_device(np.zeros(n, np.float32))
    kernel.forall(n, stream=stream)(out, d_x)
    stream.synchronize()
    np.testing.assert_array_equal(to_host(out), x + 1)

    out = cuda.to_device(np.zeros(n, np.float32))
    kernel.forall(0)(out, d_x)  # no tasks: nothing runs
    np.testing.assert_array_equal(to_host(out), np.zeros(n, np.float32))

    signature_kernel = fl.jit("void(float32[::1], float32[::1])")(add_one)
    out = cuda.to_device(np.zeros(n, np.float32))
    signature_kernel.forall(n)(out, d_x)
    np.testing.assert_array_equal(to_host(out), x + 1)


# -- overloads, signatures, inspection ----------------------------------------------------


def test_overloads_and_signatures_after_lazy_compile():
    kernel = fl.jit(add_one)
    reference = numba_jit(add_one)
    assert kernel.signatures == [] and len(kernel.overloads) == 0

    x32 = cuda.to_device(np.arange(64, dtype=np.float32))
    o32 = cuda.device_array(64, np.float32)
    x64 = cuda.to_device(np.arange(64, dtype=np.float64))
    o64 = cuda.device_array(64, np.float64)
    strided = cuda.to_device(np.arange(128, dtype=np.float32))[::2]
    for args in [(o32, x32), (o32, x32), (o64, x64), (o32, strided)]:
        kernel[1, 64](*args)
        reference[1, 64](*args)
    fl.synchronize()
    np.testing.assert_array_equal(to_host(o32), np.arange(0, 128, 2, dtype=np.float32) + 1)
    np.testing.assert_array_equal(to_host(o64), np.arange(64, dtype=np.float64) + 1)

    assert kernel.signatures == [(F32_C, F32_C), (F64_C, F64_C), (F32_C, F32_A)]
    assert kernel.signatures == reference.signatures
    assert list(kernel.overloads) == kernel.signatures
    for signature, overload in kernel.overloads.items():
        assert tuple(overload.signature.args) == signature
    assert kernel.overload_count == 3


def test_overloads_and_signatures_after_eager_compile():
    kernel = fl.jit(["void(float32[::1], float32[::1])", "void(float64[::1], float64[::1])"])(
        add_one
    )
    assert kernel.signatures == [(F32_C, F32_C), (F64_C, F64_C)]
    assert kernel.specialized is False
    x64 = cuda.to_device(np.arange(64, dtype=np.float64))
    o64 = cuda.device_array(64, np.float64)
    kernel[1, 64](o64, x64)
    fl.synchronize()
    np.testing.assert_array_equal(to_host(o64), np.arange(64, dtype=np.float64) + 1)
    assert kernel.signatures == [(F32_C, F32_C), (F64_C, F64_C)]  # nothing compiled at launch

    with pytest.raises(TypeError, match="No matching definition"):
        kernel[1, 64](cuda.device_array(64, np.int32), cuda.device_array(64, np.int32))
    with pytest.raises(TypeError, match="No matching definition"):
        kernel[1, 64](cuda.device_array(64, np.float32), cuda.device_array(128, np.float32)[::2])
    assert len(kernel.signatures) == 2

    single = fl.jit("void(float32[::1], float32[::1])")(add_one)
    assert single.specialized is True
    assert single.signatures == [(F32_C, F32_C)]


def test_inspect_types(capsys):
    kernel = fl.jit(add_one)
    kernel[1, 32](cuda.device_array(32, np.float32), cuda.device_array(32, np.float32))
    fl.synchronize()
    capsys.readouterr()
    kernel.inspect_types()
    printed = capsys.readouterr().out
    assert "out[i] = x[i] + 1" in printed
    assert "array(float32, 1d, C)" in printed
    assert _only_overload(kernel).entry_name in printed
    buffer = io.StringIO()
    kernel.inspect_types(file=buffer)
    assert buffer.getvalue() == printed


def test_inspect_llvm_and_asm():
    kernel = fl.jit(add_one)
    kernel[1, 32](cuda.device_array(32, np.float32), cuda.device_array(32, np.float32))
    kernel[1, 32](cuda.device_array(32, np.float64), cuda.device_array(32, np.float64))
    fl.synchronize()
    major, minor = fl.gpus[0].compute_capability

    llvm = kernel.inspect_llvm()
    assert list(llvm) == kernel.signatures
    for signature, ir in llvm.items():
        assert isinstance(ir, str) and "define" in ir
        assert kernel.inspect_llvm(signature) == ir

    asm = kernel.inspect_asm()
    assert list(asm) == kernel.signatures
    for signature, ptx in asm.items():
        assert ".entry" in ptx
        assert kernel.overloads[signature].entry_name in ptx
        target = re.search(r"\.target\s+sm_(\d+)", ptx)
        assert target is not None and target.group(1) == f"{major}{minor}"
        assert kernel.inspect_asm(signature) == ptx
    assert ".f32" in asm[(F32_C, F32_C)] and ".f64" in asm[(F64_C, F64_C)]


def test_inspect_sass():
    kernel = fl.jit(add_one)
    kernel[1, 32](cuda.device_array(32, np.float32), cuda.device_array(32, np.float32))
    fl.synchronize()
    try:
        sass = kernel.inspect_sass()
    except RuntimeError as error:
        if "nvdisasm" in str(error):
            pytest.skip("nvdisasm is not installed")
        raise
    assert list(sass) == kernel.signatures
    text = sass[(F32_C, F32_C)]
    assert _only_overload(kernel).entry_name in text
    assert "EXIT" in text


def test_resource_usage_matches_numba_and_the_loaded_kernel():
    kernel = fl.jit(uses_resources)
    reference = numba_jit(uses_resources)
    n, block, k = 512, 128, 5
    x = np.random.default_rng(3).random(n)
    d_x = cuda.to_device(x)
    out, out_ref = cuda.device_array(n, np.float64), cuda.device_array(n, np.float64)
    kernel[n // block, block](out, d_x, k)
    reference[n // block, block](out_ref, d_x, k)
    fl.synchronize()
    expected = uses_resources_expected(x, k, block)
    np.testing.assert_allclose(to_host(out), expected, rtol=1e-13)  # the GPU may fuse (FMA)
    np.testing.assert_array_equal(to_host(out), to_host(out_ref))

    getters = {
        "get_regs_per_thread": "num_regs",
        "get_shared_mem_per_block": "shared_size_bytes",
        "get_local_mem_per_thread": "local_size_bytes",
        "get_const_mem_size": "const_size_bytes",
        "get_max_threads_per_block": "max_threads_per_block",
    }
    overload = _only_overload(kernel)
    loaded = _loaded(kernel, overload)
    signature = overload.signature
    for getter, attribute in getters.items():
        values = getattr(kernel, getter)()
        assert list(values) == kernel.signatures, getter
        assert values == getattr(reference, getter)(), getter
        value = values[tuple(signature.args)]
        assert getattr(kernel, getter)(signature) == value, getter
        assert loaded.attribute(attribute) == value, (getter, attribute)
    assert kernel.get_regs_per_thread(signature) > 0
    assert kernel.get_shared_mem_per_block(signature) >= 128 * 8
    assert kernel.get_const_mem_size(signature) >= CONSTANTS.nbytes
    assert 0 < kernel.get_max_threads_per_block(signature) <= 1024

    # A specialized (explicit signature) kernel answers with a number, not a dict.
    specialized = fl.jit("void(float64[::1], float64[::1], int64)")(uses_resources)
    specialized[n // block, block](out, d_x, k)
    fl.synchronize()
    np.testing.assert_allclose(to_host(out), expected, rtol=1e-13)
    loaded = _loaded(specialized, _only_overload(specialized))
    assert specialized.get_regs_per_thread() == loaded.attribute("num_regs")
    assert specialized.get_shared_mem_per_block() == loaded.attribute("shared_size_bytes")
    assert specialized.get_local_mem_per_thread() == loaded.attribute("local_size_bytes")
    assert specialized.get_const_mem_size() == loaded.attribute("const_size_bytes")
    assert specialized.get_max_threads_per_block() == loaded.attribute("max_threads_per_block")


# -- cooperative launches -----------------------------------------------------------------


def _max_cooperative_blocks(kernel, blockdim):
    """numba-cuda's answer (a method of the overload), checked against fastlaunch's own
    where the kernel has one."""
    limit = _only_overload(kernel).max_cooperative_grid_blocks(blockdim)
    if hasattr(type(kernel), "max_cooperative_grid_blocks"):
        assert kernel.max_cooperative_grid_blocks(blockdim) == limit
    return limit


def test_cooperative_grid_sync_at_max_blocks():
    kernel = fl.jit("void(int64[::1], int64[::1])")(grid_two_phase)
    assert _only_overload(kernel).cooperative
    block = 128
    blocks = _max_cooperative_blocks(kernel, block)
    assert blocks >= fl.gpus[0].multiprocessor_count
    n = blocks * block * 3 + 17
    a = cuda.to_device(np.zeros(n, np.int64))
    out = cuda.to_device(np.zeros(n, np.int64))
    kernel[blocks, block](a, out)
    fl.synchronize()
    written = 3 * np.arange(n, dtype=np.int64) + 1
    np.testing.assert_array_equal(to_host(a), written)
    np.testing.assert_array_equal(to_host(out), 2 * written[::-1] + written)

    loaded = _loaded(kernel, _only_overload(kernel))
    assert loaded.cooperative is True
    per_sm = loaded.max_active_blocks_per_multiprocessor(block, 0)
    assert per_sm * fl.gpus[0].multiprocessor_count == blocks
    assert kernel.numba_launches == 0


def test_cooperative_grid_sync_every_row():
    kernel = fl.jit("void(int32[:, ::1])")(sequential_rows)
    block = 32
    blocks = min(32, _max_cooperative_blocks(kernel, block))
    rows, cols = 64, blocks * block
    m = cuda.to_device(np.zeros((rows, cols), np.int32))
    kernel[blocks, block](m)
    fl.synchronize()
    np.testing.assert_array_equal(to_host(m), np.tile(np.arange(rows, dtype=np.int32), (cols, 1)).T)


def test_cooperative_grid_too_large_is_refused():
    error = _launch_configuration_error()
    assert issubclass(error, fl.CudaError) and issubclass(error, ValueError)
    kernel = fl.jit("void(int64[::1], int64[::1])")(grid_two_phase)
    block = 256
    blocks = _max_cooperative_blocks(kernel, block)
    n = 4096
    a = cuda.to_device(np.zeros(n, np.int64))
    out = cuda.to_device(np.zeros(n, np.int64))
    with pytest.raises(error, match="max_cooperative_grid_blocks"):
        kernel[blocks + 1, block](a, out)
    with pytest.raises(error, match="max_cooperative_grid_blocks"):
        kernel[blocks + 1, block].bind(a, out)()
    kernel[blocks, block](a, out)  # the refusal left nothing behind
    fl.synchronize()
    written = 3 * np.arange(n, dtype=np.int64) + 1
    np.testing.assert_array_equal(to_host(out), 2 * written[::-1] + written)


# -- compile options --------------------------------------------------------------------


@pytest.mark.parametrize("bounds", [128, (128,), (128, 2)], ids=repr)
def test_launch_bounds(bounds):
    kernel = fl.jit(launch_bounds=bounds)(fill_index)
    n = 512
    out = cuda.to_device(np.zeros(n, np.int64))
    kernel[n // 128, 128](out)
    fl.synchronize()
    np.testing.assert_array_equal(to_host(out), 2 * np.arange(n))

    overload = _only_overload(kernel)
    assert kernel.get_max_threads_per_block()[tuple(overload.signature.args)] == 128
    assert _loaded(kernel, overload).attribute("max_threads_per_block") == 128
    ptx = kernel.inspect_asm(tuple(overload.signature.args))
    assert re.search(r"\.maxntid\s+128\b", ptx)
    if isinstance(bounds, tuple) and len(bounds) > 1:
        assert re.search(r"\.minnctapersm\s+2\b", ptx)
    with pytest.raises(fl.CudaError):
        kernel[1, 256](out)
    kernel[n // 128, 128](out)  # still launchable
    fl.synchronize()


def test_max_registers():
    limit = 32
    kernel = fl.jit(max_registers=limit)(many_registers)
    n = 1000
    x = np.linspace(-2, 2, n)
    out = cuda.to_device(np.zeros(n))
    kernel[(n + 127) // 128, 128](out, cuda.to_device(x))
    fl.synchronize()
    np.testing.assert_allclose(to_host(out), many_registers_expected(x), rtol=1e-10, atol=1e-12)
    overload = _only_overload(kernel)
    regs = kernel.get_regs_per_thread()[tuple(overload.signature.args)]
    assert 0 < regs <= limit
    assert _loaded(kernel, overload).attribute("num_regs") == regs


@pytest.mark.parametrize("carveout", ["MaxShared", "MaxL1", "default", 40], ids=repr)
def test_shared_memory_carveout_kernels_run(carveout):
    kernel = fl.jit(shared_memory_carveout=carveout)(reverse_in_block)
    n, block = 512, 128
    x = np.arange(n, dtype=np.float32)
    out = cuda.to_device(np.zeros(n, np.float32))
    kernel[n // block, block, 0, block * 4](out, cuda.to_device(x))
    fl.synchronize()
    np.testing.assert_array_equal(to_host(out), x.reshape(-1, block)[:, ::-1].ravel())


@pytest.mark.parametrize("carveout", ["MaxShared", "MaxL1", 40], ids=repr)
def test_shared_memory_carveout_is_applied_to_the_loaded_kernel(carveout):
    # numba-cuda sets the carveout on the function it loads (_Kernel.bind); fastlaunch loads
    # its own copy of the cubin, which must carry the same preference.
    kernel = fl.jit(shared_memory_carveout=carveout)(reverse_in_block)
    n, block = 128, 128
    out = cuda.to_device(np.zeros(n, np.float32))
    kernel[1, block, 0, block * 4](out, cuda.to_device(np.ones(n, np.float32)))
    fl.synchronize()
    overload = _only_overload(kernel)
    expected = {"MaxShared": 100, "MaxL1": 0, 40: 40}[carveout]
    assert overload.shared_memory_carveout == expected
    assert _loaded(kernel, overload).attribute("preferred_shared_memory_carveout") == expected


# -- dynamic shared memory above 48 KB --------------------------------------------------


SHARED_SIGNATURE = "void(int32[:, ::1], int32)"


def _shared_limits(kernel):
    optin = fl.gpus[0].MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    static = kernel.get_shared_mem_per_block()  # specialized: a number
    assert static >= 256 * 4
    return optin, static


@pytest.mark.parametrize("size", ["100KB", "max"])
def test_dynamic_shared_memory_above_48kb(size):
    kernel = fl.jit(SHARED_SIGNATURE)(static_and_dynamic_shared)
    optin, static = _shared_limits(kernel)
    sharedmem = 100 * 1024 if size == "100KB" else optin - static
    assert sharedmem > 48 * 1024
    n = sharedmem // 4
    blocks = 4
    expected = static_and_dynamic_expected(blocks, n)

    out = cuda.to_device(np.zeros((blocks, n), np.int32))
    kernel[blocks, 512, 0, sharedmem](out, n)
    fl.synchronize()
    np.testing.assert_array_equal(to_host(out), expected)
    loaded = _loaded(kernel, _only_overload(kernel))
    assert loaded.attribute("shared_size_bytes") == static

    stream = fl.stream()
    out = cuda.to_device(np.zeros((blocks, n), np.int32))
    kernel[blocks, 1024, stream, sharedmem](out, n)
    stream.synchronize()
    np.testing.assert_array_equal(to_host(out), expected)

    out = cuda.to_device(np.zeros((blocks, n), np.int32))
    kernel[blocks, 256, None, sharedmem].bind(out, n)()
    fl.synchronize()
    np.testing.assert_array_equal(to_host(out), expected)
    assert kernel.numba_launches == 0


def test_dynamic_shared_memory_grows_after_small_launches():
    # The kernel's function is looked up at its first launch (48 KiB or less, no opt-in);
    # the opt-in at a larger launch is set on the kernel and must reach that function.
    kernel = fl.jit(SHARED_SIGNATURE)(static_and_dynamic_shared)
    blocks = 2
    for sharedmem in (4096, 100 * 1024, 8192):
        n = sharedmem // 4
        out = cuda.to_device(np.zeros((blocks, n), np.int32))
        kernel[blocks, 256, 0, sharedmem](out, n)
        fl.synchronize()
        np.testing.assert_array_equal(to_host(out), static_and_dynamic_expected(blocks, n))


def test_dynamic_shared_memory_above_the_device_limit_is_refused():
    error = _launch_configuration_error()
    kernel = fl.jit(SHARED_SIGNATURE)(static_and_dynamic_shared)
    optin, static = _shared_limits(kernel)
    too_much = optin - static + 1
    out = cuda.to_device(np.zeros((1, 1024), np.int32))
    with pytest.raises(error, match=re.compile("shared memory", re.IGNORECASE)):
        kernel[1, 256, 0, too_much](out, 1024)
    with pytest.raises(error, match=re.compile("shared memory", re.IGNORECASE)):
        kernel[1, 256, 0, too_much].bind(out, 1024)()
    kernel[1, 256, 0, 4096](out, 1024)  # the refusal left nothing behind
    fl.synchronize()
    np.testing.assert_array_equal(to_host(out), static_and_dynamic_expected(1, 1024))


# -- on-disk cache ----------------------------------------------------------------------


def test_cache_a_second_process_loads_without_compiling(tmp_path):
    child = Path(__file__).with_name("cache_child.py")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}

    def run_child():
        done = subprocess.run(
            [sys.executable, str(child)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = run_child()
    assert first["ok"] is True
    assert (first["misses"], first["hits"]) == (1, 0), first
    assert first["cache_path"].startswith(str(tmp_path)), first
    assert list(tmp_path.rglob("*.nbi")) and list(tmp_path.rglob("*.nbc"))
    assert first["numba_launches"] == 0

    second = run_child()
    assert second["ok"] is True
    assert (second["misses"], second["hits"]) == (0, 1), second
    assert second["signatures"] == first["signatures"]
    assert second["numba_launches"] == 0


# -- exceptions -------------------------------------------------------------------------


class MyError(Exception):
    pass


def test_user_exception_classes_with_debug():
    @fl.jit("void(int32)", debug=True, opt=False)
    def raise_mine(x):
        if x == 1:
            raise MyError
        elif x == 2:
            raise MyError("foo")

    raise_mine[1, 1](0)  # no raise
    location = r"In function ['\"]raise_mine['\"], file .+, line \d+"
    with pytest.raises(MyError) as info:
        raise_mine[1, 1](1)
    assert re.search(location, str(info.value))
    assert "tid=[0, 0, 0] ctaid=[0, 0, 0]" in str(info.value)
    with pytest.raises(MyError) as info:
        raise_mine[1, 1](2)
    assert re.search(location, str(info.value))
    assert "tid=[0, 0, 0] ctaid=[0, 0, 0]: foo" in str(info.value)
    raise_mine[1, 1](0)  # the error state was reset
    fl.synchronize()


def index_past_shape(a):
    x = cuda.threadIdx.x
    if x == 2:
        a.shape[-x]


def test_index_error_raises_only_with_debug():
    a = cuda.to_device(np.array([0, 1]))
    unsafe = fl.jit(index_past_shape)
    safe = fl.jit(debug=True, opt=False)(index_past_shape)
    unsafe[1, 3](a)  # no error checking without debug
    fl.synchronize()
    with pytest.raises(IndexError, match="tuple index out of range"):
        safe[1, 3](a)


def divide(r, x, y):
    r[0] = y[0] / x[0]
    r[1] = y[0]


def test_zero_division_only_with_debug():
    x, y = cuda.to_device(np.zeros(1)), cuda.to_device(np.ones(1))
    r = cuda.to_device(np.zeros(2))
    fl.jit(divide)[1, 1](r, x, y)
    fl.synchronize()
    result = to_host(r)
    assert np.isinf(result[0]) and result[1] == 1.0  # execution went on

    r = cuda.to_device(np.zeros(2))
    with pytest.raises(ZeroDivisionError):
        fl.jit(debug=True, opt=False)(divide)[1, 1](r, x, y)
    np.testing.assert_array_equal(to_host(r), [0.0, 0.0])  # execution stopped


# -- grid-stride helpers ----------------------------------------------------------------


def stride_1d(out, visits, size):
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    if start == 0:
        size[0] = stride
    for i in range(start, out.size, stride):
        out[i] = i * 3
        cuda.atomic.add(visits, i, 1)


def stride_2d(out):
    x0, y0 = cuda.grid(2)
    sx, sy = cuda.gridsize(2)
    for i in range(x0, out.shape[0], sx):
        for j in range(y0, out.shape[1], sy):
            out[i, j] += i * 1000 + j


def stride_3d(out):
    x0, y0, z0 = cuda.grid(3)
    sx, sy, sz = cuda.gridsize(3)
    for i in range(x0, out.shape[0], sx):
        for j in range(y0, out.shape[1], sy):
            for k in range(z0, out.shape[2], sz):
                out[i, j, k] += i * 10000 + j * 100 + k


def test_grid_stride_helpers():
    n = 10_000
    out = cuda.to_device(np.zeros(n, np.int64))
    visits = cuda.to_device(np.zeros(n, np.int64))
    size = cuda.to_device(np.zeros(1, np.int64))
    fl.jit(stride_1d)[3, 64](out, visits, size)

    out2 = cuda.to_device(np.zeros((70, 90), np.int64))
    fl.jit(stride_2d)[(2, 3), (8, 4)](out2)

    out3 = cuda.to_device(np.zeros((9, 10, 11), np.int64))
    fl.jit(stride_3d)[(2, 1, 2), (2, 3, 2)](out3)
    fl.synchronize()

    np.testing.assert_array_equal(to_host(out), 3 * np.arange(n))
    np.testing.assert_array_equal(to_host(visits), np.ones(n, np.int64))
    assert to_host(size)[0] == 3 * 64
    i, j = np.indices((70, 90))
    np.testing.assert_array_equal(to_host(out2), i * 1000 + j)
    i, j, k = np.indices((9, 10, 11))
    np.testing.assert_array_equal(to_host(out3), i * 10000 + j * 100 + k)
