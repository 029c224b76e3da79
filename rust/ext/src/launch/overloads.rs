//! A kernel's overload table: one overload per argument fingerprint and compute
//! capability, read lock-free on every launch (last hit first) and extended on misses.
//! The Python methods of [`Kernel`] are in `kernel.rs`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;
use pyo3::intern;
use pyo3::prelude::*;

use crate::errors::{Error, Result};
use crate::launch::code::{CompiledCode, CompiledKernel};
use crate::launch::configurations::Configurations;
use crate::launch::numba_types::plan_of_types;
use crate::launch::plan::Plan;

/// What an overload launches: a loaded image, or (for kernels needing numba's own
/// launch path, such as `debug=True`) a Python callable.
pub(crate) enum Target {
    Compiled(Arc<CompiledCode>),
    Python(Py<PyAny>),
}

pub(crate) struct Overload {
    fingerprint: Box<[u8]>,
    compute_capability: u32,
    /// How Rust packs the arguments; `None` for Python targets, which get the objects.
    pub(crate) plan: Option<Plan>,
    pub(crate) target: Target,
}

impl Overload {
    #[inline]
    fn matches(&self, fingerprint: &[u8], compute_capability: u32) -> bool {
        self.compute_capability == compute_capability && same_bytes(&self.fingerprint, fingerprint)
    }
}

/// Byte-slice equality without a call into libc's `memcmp`: fingerprints are a few bytes,
/// where the call costs more than the comparison (measured: 8% of an empty launch).
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |differ, (x, y)| differ | (x ^ y)) == 0
}

/// A kernel: its overload table and launch statistics. `fastlaunch.Kernel` subclasses it.
#[pyclass(subclass, frozen, module = "fastlaunch._core")]
pub struct Kernel {
    overloads: ArcSwap<Vec<Arc<Overload>>>,
    last_hit: AtomicUsize,
    pub(crate) misses: AtomicU64,
    /// Serialises registrations (misses only); launches never take it.
    register_lock: Mutex<()>,
    pub(crate) parameter_names: OnceLock<Box<[String]>>,
    /// Every launch goes through numba-cuda's own path (kernels with `extensions`).
    pub(crate) always_numba: AtomicBool,
    /// The low-occupancy warning was considered once (numba-cuda warns per launch; once
    /// per kernel keeps the warning without its cost on every launch).
    low_occupancy_settled: AtomicBool,
    /// A configuration of this kernel has had its `pre_launch_callbacks` list asked for:
    /// from then on launches ask Python whether theirs has callbacks (`launcher.rs`).
    pub(crate) may_have_pre_launch_callbacks: AtomicBool,
    /// `kernel[...]` as numba-cuda caches it: one launcher per configuration.
    pub(crate) configurations: Configurations,
    /// Names this kernel's overload table for launches remembered on a thread (`repeat.rs`):
    /// unique in the process, and renewed when the table is cleared.
    table_id: AtomicU64,
}

/// Where overload table ids come from (see [`Kernel::table_id`]).
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

impl Kernel {
    pub(crate) fn empty() -> Kernel {
        Kernel {
            overloads: ArcSwap::from_pointee(Vec::new()),
            last_hit: AtomicUsize::new(0),
            misses: AtomicU64::new(0),
            register_lock: Mutex::new(()),
            parameter_names: OnceLock::new(),
            always_numba: AtomicBool::new(false),
            low_occupancy_settled: AtomicBool::new(false),
            may_have_pre_launch_callbacks: AtomicBool::new(false),
            configurations: Configurations::new(),
            table_id: AtomicU64::new(NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed)),
        }
    }

    /// The id of this kernel's overload table as it is now: a launch remembered under
    /// another id used an overload this kernel no longer has.
    #[inline]
    pub(crate) fn table_id(&self) -> u64 {
        self.table_id.load(Ordering::Relaxed)
    }

    /// Adds an overload for `fingerprint` on devices of `compute_capability`, unless another
    /// thread added one first. Serialised by the registration lock; launches never wait.
    pub(crate) fn register(
        &self,
        fingerprint: &[u8],
        compute_capability: u32,
        plan: Option<Plan>,
        target: Target,
    ) {
        let _guard = self.register_lock.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.overloads.load();
        if current
            .iter()
            .any(|o| o.matches(fingerprint, compute_capability))
        {
            return; // another thread registered it first
        }
        let mut next: Vec<Arc<Overload>> = current.iter().cloned().collect();
        next.push(Arc::new(Overload {
            fingerprint: fingerprint.into(),
            compute_capability,
            plan,
            target,
        }));
        self.overloads.store(Arc::new(next));
    }

    /// Registers the overload a miss's `_on_miss` returned, `(param_types, target)`:
    /// `param_types` None: `target` is a callable launching through numba-cuda. Otherwise
    /// the plan is built from the numba types and `target(packed)` gives what to launch
    /// (`packed`: whether fastlaunch packs every parameter; if not, numba-cuda launches).
    #[cold]
    pub(crate) fn register_miss(
        &self,
        fingerprint: &[u8],
        compute_capability: u32,
        returned: &Bound<'_, PyAny>,
    ) -> Result<()> {
        let (param_types, target): (Bound<'_, PyAny>, Bound<'_, PyAny>) = returned
            .extract()
            .map_err(|_| Error::Type("_on_miss must return a pair (param_types, target)".into()))?;
        if param_types.is_none() {
            return self.register_target(fingerprint, compute_capability, None, &target);
        }
        // An unpacked parameter type: numba-cuda launches the overload (`target(False)`).
        let plan = plan_of_types(&param_types, self.names())?.ok();
        // Checked before `target` is asked for, which loads the image.
        if let Some(plan) = &plan {
            plan.check_fingerprint(fingerprint)?;
        }
        let target = target.call1((plan.is_some(),))?;
        self.register_target(fingerprint, compute_capability, plan, &target)
    }

    /// [`Kernel::register_target`], after checking that `plan` fits the fingerprint.
    pub(crate) fn register_checked(
        &self,
        fingerprint: &[u8],
        compute_capability: u32,
        plan: Option<Plan>,
        target: &Bound<'_, PyAny>,
    ) -> Result<()> {
        if let Some(plan) = &plan {
            plan.check_fingerprint(fingerprint)?;
        }
        self.register_target(fingerprint, compute_capability, plan, target)
    }

    /// Registers `target` (a `CompiledKernel`, or a Python callable
    /// `(args, griddim, blockdim, stream, sharedmem)`) packed by `plan`, which fits the
    /// fingerprint; a compiled target needs a plan.
    fn register_target(
        &self,
        fingerprint: &[u8],
        compute_capability: u32,
        plan: Option<Plan>,
        target: &Bound<'_, PyAny>,
    ) -> Result<()> {
        let target = match target.cast::<CompiledKernel>() {
            Ok(_) if plan.is_none() => {
                return Err(Error::Value(
                    "a CompiledKernel target needs a packing plan".into(),
                ))
            }
            Ok(compiled) => Target::Compiled(compiled.get().code.clone()),
            Err(_) if target.is_callable() => Target::Python(target.clone().unbind()),
            Err(_) => {
                return Err(Error::Type(
                    "an overload's target must be a CompiledKernel or a callable".into(),
                ))
            }
        };
        self.register(fingerprint, compute_capability, plan, target);
        Ok(())
    }

    /// Drops every overload (their images unload once no launch holds them), after the lock
    /// is released: an overload may hold a Python callable, whose drop can run Python code.
    pub(crate) fn clear(&self) {
        let cleared = {
            let _guard = self.register_lock.lock().unwrap_or_else(|p| p.into_inner());
            let cleared = self.overloads.swap(Arc::new(Vec::new()));
            self.last_hit.store(0, Ordering::Relaxed);
            let renewed = NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed);
            self.table_id.store(renewed, Ordering::Relaxed);
            cleared
        };
        drop(cleared);
    }

    pub(crate) fn count(&self) -> usize {
        self.overloads.load().len()
    }

    #[inline]
    pub(crate) fn find(
        &self,
        fingerprint: &[u8],
        compute_capability: u32,
    ) -> Option<Arc<Overload>> {
        let table = self.overloads.load();
        let last = self.last_hit.load(Ordering::Relaxed);
        if let Some(hit) = table.get(last) {
            if hit.matches(fingerprint, compute_capability) {
                return Some(hit.clone());
            }
        }
        let (index, hit) = table
            .iter()
            .enumerate()
            .find(|(_, o)| o.matches(fingerprint, compute_capability))?;
        self.last_hit.store(index, Ordering::Relaxed);
        Some(hit.clone())
    }

    pub(crate) fn names(&self) -> &[String] {
        self.parameter_names.get().map_or(&[], |names| names)
    }

    /// Asks the Python subclass's `_warn_low_occupancy` once per kernel (it follows numba's
    /// `CUDA_LOW_OCCUPANCY_WARNINGS`).
    #[cold]
    pub(crate) fn warn_low_occupancy(
        &self,
        kernel_object: &Bound<'_, Kernel>,
        grid: [u32; 3],
    ) -> Result<()> {
        if self.low_occupancy_settled.swap(true, Ordering::Relaxed) {
            return Ok(());
        }
        let py = kernel_object.py();
        if let Ok(warn) = kernel_object.getattr(intern!(py, "_warn_low_occupancy")) {
            if let Err(raised) = warn.call1((grid.iter().map(|&g| u64::from(g)).product::<u64>(),))
            {
                // Warnings turned into errors raise each time, as numba-cuda's do.
                self.low_occupancy_settled.store(false, Ordering::Relaxed);
                return Err(raised.into());
            }
        }
        Ok(())
    }
}
