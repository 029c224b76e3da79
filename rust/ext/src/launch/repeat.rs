//! Launches like the last: each thread remembers the last two launches of each of a few
//! kernels with their packed parameters, so that a launch passing the same arrays again
//! (the loop `k[grid, block](a, b, x)`, or `a` and `b` swapped) checks each argument
//! and rewrites only the slots that can differ, instead of classifying, looking up the
//! overload and packing everything.
//!
//! Per argument, what was remembered decides the check:
//! - an array proven unchanged, the same object (`classify::Unchanged`: a numba device
//!   array; a CuPy array whose shape is the same; a torch tensor read again in one C call
//!   and found to describe the same memory, dtype, shape, strides and device): nothing to
//!   rewrite. Another object (a new array each step) or a changed one is read as below, and
//!   the argument is read on every later launch: its slots no longer hold the proven object's
//!   values, and proving the new object would cost a weak reference per launch;
//! - a scalar of the same exact type (`classify::ScalarSlots`): its value written into its
//!   slot;
//! - anything else (tuples, CUDA Array Interface objects, ...): read again as a launch reads
//!   it, its fingerprint bytes compared, its slots repacked; a CuPy array or a tensor of the
//!   layout read last (a new array each step) rewrites its data slot alone
//!   (`classify::SameLayout`).
//!
//! A launch that does not match runs the full path (which raises what it would have raised)
//! and is remembered in place of the older of that kernel's two. Launches with records, with
//! arguments only numba-cuda passes, or recorded into a `fastlaunch.graph()` are not
//! remembered.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use fastlaunch_driver::ParamBuffer;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use smallvec::SmallVec;

use crate::classify::{Position, SameLayout, ScalarSlots, Unchanged};
use crate::launch::overloads::Overload;
use crate::launch::packed::{pack_argument, pack_by_argument, read_argument, PackedArgument};
use crate::launch::plan::{array_slot_count, Param, Plan, ARRAY_DATA_SLOT};
use crate::scratch::{ArgValue, Scratch};

/// Launches remembered per thread, all kernels together; the least recently used leaves.
const REMEMBERED: usize = 16;
/// Launches remembered per kernel: two, for loops that swap two arrays each step.
const PER_KERNEL: usize = 2;

/// How one argument of a remembered launch is checked when it comes again.
enum ArgCheck {
    /// The proven object, still as it was; any other is read as `Read` reads it.
    Unchanged {
        proof: Unchanged,
        argument: PackedArgument,
    },
    /// A scalar of the same type, written into its slots (from `slot`).
    Scalar { slots: ScalarSlots, slot: usize },
    /// Read again (`Reread`).
    Read(Reread),
}

/// How many launches in a row a read argument was an object its source had not read before
/// (a new array each launch). Past two, what is read of it is remembered (`classify/known.rs`)
/// only every 16th launch: those tables are for objects that come back, and an entry costs a
/// weak reference and its copy of the array, so a new array each launch would pay for both
/// and push out arrays that do come back; sampled, an object that starts coming back is known
/// again within 16 launches.
#[derive(Clone, Copy, Default)]
struct NewObjects(u32);

impl NewObjects {
    const REMEMBERED_AFTER: u32 = 2;
    /// A power of two.
    const SAMPLED: u32 = 16;

    fn worth_remembering(self) -> bool {
        self.0 < Self::REMEMBERED_AFTER || self.0 & (Self::SAMPLED - 1) == 0
    }

    /// The count after a launch whose read found its object known (`true`) or not.
    fn after(self, known: bool) -> NewObjects {
        if known {
            NewObjects(0)
        } else {
            NewObjects(self.0.wrapping_add(1))
        }
    }
}

/// An argument read again on each launch: its fingerprint bytes must be the same, and its
/// values are packed into its slots. `same_layout`: the layout it was last read with, for a
/// new array of that layout, whose data slot alone is rewritten (`classify::SameLayout`).
struct Reread {
    argument: PackedArgument,
    new_objects: NewObjects,
    same_layout: Option<SameLayout>,
}

/// What a remembered launch's argument is repacked into: the overload's plan and parameter
/// names, the launch's fingerprint and its packed parameters.
struct Repack<'a> {
    plan: &'a Plan,
    names: &'a [String],
    fingerprint: &'a [u8],
    params: &'a mut ParamBuffer,
}

impl Reread {
    fn new(argument: PackedArgument) -> Reread {
        Reread {
            argument,
            new_objects: NewObjects::default(),
            same_layout: None,
        }
    }

    /// Rewrites the argument's slots in `into.params` for `arg`: whether `arg` fits them.
    #[inline]
    fn refill(
        &mut self,
        arg: &Bound<'_, PyAny>,
        at: Position<'_>,
        into: Repack<'_>,
        scratch: &mut Scratch,
    ) -> bool {
        scratch.forget_reads = !self.new_objects.worth_remembering();
        scratch.read_was_known = false;
        let refilled = match self.data_of_same_layout(arg, at, scratch) {
            Some(data) => into
                .params
                .slots_mut()
                .get_mut(self.argument.slots.start + ARRAY_DATA_SLOT)
                .map(|slot| *slot = data)
                .is_some(),
            None => self.read_in_full(arg, at, into, scratch),
        };
        self.new_objects = self.new_objects.after(scratch.read_was_known);
        scratch.forget_reads = false;
        refilled
    }

    fn data_of_same_layout(
        &self,
        arg: &Bound<'_, PyAny>,
        at: Position<'_>,
        scratch: &mut Scratch,
    ) -> Option<u64> {
        self.same_layout.as_ref()?.data_of(arg, at, scratch)
    }

    /// Reads `arg` as a launch reads it and packs it into the argument's slots, keeping its
    /// layout for the next launch.
    fn read_in_full(
        &mut self,
        arg: &Bound<'_, PyAny>,
        at: Position<'_>,
        Repack {
            plan,
            names,
            fingerprint,
            params,
        }: Repack<'_>,
        scratch: &mut Scratch,
    ) -> bool {
        let argument = &self.argument;
        let values_start = scratch.values.len();
        let expected = &fingerprint[argument.fingerprint.clone()];
        let read = read_argument(arg, at, expected, scratch).unwrap_or(false);
        let packed = read
            .then(|| pack_argument(plan, argument.first_value, values_start, names, scratch).ok())
            .flatten()
            .filter(|packed| packed.len() == argument.slots.len());
        let Some(packed) = packed else {
            self.same_layout = None;
            return false;
        };
        params.slots_mut()[argument.slots.clone()].copy_from_slice(packed);
        // An argument whose arrays have no such check (numba-cuda's own, say) would pay for
        // the attempt on every launch: after a first miss, it is tried as often as a new
        // array is remembered. Only an argument that is one array has one data slot.
        let worth_trying = self.same_layout.is_some() || self.new_objects.worth_remembering();
        self.same_layout = (worth_trying && is_one_array(plan, argument))
            .then(|| SameLayout::of(arg))
            .flatten();
        true
    }
}

/// Whether `argument` is one array, packed as the plan packs an array.
fn is_one_array(plan: &Plan, argument: &PackedArgument) -> bool {
    matches!(plan.param(argument.first_value), Some(Param::Array { ndim })
        if argument.slots.len() == array_slot_count(ndim))
}

/// A launch remembered with its packed parameters.
pub(crate) struct LastLaunch {
    /// The kernel's overload table it was found in (`Kernel::table_id`).
    table_id: u64,
    /// The context's key (`LaunchContext::key`: its unique id, not its handle, which a
    /// context re-created after a reset can reuse).
    context: u64,
    /// Weak: a remembered launch must not keep a dead kernel's image loaded.
    overload: Weak<Overload>,
    /// The packed parameters, their pointer array prepared.
    pub(crate) params: ParamBuffer,
    fingerprint: Box<[u8]>,
    args: Vec<ArgCheck>,
    last_used: u64,
}

#[derive(Default)]
struct Remembered {
    launches: Vec<LastLaunch>,
    clock: u64,
    /// Launches that matched a remembered one (`_remembered_launches`, for tests).
    hits: u64,
}

thread_local! {
    static REMEMBERED_LAUNCHES: RefCell<Remembered> = RefCell::new(Remembered::default());
}

/// The kernel's remembered launches (at most [`PER_KERNEL`]) for this context, taken out
/// of the thread's table while they are checked (a launch made from Python code run by a
/// check finds none).
fn take(table_id: u64, context: u64) -> SmallVec<[LastLaunch; PER_KERNEL]> {
    let mut taken = SmallVec::new();
    REMEMBERED_LAUNCHES.with(|cell| {
        let Ok(mut remembered) = cell.try_borrow_mut() else {
            return;
        };
        let mut index = 0;
        while index < remembered.launches.len() {
            let launch = &remembered.launches[index];
            if launch.table_id == table_id && launch.context == context {
                taken.push(remembered.launches.swap_remove(index));
            } else {
                index += 1;
            }
        }
    });
    taken
}

/// Puts launches back into the thread's table, those paired with `true` marked as used now;
/// `hit`: one of them was launched again.
fn put_back(launches: impl IntoIterator<Item = (LastLaunch, bool)>, hit: bool) {
    REMEMBERED_LAUNCHES.with(|cell| {
        let Ok(mut remembered) = cell.try_borrow_mut() else {
            return;
        };
        remembered.clock += 1;
        remembered.hits += u64::from(hit);
        let now = remembered.clock;
        for (mut launch, used) in launches {
            if used {
                launch.last_used = now;
            }
            if remembered.launches.len() >= REMEMBERED {
                let oldest = (0..remembered.launches.len())
                    .min_by_key(|&i| remembered.launches[i].last_used)
                    .unwrap_or(0);
                remembered.launches.swap_remove(oldest);
            }
            remembered.launches.push(launch);
        }
    });
}

/// A remembered launch of this kernel that `args` match, with its slots rewritten for them
/// and `scratch` holding what the rest of the launch reads (streams, devices), and its
/// overload; the caller gives the launch back with [`keep`]. `None`: none matches
/// (`scratch` is then reset).
#[inline]
pub(crate) fn find(
    table_id: u64,
    context: u64,
    args: &Bound<'_, PyTuple>,
    names: &[String],
    scratch: &mut Scratch,
) -> Option<(LastLaunch, Arc<Overload>)> {
    let mut candidates = take(table_id, context);
    if candidates.is_empty() {
        return None;
    }
    // The most recently used first: in a loop of swapped arrays, the other one.
    candidates.sort_unstable_by_key(|launch| std::cmp::Reverse(launch.last_used));
    // Each by its proofs first; failing that, once the kernel has its launches remembered
    // (two arrays swapped each step are remembered as the second, proven), the most recent
    // with its arrays read: new arrays of the same kinds.
    let mut found = None;
    let tries = (0..candidates.len()).map(|index| (index, Proofs::Required));
    let read = (candidates.len() == PER_KERNEL).then_some((0, Proofs::OrRead));
    for (index, proofs) in tries.chain(read) {
        let Some(launch) = candidates.get_mut(index) else {
            break;
        };
        if let Some(overload) = launch.refill(args, names, scratch, proofs) {
            found = Some((index, overload));
            break;
        }
        scratch.reset(); // the launch stream stays
    }
    let found = found.map(|(index, overload)| (candidates.remove(index), overload));
    // A launch whose overload is gone (its kernel died) is dropped here.
    let live = candidates
        .into_iter()
        .filter(|launch| launch.overload.strong_count() > 0);
    put_back(live.map(|launch| (launch, false)), false);
    found
}

/// Whether a remembered launch's proven arrays must be the very objects proven.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Proofs {
    Required,
    /// Another array of the same kind is read, and read from then on.
    OrRead,
}

/// Gives back the launch [`find`] returned, as the most recently used.
pub(crate) fn keep(launch: LastLaunch) {
    put_back([(launch, true)], true);
}

impl LastLaunch {
    /// The overload, held for the launch, if `args` launch as this did: each checked as
    /// remembered (a proven array that is another object: a miss, or read as `proofs` says),
    /// the slots of those that may differ rewritten. Any doubt (a different type,
    /// kind or shape, an error while reading) is a miss: the full path decides, and raises
    /// what it raises.
    #[inline]
    fn refill(
        &mut self,
        args: &Bound<'_, PyTuple>,
        names: &[String],
        scratch: &mut Scratch,
        proofs: Proofs,
    ) -> Option<Arc<Overload>> {
        if args.len() != self.args.len() {
            return None;
        }
        let overload = self.overload.upgrade()?;
        let plan = overload.plan.as_ref()?;
        for (index, arg) in args.iter_borrowed().enumerate() {
            let at = Position {
                index,
                name: names.get(index).map_or("", String::as_str),
            };
            let check = self.args.get_mut(index)?;
            if let ArgCheck::Unchanged { proof, argument } = check {
                if proof.holds(&arg, scratch) {
                    continue;
                }
                if proofs == Proofs::Required {
                    return None;
                }
                // Its slots are about to hold another object's values: from now on read.
                *check = ArgCheck::Read(Reread::new(argument.clone()));
            }
            let matches = match check {
                ArgCheck::Unchanged { .. } => true, // (one that holds is passed above)
                ArgCheck::Scalar { slots, slot } => {
                    let end = *slot + slots.width();
                    match self.params.slots_mut().get_mut(*slot..end) {
                        Some(written) => slots.write(&arg, written),
                        None => false,
                    }
                }
                ArgCheck::Read(reread) => {
                    let into = Repack {
                        plan,
                        names,
                        fingerprint: &self.fingerprint,
                        params: &mut self.params,
                    };
                    reread.refill(&arg, at, into, scratch)
                }
            };
            if !matches {
                return None;
            }
        }
        let launchable = !scratch.needs_numba && scratch.staging.copies.is_empty();
        launchable.then_some(overload)
    }
}

/// Remembers a launch that just ran the full path with `overload`, from what `scratch`
/// holds of it, in place of the least recently used of this kernel's (or any kernel's).
pub(crate) fn remember(
    table_id: u64,
    context: u64,
    overload: &Arc<Overload>,
    args: &Bound<'_, PyTuple>,
    names: &[String],
    scratch: &mut Scratch,
) {
    let Some(plan) = &overload.plan else { return };
    if scratch.needs_numba || !scratch.staging.copies.is_empty() {
        return;
    }
    let Some(launch) = LastLaunch::new(table_id, context, overload, plan, args, names, scratch)
    else {
        return;
    };
    let mut mine = take(table_id, context);
    if mine.len() >= PER_KERNEL {
        mine.sort_unstable_by_key(|launch| launch.last_used);
        mine.remove(0);
    }
    let others = mine.into_iter().map(|launch| (launch, false));
    put_back(others.chain([(launch, true)]), false);
}

impl LastLaunch {
    /// The launch classified in `scratch`, packed again argument by argument (`None` when
    /// its parts do not line up with the plan, which the launch would have refused).
    fn new(
        table_id: u64,
        context: u64,
        overload: &Arc<Overload>,
        plan: &Plan,
        args: &Bound<'_, PyTuple>,
        names: &[String],
        scratch: &Scratch,
    ) -> Option<LastLaunch> {
        let mut params = ParamBuffer::with_capacity(scratch.params.len());
        let arguments = pack_by_argument(plan, scratch, names, &mut params).ok()?;
        if arguments.len() != args.len() {
            return None;
        }
        let checks = args
            .iter_borrowed()
            .zip(arguments)
            .map(|(arg, argument)| check_for(&arg, argument, plan, scratch))
            .collect();
        params.prepare();
        Some(LastLaunch {
            table_id,
            context,
            overload: Arc::downgrade(overload),
            params,
            fingerprint: scratch.fingerprint.as_slice().into(),
            args: checks,
            last_used: 0,
        })
    }
}

/// How `arg`, classified in `scratch` as `argument`, is checked when it comes again.
fn check_for(
    arg: &Bound<'_, PyAny>,
    argument: PackedArgument,
    plan: &Plan,
    scratch: &Scratch,
) -> ArgCheck {
    let part = &scratch.fingerprint[argument.fingerprint.clone()];
    let values = &scratch.values[argument.first_value..];
    match values.first() {
        // An array's fingerprint starts with its tag, a scalar's is its one byte (tuples,
        // enum members and datetimes have more), which `Unchanged::of` and `kind` check.
        Some(ArgValue::Array(array)) => {
            let shape = scratch
                .dims
                .get(array.dims_at..array.dims_at + array.ndim)
                .unwrap_or_default();
            if let Some(proof) = Unchanged::of(arg, part, shape) {
                return ArgCheck::Unchanged { proof, argument };
            }
        }
        Some(ArgValue::Scalar(_)) => {
            if let Some(Param::Scalar(target)) = plan.param(argument.first_value) {
                if let Some(written) = ScalarSlots::of(arg, target) {
                    if part == [written.kind()] && argument.slots.len() == written.width() {
                        return ArgCheck::Scalar {
                            slots: written,
                            slot: argument.slots.start,
                        };
                    }
                }
            }
        }
        _ => {}
    }
    ArgCheck::Read(Reread::new(argument))
}

/// How each argument of this thread's most recently used remembered launch is checked
/// when it comes again: `"numba array"`, `"cupy array"`, `"tensor"` (proven unchanged),
/// `"scalar"` (its value rewritten), `"read"` (read again and repacked) or `"same
/// layout"` (the same, but a new array of the layout last read rewrites its data slot
/// alone); for tests.
#[pyfunction]
pub(crate) fn _remembered_checks() -> Vec<&'static str> {
    REMEMBERED_LAUNCHES.with(|cell| {
        let remembered = cell.borrow();
        let latest = remembered
            .launches
            .iter()
            .max_by_key(|launch| launch.last_used);
        latest.map_or_else(Vec::new, |launch| {
            let name = |check: &ArgCheck| match check {
                ArgCheck::Unchanged { proof, .. } => proof.kind_name(),
                ArgCheck::Scalar { .. } => "scalar",
                ArgCheck::Read(Reread {
                    same_layout: Some(_),
                    ..
                }) => "same layout",
                ArgCheck::Read(_) => "read",
            };
            launch.args.iter().map(name).collect()
        })
    })
}

/// `(remembered, hits)`: how many launches this thread remembers now, and how many of its
/// launches matched a remembered one (for tests).
#[pyfunction]
pub(crate) fn _remembered_launches() -> (usize, u64) {
    REMEMBERED_LAUNCHES.with(|cell| {
        let remembered = cell.borrow();
        (remembered.launches.len(), remembered.hits)
    })
}
