"""The miss path's contract, Rust's side (``_core._KernelHooks._on_miss``): on a miss Rust
calls ``_on_miss`` once and registers what it returns, ``(param_types, target)``. With numba
parameter types, Rust builds the packing plan from them and asks ``target(packed)`` for what
to launch; with ``None``, ``target`` is numba-cuda's launch. Run against the stand-in driver
(numba-cuda cannot compile without a GPU): a ``_core.Kernel`` whose ``_on_miss`` returns fixed
answers, and ``fastlaunch.Kernel._on_miss`` with numba-cuda's compile, image loading and
launch replaced by stand-ins (the GPU tests run them for real)."""

from __future__ import annotations

import textwrap

MISS = textwrap.dedent(
    """
    import fastlaunch as fl
    from fastlaunch import _core
    from numba.cuda import types

    assert fl.is_available(), _core.unavailable_reason()

    class Raw(_core.Kernel):
        def __init__(self, param_types, make_target):
            self.param_types = param_types
            self.make_target = make_target
            self.descriptors = []
            self.asked = []
            self.launched = []

        def _on_miss(self, args, fingerprint, descriptors, compute_capability, configuration):
            self.descriptors.append(descriptors)
            if self.make_target is None:
                return self.param_types  # not a pair
            if self.param_types is None:
                return None, self.launch
            return self.param_types, self.target

        def target(self, packed):
            self.asked.append(packed)
            return self.make_target(self)

        def launch(self, args, griddim, blockdim, stream, sharedmem):
            self.launched.append((args, griddim, blockdim))

    def image(kernel):
        return _core.CompiledKernel(b"image", "entry")

    def python(kernel):
        return kernel.launch

    def run(kernel, *args):
        for _ in range(3):
            kernel[2, 32](*args)
        print(kernel.miss_count, kernel.overload_count, kernel.asked, len(kernel.launched))

    # packed: the plan built from the types, target(True) gives the loaded image
    packed = Raw((types.float64, types.UniTuple(types.int32, 2)), image)
    run(packed, 2.0, (1, 2))
    print(packed.descriptors)
    # a parameter type fastlaunch does not pack: target(False), numba-cuda's launch
    run(Raw((types.CPointer(types.float32), types.int64), python), 2.0, 1)
    # a tuple holding one: the same
    run(Raw((types.Tuple((types.int64, types.voidptr)),), python), (1, 2))
    # None: numba-cuda launches, target is its launch (never asked)
    none = Raw(None, image)
    run(none, 2.0)
    print(none.launched[0])
    # packed, and the target a callable (debug kernels): kept with the plan
    run(Raw((types.float32,), python), 1.5)
    # refused: types that do not fit the arguments, before any target is made
    for param_types, make_target in [
        ((types.float32[:],), image),
        ((types.float32, types.float32), image),
        ((types.CPointer(types.float32),), image),
        ((types.float32,), lambda kernel: 42),
        ("not a pair", None),
    ]:
        kernel = Raw(param_types, make_target)
        try:
            kernel[1, 1](2.0)
        except (TypeError, ValueError) as e:
            print(type(e).__name__, e, kernel.asked, kernel.overload_count)
    """
)


def test_rust_registers_what_on_miss_returns(run_on_stand_in):
    lines = run_on_stand_in(MISS)
    assert lines == [
        "1 1 [True] 0",
        "[[('scalar', 'float64'), ('tuple', [('scalar', 'int64'), ('scalar', 'int64')])]]",
        "1 1 [False] 3",
        "1 1 [False] 3",
        "1 1 [] 3",
        "((2.0,), (2, 1, 1), (32, 1, 1))",
        "1 1 [True] 3",
        "ValueError plan entry 0 (Array { ndim: 1 }) does not fit the argument's kind [] 0",
        "ValueError plan has 2 parameters, the arguments a different number [] 0",
        "ValueError a CompiledKernel target needs a packing plan [False] 0",
        "TypeError an overload's target must be a CompiledKernel or a callable [True] 0",
        "TypeError _on_miss must return a pair (param_types, target) [] 0",
    ]


DISPATCHER = textwrap.dedent(
    """
    import types as pytypes
    import fastlaunch as fl
    from fastlaunch import _core
    from numba.cuda import types

    assert fl.is_available(), _core.unavailable_reason()

    def overload(*param_types, **flags):
        # what numba-cuda's compile gives _on_miss: its parameter types and flags
        return pytypes.SimpleNamespace(
            signature=pytypes.SimpleNamespace(args=param_types),
            launch_config_sensitive=flags.get("sensitive", False),
            debug=False,
        )

    def kernel_for(compiled):
        def k(x, y):
            pass

        kernel = fl.jit(k)
        kernel._select_overload = lambda argtypes, configuration: compiled
        loaded = []
        kernel._target = lambda compiled, cc: loaded.append(cc) or _core.CompiledKernel(
            b"image", "entry"
        )
        numba = []
        kernel._numba_target = lambda compiled: lambda *a: numba.append(a[0])
        kernel._launch_with_numba = lambda *a: numba.append(a[0])
        return kernel, loaded, numba

    # packed: the overload's types (float32 for a float64 argument: converted when packing)
    kernel, loaded, numba = kernel_for(overload(types.float32, types.UniTuple(types.int64, 2)))
    for _ in range(3):
        kernel[1, 1](2.0, (1, 2))
    print("packed", kernel.miss_count, kernel.overload_count, loaded, numba)
    # a parameter fastlaunch does not pack: numba-cuda's launch of that overload, no image
    kernel, loaded, numba = kernel_for(overload(types.CPointer(types.float32), types.int64))
    for _ in range(2):
        kernel[1, 1](2.0, 3)
    print("unpacked", kernel.miss_count, kernel.overload_count, loaded, numba)
    # launch-config sensitive: numba-cuda launches every launch from now on
    kernel, loaded, numba = kernel_for(overload(types.float64, types.int64, sensitive=True))
    for _ in range(2):
        kernel[1, 1](2.0, 3)
    print("sensitive", kernel.miss_count, kernel.overload_count, loaded, numba)
    # an explicit signature the arguments do not fit: refused before anything is made
    kernel, loaded, numba = kernel_for(overload(types.float32[:], types.int64))
    try:
        kernel[1, 1](2.0, 3)
    except TypeError as e:
        print(type(e).__name__, e, kernel.overload_count, loaded)
    """
)


def test_dispatcher_on_miss_returns_what_rust_registers(run_on_stand_in):
    lines = run_on_stand_in(DISPATCHER)
    assert lines == [
        "packed 1 1 [90] []",
        "unpacked 1 1 [] [(2.0, 3), (2.0, 3)]",
        "sensitive 1 1 [] [(2.0, 3), (2.0, 3)]",
        "KernelArgumentError argument 0 (x): the kernel's signature expects array(float32, 1d, A), "
        "got float64 0 []",
    ]


KEPT_EXCEPTION = textwrap.dedent(
    """
    import types as pytypes, weakref
    import fastlaunch as fl
    from fastlaunch import _core, _numba_compat
    from numba.cuda import types
    from benchmarks.stand_in import stand_in_context

    assert fl.is_available(), _core.unavailable_reason()
    stand_in_context()
    kept = []

    def compile_keeping_an_exception(dispatcher, typed, config):
        # as pytest's hook keeps an exception that a finalizer raised during the compile:
        # its traceback keeps the compile's frames, and the frames' locals, alive
        try:
            raise RuntimeError("raised during the compile")
        except RuntimeError as e:
            kept.append(e)
        if _numba_compat.has_launch_config_api():
            print("current", [type(a).__name__ for a in _numba_compat.current_launch_args()])
        return pytypes.SimpleNamespace(
            signature=pytypes.SimpleNamespace(args=(types.float64[::1], types.float64[::1])),
            launch_config_sensitive=False,
            debug=False,
        )

    _numba_compat.compile_with_c_dispatcher = compile_keeping_an_exception

    @fl.jit
    def double(out, a):
        pass

    double._target = lambda compiled, cc: _core.CompiledKernel(b"image", "entry")
    source = fl.device_array(16)
    out = fl.device_array(16)
    released = weakref.ref(out)
    double[1, 16](out, source)
    del out
    print("released", released() is None, "kept", len(kept))
    if _numba_compat.has_launch_config_api():
        print("after", _numba_compat.current_launch_args())
    """
)


def test_a_compile_whose_frames_are_kept_keeps_no_argument(run_on_stand_in):
    """The first launch's arguments go when the caller drops them, even where something
    keeps the compile's frames (an exception raised there, kept with its traceback): the
    arguments are numba-cuda's current launch arguments during the compile, and no frame of
    the miss path holds them. Seen on the H200 under pytest, where the first launch of a
    kernel kept its argument tuple (tests/test_gpu_launch.py)."""
    from fastlaunch import _numba_compat

    lines = run_on_stand_in(KEPT_EXCEPTION)
    if _numba_compat.has_launch_config_api():  # numba-cuda 0.30 and newer
        assert lines == [
            "current ['DeviceNDArray', 'DeviceNDArray']",
            "released True kept 1",
            "after None",
        ]
    else:
        assert lines == ["released True kept 1"]
