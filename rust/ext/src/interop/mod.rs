//! Readers of other libraries' objects: DLPack's C structs and torch's exchange API
//! (`dlpack`), what a torch tensor described (`held_tensor`), CuPy's ndarray layout
//! (`cupy_layout`) and current stream (`cupy_stream`). Each states the invariants of the
//! foreign memory it reads.

pub(crate) mod cupy_layout;
pub(crate) mod cupy_stream;
pub(crate) mod dlpack;
pub(crate) mod held_tensor;
