//! The consumer side of the device ring.

use core::time::Duration;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Instant;

use ring_core::{Consumer, DeliveryClass, OwnerId};
use ring_os::raw::lock::{Liveness, Role, RoleLock};
use ring_os::raw::RoleFile;

use super::producer::TEARDOWN_TIMEOUT;
use super::table::{Table, TableHeader, TableMemory};
use super::{backoff, new_token, RingError};
use crate::cache::{EventCache, MappingCache};
use crate::device::Device;
use crate::error::Error;
use crate::handle::{EventId, ExportKind, MappingId, Mem, MemHandle, Owner, StreamId};

/// One message read by a [`DeviceConsumer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<R> {
    /// The message's sequence number.
    pub seq: u64,
    /// Messages skipped before it (always 0 for a gating consumer).
    pub missed: u64,
    /// The slot buffer it lies in.
    pub buffer: usize,
    /// Its length in bytes.
    pub len: u64,
    /// The producer's monotonic clock ([`monotonic_ns`](super::monotonic_ns)) when it began
    /// the message (before enqueueing its writes).
    pub published_ns: u64,
    /// What the read closure returned.
    pub value: R,
}

/// Reads device-memory messages: see the [module docs](super).
///
/// Holds its ring-core entry's [`Role::Consumer`] lock (ring-os, kernel-held) from before it
/// registers until after it left, so a producer reclaims it only once it is dead.
pub struct DeviceConsumer<D: Device, M: RoleFile, T: TableMemory> {
    dev: Arc<D>,
    ring: Consumer<M>,
    table: T,
    owner: Owner,
    token: u64,
    slots: usize,
    consumers: usize,
    stream: Option<StreamId>,
    read_events: Vec<EventId>,
    producer_token: u64,
    buffer_len: u64,
    kind: ExportKind,
    /// Opened slot buffers, keyed by (producer token, slot).
    mappings: MappingCache<(u64, usize)>,
    /// Opened write events, keyed by (producer token, slot).
    write_events: EventCache<(u64, usize)>,
    /// A message left pinned on purpose (see [`RingError::PinHeld`]); reads are refused after.
    held: Option<u64>,
    /// The entry's role lock; declared after `ring`, so it is released only once the
    /// ring-core consumer left its entry (and `Drop` emptied the table row).
    _role: RoleLock,
}

/// How long a consumer whose read-event record failed waits on the host for its own copy
/// before it gives up and keeps the message pinned.
const UNPIN_SYNC_TIMEOUT: Duration = Duration::from_secs(10);

impl<D: Device, M: RoleFile, T: TableMemory> core::fmt::Debug for DeviceConsumer<D, M, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DeviceConsumer")
            .field("index", &self.ring.index())
            .finish_non_exhaustive()
    }
}

impl<D: Device, M: RoleFile, T: TableMemory> DeviceConsumer<D, M, T> {
    /// Registers as a consumer of class `class`, waits (at most `timeout`) for the producer's
    /// table, and publishes this consumer's read events in its table row.
    ///
    /// # Errors
    /// [`RingError::Ring`] (consumer table full), [`RingError::Segment`] (role locks),
    /// [`RingError::NotReady`] (no producer within `timeout`), [`RingError::Corrupt`],
    /// [`RingError::Device`].
    pub fn new(
        dev: Arc<D>,
        mem: M,
        table: T,
        class: DeliveryClass,
        owner: OwnerId,
        timeout: Duration,
    ) -> Result<Self, RingError> {
        // Bound lock first: on an early return the consumer (declared after) drops first, so
        // the lock is released only once the entry was left.
        let (role, ring) = register(mem, class, owner, timeout)?;
        let g = ring.memory().geometry();
        let (slots, consumers) = (g.slots(), g.consumers());
        let corrupt = RingError::Corrupt("the device table is smaller than the geometry needs");
        let header = {
            let t = Table::new(table.table(), slots, consumers).ok_or(corrupt)?;
            let start = Instant::now();
            let mut round = 0;
            loop {
                if let Some(h) = t.header() {
                    break h;
                }
                if start.elapsed() >= timeout {
                    return Err(RingError::NotReady);
                }
                backoff(&mut round);
            }
        };
        let mut this = Self {
            dev,
            ring,
            table,
            owner: Owner(owner.get()),
            token: new_token(),
            slots,
            consumers,
            stream: None,
            read_events: Vec::with_capacity(slots),
            producer_token: header.token,
            buffer_len: header.buffer_len,
            kind: header.kind,
            mappings: MappingCache::new(),
            write_events: EventCache::new(),
            held: None,
            _role: role,
        };
        this.stream = Some(this.dev.create_stream(this.owner)?);
        let mut handles = Vec::with_capacity(slots);
        for _ in 0..slots {
            let e = this.dev.create_event(this.owner)?;
            this.read_events.push(e);
            handles.push(this.dev.export_event(e)?);
        }
        let t = Table::new(this.table.table(), slots, consumers)
            .ok_or(RingError::Corrupt("the device table shrank"))?;
        // Open every slot's buffer and write event now (milliseconds each on a GPU), not on
        // the first frame that uses them; before the row is published, so a failure leaves
        // nothing for the producer to wait on.
        for s in 0..slots {
            open_slot(
                &mut this.mappings,
                &mut this.write_events,
                &*this.dev,
                &t,
                this.owner,
                &header,
                s,
            )?;
        }
        // Published before the first pin: the producer's scan after claiming a slot this
        // consumer has read is ordered after this (pin, unpin, claim), so it sees the row.
        let me = ring_os::raw::owner::current().map_or(0, OwnerId::get);
        t.publish_consumer(this.ring.index(), this.token, me, &handles);
        Ok(this)
    }

    /// The device.
    #[must_use]
    pub fn device(&self) -> &Arc<D> {
        &self.dev
    }

    /// The ring-core consumer (index, class, counters).
    #[must_use]
    pub fn ring(&self) -> &Consumer<M> {
        &self.ring
    }

    /// This consumer's stream (work enqueued by read closures runs on it).
    ///
    /// # Errors
    /// [`RingError::NotReady`] only during construction.
    pub fn stream(&self) -> Result<StreamId, RingError> {
        self.stream.ok_or(RingError::NotReady)
    }

    /// Bytes per slot buffer, as the producer published.
    #[must_use]
    pub const fn buffer_len(&self) -> u64 {
        self.buffer_len
    }

    /// Opened-mapping counters (each slot buffer is opened once).
    #[must_use]
    pub fn mapping_stats(&self) -> crate::CacheStats {
        self.mappings.stats()
    }

    /// How the producer exports its buffers (with [`ExportKind::Fd`], call
    /// [`receive_buffers`](Self::receive_buffers) before reading).
    #[must_use]
    pub const fn export_kind(&self) -> ExportKind {
        self.kind
    }

    /// Receives the producer's slot buffers as file descriptors (VMM export) over a Unix socket
    /// — one message per slot, see
    /// [`DeviceProducer::send_buffers`](super::DeviceProducer::send_buffers) — and opens each
    /// once. Each message is checked: the producer token, a slot in range, the table's length.
    ///
    /// # Errors
    /// [`RingError::Segment`] (socket, timeout), [`RingError::Corrupt`] (a message that does not
    /// match the table), device errors from opening.
    pub fn receive_buffers(
        &mut self,
        socket: impl AsFd,
        timeout: Duration,
    ) -> Result<(), RingError> {
        for _ in 0..self.slots {
            let mut note = [0u8; 24];
            let (fd, n) = ring_os::raw::fdpass::recv_fd(&socket, &mut note, timeout)
                .map_err(RingError::Segment)?;
            let word = |i: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&note[i * 8..i * 8 + 8]);
                u64::from_le_bytes(b)
            };
            let (token, slot, len) = (word(0), word(1), word(2));
            if n != 24
                || token != self.producer_token
                || slot >= self.slots as u64
                || len != self.buffer_len
            {
                return Err(RingError::Corrupt(
                    "a buffer descriptor message does not match the table",
                ));
            }
            let (dev, owner) = (&*self.dev, self.owner);
            let handle = MemHandle::Fd { fd, len };
            self.mappings
                .get_or_open((token, slot as usize), || dev.open(owner, &handle))?;
        }
        Ok(())
    }

    /// Forgets mappings and events of a previous producer (its table token changed), once the
    /// work this consumer queued on them has finished.
    fn resync(&mut self, token: u64) -> Result<(), RingError> {
        let dev = &*self.dev;
        if let Some(s) = self.stream {
            dev.sync_stream(s, TEARDOWN_TIMEOUT)?;
        }
        let _ = self.mappings.close_all(dev);
        let _ = self.write_events.destroy_all(dev);
        self.producer_token = token;
        Ok(())
    }

    /// Pins the next message without blocking, makes the consumer's stream wait for the
    /// producer's writes (device-side), lets `read` enqueue work on the stream over the slot's
    /// buffer (`read(device, stream, buffer, len)`), records this consumer's read event for
    /// the slot and unpins.
    ///
    /// # Errors
    /// [`RingError::Read`] (`Empty` is transient; `Closed` at the end), [`RingError::NotReady`],
    /// [`RingError::Corrupt`] (a message names a buffer or length that cannot be), device errors
    /// and what `read` returned (the read event is recorded in every case). If recording the
    /// read event fails, the message is unpinned only after a host sync of the stream shows
    /// the copy finished ([`RingError::ReadEvent`]); if that fails too it stays pinned for good
    /// ([`RingError::PinHeld`], also returned by every later call).
    pub fn try_read_with<R>(
        &mut self,
        read: impl FnOnce(&D, StreamId, Mem, u64) -> Result<R, Error>,
    ) -> Result<Frame<R>, RingError> {
        if let Some(seq) = self.held {
            return Err(RingError::PinHeld { seq });
        }
        let stream = self.stream.ok_or(RingError::NotReady)?;
        let header = Table::new(self.table.table(), self.slots, self.consumers)
            .ok_or(RingError::Corrupt("the device table shrank"))?
            .header();
        match header {
            Some(h) if h.token == self.producer_token => {}
            Some(h) if h.buffer_len == self.buffer_len && h.kind == self.kind => {
                self.resync(h.token)?;
            }
            Some(_) => {
                return Err(RingError::Corrupt(
                    "a new producer changed the buffer length",
                ))
            }
            None => return Err(RingError::NotReady),
        }
        let pinned = self.ring.try_pin()?;
        let [buffer, len] = pinned.meta();
        if buffer >= self.slots as u64 || len == 0 || len > self.buffer_len {
            return Err(RingError::Corrupt(
                "a message names an impossible buffer or length",
            ));
        }
        let buffer = buffer as usize;
        let mut ts = [0u8; 8];
        let published_ns = if pinned.copy_to(&mut ts) == 8 {
            u64::from_le_bytes(ts)
        } else {
            0
        };
        let (seq, missed) = (pinned.seq(), pinned.missed());
        let dev = &*self.dev;
        let (owner, ptoken, buffer_len) = (self.owner, self.producer_token, self.buffer_len);
        let t = Table::new(self.table.table(), self.slots, self.consumers)
            .ok_or(RingError::Corrupt("the device table shrank"))?;
        let h = TableHeader {
            token: ptoken,
            kind: self.kind,
            buffer_len,
        };
        let (mapping, wev) = open_slot(
            &mut self.mappings,
            &mut self.write_events,
            dev,
            &t,
            owner,
            &h,
            buffer,
        )?;
        let mapping = mapping.ok_or(Error::InvalidOperation(
            "the producer exports fds: call receive_buffers before reading",
        ))?;
        // The mutation check removes this wait: the ring tests must then see torn frames.
        #[cfg(not(ring_mutant = "cuda_skip_write_wait"))]
        dev.wait_event(stream, wev)?;
        #[cfg(ring_mutant = "cuda_skip_write_wait")]
        let _ = wev;
        let value = read(dev, stream, Mem::Mapping(mapping), len);
        // Recorded whatever `read` did: the producer must wait for any work it enqueued.
        if let Err(source) = dev.record(self.read_events[buffer], stream) {
            // Without the record, the producer's next wait on this slot would not cover the
            // work just enqueued: unpin only once the host has seen that work finish.
            if dev.sync_stream(stream, UNPIN_SYNC_TIMEOUT).is_err() {
                core::mem::forget(pinned);
                self.held = Some(seq);
                return Err(RingError::PinHeld { seq });
            }
            drop(pinned);
            return Err(RingError::ReadEvent {
                consumer: self.ring.index(),
                source,
            });
        }
        drop(pinned);
        Ok(Frame {
            seq,
            missed,
            buffer,
            len,
            published_ns,
            value: value?,
        })
    }

    /// [`try_read_with`](Self::try_read_with), waiting while the ring is empty, for at most
    /// `timeout`: parked on the ring's futex word (ring-core `wait_ready` with ring-os
    /// [`FutexWait`](ring_os::raw::FutexWait)) when the ring wakes waiters
    /// ([`TableMemory::wakes_waiters`]: a [`SharedRing`](super::SharedRing)), with a short
    /// back-off otherwise (in-process heap rings).
    ///
    /// # Errors
    /// As `try_read_with`; `Read(Empty)` when the timeout ran out.
    pub fn read_with<R>(
        &mut self,
        timeout: Duration,
        mut read: impl FnMut(&D, StreamId, Mem, u64) -> Result<R, Error>,
    ) -> Result<Frame<R>, RingError> {
        let deadline = ring_os::raw::deadline_after(timeout);
        let mut round = 0;
        loop {
            match self.try_read_with(&mut read) {
                Err(RingError::Read(ring_core::ReadError::Empty))
                    if self.table.wakes_waiters() && Instant::now() < deadline =>
                {
                    // Park on the ring's futex word until the producer's publish wakes us (or
                    // the deadline): no polling, no sleep back-off. A timeout or an eviction
                    // is reported by the next `try_read_with`.
                    let _ = self
                        .ring
                        .wait_ready(&mut ring_os::raw::FutexWait::until(deadline));
                }
                Err(e) if e.is_transient() && Instant::now() < deadline => backoff(&mut round),
                other => return other,
            }
        }
    }
}

/// Registers a ring-core consumer of `class` holding its entry's [`Role::Consumer`] lock: locks
/// a free-looking entry first, then registers into exactly that entry, so a reclaimer (which
/// must take the same lock) never touches an entry being registered. Retries while the locks
/// of free entries are busy, at most `timeout`.
fn register<M: RoleFile>(
    mut mem: M,
    class: DeliveryClass,
    owner: OwnerId,
    timeout: Duration,
) -> Result<(RoleLock, Consumer<M>), RingError> {
    let start = Instant::now();
    let n = mem.geometry().consumers();
    loop {
        let mut any_free = false;
        for index in 0..n {
            if ring_core::inspect::consumer_info(&mem, index).is_none_or(|e| e.owner != 0) {
                continue;
            }
            any_free = true;
            let Some(role) = mem
                .lock_role(Role::Consumer(index))
                .map_err(RingError::Segment)?
            else {
                continue; // A registrant or a reclaimer holds it right now.
            };
            // SAFETY: we hold entry `index`'s role lock, and the caller keeps it in the
            // `DeviceConsumer` after the consumer (released only once the consumer left the
            // entry), so no lock-based reclaim of the entry runs while the consumer lives.
            match unsafe { Consumer::new_at_unchecked(mem, index, class, owner) } {
                Ok(c) => return Ok((role, c)),
                // Taken between our look and our lock (a peer without the locks, or a producer
                // sweeping its bits): try the next entry.
                Err((m, ring_core::Error::EntryBusy { .. })) => mem = m,
                Err((_, e)) => return Err(RingError::Ring(e)),
            }
        }
        if !any_free {
            return Err(RingError::Ring(ring_core::Error::ConsumerTableFull {
                capacity: mem.geometry().config().consumers,
            }));
        }
        if start.elapsed() >= timeout {
            return Err(RingError::Segment(ring_os::Error::TimedOut));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Opens (once) slot `s`'s write event and, for an IPC-exported ring, its buffer mapping; an
/// fd-exported ring's mapping is the one [`DeviceConsumer::receive_buffers`] opened, if any.
fn open_slot<D: Device>(
    mappings: &mut MappingCache<(u64, usize)>,
    write_events: &mut EventCache<(u64, usize)>,
    dev: &D,
    t: &Table<'_>,
    owner: Owner,
    h: &TableHeader,
    s: usize,
) -> Result<(Option<MappingId>, EventId), Error> {
    let (mh, eh) = t.slot(s);
    let mapping = if h.kind == ExportKind::Fd {
        mappings.get(&(h.token, s))
    } else {
        Some(mappings.get_or_open((h.token, s), || {
            if mh.len != h.buffer_len {
                return Err(Error::InvalidHandle(
                    "slot buffer length differs from the header",
                ));
            }
            dev.open(owner, &MemHandle::Ipc(mh))
        })?)
    };
    let wev = write_events.get_or_open((h.token, s), || dev.open_event(owner, &eh))?;
    Ok((mapping, wev))
}

impl<D: Device, M: RoleFile, T: TableMemory> DeviceConsumer<D, M, T> {
    /// The consumer's half of the teardown protocol (`docs/CUDA.md`), run on drop: sync the
    /// stream (every copy done), ask to leave, and destroy the read events only once the
    /// producer acknowledged, stopped, went away or died; then close the mappings and empty
    /// the row, which lets the producer free its buffers. Returns whether the read events
    /// could be destroyed (false: the producer did not answer within `timeout`, and they are
    /// left to the device's drop, or the process's exit, rather than destroyed under a wait).
    fn leave(&mut self, timeout: Duration) -> bool {
        let dev = &*self.dev;
        let synced = self
            .stream
            .is_some_and(|s| dev.sync_stream(s, timeout).is_ok());
        let Some(t) = Table::new(self.table.table(), self.slots, self.consumers) else {
            return false;
        };
        let (c, token, ptoken) = (self.ring.index(), self.token, self.producer_token);
        // A row never published (registration failed) has nothing the producer waits on.
        let mut released = t.consumer_token(c) != token;
        if !released && synced && self.held.is_none() {
            t.request_leave(c, token);
            let start = Instant::now();
            let mut round = 0;
            released = loop {
                // A producer whose role lock is free is dead (its stream went with it).
                let gone = t.header().is_none_or(|h| h.token != ptoken)
                    || ring_os::raw::lock::probe(self.ring.memory().role_file(), Role::Producer)
                        == Liveness::Dead;
                if t.leave_acked(c, token) || t.producer_stopped(ptoken) || gone {
                    break true;
                }
                if start.elapsed() >= timeout {
                    break false;
                }
                backoff(&mut round);
            };
        }
        if released {
            for e in self.read_events.drain(..) {
                let _ = dev.destroy_event(e);
            }
        }
        let _ = self.mappings.close_all(dev);
        let _ = self.write_events.destroy_all(dev);
        t.withdraw_consumer(c, token);
        released
    }
}

impl<D: Device, M: RoleFile, T: TableMemory> Drop for DeviceConsumer<D, M, T> {
    fn drop(&mut self) {
        if !self.leave(TEARDOWN_TIMEOUT) {
            eprintln!(
                "ring-cuda: consumer {} left without the producer's acknowledgement; its read \
                 events are kept until its device is dropped",
                self.ring.index()
            );
        }
        if let Some(s) = self.stream.take() {
            let _ = self.dev.destroy_stream(s, TEARDOWN_TIMEOUT);
        }
    }
}
