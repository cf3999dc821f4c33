//! Blocking operations with timeouts and peer liveness: consumers that notice a dead producer
//! (`ProducerGone`), a producer that reclaims dead consumers holding it back.
//!
//! Every blocking call waits in slices of at most [`LIVENESS_PERIOD`] on the futex; when a slice
//! ends with no progress it asks the kernel whether the peers' role locks are held (one `fcntl`,
//! see [`crate::raw::lock`]) before waiting again, so a dead peer is detected within about one period
//! and the fast path makes no extra system call.

use core::time::Duration;
use std::time::Instant;

use ring_core::{ClaimError, Consumer, Copied, Hold, Memory, Pinned, Producer, ReadError};

use crate::ShmReadError;
use ring_core::{Reclaimed, WriteSlot};

use crate::liveness::lock::{Liveness, Role};
use crate::liveness::roles::{self, reclaim_if_dead, RoleFile};
use crate::segment::sigbus::memory_truncated;
use crate::wait::{deadline_after, FutexWait};

/// The `Corrupt` reason the blocking helpers report once the SIGBUS guard found the segment
/// truncated under its mapping (`Mapping::check_len` then says by how much).
pub const TRUNCATED: &str = "a peer truncated the segment under this mapping, or its pages \
                             could not be backed (they read as zeros now; see \
                             Mapping::is_truncated): recreate the ring";

/// `Err(ReadError::Corrupt(TRUNCATED))` when `mem` was found truncated; with `probe`, the end of
/// its layout is touched first (for slice ends and errors, where one more load costs nothing).
fn read_guard<M: Memory + ?Sized>(mem: &M, probe: bool) -> Result<(), ReadError> {
    if memory_truncated(mem, probe) {
        Err(ReadError::Corrupt(TRUNCATED))
    } else {
        Ok(())
    }
}

/// As [`read_guard`], for claims.
fn claim_guard<M: Memory + ?Sized>(mem: &M, probe: bool) -> Result<(), ClaimError> {
    if memory_truncated(mem, probe) {
        Err(ClaimError::Corrupt(TRUNCATED))
    } else {
        Ok(())
    }
}

/// How long a blocked operation waits before it re-checks whether its peers are alive.
pub const LIVENESS_PERIOD: Duration = Duration::from_millis(20);

/// The end of the next wait slice.
fn slice_end(deadline: Instant) -> Instant {
    deadline.min(Instant::now() + LIVENESS_PERIOD)
}

/// Blocking reads for consumers in OS shared memory.
pub trait ConsumerExt<M: Memory> {
    /// Waits (at most `timeout`) until a read would find a message or the ring is closed.
    ///
    /// # Errors
    ///
    /// [`ReadError::Timeout`]; [`ShmReadError::ProducerGone`] when nothing is readable and the
    /// producer's process is dead; [`ReadError::Evicted`]; [`ReadError::Corrupt`]`(`[`TRUNCATED`]`)`
    /// when a peer truncated the segment (checked at every slice end and before any error);
    /// ring-core's reasons come as [`ShmReadError::Read`].
    fn wait_message(&mut self, timeout: Duration) -> Result<(), ShmReadError>;

    /// Copies the next message into `buf`, waiting at most `timeout` for one.
    ///
    /// # Errors
    ///
    /// As [`wait_message`](Self::wait_message) and [`Consumer::try_copy`].
    fn recv(&mut self, buf: &mut [u8], timeout: Duration) -> Result<Copied, ShmReadError>;

    /// Pins the next message, waiting at most `timeout` for one.
    ///
    /// # Errors
    ///
    /// As [`wait_message`](Self::wait_message) and [`Consumer::try_pin`].
    fn recv_pinned(&mut self, timeout: Duration) -> Result<Pinned<'_, M>, ShmReadError>;

    /// Holds the next message ([`Consumer::try_hold`]), waiting at most `timeout` for one.
    ///
    /// # Errors
    ///
    /// As [`wait_message`](Self::wait_message) and [`Consumer::try_hold`]
    /// (`TooManyHolds` at once, without waiting).
    fn recv_held(&mut self, timeout: Duration) -> Result<Hold, ShmReadError>;

    /// Whether a process holds the ring's producer lock (`Dead` also when there is no producer).
    fn producer_liveness(&self) -> Liveness;
}

impl<M: RoleFile> ConsumerExt<M> for Consumer<M> {
    fn wait_message(&mut self, timeout: Duration) -> Result<(), ShmReadError> {
        let deadline = deadline_after(timeout);
        read_guard(self.memory(), false)?;
        loop {
            match self.wait_ready(&mut FutexWait::until(slice_end(deadline))) {
                Err(ReadError::Timeout) => {}
                Ok(()) => return Ok(read_guard(self.memory(), false)?),
                Err(e) => {
                    // `Closed` or `Corrupt` may be read from zeros the guard mapped.
                    read_guard(self.memory(), true)?;
                    return Err(e.into());
                }
            }
            // A slice passed with nothing to read: was the segment cut under us, is anyone
            // still writing? A registered producer whose lock is free is gone.
            read_guard(self.memory(), true)?;
            if self.producer_owner() != 0 && self.producer_liveness() == Liveness::Dead {
                return Err(ShmReadError::ProducerGone);
            }
            if Instant::now() >= deadline {
                return Err(ReadError::Timeout.into());
            }
        }
    }

    fn recv(&mut self, buf: &mut [u8], timeout: Duration) -> Result<Copied, ShmReadError> {
        let deadline = deadline_after(timeout);
        loop {
            match self.try_copy(buf) {
                Err(ReadError::Empty) => {}
                // A lost page the copy touched faulted into zeros and the guard's mark; bytes
                // zeroed in the page that holds the new end of file do not fault, so probe the
                // mapping's end too (the kernel unmaps the lost pages before it zeroes that one).
                Ok(m) => return Ok(read_guard(self.memory(), true).map(|()| m)?),
                Err(e) => {
                    read_guard(self.memory(), true)?;
                    return Err(e.into());
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            self.wait_message(left)?;
        }
    }

    fn recv_held(&mut self, timeout: Duration) -> Result<Hold, ShmReadError> {
        let deadline = deadline_after(timeout);
        loop {
            match self.try_hold() {
                Err(ReadError::Empty) => {}
                // The caller reads the bytes later: check now whether the segment was cut (as
                // `recv_pinned` does); a message read from zeros is not handed out.
                Ok(hold) => {
                    if let Err(e) = read_guard(self.memory(), true) {
                        let _ = self.release(hold);
                        return Err(e.into());
                    }
                    return Ok(hold);
                }
                Err(e) => {
                    read_guard(self.memory(), true)?;
                    return Err(e.into());
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            self.wait_message(left)?;
        }
    }

    fn recv_pinned(&mut self, timeout: Duration) -> Result<Pinned<'_, M>, ShmReadError> {
        self.wait_message(timeout)?;
        // `head` only grows, so a message `wait_message` found stays there to pin (or is
        // overwritten, which `try_pin` reports as a miss and re-targets).
        // The pin borrows `self`: remember where the segment is to look the mark up after.
        let segment = core::ptr::from_ref(self.memory().header()) as usize;
        match self.try_pin() {
            Ok(pin) => {
                // The caller reads the bytes later: check now whether the segment was cut (see
                // `recv`; a truncation after this point can still zero what the caller reads).
                // SAFETY: the pin borrows the consumer, which keeps its memory mapped.
                if unsafe { crate::segment::sigbus::probe_at(segment) } {
                    return Err(ReadError::Corrupt(TRUNCATED).into());
                }
                Ok(pin)
            }
            // `Closed` or `Corrupt` may be read from zeros the guard mapped, or written by a
            // producer that gave up on the truncated segment: report the truncation.
            // SAFETY: `self` (borrowed for this call) keeps its memory mapped.
            Err(_) if unsafe { crate::segment::sigbus::probe_at(segment) } => {
                Err(ReadError::Corrupt(TRUNCATED).into())
            }
            Err(e) => Err(e.into()),
        }
    }

    fn producer_liveness(&self) -> Liveness {
        roles::liveness(self.memory(), Role::Producer)
    }
}

/// Blocking writes for producers in OS shared memory, reclaiming dead consumers.
pub trait ProducerExt<M: Memory> {
    /// Claims the next slot, waiting at most `timeout` while consumers hold the ring back and
    /// reclaiming those whose process died; passes the slot to `write` (which fills and
    /// publishes or aborts it) and returns what `write` returns.
    ///
    /// # Errors
    ///
    /// [`ClaimError::Closed`], or the last `Full`/`Pinned` when `timeout` ran out;
    /// [`ClaimError::Corrupt`]`(`[`TRUNCATED`]`)` when a peer truncated the segment (checked
    /// before the claim, after `write`, at every slice end; the slot may have been published
    /// into the truncated ring).
    fn claim_with<R>(
        &mut self,
        timeout: Duration,
        write: impl FnOnce(WriteSlot<'_, M>) -> R,
    ) -> Result<R, ClaimError>;

    /// Publishes `data` (see [`claim_with`](Self::claim_with)); returns its sequence number.
    ///
    /// # Errors
    ///
    /// As `claim_with`, and [`ClaimError::TooLarge`].
    fn publish(&mut self, data: &[u8], timeout: Duration) -> Result<u64, ClaimError>;

    /// [`publish`](Self::publish) with the message's two metadata words (as
    /// [`WriteSlot::set_meta`] sets them): the one-pass publish first, then the claim.
    ///
    /// # Errors
    ///
    /// As `publish`.
    fn publish_with_meta(
        &mut self,
        data: &[u8],
        meta: [u64; 2],
        timeout: Duration,
    ) -> Result<u64, ClaimError>;

    /// ring-core's [`try_publish`](Producer::try_publish) (the one-pass publish of a message
    /// that fits the slot's message line, the claim path otherwise) with `claim_with`'s
    /// truncation checks: never waits. `publish` starts with it.
    ///
    /// # Errors
    ///
    /// As `try_publish` (`Full` and `Pinned` mean "wait": nothing changed), and
    /// [`ClaimError::Corrupt`]`(`[`TRUNCATED`]`)` when a peer truncated the segment (checked
    /// before, and after the write).
    fn try_publish_checked(&mut self, data: &[u8]) -> Result<u64, ClaimError>;

    /// [`try_publish_checked`](Self::try_publish_checked) with the message's two metadata
    /// words (ring-core's [`try_publish_with_meta`](Producer::try_publish_with_meta)).
    ///
    /// # Errors
    ///
    /// As `try_publish_checked`.
    fn try_publish_checked_with_meta(
        &mut self,
        data: &[u8],
        meta: [u64; 2],
    ) -> Result<u64, ClaimError>;

    /// Waits until every gating consumer has consumed everything published ("ack all"),
    /// reclaiming dead ones; false when `timeout` ran out first or the segment was truncated
    /// (`Mapping::is_truncated` tells which).
    fn wait_drained_for(&mut self, timeout: Duration) -> bool;

    /// Reclaims every registered consumer whose role lock is free; returns what was cleared.
    fn reclaim_dead(&mut self) -> Vec<Reclaimed>;
}

impl<M: RoleFile> ProducerExt<M> for Producer<M> {
    fn claim_with<R>(
        &mut self,
        timeout: Duration,
        write: impl FnOnce(WriteSlot<'_, M>) -> R,
    ) -> Result<R, ClaimError> {
        let mut write = Some(write);
        claim_guard(self.memory(), false)?;
        // After `write`, probe whether the segment was cut (see `recv`), looked up by address:
        // the slot borrows the producer.
        let segment = core::ptr::from_ref(self.memory().header()) as usize;
        let written = |r: R| {
            // SAFETY: `self` (borrowed for this call) keeps its memory mapped.
            if unsafe { crate::segment::sigbus::probe_at(segment) } {
                Err(ClaimError::Corrupt(TRUNCATED))
            } else {
                Ok(r)
            }
        };
        // Fast path: no clock read, no wait strategy.
        let first = match self.try_claim() {
            Ok(slot) => {
                return match write.take() {
                    Some(f) => written(f(slot)),
                    // Unreachable: `write` was just filled.
                    None => Err(ClaimError::Closed),
                };
            }
            Err(e) => e,
        };
        if let ClaimError::Closed
        | ClaimError::TooLarge { .. }
        | ClaimError::Displaced { .. }
        | ClaimError::Corrupt(_) = first
        {
            claim_guard(self.memory(), true)?;
            return Err(first);
        }
        let deadline = deadline_after(timeout);
        loop {
            let err = match self.claim(&mut FutexWait::until(slice_end(deadline))) {
                Ok(slot) => {
                    return match write.take() {
                        Some(f) => written(f(slot)),
                        // Unreachable: `write` is taken only here, and we return at once.
                        None => Err(ClaimError::Closed),
                    };
                }
                Err(e) => e,
            };
            // Held back for a whole slice (or refused): was the segment cut under us?
            claim_guard(self.memory(), true)?;
            // Held back for a whole slice: by whom, and are they alive?
            match err {
                ClaimError::Full { consumer, .. } => {
                    let _ = reclaim_if_dead(self, consumer);
                }
                ClaimError::Pinned { readers, .. } => {
                    for index in (0..32).filter(|i| readers & (1 << i) != 0) {
                        let _ = reclaim_if_dead(self, index);
                    }
                }
                e => return Err(e),
            }
            if Instant::now() >= deadline {
                return Err(err);
            }
        }
    }

    fn publish(&mut self, data: &[u8], timeout: Duration) -> Result<u64, ClaimError> {
        self.publish_with_meta(data, [0; 2], timeout)
    }

    fn publish_with_meta(
        &mut self,
        data: &[u8],
        meta: [u64; 2],
        timeout: Duration,
    ) -> Result<u64, ClaimError> {
        let capacity = self.memory().geometry().slot_capacity();
        if data.len() > capacity {
            return Err(ClaimError::TooLarge {
                len: data.len(),
                capacity,
            });
        }
        // Fast path: ring-core's one-pass publish (no claim object, no clock read, no wait
        // strategy).
        match self.try_publish_checked_with_meta(data, meta) {
            // Held back: wait in `claim_with` (which claims again; a refused publish changed
            // nothing).
            Err(ClaimError::Full { .. } | ClaimError::Pinned { .. }) => {}
            done => return done,
        }
        self.claim_with(timeout, |mut slot| {
            // Cannot overflow: the length was checked against the capacity above.
            let _ = slot.write(data);
            slot.set_meta(meta);
            slot.publish()
        })?
    }

    fn try_publish_checked(&mut self, data: &[u8]) -> Result<u64, ClaimError> {
        self.try_publish_checked_with_meta(data, [0; 2])
    }

    fn try_publish_checked_with_meta(
        &mut self,
        data: &[u8],
        meta: [u64; 2],
    ) -> Result<u64, ClaimError> {
        claim_guard(self.memory(), false)?;
        match self.try_publish_with_meta(data, meta) {
            // The write is done: probe whether the segment was cut under it (see `recv`).
            Ok(seq) => claim_guard(self.memory(), true).map(|()| seq),
            Err(e @ (ClaimError::Full { .. } | ClaimError::Pinned { .. })) => Err(e),
            Err(e) => {
                claim_guard(self.memory(), true)?;
                Err(e)
            }
        }
    }

    fn wait_drained_for(&mut self, timeout: Duration) -> bool {
        let deadline = deadline_after(timeout);
        loop {
            // Zeros the guard mapped look drained, and a truncated ring drains nothing.
            if memory_truncated(self.memory(), true) {
                return false;
            }
            if self.wait_drained(&mut FutexWait::until(slice_end(deadline))) {
                return !memory_truncated(self.memory(), true);
            }
            if !self.reclaim_dead().is_empty() {
                continue;
            }
            if Instant::now() >= deadline {
                return false;
            }
        }
    }

    fn reclaim_dead(&mut self) -> Vec<Reclaimed> {
        let n = self.memory().geometry().consumers();
        (0..n).filter_map(|i| reclaim_if_dead(self, i)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::liveness::owner::dead_owner;
    use crate::raw::ShmRing;
    use crate::segment::CreateOptions;
    use ring_core::inspect::EntryState;
    use ring_core::{Config, DeliveryClass};

    #[test]
    fn an_empty_ring_times_out_and_a_dead_producer_is_gone() {
        let ring = ShmRing::create_memfd(&Config::new(4, 64), CreateOptions::new()).unwrap();
        let mut c = ShmRing::consumer(&ring, DeliveryClass::Gating).unwrap();
        let mut buf = [0u8; 64];
        // No producer at all: a plain timeout.
        let t = Instant::now();
        assert_eq!(
            c.recv(&mut buf, Duration::from_millis(50)),
            Err(ReadError::Timeout.into())
        );
        assert!(t.elapsed() >= Duration::from_millis(45));
        // A producer that died: reported within about one liveness period.
        // SAFETY: `p` stands for a process that died (no lock): nothing takes it over in this
        // test (the consumer only reports it gone), and it is forgotten, not used, afterwards.
        let mut p =
            unsafe { Producer::new_unchecked(std::sync::Arc::clone(&ring), dead_owner()) }.unwrap();
        p.try_publish(b"last words").unwrap();
        let got = c.recv(&mut buf, Duration::MAX).unwrap();
        assert_eq!(
            &buf[..got.len],
            b"last words",
            "published messages stay readable"
        );
        let t = Instant::now();
        assert_eq!(
            c.recv(&mut buf, Duration::from_secs(10)),
            Err(ShmReadError::ProducerGone)
        );
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "took {:?}",
            t.elapsed()
        );
        assert_eq!(c.producer_liveness(), Liveness::Dead);
        core::mem::forget(p);
    }

    #[test]
    fn a_dead_gating_consumer_is_reclaimed_by_a_blocked_publish() {
        let config = Config::new(4, 64).with_consumers(2);
        let ring = ShmRing::create_memfd(&config, CreateOptions::new()).unwrap();
        let mut p = ShmRing::producer(&ring).unwrap();
        // SAFETY: `dead` stands for a process that died: it is forgotten at once, before the
        // producer reclaims it, and holds no pin.
        let dead = unsafe {
            Consumer::new_unchecked(
                std::sync::Arc::clone(&ring),
                DeliveryClass::Gating,
                dead_owner(),
            )
        }
        .unwrap();
        // A dead process runs no destructors.
        core::mem::forget(dead);
        for i in 0..4u8 {
            p.publish(&[i], Duration::from_secs(1)).unwrap();
        }
        // The fifth needs the dead consumer's slot: held back until it is reclaimed.
        let t = Instant::now();
        p.publish(&[4], Duration::from_secs(5)).unwrap();
        assert!(t.elapsed() >= LIVENESS_PERIOD / 2 && t.elapsed() < Duration::from_secs(2));
        assert!(p.reclaim_dead().is_empty(), "already reclaimed");
        assert_eq!(p.consumer_info(0).unwrap().state, EntryState::Free);
        // The publisher can tell it lost a reader, and which, and how much it had not read.
        let lost = p.lost_readers();
        assert_eq!((lost.total, lost.gating), (1, 1), "{lost:?}");
        let first = lost
            .first_gating_unread
            .expect("a gating reader died with messages unread");
        assert_eq!(first.class, Some(DeliveryClass::Gating));
        assert_eq!((first.reclaimed.cursor, first.published), (0, 4));
        assert_eq!(first.unread(), 4);
    }

    /// `publish_with_meta`'s words arrive whether its one-pass attempt publishes or the ring
    /// holds it back and the claim does (a reader frees a slot while it waits).
    #[test]
    fn publish_with_meta_carries_its_words_on_both_paths() {
        let ring = ShmRing::create_memfd(&Config::new(2, 64), CreateOptions::new()).unwrap();
        let mut p = ShmRing::producer(&ring).unwrap();
        let mut c = ShmRing::consumer(&ring, DeliveryClass::Gating).unwrap();
        let mut buf = [0u8; 64];
        // Two slots, read after both are full: the third publish waits in the claim.
        std::thread::scope(|s| {
            let reader = s.spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                (0..3u64)
                    .map(|_| {
                        let got = c.recv(&mut buf, Duration::from_secs(5)).unwrap();
                        (buf[0], got.meta)
                    })
                    .collect::<Vec<_>>()
            });
            for i in 0..3u8 {
                let meta = [u64::from(i) + 100, !u64::from(i)];
                p.publish_with_meta(&[i], meta, Duration::from_secs(5))
                    .unwrap();
            }
            let got = reader.join().unwrap();
            let want: Vec<_> = (0..3u8)
                .map(|i| (i, [u64::from(i) + 100, !u64::from(i)]))
                .collect();
            assert_eq!(got, want);
        });
    }

    #[test]
    fn wait_drained_waits_for_a_live_reader_only_until_the_timeout() {
        let ring = ShmRing::create_memfd(&Config::new(4, 64), CreateOptions::new()).unwrap();
        let mut p = ShmRing::producer(&ring).unwrap();
        let mut c = ShmRing::consumer(&ring, DeliveryClass::Gating).unwrap();
        assert!(
            p.wait_drained_for(Duration::ZERO),
            "nothing published: drained"
        );
        p.publish(b"x", Duration::from_secs(1)).unwrap();
        assert!(!p.wait_drained_for(Duration::from_millis(30)));
        let mut buf = [0u8; 8];
        c.recv(&mut buf, Duration::from_secs(1)).unwrap();
        assert!(p.wait_drained_for(Duration::from_secs(1)));
    }

    /// The SIGBUS guard under the blocking helpers: a peer that truncates a file ring costs a
    /// clear error (`Corrupt(TRUNCATED)`, `Error::Truncated`), never the process.
    #[test]
    #[cfg(unix)]
    fn a_truncated_file_ring_is_a_clear_error_in_this_process() {
        let dir = std::env::temp_dir().join(format!("ring-os-sigbus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ring");
        let config = Config::new(16, 4096);
        let ring = ShmRing::create_file(&path, &config, CreateOptions::new()).unwrap();
        let mut p = ShmRing::producer(&ring).unwrap();
        let mut c = ShmRing::consumer(&ring, DeliveryClass::Gating).unwrap();
        let mut buf = vec![0u8; 4096];
        p.publish(&[7; 4096], Duration::from_secs(1)).unwrap();
        c.recv(&mut buf, Duration::from_secs(1)).unwrap();
        assert!(!ring.is_truncated());
        let len = ring.segment().len() as u64;
        rustix::fs::ftruncate(ring.segment().fd(), len / 3).unwrap();
        // Messages in slots that are still backed go through; the first one whose pages are
        // lost is reported (without the guard, it is a SIGBUS).
        let mut sent = 0;
        let published = loop {
            match p.publish(&[8; 4096], Duration::from_secs(1)) {
                Ok(_) => sent += 1,
                Err(e) => break e,
            }
            let got = c.recv(&mut buf, Duration::from_secs(1)).unwrap();
            assert_eq!(
                buf[..got.len],
                [8; 4096],
                "a message from a backed slot is intact"
            );
            assert!(
                sent < 16,
                "a whole ring cycle went through a truncated segment"
            );
        };
        assert_eq!(published, ring_core::ClaimError::Corrupt(TRUNCATED));
        assert_eq!(
            c.recv(&mut buf, Duration::from_secs(1)),
            Err(ring_core::ReadError::Corrupt(TRUNCATED).into())
        );
        assert!(ring.is_truncated());
        assert!(crate::segment::sigbus::repaired_faults() >= 1);
        match ring.check_len() {
            Err(e @ crate::Error::Truncated { .. }) => assert!(e.to_string().contains("truncated")),
            other => panic!("{other:?}"),
        }
        assert!(!p.wait_drained_for(Duration::from_millis(50)));
        drop((p, c, ring));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
