//! The freed-block cache: a context's pool blocks of up to [`LARGEST_CLASS`] bytes, freed on
//! the legacy stream, kept by size class and handed out again without the pool's two driver
//! calls (`cuMemFreeAsync`, `cuMemAllocFromPoolAsync`), as CuPy's and torch's caching
//! allocators keep theirs.
//!
//! A block is allocated at its class's size (`nbytes` rounded up to [`CLASS_BYTES`], or above
//! [`SMALL_LARGEST`] to [`LARGE_CLASS_BYTES`]), so any block of a class fits every request of
//! it. Which blocks were handed out, and their class,
//! is known here: a pointer this cache did not hand out is never kept, whatever a caller says.
//!
//! Stream order is the pool's: a kept block was freed after its earlier users
//! (`ordering::order_free`), and its reuse is ordered after that free
//! (`ordering::before_reuse`). While a stream capture refuses the pool's calls, blocks are
//! neither kept nor handed out (`pool.rs`).
//!
//! Bounds: [`BLOCKS_PER_CLASS`] blocks a class, and in all the pool's release threshold
//! (what the pool may keep unused), at most [`MOST_BYTES`]. Emptied by `pool_trim`, before the
//! retry of an allocation out of memory, when the release threshold is set, and when the
//! context is reset. `FASTLAUNCH_FREED_BLOCK_CACHE=0` turns it off (read per context, when
//! its memory state is made).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use fastlaunch_driver::{self as driver, Capture, Context, LEGACY_STREAM};

use super::stream_ordering::FreePoint;

/// Sizes up to [`SMALL_LARGEST`] are rounded up to a multiple of this.
pub(crate) const CLASS_BYTES: usize = 512;
/// The largest size rounded to [`CLASS_BYTES`].
const SMALL_LARGEST: usize = 1 << 20;
/// Larger sizes are rounded up to a multiple of this: at most an eighth more than asked.
const LARGE_CLASS_BYTES: usize = 128 << 10;
/// The largest block kept; larger allocations go to the pool alone.
pub(crate) const LARGEST_CLASS: usize = 16 << 20;
const SMALL_CLASSES: usize = SMALL_LARGEST / CLASS_BYTES;
const CLASSES: usize = SMALL_CLASSES + (LARGEST_CLASS - SMALL_LARGEST) / LARGE_CLASS_BYTES;
pub(crate) const BLOCKS_PER_CLASS: usize = 16;
pub(crate) const MOST_BYTES: u64 = 64 << 20;
/// The environment variable whose value `0` turns the cache off.
pub(crate) const SWITCH: &str = "FASTLAUNCH_FREED_BLOCK_CACHE";

/// A size class: blocks of `bytes()` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SizeClass {
    bytes: usize,
}

impl SizeClass {
    /// The class of an allocation of `nbytes`, if the cache keeps such blocks.
    fn of(nbytes: usize) -> Option<SizeClass> {
        let step = if nbytes <= SMALL_LARGEST {
            CLASS_BYTES
        } else {
            LARGE_CLASS_BYTES
        };
        (nbytes > 0 && nbytes <= LARGEST_CLASS).then(|| SizeClass {
            bytes: nbytes.next_multiple_of(step),
        })
    }

    pub(crate) fn bytes(self) -> usize {
        self.bytes
    }

    /// Its place among the [`CLASSES`]: the small classes, then the large ones.
    fn index(self) -> usize {
        if self.bytes <= SMALL_LARGEST {
            self.bytes / CLASS_BYTES - 1
        } else {
            SMALL_CLASSES + (self.bytes - SMALL_LARGEST) / LARGE_CLASS_BYTES - 1
        }
    }
}

/// A block kept: its pointer, and where it was freed on the legacy stream.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FreedBlock {
    pub(crate) pointer: u64,
    pub(crate) freed: FreePoint,
}

/// One context's cache (see the module's documentation).
pub(crate) struct FreedBlocks {
    /// Off (the switch), nothing is rounded, kept or handed out.
    on: bool,
    state: Mutex<State>,
    /// `State::held`, read without the lock (`pool_usage`).
    held_bytes: AtomicU64,
}

struct State {
    /// Bytes it may hold: the release threshold, at most `MOST_BYTES`.
    limit: u64,
    held: u64,
    kept: Vec<Vec<FreedBlock>>,
    /// Blocks handed out (by this cache or the pool at a class's size), by pointer.
    handed_out: HashMap<u64, SizeClass>,
}

impl FreedBlocks {
    /// A cache holding at most `release_threshold` bytes (and `MOST_BYTES`); off when the
    /// switch says `0`.
    pub(crate) fn new(release_threshold: u64) -> FreedBlocks {
        let on = std::env::var(SWITCH).map_or(true, |value| value.trim() != "0");
        FreedBlocks {
            on,
            state: Mutex::new(State {
                limit: release_threshold.min(MOST_BYTES),
                held: 0,
                kept: if on {
                    (0..CLASSES).map(|_| Vec::new()).collect()
                } else {
                    Vec::new()
                },
                handed_out: HashMap::new(),
            }),
            held_bytes: AtomicU64::new(0),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The class an allocation of `nbytes` is made in, if the cache is on and keeps such
    /// blocks.
    pub(crate) fn class_of(&self, nbytes: usize) -> Option<SizeClass> {
        SizeClass::of(nbytes).filter(|_| self.on)
    }

    /// A kept block of `class`, now handed out; order its use with `ordering::before_reuse`
    /// (or give it back with [`FreedBlocks::put_back`]).
    pub(crate) fn take(&self, class: SizeClass) -> Option<FreedBlock> {
        if self.held_bytes.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut state = self.state();
        let block = state.kept[class.index()].pop()?;
        state.held -= class.bytes() as u64;
        self.held_bytes.store(state.held, Ordering::Relaxed);
        state.handed_out.insert(block.pointer, class);
        Some(block)
    }

    /// A block [`FreedBlocks::take`] gave that could not be ordered: kept again, as it was.
    pub(crate) fn put_back(&self, class: SizeClass, block: FreedBlock) {
        let mut state = self.state();
        state.handed_out.remove(&block.pointer);
        state.held += class.bytes() as u64;
        self.held_bytes.store(state.held, Ordering::Relaxed);
        state.kept[class.index()].push(block);
    }

    /// `pointer`, just allocated from the pool at `class`'s size, is handed out.
    pub(crate) fn note_handed_out(&self, pointer: u64, class: SizeClass) {
        self.state().handed_out.insert(pointer, class);
    }

    /// `pointer` is being freed on the legacy stream at `freed`: whether it is kept (it was
    /// handed out here and its class and the cache have room); if not, the caller frees it.
    pub(crate) fn keep(&self, pointer: u64, freed: FreePoint) -> bool {
        if !self.on {
            return false;
        }
        let mut state = self.state();
        let Some(class) = state.handed_out.remove(&pointer) else {
            return false;
        };
        let bytes = class.bytes() as u64;
        let room =
            state.held + bytes <= state.limit && state.kept[class.index()].len() < BLOCKS_PER_CLASS;
        if room {
            state.held += bytes;
            self.held_bytes.store(state.held, Ordering::Relaxed);
            state.kept[class.index()].push(FreedBlock { pointer, freed });
        }
        room
    }

    /// `pointer` is being freed another way (not kept: freed on another stream, or later,
    /// after a capture).
    pub(crate) fn forget(&self, pointer: u64) {
        if self.on {
            self.state().handed_out.remove(&pointer);
        }
    }

    /// Frees every kept block on the legacy stream of `context` (theirs: where each was
    /// freed, after its users); while a capture refuses the legacy stream, they stay kept.
    /// Whether any was freed.
    pub(crate) fn release_all(
        &self,
        driver: &'static driver::Driver,
        context: Context,
    ) -> driver::Result<bool> {
        if self.held_bytes() == 0 {
            return Ok(false);
        }
        let other = driver.current_context()? != Some(context);
        if other {
            driver.push_context(context)?;
        }
        let released = (|| {
            if driver.capture_state(LEGACY_STREAM)? != Capture::None {
                return Ok(false);
            }
            for pointer in self.take_all() {
                driver.free_async(pointer, LEGACY_STREAM)?;
            }
            Ok(true)
        })();
        if other {
            driver.pop_context()?;
        }
        released
    }

    /// Every kept block, no longer kept: the caller frees them on the legacy stream (where
    /// each was freed).
    fn take_all(&self) -> Vec<u64> {
        if self.held_bytes.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let mut state = self.state();
        state.held = 0;
        self.held_bytes.store(0, Ordering::Relaxed);
        let mut pointers = Vec::new();
        for class in state.kept.iter_mut() {
            pointers.extend(class.drain(..).map(|block| block.pointer));
        }
        pointers
    }

    /// The pool's release threshold changed: the cache holds at most that (and `MOST_BYTES`)
    /// from now on.
    pub(crate) fn set_limit(&self, release_threshold: u64) {
        self.state().limit = release_threshold.min(MOST_BYTES);
    }

    /// Bytes kept now.
    pub(crate) fn held_bytes(&self) -> u64 {
        self.held_bytes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_up_to_their_class_and_large_ones_have_none() {
        assert_eq!(SizeClass::of(0), None);
        assert_eq!(SizeClass::of(1).map(SizeClass::bytes), Some(512));
        assert_eq!(SizeClass::of(512).map(SizeClass::bytes), Some(512));
        assert_eq!(SizeClass::of(513).map(SizeClass::bytes), Some(1024));
        assert_eq!(SizeClass::of(32768).map(SizeClass::bytes), Some(32768));
        assert_eq!(SizeClass::of(1 << 20).map(SizeClass::bytes), Some(1 << 20));
        assert_eq!(
            SizeClass::of((1 << 20) + 1).map(SizeClass::bytes),
            Some((1 << 20) + (128 << 10))
        );
        assert_eq!(SizeClass::of(2 << 20).map(SizeClass::bytes), Some(2 << 20));
        assert_eq!(
            SizeClass::of(LARGEST_CLASS).map(SizeClass::bytes),
            Some(LARGEST_CLASS)
        );
        assert_eq!(SizeClass::of(LARGEST_CLASS + 1), None);
    }

    #[test]
    fn every_class_has_its_own_place() {
        let sizes = (1..=LARGEST_CLASS / CLASS_BYTES).map(|n| n * CLASS_BYTES);
        let mut seen = vec![None; CLASSES];
        for class in sizes.filter_map(SizeClass::of) {
            let place = &mut seen[class.index()];
            assert!(place.is_none_or(|bytes| bytes == class.bytes()));
            *place = Some(class.bytes());
        }
        assert!(seen.iter().all(Option::is_some));
    }
}
