"""``kernel[griddim, blockdim, stream, sharedmem]`` (rust/ext/src/launcher.rs) as numba-cuda's
``_LaunchConfiguration``: dimensions padded as numba-cuda pads them, ``pre_launch_callbacks``,
``dispatcher`` and pickling. Callback runs need a launch: they go through the stand-in driver.
test_gpu_numba_launchconfig.py runs the callbacks beside numba-cuda's on the GPU."""

from __future__ import annotations

import pickle
import textwrap

import numpy as np
import pytest
from numba import cuda

import fastlaunch
from fastlaunch import _numba_compat
from fastlaunch.errors import NumbaCudaVersionError

pytestmark = pytest.mark.filterwarnings("ignore:Grid size")

#: numba-cuda 0.30 added pre_launch_callbacks; before it fastlaunch refuses them (pinned below)
needs_launch_config_api = pytest.mark.skipif(
    not _numba_compat.has_launch_config_api(),
    reason="numba-cuda before 0.30 has no pre_launch_callbacks",
)


@fastlaunch.jit
def kernel(a):
    pass


@pytest.mark.parametrize(
    ("griddim", "blockdim", "expected"),
    [(5, 8, ((5, 1, 1), (8, 1, 1))), ((), (2, 3), ((1, 1, 1), (2, 3, 1)))],
)
def test_dimensions_are_padded_as_numba_cuda_pads_them(griddim, blockdim, expected):
    launcher = kernel[griddim, blockdim]
    numba_config = cuda.jit(kernel.py_func)[griddim, blockdim]
    assert (launcher.griddim, launcher.blockdim) == expected
    assert (numba_config.griddim, numba_config.blockdim) == expected


@needs_launch_config_api
def test_one_callback_list_per_configuration_as_numba_cuda_caches_configurations():
    @fastlaunch.jit
    def fresh(a):
        pass

    first, again, other = fresh[1, 1], fresh[(1,), (1, 1)], fresh[1, 1, 0, 8]
    first.pre_launch_callbacks.append(print)
    assert again.pre_launch_callbacks == [print]
    assert first.pre_launch_callbacks is again.pre_launch_callbacks
    assert other.pre_launch_callbacks == []
    assert kernel[1, 1].pre_launch_callbacks == []  # another kernel
    assert first.dispatcher is fresh
    # numba-cuda: the same configuration object, so the same list
    numba_kernel = cuda.jit(fresh.py_func)
    assert numba_kernel[1, 1].pre_launch_callbacks is numba_kernel[1, 1].pre_launch_callbacks
    # the deliberate difference (docs/differences.md): numba-cuda keys its cache on the
    # configuration as written, fastlaunch on what it means
    assert (
        numba_kernel[1, 1].pre_launch_callbacks
        is not numba_kernel[(1,), (1, 1)].pre_launch_callbacks
    )


def test_the_same_configuration_is_the_same_launcher_as_numba_cuda_caches_it():
    @fastlaunch.jit
    def fresh(a):
        pass

    numba_kernel = cuda.jit(fresh.py_func)
    for config in [(1, 1), (4, 32, 0), (4, 32, None, 0), ((2, 2), (8, 4), 0, 128)]:
        assert fresh[config] is fresh[config]
        assert numba_kernel[config] is numba_kernel[config]
    assert fresh[1, 1] is not fresh[1, 1, 0]  # its `stream` is 0, not None
    assert fresh[1, 1, None, 16].sharedmem == 16
    assert fresh[1, 1, None, 16] is not fresh[1, 1]


@pytest.mark.parametrize(
    "config",
    [
        (0, 1),
        (1, -1),
        (2**32, 1),
        (1.0, 1),
        (1, (1, 2, 3, 4)),
        (1, 1, -1),
        (1, 1, 0, -4),
    ],
)
def test_configurations_that_are_not_cached_still_raise(config):
    with pytest.raises((TypeError, ValueError)):
        kernel[config]


class Stream:
    """A stream object of any library: its handle, through ``__cuda_stream__``."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def test_a_stream_object_is_one_configuration_while_it_lives():
    @fastlaunch.jit
    def fresh(a):
        pass

    first, second = Stream(7), Stream(9)
    assert fresh[1, 1, first] is fresh[1, 1, first]
    assert fresh[1, 1, first].stream_handle == 7
    assert fresh[1, 1, second].stream_handle == 9
    assert fresh[1, 1, first].stream is first


def test_a_stream_object_no_one_holds_is_not_kept_by_the_configurations():
    """The launcher made over a stream object is remembered (the next `kernel[..., stream]`
    over that object returns it), but once neither is held by anyone else, the next
    configuration over another stream object lets both go: a stream made per call is
    collected then, not several calls later. A stream still held keeps its launcher."""
    import weakref

    @fastlaunch.jit
    def fresh(a):
        pass

    held = Stream(5)
    launcher = fresh[1, 1, held]
    first = Stream(7)
    released = weakref.ref(first)
    fresh[1, 1, first]
    del first
    assert released() is not None  # its launcher is remembered until the next one is made
    fresh[1, 1, Stream(9)]
    assert released() is None
    assert fresh[1, 1, held] is launcher


def test_cached_configurations_are_bounded_and_collected_with_their_kernel():
    import gc
    import weakref

    @fastlaunch.jit
    def fresh(a):
        pass

    for blocks in range(1, 40):
        fresh[blocks, 32]
    assert 0 < fresh._configuration_count <= 16
    launcher = fresh[1000, 32]
    fresh._clear_configurations()
    assert fresh._configuration_count == 0
    assert launcher.griddim == (1000, 1, 1)  # a launcher held stays valid
    del launcher
    alive = weakref.ref(fresh)
    fresh[1, 1]
    del fresh
    gc.collect()
    assert alive() is None  # kernel -> its configurations -> launcher -> kernel


def test_a_configured_launch_pickles_with_its_configuration():
    launcher = kernel.configure((5, 2), 8, 0, 16, cluster=(1, 2))
    copy = pickle.loads(pickle.dumps(launcher))
    assert type(copy) is type(launcher)
    assert (copy.griddim, copy.blockdim, copy.sharedmem, copy.cluster) == (
        (5, 2, 1),
        (8, 1, 1),
        16,
        (1, 2, 1),
    )
    # numba-cuda pickles the kernel's function by value: a new kernel of the same code
    assert isinstance(copy.dispatcher, fastlaunch.Kernel)
    assert copy.dispatcher.py_func.__code__.co_code == kernel.py_func.__code__.co_code


@needs_launch_config_api
def test_pickling_a_configured_launch_with_callbacks_is_refused_as_numba_cuda_refuses():
    launcher = kernel[5, 8, 0, 4]
    launcher.pre_launch_callbacks.append(print)
    with pytest.raises(
        pickle.PicklingError, match="Cannot pickle configured launches with pre-launch callbacks"
    ):
        pickle.dumps(launcher)
    launcher.pre_launch_callbacks.clear()
    assert pickle.loads(pickle.dumps(launcher)).griddim == (5, 1, 1)


CALLBACKS_ON_STAND_IN = textwrap.dedent(
    """
    import numpy as np
    import fastlaunch as fl
    from fastlaunch import _core

    @fl.jit
    def scalars(a, b):
        pass

    seen = []
    # Stands for numba-cuda's compile (no compiler without a GPU): the overload the
    # callbacks receive is what the kernel selects for the arguments' types.
    scalars._select_overload = lambda argtypes, configuration: ("overload", argtypes)
    from numba.cuda import types
    scalars._register(
        _core.fingerprint((np.float32(1), 2)), 90, (types.float32, types.int64),
        _core.CompiledKernel(b"image", "entry"),
    )
    launcher = scalars[2, 32]
    launcher(np.float32(1), 2)
    print("without", len(seen), scalars.miss_count)
    scalars[3, 32].pre_launch_callbacks  # another configuration's list: still no callback
    launcher(np.float32(1), 2)
    launcher.pre_launch_callbacks.append(lambda k, c: seen.append(("first", k, c is launcher)))
    launcher.pre_launch_callbacks.append(lambda k, c: seen.append(("second", c.griddim)))
    scalars[2, 32](np.float32(1), 2)  # the same configuration: the same callbacks
    print("with", seen)

    def refuse(k, c):
        raise RuntimeError("refused by a callback")

    launcher.pre_launch_callbacks.insert(0, refuse)
    try:
        launcher(np.float32(1), 2)
    except RuntimeError as e:
        print("raised", e, len(seen))
    """
)


@needs_launch_config_api
def test_callbacks_run_before_each_launch_with_the_overload_and_configuration(
    run_on_stand_in,
):
    lines = run_on_stand_in(CALLBACKS_ON_STAND_IN)
    assert lines[0] == "without 0 0"
    assert lines[1] == (
        "with [('first', ('overload', (float32, int64)), True), ('second', (2, 1, 1))]"
    )
    # a callback that raises stops the launch, and the callbacks after it
    assert lines[2] == "raised refused by a callback 2"


def test_arguments_only_numba_cuda_launches_are_typed_by_numba_cuda():
    host = np.zeros(3, np.float32)
    assert kernel._argument_type(host) == cuda.jit(kernel.py_func).typeof_pyval(host)
    assert str(kernel._argument_type(np.float32(1))) == "float32"


def test_callbacks_before_numba_cuda_0_30_are_refused_naming_the_versions(monkeypatch):
    @fastlaunch.jit
    def fresh(a):
        pass

    monkeypatch.setattr(_numba_compat, "version", lambda: (0, 26, 0))
    monkeypatch.setattr(_numba_compat, "version_string", lambda: "0.26.0")
    with pytest.raises(NumbaCudaVersionError, match=r"pre_launch_callbacks needs numba-cuda 0\.30"):
        fresh[1, 1].pre_launch_callbacks  # noqa: B018 - the attribute read is what raises
    # and a launch without callbacks is unaffected
    assert fresh[1, 1].griddim == (1, 1, 1)
