//! What `fastlaunch.graphed` asks of Rust for a whole step: its form, the key that says a call
//! is like an earlier one (`step_form`); the arguments of a call, held with what each tensor
//! described (`held_args`); the last calls, replayed again in one call (`direct_replays`).

pub(crate) mod direct_replays;
pub(crate) mod held_args;
pub(crate) mod step_form;
