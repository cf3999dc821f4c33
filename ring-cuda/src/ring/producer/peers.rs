//! The producer's dealings with its consumers' lives: becoming the producer (taking a dead
//! one's ring over), acknowledging consumers that leave, and reclaiming the rows and entries of
//! consumers that died.

use core::time::Duration;
use std::time::Instant;

use ring_core::{OwnerId, Producer};
use ring_os::raw::lock::{Liveness, Role, RoleLock};
use ring_os::raw::RoleFile;

use super::{DeviceProducer, TEARDOWN_TIMEOUT};
use crate::device::Device;
use crate::error::Error;
use crate::ring::table::{Table, TableMemory};
use crate::ring::RingError;

impl<D: Device, M: RoleFile, T: TableMemory> DeviceProducer<D, M, T> {
    /// Acknowledges consumers that asked to leave: makes sure (one host sync of the producer's
    /// stream, only when someone leaves) that the stream has passed every wait it enqueued on
    /// their read events, closes its copies of those events and tells each consumer it may
    /// destroy its own (the table's `ack`). Called by every publish; call it when idle so
    /// departing consumers need not wait. Returns how many left.
    ///
    /// # Errors
    /// [`Error::Timeout`] if the stream does not drain within 10 s (nothing acknowledged).
    pub fn serve_departures(&mut self) -> Result<usize, RingError> {
        let t = Table::new(self.table.table(), self.slots, self.consumers)
            .ok_or(RingError::Corrupt("the device table shrank"))?;
        // No allocation and no host sync unless someone is leaving: this runs on every publish.
        let mut left = 0;
        for c in 0..self.consumers {
            let token = t.consumer_token(c);
            if token == 0 || t.leave_request(c) != token || t.leave_acked(c, token) {
                continue;
            }
            if left == 0 {
                let stream = self.stream.ok_or(RingError::NotReady)?;
                self.dev.sync_stream(stream, TEARDOWN_TIMEOUT)?;
            }
            for e in self.readers.events.remove_where(|k| k.0 == c) {
                let _ = self.dev.destroy_event(e);
            }
            t.ack_leave(c, token);
            left += 1;
        }
        Ok(left)
    }

    /// Frees consumer row `c` — its table row, the producer's copies of its read events and
    /// its ring-core entry — if no process holds the entry's role lock (the kernel released it:
    /// the consumer died). A consumer that died cannot leave by the teardown protocol, and its
    /// read events may no longer open (a publish would fail with [`RingError::ReadEvent`]
    /// naming it), so the producer reclaims it: publishes do so by themselves for a consumer
    /// whose read event fails or that holds the ring back; an idle producer may call this.
    /// Returns whether anything was freed (`false`: empty, or its owner is alive).
    ///
    /// The row is cleared while the producer holds the entry's lock itself, so no consumer can
    /// register into the entry (and publish a row there) meanwhile.
    ///
    /// # Errors
    /// [`Error::InvalidOperation`] for a row past the table; [`RingError::Segment`] when the
    /// lock cannot be taken; [`RingError::Ring`] if ring-core refused to reclaim the entry.
    pub fn reclaim_dead_consumer(&mut self, c: usize) -> Result<bool, RingError> {
        if c >= self.consumers {
            return Err(RingError::Device(Error::InvalidOperation(
                "reclaim_dead_consumer: no such consumer row",
            )));
        }
        let t = Table::new(self.table.table(), self.slots, self.consumers)
            .ok_or(RingError::Corrupt("the device table shrank"))?;
        let registered =
            |ring: &Producer<M>| ring.consumer_info(c).and_then(|i| OwnerId::new(i.owner));
        // Cheap looks first (no system call unless someone is registered there).
        if t.consumer_token(c) == 0 && registered(&self.ring).is_none() {
            return Ok(false);
        }
        let mem = self.ring.memory();
        if !ring_os::raw::lock::SUPPORTED
            || ring_os::raw::lock::probe(mem.role_file(), Role::Consumer(c)) == Liveness::Alive
        {
            return Ok(false);
        }
        let Some(_held) = mem
            .lock_role(Role::Consumer(c))
            .map_err(RingError::Segment)?
        else {
            return Ok(false); // A consumer is registering there right now.
        };
        let token = t.consumer_token(c);
        let mut freed = false;
        if let Some(dead) = registered(&self.ring) {
            // SAFETY: we hold entry `c`'s role lock, which a live DeviceConsumer holds from
            // before it registers the entry until after it left it, and which the kernel
            // released when its process died: whoever registered `dead` is inside no call and
            // holds no pin.
            unsafe { reclaim_entry(&mut self.ring, c, dead) }?;
            freed = true;
        }
        if token != 0 {
            t.withdraw_consumer(c, token);
            freed = true;
        }
        for e in self.readers.events.remove_where(|k| k.0 == c) {
            let _ = self.dev.destroy_event(e);
        }
        self.readers.rows[c] = 0;
        Ok(freed)
    }

    /// Reclaims the consumers named by a refused claim (the gating consumer the ring is full
    /// for, the consumers pinning the slot) whose role locks are free; at most once per
    /// [`PROBE_PERIOD`] (each probe is a system call). Returns whether one was reclaimed.
    pub(super) fn reclaim_holding_back(&mut self, e: &RingError) -> bool {
        let now = Instant::now();
        if self
            .probed
            .is_some_and(|t| now.duration_since(t) < PROBE_PERIOD)
        {
            return false;
        }
        self.probed = Some(now);
        let mask = match e {
            RingError::Claim(ring_core::ClaimError::Full { consumer, .. }) => {
                1u64.checked_shl(*consumer as u32).unwrap_or(0)
            }
            RingError::Claim(ring_core::ClaimError::Pinned { readers, .. }) => u64::from(*readers),
            _ => 0,
        };
        let mut any = false;
        for c in (0..self.consumers.min(64)).filter(|c| mask & (1 << c) != 0) {
            any |= self.reclaim_dead_consumer(c).unwrap_or(false);
        }
        any
    }
}

/// Becomes the producer of the ring in `mem`: takes [`Role::Producer`]'s lock first, then the
/// producer line, taking the ring over when a registered producer holds no lock (its process
/// died), as ring-os's own producers do.
pub(super) fn become_producer<M: RoleFile>(
    mem: M,
    owner: OwnerId,
) -> Result<(RoleLock, Producer<M>), RingError> {
    let registered = |mem: &M| ring_core::inspect::producer_info(mem).owner;
    let Some(role) = mem.lock_role(Role::Producer).map_err(RingError::Segment)? else {
        return Err(RingError::Segment(ring_os::Error::ProducerAlive {
            owner: registered(&mem),
        }));
    };
    let ring = match OwnerId::new(registered(&mem)) {
        // Without OFD locks a free lock proves nothing: never displace anyone there.
        Some(dead) if ring_os::raw::lock::SUPPORTED => {
            // SAFETY: we hold Role::Producer, so whoever registered `dead` holds no lock. Every
            // producer on this memory holds that lock for its whole life (it is not `OpenJoin`:
            // producers on it are made here, by ring-os, or by `unsafe` code that promised the
            // same), so its process is gone (the kernel released the lock): it is inside no
            // call and holds no slot. If the line changed meanwhile, the take-over's
            // compare-exchange fails instead.
            unsafe { Producer::take_over(mem, owner, dead) }
        }
        // SAFETY: we hold Role::Producer, and the caller keeps it in the `DeviceProducer`
        // after the producer (released only once the producer left the line).
        _ => unsafe { Producer::new_unchecked(mem, owner) },
    };
    ring.map(|p| (role, p)).map_err(RingError::Ring)
}

/// The one call into ring-core's `Producer::reclaim`, for an entry whose owner process is
/// dead.
///
/// # Safety
/// As `Producer::reclaim`: the entry's consumer is inside no call and holds no pin.
unsafe fn reclaim_entry<M: ring_core::Memory>(
    ring: &mut Producer<M>,
    c: usize,
    dead: OwnerId,
) -> Result<(), RingError> {
    // SAFETY: the caller's promise is `reclaim`'s.
    unsafe { ring.reclaim(c, dead) }
        .map(drop)
        .map_err(RingError::Ring)
}

/// How often a publish held back by consumers probes their role locks.
const PROBE_PERIOD: Duration = Duration::from_millis(5);
