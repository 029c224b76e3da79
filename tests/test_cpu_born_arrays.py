"""Arrays described from birth (`rust/ext/src/classify/born.rs`): the `DeviceNDArray`s that
fastlaunch's memory API makes carry what a launch reads of them, and are launched with the
fingerprint and packed bytes that reading them gives (a numba-cuda twin over the same memory,
which carries no description, is read). A description is never used where it could be stale:
on another object, a subclass, or an array given other memory since. On the stand-in driver,
with numba-cuda's own memory manager (`test_cpu_memory_api.py`)."""

from __future__ import annotations

from test_cpu_memory_api import PRELUDE as MEMORY_API_PRELUDE

PRELUDE = (
    MEMORY_API_PRELUDE
    + """
import copy
from fastlaunch.dispatcher import numba_type
from fastlaunch.memory import views

COMPILED = _core.CompiledKernel(b"fake image", "fake_entry")
_core._keep_submitted(True)

def twin(array, shape=None):
    # numba-cuda's own DeviceNDArray over the same memory and layout: read, not described
    return DeviceNDArray(shape or array.shape, array.strides, array.dtype,
                         gpu_data=array.gpu_data)

def read_as(array, expected):
    # what a launch reads of `array` is what it reads of `expected`
    types = tuple(numba_type(d) for d in _core.describe(_core.fingerprint((expected,))))
    return (_core.fingerprint((array,)) == _core.fingerprint((expected,))
            and _core.pack(types, (array,)) == _core.pack(types, (expected,)))

def described(array):
    return type(vars(array).get("_fastlaunch_description")) is _core.ArrayDescription
"""
)


def test_arrays_and_views_made_by_fastlaunch_read_as_numba_cudas_own(run_on_stand_in):
    lines = run_on_stand_in(
        PRELUDE
        + """
base = fl.to_device(np.arange(24, dtype=np.float32).reshape(4, 6))
made = [
    fl.device_array(4096, dtype=np.float32),
    fl.device_array((3, 5), dtype=np.int16, order="F"),
    fl.device_array((2, 3), dtype=[("a", "f4"), ("b", "i2")]),
    fl.device_array(7, dtype="datetime64[ns]"),
    base,
    views.getitem(base, slice(1, 3)),
    views.reshape(base, 6, 4),
    views.ravel(base),
    fl.to_device(np.asfortranarray(np.ones((3, 4)))),
]
print(all(map(described, made)), all(read_as(a, twin(a)) for a in made))
print(described(twin(base)), type(DeviceNDArray.__dict__["_fastlaunch_description"]))
"""
    )
    assert lines == ["True True", "False <class 'NoneType'>"]


def test_arrays_of_one_layout_and_dtype_share_all_but_their_pointer(run_on_stand_in):
    """What a launch reads of an array but its pointer is read once per layout and dtype and
    shared: arrays of one shape and other dtypes, and more layouts than a thread keeps, are
    each read as their twins, over their own memory."""
    lines = run_on_stand_in(
        PRELUDE
        + """
made = []
for step in range(3):
    for n in range(1, 100):
        made.append(fl.device_array(n, dtype=np.float32))
        made.append(fl.device_array(n, dtype=np.int32))
        made.append(fl.device_array((n, 2), dtype=np.complex64, order="F"))
        made.append(fl.to_device(np.zeros(n, dtype=np.int32)))
pointers = {a.gpu_data.device_ctypes_pointer.value for a in made}
print(all(map(described, made)), all(read_as(a, twin(a)) for a in made),
      len(pointers) == len(made))
"""
    )
    assert lines == ["True True True"]


def test_a_launch_reads_the_description(run_on_stand_in):
    """An array's shape is fixed at birth (numba-cuda never assigns it): one assigned since
    shows which the launch read."""
    lines = run_on_stand_in(
        PRELUDE
        + """
a = fl.device_array(64, dtype=np.float32)
expected = twin(a)
a.shape = (32,)
print(read_as(a, expected), read_as(a, twin(a)))
"""
    )
    assert lines == ["True False"]


def test_a_description_is_used_on_its_own_array_only(run_on_stand_in):
    """Each case's shape is assigned after it gets its description (as in the test above):
    what the launch reads is the object's own, never the description's."""
    lines = run_on_stand_in(
        PRELUDE
        + """
a = fl.device_array(64, dtype=np.float32)
other = fl.device_array(64, dtype=np.float32)

copied = copy.copy(a)  # the same description, on another object
copied.shape = (16,)

carrying = twin(other)  # numba-cuda's array given another's description
carrying._fastlaunch_description = a._fastlaunch_description

class Sub(DeviceNDArray):
    pass
sub = object.__new__(Sub)  # a subclass with an array's own attributes, description too
vars(sub).update(vars(a))
sub.shape = (8,)

moved = fl.device_array(64, dtype=np.float32)  # memory replaced after its birth
moved.gpu_data = other.gpu_data

for case in (copied, carrying, sub, moved):
    print(read_as(case, twin(case)), end=" ")
print(_core.fingerprint((a,)) == _core.fingerprint((twin(a),)))
"""
    )
    assert lines == ["True True True True True"]


def test_new_arrays_each_launch_are_launched_as_packed(run_on_stand_in):
    """A loop making new arrays and views for each launch (remembered launches take each new
    one of the layout read last by its data pointer alone: `same_layout.rs`), against
    numba-cuda twins of each."""
    lines = run_on_stand_in(
        PRELUDE
        + """
@fl.jit
def three(a, b, c):
    pass

def new_args():
    base = fl.device_array(128, dtype=np.float32)
    return (fl.device_array(64, dtype=np.float32), views.getitem(base, slice(64, None)),
            fl.to_device(np.arange(8.0)))

first = new_args()
types = tuple(numba_type(d) for d in _core.describe(_core.fingerprint(first)))
three._register(_core.fingerprint(first), 90, types, COMPILED)
same = []
for step in range(10):
    args = new_args()
    three[1, 1](*args)
    same.append(_core._submitted() == _core.pack(types, tuple(map(twin, args))))
print(all(same), len(same), _core._remembered_checks())
"""
    )
    assert lines == ["True 10 ['same layout', 'same layout', 'same layout']"]
