//! A callback watching a Python object through a weak reference, which the callback's owner
//! holds until it runs (`releases.rs`): the pair keeps itself alive
//! without a registry (neither visits the other for the garbage collector, so a collection
//! never finds them unreachable), and stopping the watch takes the reference out, which ends
//! the pair (the collector's call of a callback leaves the reference holding it).

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyWeakrefReference;

/// The weak reference an object's callback watches it through, until it stops.
#[derive(Default)]
pub(super) struct Watch(Mutex<Option<Py<PyAny>>>);

impl Watch {
    /// Watches `object`: `callback` is called (with the weak reference) when it is collected.
    pub(super) fn start(
        &self,
        object: &Bound<'_, PyAny>,
        callback: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let reference = PyWeakrefReference::new_with(object, callback)?;
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(reference.into_any().unbind());
        Ok(())
    }

    /// Stops watching: the reference is dropped (after the lock), and with it the callback.
    /// Whether it was watching until now (false the second time).
    pub(super) fn stop(&self) -> bool {
        let reference = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        reference.is_some()
    }
}
