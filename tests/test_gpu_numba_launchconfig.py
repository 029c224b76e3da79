"""numba-cuda's launch-configuration API (``numba.cuda.launchconfig``) through fastlaunch, on
the GPU: a compile triggered by a launch sees that launch's configuration and arguments, a
kernel marked launch-config sensitive is compiled per configuration, and wrapping
``_compile_for_args`` on a fastlaunch kernel sees its compiles (as cuda.coop relies on).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from numba import cuda

import fastlaunch as fl

# numba-cuda 0.30 added the API; before it, test_cpu_launcher.py pins fastlaunch's refusal
launchconfig = pytest.importorskip(
    "numba.cuda.launchconfig", reason="numba-cuda before 0.30 has no launch-configuration API"
)

pytestmark = pytest.mark.gpu


def _store_one():
    @fl.jit
    def store_one(x):
        x[0] = 1

    return store_one


def test_compile_sees_the_launch_configuration_and_arguments():
    kernel = _store_one()
    a = cuda.to_device(np.zeros(1, np.int32))
    seen = {}
    compile_for_args = kernel._compile_for_args

    def wrapped(*args, **kws):
        config = launchconfig.ensure_current_launch_config()
        seen.update(config=config, args=config.args, launcher_args=launcher.args)
        return compile_for_args(*args, **kws)

    kernel._compile_for_args = wrapped
    launcher = kernel[2, 3, 0, 16]
    assert launchconfig.current_launch_config() is None
    launcher(a)
    config = seen["config"]
    assert config.dispatcher is kernel
    assert (config.griddim, config.blockdim, config.sharedmem) == ((2, 1, 1), (3, 1, 1), 16)
    assert seen["args"][0] is a and seen["launcher_args"][0] is a
    assert launchconfig.current_launch_config() is None
    assert launcher.args is None
    assert a.copy_to_host()[0] == 1
    assert kernel.numba_launches == 0  # compiled with the configuration, launched by fastlaunch


def test_capture_compile_config_on_a_fastlaunch_kernel():
    kernel = _store_one()
    a = cuda.to_device(np.zeros(1, np.int32))
    with launchconfig.capture_compile_config(kernel) as capture:
        kernel[1, 4](a)
    assert capture["config"].dispatcher is kernel
    assert capture["config"].blockdim == (4, 1, 1)
    assert "_compile_for_args" not in kernel.__dict__  # the wrapper was taken off again


def test_launch_config_sensitive_kernels_compile_per_configuration():
    @fl.jit
    def store_block_size(x):
        if cuda.threadIdx.x == 0:
            x[0] = cuda.blockDim.x

    compiled_for = []
    compile_for_args = store_block_size._compile_for_args

    def sensitive(*args, **kws):
        config = launchconfig.ensure_current_launch_config()
        config.dispatcher.mark_launch_config_sensitive()
        compiled_for.append(config.blockdim)
        return compile_for_args(*args, **kws)

    store_block_size._compile_for_args = sensitive
    a = cuda.to_device(np.zeros(1, np.int32))
    store_block_size[1, 4](a)
    assert a.copy_to_host()[0] == 4
    (kernel,) = store_block_size.overloads.values()
    assert kernel.launch_config_sensitive
    store_block_size[1, 8](a)
    assert a.copy_to_host()[0] == 8
    assert compiled_for == [(4, 1, 1)]
    # numba-cuda compiled the second configuration in a dispatcher of its own, and launches
    # every configuration of this kernel from now on
    assert ((1, 1, 1), (8, 1, 1), 0) in store_block_size.dispatcher._launch_config_specializations
    assert store_block_size.numba_launches == 2


def test_mark_launch_config_sensitive_outside_a_compile_raises():
    kernel = _store_one()
    with pytest.raises(RuntimeError, match="No launch config"):
        kernel.mark_launch_config_sensitive()


def test_launch_arguments_during_compile_are_per_thread():
    kernel = _store_one()
    launcher = kernel[1, 1]
    barrier = threading.Barrier(2)
    seen, errors = [], []
    compile_for_args = kernel._compile_for_args

    def wrapped(*args, **kws):
        config = launchconfig.ensure_current_launch_config()
        barrier.wait(timeout=10)  # both threads compile at once
        seen.append(id(config.args[0]))
        return compile_for_args(*args, **kws)

    kernel._compile_for_args = wrapped
    arrays = [np.zeros(1, np.int32), np.zeros(1, np.int32)]

    def launch(array):
        try:
            launcher(array)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=launch, args=(a,)) for a in arrays]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert errors == []
    assert set(seen) == {id(a) for a in arrays}
    assert all(a[0] == 1 for a in arrays)


def test_launches_numba_cuda_makes_see_the_fastlaunch_kernel_as_dispatcher():
    kernel = _store_one()
    a = np.zeros(4, np.int32)[::2]  # a strided host array: numba-cuda's own launch path
    with launchconfig.capture_compile_config(kernel) as capture:
        kernel[1, 2](a)
    assert capture["config"].dispatcher is kernel
    assert capture["config"].blockdim == (2, 1, 1)
    assert a[0] == 1
    assert kernel.numba_launches == 1


# -- pre_launch_callbacks: beside numba-cuda's own ------------------------------------------


def _callback_trace(make_kernel, arguments):
    """Launches twice through one configuration with a callback, once through the same
    configuration made again and once through another; returns what the callbacks saw (the
    overload's type and its argument types, the configuration's kernel and grid) and the
    launch count. Callbacks may
    not call CUDA (numba-cuda's rule), so they only record."""
    out = cuda.to_device(np.zeros(1, np.int32))
    seen = []

    def callback(overload, launch_config):
        seen.append(
            (
                type(overload).__name__,
                tuple(str(t) for t in overload.signature.args),
                launch_config.dispatcher is count,
                launch_config.griddim,
            )
        )

    @make_kernel
    def count(out, x):
        out[0] += 1

    configured = count[2, 32]
    configured.pre_launch_callbacks.append(callback)
    configured(out, arguments)
    cuda.synchronize()
    configured(out, arguments)
    # numba-cuda caches configurations: kernel[2, 32] again has the same callbacks ...
    count[2, 32](out, arguments)
    # ... and another configuration has none
    count[4, 32](out, arguments)
    cuda.synchronize()
    return seen, int(out.copy_to_host()[0])


@pytest.mark.parametrize(
    "arguments",
    [np.float32(1.5), 7, (1, 2.0)],
    ids=["numpy-scalar", "int", "tuple"],
)
def test_pre_launch_callbacks_run_as_under_numba_cuda(arguments):
    numba_seen, numba_count = _callback_trace(cuda.jit, arguments)
    fast_seen, fast_count = _callback_trace(fl.jit, arguments)
    assert fast_seen == numba_seen
    assert fast_count == numba_count == 4
    assert len(fast_seen) == 3 and fast_seen[0][0] == "_Kernel"


def test_pre_launch_callbacks_on_an_argument_numba_cuda_launches():
    host = np.zeros(4, np.float32)
    seen = []

    @fl.jit
    def fill(a):
        a[cuda.grid(1)] = 2

    configured = fill[1, 4]
    configured.pre_launch_callbacks.append(
        lambda overload, config: seen.append(str(overload.signature.args[0]))
    )
    configured(host)
    assert seen == ["array(float32, 1d, C)"]
    assert host.tolist() == [2, 2, 2, 2]
