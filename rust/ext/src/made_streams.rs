//! The streams fastlaunch made (`Stream.create`, so `cuda.stream()`'s pooled streams), whose
//! flags and context a launch knows without asking the driver (`cuStreamGetFlags`,
//! `cuStreamGetCtx`: each a driver call per launch otherwise).
//!
//! An entry lives exactly as long as the stream: it is entered once `cuStreamCreate` made the
//! stream and taken out before `cuStreamDestroy` (the driver may then give the handle to
//! another stream, of other flags). A context reset destroys its streams without that: an
//! entry names its context by the context's unique id (`cuCtxGetId`), which no later context
//! gets, and is only read for that context; where the driver has no ids, nothing is entered.

use std::collections::HashMap;
use std::sync::Mutex;

/// What is known of a stream made here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Made {
    /// The unique id of the context it was made in.
    context_id: u64,
    non_blocking: bool,
}

static MADE: Mutex<Option<HashMap<usize, Made>>> = Mutex::new(None);

/// Enters `handle`, just made with these flags in the context of unique id `context_id`
/// (`LaunchContext::id`).
pub(crate) fn note_made(handle: usize, context_id: Option<u64>, non_blocking: bool) {
    let Some(context_id) = context_id else {
        return; // a context's handle may be reused after a reset: never trusted
    };
    let mut made = MADE.lock().unwrap_or_else(|p| p.into_inner());
    made.get_or_insert_with(HashMap::new).insert(
        handle,
        Made {
            context_id,
            non_blocking,
        },
    );
}

/// Takes `handle` out, before its stream is destroyed.
pub(crate) fn note_destroyed(handle: usize) {
    let mut made = MADE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(made) = made.as_mut() {
        made.remove(&handle);
    }
}

/// Whether `handle` is a non-blocking stream fastlaunch made in the context of unique id
/// `context_id`: None where it is not one made there (ask the driver).
#[inline]
pub(crate) fn non_blocking_in(handle: usize, context_id: Option<u64>) -> Option<bool> {
    let context_id = context_id?;
    let made = MADE.lock().unwrap_or_else(|p| p.into_inner());
    let entry = made.as_ref()?.get(&handle)?;
    (entry.context_id == context_id).then_some(entry.non_blocking)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_stream_is_known_in_its_context_until_destroyed() {
        note_made(0x5000, Some(7), true);
        assert_eq!(non_blocking_in(0x5000, Some(7)), Some(true));
        assert_eq!(non_blocking_in(0x5000, Some(8)), None); // a reset's new context
        note_destroyed(0x5000);
        assert_eq!(non_blocking_in(0x5000, Some(7)), None);
    }

    #[test]
    fn nothing_is_known_without_context_ids() {
        note_made(0x6000, None, false);
        assert_eq!(non_blocking_in(0x6000, None), None);
    }
}
