//! `fastlaunch._core`: the launch path in Rust. `ARCHITECTURE.md` at the repository root
//! maps the modules; Python (`python/fastlaunch`) is the public API over this module.

mod classify;
mod devices;
mod errors;
mod graphed;
mod inspect;
mod interop;
mod launch;
mod made_streams;
mod memory;
mod numba_stream_class;
mod scalar;
mod scratch;
mod streams;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<launch::overloads::Kernel>()?;
    m.add_class::<launch::launcher::Launcher>()?;
    m.add_class::<launch::bound::BoundLaunch>()?;
    m.add_class::<launch::code::CompiledKernel>()?;
    m.add_class::<launch::graph::Graph>()?;
    m.add_class::<launch::graph::GraphLaunch>()?;
    m.add_class::<streams::Stream>()?;
    m.add_class::<streams::Event>()?;
    m.add_function(wrap_pyfunction!(streams::set_ordering, m)?)?;
    m.add_function(wrap_pyfunction!(streams::ordering_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(streams::set_default_stream_policy, m)?)?;
    m.add_function(wrap_pyfunction!(streams::default_stream_policy, m)?)?;
    m.add_function(wrap_pyfunction!(streams::stream_handle, m)?)?;
    m.add_function(wrap_pyfunction!(streams::memory_stream_handle, m)?)?;
    m.add_function(wrap_pyfunction!(graphed::step_form::step_form, m)?)?;
    m.add_class::<graphed::held_args::HeldArgs>()?;
    m.add_class::<graphed::direct_replays::DirectReplays>()?;
    m.add_function(wrap_pyfunction!(
        launch::followed_capture::follow_capture,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(
        launch::followed_capture::end_followed_capture,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(
        launch::followed_capture::followed_capture,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(inspect::classify, m)?)?;
    m.add_class::<classify::born::ArrayDescription>()?;
    m.add_function(wrap_pyfunction!(classify::born::describe_births_of, m)?)?;
    m.add_function(wrap_pyfunction!(classify::born::describe_birth, m)?)?;
    m.add_function(wrap_pyfunction!(launch::submitted::_keep_submitted, m)?)?;
    m.add_function(wrap_pyfunction!(launch::submitted::_submitted, m)?)?;
    m.add_function(wrap_pyfunction!(launch::repeat::_remembered_launches, m)?)?;
    m.add_function(wrap_pyfunction!(launch::repeat::_remembered_checks, m)?)?;
    m.add_function(wrap_pyfunction!(interop::cupy_layout::_cupy_layout, m)?)?;
    m.add_function(wrap_pyfunction!(
        interop::cupy_stream::_cupy_current_stream,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(launch::code::set_release_gil, m)?)?;
    m.add_function(wrap_pyfunction!(launch::code::releases_gil, m)?)?;
    m.add_function(wrap_pyfunction!(inspect::describe, m)?)?;
    m.add_function(wrap_pyfunction!(inspect::pack, m)?)?;
    m.add_function(wrap_pyfunction!(inspect::fingerprint, m)?)?;
    m.add_function(wrap_pyfunction!(devices::is_available, m)?)?;
    m.add_function(wrap_pyfunction!(devices::unavailable_reason, m)?)?;
    m.add_function(wrap_pyfunction!(devices::driver_version, m)?)?;
    m.add_function(wrap_pyfunction!(devices::device_count, m)?)?;
    m.add_function(wrap_pyfunction!(devices::_mark_forked_child, m)?)?;
    m.add_function(wrap_pyfunction!(devices::device_index, m)?)?;
    m.add_function(wrap_pyfunction!(devices::device_name, m)?)?;
    m.add_function(wrap_pyfunction!(devices::device_uuid, m)?)?;
    m.add_function(wrap_pyfunction!(devices::device_pci_bus_id, m)?)?;
    m.add_function(wrap_pyfunction!(devices::device_total_memory, m)?)?;
    m.add_function(wrap_pyfunction!(devices::device_attribute, m)?)?;
    m.add_function(wrap_pyfunction!(devices::device_attribute_names, m)?)?;
    m.add_function(wrap_pyfunction!(devices::compute_capability, m)?)?;
    m.add_function(wrap_pyfunction!(devices::select_device, m)?)?;
    m.add_function(wrap_pyfunction!(devices::current_device, m)?)?;
    m.add_function(wrap_pyfunction!(devices::current_context, m)?)?;
    m.add_function(wrap_pyfunction!(devices::primary_context, m)?)?;
    m.add_function(wrap_pyfunction!(devices::push_device, m)?)?;
    m.add_function(wrap_pyfunction!(devices::pop_device, m)?)?;
    m.add_function(wrap_pyfunction!(devices::synchronize, m)?)?;
    m.add_function(wrap_pyfunction!(devices::memory_info, m)?)?;
    m.add_function(wrap_pyfunction!(devices::loaded_image_count, m)?)?;
    m.add_function(wrap_pyfunction!(devices::pointer_device, m)?)?;
    m.add_function(wrap_pyfunction!(memory::context_key, m)?)?;
    m.add_function(wrap_pyfunction!(memory::forget_context, m)?)?;
    m.add_function(wrap_pyfunction!(memory::at_exit, m)?)?;
    m.add_function(wrap_pyfunction!(memory::settle_export, m)?)?;
    m.add_class::<memory::InterfaceProperty>()?;
    m.add_function(wrap_pyfunction!(memory::current_context_key, m)?)?;
    m.add_function(wrap_pyfunction!(memory::mem_alloc, m)?)?;
    m.add_function(wrap_pyfunction!(memory::mem_free, m)?)?;
    m.add_class::<memory::PoolRelease>()?;
    m.add_class::<memory::OwnerDeref>()?;
    m.add_function(wrap_pyfunction!(memory::pool_release, m)?)?;
    m.add_function(wrap_pyfunction!(memory::deref_when_collected, m)?)?;
    m.add_class::<memory::StreamReturn>()?;
    m.add_function(wrap_pyfunction!(numba_stream_class::read_numba_streams, m)?)?;
    m.add_function(wrap_pyfunction!(memory::pool_numba_streams, m)?)?;
    m.add_function(wrap_pyfunction!(memory::numba_stream, m)?)?;
    m.add_function(wrap_pyfunction!(memory::read_numba_memory_classes, m)?)?;
    m.add_function(wrap_pyfunction!(memory::read_numba_contexts, m)?)?;
    m.add_function(wrap_pyfunction!(memory::numba_pool_memory, m)?)?;
    m.add_function(wrap_pyfunction!(memory::numba_device_array, m)?)?;
    m.add_function(wrap_pyfunction!(memory::pool_array, m)?)?;
    m.add_function(wrap_pyfunction!(memory::device_array, m)?)?;
    m.add_function(wrap_pyfunction!(memory::give_device_array, m)?)?;
    m.add_function(wrap_pyfunction!(memory::pool_array_from, m)?)?;
    m.add_function(wrap_pyfunction!(memory::first_axis_view, m)?)?;
    m.add_function(wrap_pyfunction!(memory::copy_to_device, m)?)?;
    m.add_function(wrap_pyfunction!(memory::copy_to_host, m)?)?;
    m.add_function(wrap_pyfunction!(memory::copy_device, m)?)?;
    m.add_function(wrap_pyfunction!(memory::memset, m)?)?;
    m.add_function(wrap_pyfunction!(memory::pool_release_threshold, m)?)?;
    m.add_function(wrap_pyfunction!(memory::set_pool_release_threshold, m)?)?;
    m.add_function(wrap_pyfunction!(memory::pool_usage, m)?)?;
    m.add_function(wrap_pyfunction!(memory::pool_trim, m)?)?;
    m.add_function(wrap_pyfunction!(memory::pinned_alloc, m)?)?;
    m.add_function(wrap_pyfunction!(memory::pinned_free, m)?)?;
    m.add_function(wrap_pyfunction!(memory::stream_create, m)?)?;
    m.add_function(wrap_pyfunction!(memory::stream_destroy, m)?)?;
    m.add_function(wrap_pyfunction!(memory::stream_synchronize, m)?)?;
    m.add_function(wrap_pyfunction!(memory::stream_query, m)?)?;
    m.add_function(wrap_pyfunction!(memory::stream_wait_event, m)?)?;
    m.add_function(wrap_pyfunction!(memory::event_create, m)?)?;
    m.add_function(wrap_pyfunction!(memory::event_destroy, m)?)?;
    m.add_function(wrap_pyfunction!(memory::event_record, m)?)?;
    m.add_function(wrap_pyfunction!(memory::event_synchronize, m)?)?;
    m.add_function(wrap_pyfunction!(memory::event_query, m)?)?;
    m.add_function(wrap_pyfunction!(memory::event_elapsed_ms, m)?)?;
    m.add_function(wrap_pyfunction!(memory::context_synchronize, m)?)?;
    Ok(())
}
