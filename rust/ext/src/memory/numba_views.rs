//! `d[a:b]` of a numba-cuda `DeviceNDArray` made in Rust ([`first_axis_view`]): the slice of
//! the first axis with step 1 of an array over numba-cuda's memory with positive strides, as
//! `DeviceNDArray.__getitem__` makes it (`gpu_data.view(begin, end)`, a `MemoryPointer` of the
//! owner in a new `OwnedPointer`, then `DeviceNDArray(shape, strides, dtype, stream,
//! gpu_data=...)`), every object in the state numba-cuda's constructors leave it, the same
//! attributes in the same order (`python/fastlaunch/memory/objects.py` builds the others).
//! Any other case is left to numba-cuda (`None`), whose results and errors stay its own.
//! `d[1:-1]` is the most common view; made here, it runs no Python frame.

use std::cell::RefCell;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PySlice, PyTuple, PyWeakrefProxy};
use smallvec::SmallVec;

use super::instances::new_instance;
use super::numba_arrays::device_array;
use super::numba_classes::{numba_classes, NumbaClasses};
use super::numba_pointers::{init_memory_pointer, owned_pointer, MemoryPointerFields};

/// `array[item]` for `item` a slice of the first axis with step 1, made here where `array` is
/// exactly a `DeviceNDArray` over an `OwnedPointer` with positive extents and strides, and
/// the view is not empty; else `None` (numba-cuda's `_do_getitem` is to make it).
#[pyfunction]
pub(crate) fn first_axis_view<'py>(
    array: &Bound<'py, PyAny>,
    item: &Bound<'py, PySlice>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = array.py();
    let Some(classes) = numba_classes(py) else {
        return Ok(None);
    };
    if !array.get_type().is(classes.device_nd_array.bind(py)) {
        return Ok(None);
    }
    let gpu_data = array.getattr(intern!(py, "gpu_data"))?;
    if !gpu_data.get_type().is(classes.owned_pointer.bind(py)) {
        return Ok(None);
    }
    let Some(layout) = Layout::of(array)? else {
        return Ok(None);
    };
    let Some((begin, end, count)) = layout.first_axis(item)? else {
        return Ok(None);
    };
    let address: u64 = gpu_data
        .getattr(intern!(py, "device_ctypes_pointer"))?
        .getattr(intern!(py, "value"))?
        .extract()
        .unwrap_or(0);
    if address == 0 || address.checked_add(end).is_none() {
        return Ok(None);
    }
    let owned = owned_view(classes, &gpu_data, address + begin, end - begin)?;
    let described = layout.of_view(classes, count)?;
    let stream = array.getattr(intern!(py, "stream"))?;
    let view = device_array(
        classes,
        &described,
        &layout.dtype,
        &stream,
        &owned,
        Some(address + begin),
    )?;
    Ok(Some(view))
}

/// Views' layouts kept per thread.
const VIEW_LAYOUT_SLOTS: usize = 8;

/// The layout of a view of `count` rows of an array whose shape and strides are these very
/// tuples (held: their addresses stay theirs) of `itemsize`-byte items.
struct ViewLayout {
    shape: Py<PyTuple>,
    strides: Py<PyTuple>,
    itemsize: i64,
    count: i64,
    described: Py<PyTuple>,
}

thread_local! {
    static VIEW_LAYOUTS: RefCell<Vec<ViewLayout>> = const { RefCell::new(Vec::new()) };
}

/// What a slice reads of the array sliced.
struct Layout<'py> {
    shape_tuple: Bound<'py, PyTuple>,
    shape: SmallVec<[i64; 4]>,
    strides: Bound<'py, PyTuple>,
    stride_values: SmallVec<[i64; 4]>,
    dtype: Bound<'py, PyAny>,
    itemsize: i64,
}

impl<'py> Layout<'py> {
    /// `array`'s shape, strides and dtype, where every extent and stride is a positive int
    /// (numba-cuda's dummy array treats the others its own way).
    fn of(array: &Bound<'py, PyAny>) -> PyResult<Option<Layout<'py>>> {
        let py = array.py();
        let Ok(shape) = array.getattr(intern!(py, "shape"))?.cast_into::<PyTuple>() else {
            return Ok(None);
        };
        let Ok(strides) = array
            .getattr(intern!(py, "strides"))?
            .cast_into::<PyTuple>()
        else {
            return Ok(None);
        };
        let (Some(shape_values), Some(stride_values)) = (positive(&shape), positive(&strides))
        else {
            return Ok(None);
        };
        if shape_values.is_empty() || shape_values.len() != stride_values.len() {
            return Ok(None);
        }
        let dtype = array.getattr(intern!(py, "dtype"))?;
        let itemsize: i64 = dtype.getattr(intern!(py, "itemsize"))?.extract()?;
        Ok(Some(Layout {
            shape_tuple: shape,
            shape: shape_values,
            strides,
            stride_values,
            dtype,
            itemsize,
        }))
    }

    /// The byte range `[begin, end)` of `self[item]` (numba-cuda's extent of the sliced dummy
    /// array: its first element to one past its last) and its first extent; `None` for an
    /// empty view or a step other than 1.
    fn first_axis(&self, item: &Bound<'py, PySlice>) -> PyResult<Option<(u64, u64, i64)>> {
        let indices = item.indices(self.shape[0] as isize)?;
        let count = (indices.stop - indices.start) as i64;
        if indices.step != 1 || count <= 0 {
            return Ok(None);
        }
        // checked: a layout past 64 bits (no memory has one, but a DeviceNDArray may be made
        // with any strides) is left to numba-cuda's own integers
        let extent = |n: i64, stride: i64| (n - 1).checked_mul(stride);
        let stride = self.stride_values[0];
        let begin = (indices.start as i64).checked_mul(stride);
        let mut end = begin
            .zip(extent(count, stride))
            .and_then(|(begin, extent)| begin.checked_add(extent)?.checked_add(self.itemsize));
        for (&n, &s) in self.shape[1..].iter().zip(&self.stride_values[1..]) {
            end = end
                .zip(extent(n, s))
                .and_then(|(end, extent)| end.checked_add(extent));
        }
        let (Some(begin), Some(end)) = (begin, end) else {
            return Ok(None);
        };
        Ok(Some((begin as u64, end as u64, count)))
    }

    /// The `objects.layout` tuple of a view of this array's first `count` rows: from this
    /// thread's table when a view of as many rows of an array of these very shape and strides
    /// tuples was made here before (numba-cuda's arrays of one layout share those tuples),
    /// else `objects.layout`'s (cached there by value), then kept.
    fn of_view(&self, classes: &NumbaClasses, count: i64) -> PyResult<Bound<'py, PyTuple>> {
        let py = self.strides.py();
        let found = VIEW_LAYOUTS.with(|table| {
            let table = table.try_borrow().ok()?;
            let entry = table.iter().find(|entry| {
                entry.count == count
                    && entry.itemsize == self.itemsize
                    && entry.shape.bind(py).is(&self.shape_tuple)
                    && entry.strides.bind(py).is(&self.strides)
            })?;
            Some(entry.described.bind(py).clone())
        });
        if let Some(described) = found {
            return Ok(described);
        }
        let mut shape: SmallVec<[i64; 4]> = SmallVec::with_capacity(self.shape.len());
        shape.push(count);
        shape.extend_from_slice(&self.shape[1..]);
        let described = classes.layout(PyTuple::new(py, shape)?, &self.strides, self.itemsize)?;
        let entry = ViewLayout {
            shape: self.shape_tuple.clone().unbind(),
            strides: self.strides.clone().unbind(),
            itemsize: self.itemsize,
            count,
            described: described.clone().unbind(),
        };
        // the entry dropped (the oldest, past VIEW_LAYOUT_SLOTS) is dropped after the borrow
        let _dropped = VIEW_LAYOUTS.with(|table| {
            let mut table = table.try_borrow_mut().ok()?;
            table.insert(0, entry);
            (table.len() > VIEW_LAYOUT_SLOTS)
                .then(|| table.pop())
                .flatten()
        });
        Ok(described)
    }
}

/// The ints of `values`, where each is an int above 0.
fn positive(values: &Bound<'_, PyTuple>) -> Option<SmallVec<[i64; 4]>> {
    values
        .iter_borrowed()
        .map(|value| value.extract::<i64>().ok().filter(|&v| v > 0))
        .collect()
}

/// `gpu_data.view(begin, end)` for an `OwnedPointer` `gpu_data` at `address` (the view's
/// first byte, `size` bytes): a `MemoryPointer` of the owning allocation, in a new
/// `OwnedPointer` that holds a reference on the owner (its `deref` run in Rust when collected).
fn owned_view<'py>(
    classes: &NumbaClasses,
    gpu_data: &Bound<'py, PyAny>,
    address: u64,
    size: u64,
) -> PyResult<Bound<'py, PyAny>> {
    let py = gpu_data.py();
    let view = gpu_data.getattr(intern!(py, "_view"))?;
    let owner = owner_of(&view)?;
    // MemoryPointer.view: a MemoryPointer of the owner ...
    let memory = new_instance(classes.memory_pointer.bind(py))?;
    let address = address.into_pyobject(py)?.into_any();
    let fields = MemoryPointerFields {
        context: &view.getattr(intern!(py, "context"))?,
        address: &address,
        size,
        managed: false,
        owner: &owner,
        finalizer: None,
    };
    init_memory_pointer(classes, &memory, fields)?;
    // ... in an OwnedPointer, which takes a reference on the owner (counted on the owner
    // itself: through its proxy costs twice as much)
    let refct = intern!(py, "refct");
    owner.setattr(refct, owner.getattr(refct)?.extract::<i64>()? + 1)?;
    let proxy = PyWeakrefProxy::new(&owner)?;
    owned_pointer(classes, proxy, &memory, None, &address)
}

/// `view.owner` (`MemoryPointer.owner`: the pointer itself, or its `_owner`) without the
/// property's frame; `view` may be a weak proxy of the pointer (a pool array's `_view`).
fn owner_of<'py>(view: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let owner = view.getattr(intern!(view.py(), "_owner"))?;
    if !owner.is_none() {
        return Ok(owner);
    }
    match view.cast::<PyWeakrefProxy>() {
        Ok(proxy) => proxy.upgrade().ok_or_else(|| {
            pyo3::exceptions::PyReferenceError::new_err("weakly-referenced object no longer exists")
        }),
        Err(_) => Ok(view.clone()),
    }
}
