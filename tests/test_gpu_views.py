"""What users write, on the GPU: ``kernel[grid, block](*args)`` spelled on every call, with
torch and CuPy views, beside numba-cuda; and everything fastlaunch remembers per object
(numba and CuPy arrays, torch views found free of the negative bit) noticing what can change:
a tensor after ``set_()``, ``resize_()``, ``.data = ...``, ``as_strided_()`` or a move to
another device, a CuPy array whose ``shape`` was assigned in place, an object freed and
another allocated at its address. Lazy conjugate/negative views stay refused."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import fastlaunch as fl

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore:Grid size")]


def copy_body(out, a):
    i = cuda.grid(1)
    if i < out.size and i < a.size:
        out[i] = a[i]


copy_1d = fl.jit(copy_body)
numba_copy_1d = cuda.jit(copy_body)


@fl.jit
def copy_2d(out, a):
    i, j = cuda.grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        out[i * a.shape[1] + j] = a[i, j]


@fl.jit
def record_shape(out, a):
    if cuda.grid(1) == 0:
        out[0] = a.shape[0]
        out[1] = a.size


def test_inline_launches_match_numba_cuda_for_views_of_every_source():
    torch = pytest.importorskip("torch")
    cupy = pytest.importorskip("cupy")
    n = 1000
    sources = {
        "torch": torch.arange(4 * n, dtype=torch.float32, device="cuda"),
        "cupy": cupy.arange(4 * n, dtype=np.float32),
        "numba": cuda.to_device(np.arange(4 * n, dtype=np.float32)),
    }
    for name, buffer in sources.items():
        for k in range(4):
            view = buffer[k * n : (k + 1) * n]
            out = cuda.device_array(n, np.float32)
            expected = cuda.device_array(n, np.float32)
            for _ in range(3):  # launched again: from what fastlaunch remembers
                copy_1d[(n + 127) // 128, 128](out, view)
            numba_copy_1d[(n + 127) // 128, 128](expected, view)
            np.testing.assert_array_equal(out.copy_to_host(), expected.copy_to_host(), name)


def test_inline_configurations_that_numba_cuda_refuses_are_refused():
    """fastlaunch refuses a bad configuration when it is made (docs/differences.md), numba-cuda
    when it launches; neither launches it."""
    out = cuda.device_array(32, np.float32)
    a = cuda.device_array(32, np.float32)
    for config, error in [((0, 32), ValueError), ((1, 2**40), ValueError), ((1.5, 1), TypeError)]:
        for _ in range(2):  # and again: a refused configuration is not cached
            with pytest.raises(error):
                copy_1d[config](out, a)
        with pytest.raises(Exception):  # noqa: B017, PT011 - numba-cuda's own error types
            numba_copy_1d[config](out, a)
            cuda.synchronize()


def _copied(launch, out, tensor):
    launch(out, tensor)
    torch = pytest.importorskip("torch")
    torch.cuda.synchronize()
    return out.clone()


def test_a_tensor_changed_in_place_is_read_as_it_is_now():
    torch = pytest.importorskip("torch")
    out = torch.zeros(64, device="cuda")
    t = torch.arange(64, dtype=torch.float32, device="cuda")
    launch = copy_1d[1, 64]
    view = t[8:40]
    for _ in range(2):
        assert torch.equal(_copied(launch, out, view)[:32], t[8:40])
    view.data = torch.arange(200, 264, dtype=torch.float32, device="cuda")
    out.zero_()
    assert torch.equal(_copied(launch, out, view), view)
    view = t.clone()  # set_, resize_ and as_strided_ on a tensor of its own
    assert torch.equal(_copied(launch, out, view), t)
    other = torch.full((64,), 7.0, device="cuda")
    view.set_(other)  # another storage
    out.zero_()
    assert torch.equal(_copied(launch, out, view), other)
    view.resize_(16)
    out.zero_()
    assert torch.equal(_copied(launch, out, view)[:16], other[:16])
    assert torch.equal(_copied(launch, out.zero_(), view)[16:], torch.zeros(48, device="cuda"))
    view.as_strided_((8,), (2,))
    out.zero_()
    assert torch.equal(_copied(launch, out, view)[:8], other[0:16:2])
    replacement = torch.arange(100, 164, dtype=torch.float32, device="cuda")
    view.data = replacement
    out.zero_()
    assert torch.equal(_copied(launch, out, view), replacement)


def test_a_view_given_a_negated_views_data_is_refused():
    torch = pytest.importorskip("torch")
    base = torch.arange(16, dtype=torch.float32, device="cuda")
    view = base[:8]
    out = torch.zeros(8, device="cuda")
    copy_1d[1, 8](out, view)  # found free of the negative bit, and remembered
    other = torch.arange(100, 108, dtype=torch.float32, device="cuda")
    try:
        view.data = other._neg_view()
    except RuntimeError as e:  # torch may refuse the assignment itself
        pytest.skip(f"torch refuses .data = a negated view: {e}")
    if not view.is_neg():
        pytest.skip("torch dropped the negative bit on assignment")
    with pytest.raises(fl.KernelArgumentError, match="resolve_neg"):
        copy_1d[1, 8](out, view)


def test_a_new_tensor_at_a_freed_tensors_address_is_checked_again():
    torch = pytest.importorskip("torch")
    out = torch.zeros(8, device="cuda")
    refused = 0
    for i in range(200):
        base = torch.arange(16, dtype=torch.float32, device="cuda") + i
        view = base[:8] if i % 2 == 0 else base[:8]._neg_view()
        if view.is_neg():
            with pytest.raises(fl.KernelArgumentError, match="resolve_neg"):
                copy_1d[1, 8](out, view)
            refused += 1
        else:
            copy_1d[1, 8](out, view)
            torch.cuda.synchronize()
            assert torch.equal(out, view)
        del view, base
    assert refused == 100


def test_a_tensor_moved_to_another_device_is_read_there():
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    t = torch.arange(32, dtype=torch.float32, device="cuda:0")
    out = torch.zeros(32, device="cuda:0")
    copy_1d[1, 32](out, t)
    moved = t.to("cuda:1")
    out1 = torch.zeros(32, device="cuda:1")
    with torch.cuda.device(1):
        copy_1d[1, 32](out1, moved)
    torch.cuda.synchronize(1)
    assert torch.equal(out1.cpu(), t.cpu())


def test_a_cupy_shape_assigned_in_place_is_noticed():
    cupy = pytest.importorskip("cupy")
    out = cupy.zeros(4, dtype=np.int64)
    a = cupy.arange(24, dtype=np.float32)
    record_shape[1, 1](out, a)
    assert out[:2].tolist() == [24, 24]
    a.shape = (4, 6)
    b = cupy.zeros(24, dtype=np.float32)
    copy_2d[(1, 1), (8, 8)](b, a)  # now 2-D
    assert cupy.array_equal(b, cupy.arange(24, dtype=np.float32))
    a.shape = (6, 4)
    b.fill(0)
    copy_2d[(1, 1), (8, 8)](b, a)
    assert cupy.array_equal(b, cupy.arange(24, dtype=np.float32))
    a.shape = (24,)
    record_shape[1, 1](out, a)
    assert out[:2].tolist() == [24, 24]


def test_a_new_cupy_array_at_a_freed_arrays_address_is_read():
    cupy = pytest.importorskip("cupy")
    out = cupy.zeros(64, dtype=np.float32)
    for i in range(100):
        n = 8 + (i % 5) * 8
        a = cupy.full(n, float(i), dtype=np.float32)
        out.fill(-1)
        copy_1d[1, 64](out, a)
        assert bool((out[:n] == i).all()) and bool((out[n:] == -1).all()), (i, n)
        del a  # CuPy's pool takes the block back now: the next array may be given its address


def test_cupy_arrays_read_from_cupys_layout_pack_as_the_interface_describes_them():
    """Once CuPy's object layout is confirmed, a CuPy array's first read takes its pointer,
    shape, strides and dtype from it (`cupy_layout.rs`): for every kind of view, what is read
    must fingerprint and pack as its own CUDA Array Interface describes it."""
    cupy = pytest.importorskip("cupy")
    from arrays import FakeCAI

    from fastlaunch import _core
    from fastlaunch.dispatcher import numba_type

    base = cupy.arange(4 * 6 * 5, dtype=np.float64).reshape(4, 6, 5)
    record_shape[1, 1](cupy.zeros(4, dtype=np.int64), base)  # read once: confirms the layout
    arrays = [
        base[1:, ::2],
        base.transpose(2, 0, 1),
        base[..., 3],
        cupy.asfortranarray(base),
        base[2, 3, 4],
        cupy.zeros((0, 3), dtype=np.float32),  # CuPy's own strides differ from C's here
        cupy.zeros((3, 0), dtype=np.float32, order="F"),
        base[:1, :, ::2],
        base.astype(np.int16)[::-1],
        cupy.arange(10, dtype=np.complex64)[::3],
    ]
    for array in arrays:
        cai = array.__cuda_array_interface__
        described = FakeCAI(cai["shape"], cai["typestr"], cai["strides"], cai["data"][0])
        assert _core.fingerprint((array,)) == _core.fingerprint((described,)), array.shape
        (descriptor,) = _core.describe(_core.fingerprint((described,)))
        param_types = (numba_type(descriptor),)
        assert _core.pack(param_types, (array,)) == _core.pack(param_types, (described,))
    major, minor = (int(part) for part in cupy.__version__.split(".")[:2])
    if (8, 0) <= (major, minor) < (14, 3):
        assert _core._cupy_layout() == "confirmed"
