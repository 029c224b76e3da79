//! A new array in the place of the last one: a loop that makes its arrays anew each step
//! (`x = cupy.empty(n)`, `torch.empty(n, device="cuda")`) passes a launch like the last
//! (`launch/repeat.rs`) objects that differ from the ones before only in their memory. What
//! the last full read found (type, dtype, shape, strides, device) is kept here, and a new
//! object found to have all of it gives its data pointer alone: the argument's one data slot
//! is rewritten, where a full read would read, fingerprint and pack it again to the same
//! bytes but that one. Any difference, and any doubt, is left to the full read.
//!
//! For the sources whose layout is a few fields read in C or shared by many arrays: the
//! numba-cuda arrays fastlaunch's memory API describes from birth (`born.rs`), CuPy arrays
//! read from CuPy's object layout (`crate::interop::cupy_layout`) and tensors of the DLPack C
//! exchange API (a torch tensor's lazy conjugate and negative bits are still asked of each
//! new tensor, as the full read asks them). Only with one device: with several, the launch
//! checks each array's device by its pointer (`limits::check_devices`) from what the full
//! read pushes.

use std::sync::Arc;

use pyo3::ffi;
use pyo3::prelude::*;
use smallvec::SmallVec;

use super::{born, cached_strategy, dlpack, Position, Scratch, Strategy};
use crate::devices::driver;
use crate::interop::cupy_layout;
use crate::interop::dlpack::{read_tensor, DLTensor, ExchangeApi, KDL_CUDA};
use crate::interop::held_tensor::TensorLayout;

/// The layout an argument was last read with, for a new object of its type.
pub(crate) struct SameLayout {
    /// The type read (held alive by the thread's type cache, so its address stays its own).
    type_ptr: usize,
    layout: Layout,
}

enum Layout {
    /// A numba-cuda array made by fastlaunch, described from birth (`born.rs`): arrays of one
    /// description layout share it, held.
    Described(Arc<born::Layout>),
    /// A CuPy array as its object layout gave it. `strides`: `None` when CuPy holds it
    /// C-contiguous, whose strides the full read makes from the shape.
    Cupy {
        /// Held, so that the address compared is never another dtype's.
        dtype: Py<PyAny>,
        shape: SmallVec<[isize; 4]>,
        strides: Option<SmallVec<[isize; 4]>>,
    },
    /// A tensor as the exchange API described it.
    Tensor {
        api: ExchangeApi,
        layout: TensorLayout,
    },
}

impl SameLayout {
    /// `arg`'s layout, just read in full, when its source has this check and there is one
    /// device.
    pub(crate) fn of(arg: &Bound<'_, PyAny>) -> Option<SameLayout> {
        if driver().ok()?.device_count() != 1 {
            return None;
        }
        // SAFETY: `arg` is a valid object; its type is read without taking a reference.
        let type_ptr = unsafe { ffi::Py_TYPE(arg.as_ptr()) } as usize;
        let layout = match cached_strategy(type_ptr)? {
            Strategy::NumbaDeviceArray => Layout::Described(born::described_layout(arg)?),
            Strategy::CupyArray { layout: true } => {
                // SAFETY: the strategy is only `layout: true` for types `cupy_layout::applies_to`
                // accepted.
                let array = unsafe { cupy_layout::read(arg) }?;
                Layout::Cupy {
                    dtype: array.dtype.to_owned().unbind(),
                    shape: array.shape.into(),
                    strides: (!array.c_contiguous).then(|| array.strides.into()),
                }
            }
            Strategy::Exchange(api) => {
                let tensor = read_tensor(arg, api.from_py_object)?;
                Layout::Tensor {
                    api,
                    layout: TensorLayout::of(&tensor)?,
                }
            }
            _ => return None,
        };
        Some(SameLayout { type_ptr, layout })
    }

    /// The data pointer of `arg` when it has this layout, with what its full read would have
    /// told the launch (the producer's current stream; for a tensor, that its lazy sign
    /// bits are clear, asked as the full read asks). `None`: read it in full.
    #[inline]
    pub(crate) fn data_of(
        &self,
        arg: &Bound<'_, PyAny>,
        at: Position<'_>,
        scratch: &mut Scratch,
    ) -> Option<u64> {
        // SAFETY: `arg` is a valid object; its type is read without taking a reference.
        if unsafe { ffi::Py_TYPE(arg.as_ptr()) } as usize != self.type_ptr {
            return None;
        }
        match &self.layout {
            Layout::Described(layout) => born::described_data(arg, layout),
            Layout::Cupy {
                dtype,
                shape,
                strides,
            } => {
                // SAFETY: `type_ptr` is a type `cupy_layout::applies_to` accepted (`of`).
                let array = unsafe { cupy_layout::read(arg) }?;
                let same = array.dtype.as_ptr() == dtype.as_ptr()
                    && array.shape == shape.as_slice()
                    && match strides {
                        None => array.c_contiguous,
                        Some(strides) => !array.c_contiguous && array.strides == strides.as_slice(),
                    };
                if !same {
                    return None;
                }
                scratch.streams.has_cupy = true;
                Some(array.data)
            }
            Layout::Tensor { api, layout } => {
                let tensor = read_tensor(arg, api.from_py_object)?;
                if !layout.describes(&tensor) {
                    return None;
                }
                Self::tensor_data(arg, &tensor, *api, at, scratch)
            }
        }
    }

    /// A tensor of this layout: refused (left to the full read, which raises) when a lazy
    /// sign bit is set or its device is one the launch would check.
    fn tensor_data(
        arg: &Bound<'_, PyAny>,
        tensor: &DLTensor,
        api: ExchangeApi,
        at: Position<'_>,
        scratch: &mut Scratch,
    ) -> Option<u64> {
        let device = tensor.device;
        // The full read claims a CUDA tensor's device, checked against the launch's; with
        // one device that is device 0.
        if device.device_type == KDL_CUDA && device.device_id != 0 {
            return None;
        }
        dlpack::note_exchange_read(arg, tensor, api, at, scratch).ok()?;
        Some((tensor.data as u64).wrapping_add(tensor.byte_offset))
    }
}
