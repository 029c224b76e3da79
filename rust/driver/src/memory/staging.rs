//! Copies between pageable host memory and the device through a ring of pinned staging
//! slots. A copy to the device returns once the host bytes are in a slot (the DMA from the
//! slot runs on, in the stream's order, and everything later on that stream sees it); a copy
//! back lands in a slot and is moved out once the slot's event says it is there. Each slot
//! is guarded by an event recorded after the copy that uses it, and is waited for only when
//! the ring comes round to it while that copy still runs.
//!
//! Copies larger than a slot go straight from and to pageable memory: the driver stages
//! those itself, and returns from `cuMemcpyHtoDAsync` once it has taken the host bytes and
//! from `cuMemcpyDtoHAsync` once the bytes have arrived (CUDA's "API synchronization
//! behavior" for pageable memory), which is what each caller needs.
//!
//! A ring belongs to one context (its events do); its slots are portable pinned memory.

use std::ptr;

use super::pinned::PinnedBuffer;
use crate::error::Result;
use crate::stream::Event;
use crate::sys::CUdeviceptr;
use crate::Driver;

/// Bytes a slot holds: copies up to this size are staged.
pub const SLOT_BYTES: usize = 1 << 20;
/// Slots in a ring: enough for the copies of one call to be in flight at once.
pub const SLOTS: usize = 4;

struct Slot {
    buffer: PinnedBuffer,
    /// Recorded after the last copy that used the slot.
    event: Event,
    recorded: bool,
}

impl Slot {
    /// Waits until the last copy through this slot is done (a query first: it usually is).
    fn wait_free(&mut self) -> Result<()> {
        if self.recorded && !self.event.query()? {
            self.event.synchronize()?;
        }
        self.recorded = false;
        Ok(())
    }
}

/// A context's staging slots, made on first use.
pub struct StagingRing {
    driver: &'static Driver,
    slots: Vec<Slot>,
    next: usize,
}

impl StagingRing {
    pub fn new(driver: &'static Driver) -> StagingRing {
        StagingRing {
            driver,
            slots: Vec::new(),
            next: 0,
        }
    }

    /// Whether a copy of `len` bytes goes through a slot.
    pub fn stages(len: usize) -> bool {
        len <= SLOT_BYTES
    }

    /// The next slot, free to be written; made when the ring is not full yet.
    fn take_slot(&mut self) -> Result<&mut Slot> {
        let index = self.next;
        self.next = slot_after(index);
        if index == self.slots.len() {
            self.slots.push(Slot {
                buffer: PinnedBuffer::alloc(self.driver, SLOT_BYTES)?,
                event: Event::create(self.driver, false)?,
                recorded: false,
            });
        }
        let slot = &mut self.slots[index];
        slot.wait_free()?;
        Ok(slot)
    }

    /// Copies `host` to `device` on `stream`; returns once the host bytes are taken.
    ///
    /// # Safety
    /// `device` must be writable for `host.len()` bytes until the copy has run.
    pub unsafe fn copy_to_device(
        &mut self,
        device: CUdeviceptr,
        host: &[u8],
        stream: usize,
    ) -> Result<()> {
        let (driver, len) = (self.driver, host.len());
        if len == 0 {
            return Ok(());
        }
        if !Self::stages(len) {
            // SAFETY: per the caller; from pageable memory the driver has taken the bytes
            // when this returns.
            return unsafe { driver.copy_host_to_device_async(device, host, stream) };
        }
        let slot = self.take_slot()?;
        // SAFETY: the slot holds SLOT_BYTES >= len bytes, no copy uses it now (`take_slot`
        // waited), and it does not overlap `host`.
        let staged = unsafe {
            ptr::copy_nonoverlapping(host.as_ptr(), slot.buffer.as_ptr(), len);
            std::slice::from_raw_parts(slot.buffer.as_ptr().cast_const(), len)
        };
        // SAFETY: per the caller for `device`; the slot stays untouched until its event says
        // this copy has run.
        unsafe { driver.copy_host_to_device_async(device, staged, stream) }?;
        slot.event.record(stream)?;
        slot.recorded = true;
        Ok(())
    }

    /// Copies `device` to `host` after the work already enqueued on `stream`; returns once
    /// the bytes are in `host`.
    ///
    /// # Safety
    /// `device` must be readable for `host.len()` bytes.
    pub unsafe fn copy_to_host(
        &mut self,
        host: &mut [u8],
        device: CUdeviceptr,
        stream: usize,
    ) -> Result<()> {
        let (driver, len) = (self.driver, host.len());
        if len == 0 {
            return Ok(());
        }
        if !Self::stages(len) {
            // SAFETY: per the caller; into pageable memory the copy has completed when this
            // returns.
            return unsafe { driver.copy_device_to_host_async(host, device, stream) };
        }
        let slot = self.take_slot()?;
        // SAFETY: the slot holds SLOT_BYTES >= len bytes and no other copy uses it
        // (`take_slot` waited).
        let landing = unsafe { std::slice::from_raw_parts_mut(slot.buffer.as_ptr(), len) };
        // SAFETY: per the caller for `device`.
        unsafe { driver.copy_device_to_host_async(landing, device, stream) }?;
        slot.event.record(stream)?;
        slot.event.synchronize()?;
        // SAFETY: the copy into the slot has completed; `host` is writable for `len` bytes
        // and does not overlap the slot.
        unsafe { ptr::copy_nonoverlapping(slot.buffer.as_ptr(), host.as_mut_ptr(), len) };
        Ok(())
    }
}

/// The slot used after slot `index`: the ring goes round, so the slot a copy reuses is the
/// one used longest ago, the likeliest to be done.
fn slot_after(index: usize) -> usize {
    (index + 1) % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_uses_every_slot_before_reusing_one() {
        let mut index = 0;
        let mut order = Vec::new();
        for _ in 0..2 * SLOTS {
            order.push(index);
            index = slot_after(index);
        }
        let once: Vec<usize> = (0..SLOTS).collect();
        assert_eq!(order[..SLOTS], once[..]);
        assert_eq!(order[SLOTS..], once[..]);
    }

    #[test]
    fn copies_up_to_a_slot_are_staged_and_larger_ones_are_not() {
        assert!(StagingRing::stages(1));
        assert!(StagingRing::stages(32 * 1024));
        assert!(StagingRing::stages(SLOT_BYTES));
        assert!(!StagingRing::stages(SLOT_BYTES + 1));
        assert!(!StagingRing::stages(2 << 20));
    }
}
