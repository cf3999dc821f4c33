//! The producer side of the device ring: making it, its buffers and events, publishing, and
//! tearing down; `peers.rs` deals with its consumers' lives (departures, the dead).

use core::time::Duration;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Instant;

use ring_core::{OwnerId, Producer};
use ring_os::raw::lock::{Liveness, Role, RoleLock};
use ring_os::raw::RoleFile;

mod peers;

use peers::become_producer;

use super::table::{Table, TableMemory};
use super::{backoff, monotonic_ns, new_token, RingError};
use crate::cache::EventCache;
use crate::device::Device;
use crate::error::Error;
use crate::handle::{
    BufferId, EventId, ExportKind, IpcMemHandle, Mem, MemHandle, Owner, StreamId, IPC_HANDLE_SIZE,
};

/// The consumers' read events as the producer opened them.
struct Readers {
    /// Opened read events, keyed by (consumer row, its token, slot).
    events: EventCache<(usize, u64, usize)>,
    /// The token last seen in each consumer row.
    rows: Vec<u64>,
}

impl Readers {
    /// Makes the producer's stream wait for consumer row `c`'s last read of slot `s` (nothing
    /// to wait for if the row is empty). The row's token is re-read if a consumer replaced it
    /// while its handle was being read (the table's seqlock); a handle that does not open is
    /// [`RingError::ReadEvent`].
    fn wait<D: Device>(
        &mut self,
        dev: &D,
        t: &Table<'_>,
        owner: Owner,
        stream: StreamId,
        (c, s): (usize, usize),
    ) -> Result<(), RingError> {
        // A row changes hands only on a (rare) re-registration; two re-reads are plenty, and a
        // row that keeps changing is reported rather than skipped.
        for _ in 0..3 {
            let token = t.consumer_token(c);
            if token != self.rows[c] {
                for e in self.events.remove_where(|k| k.0 == c) {
                    let _ = dev.destroy_event(e);
                }
                self.rows[c] = token;
                // A new registration: open all its read events now rather than one per slot
                // on later publishes (an error here comes back when that slot needs it).
                for other in (0..t.slots()).filter(|&o| o != s && token != 0) {
                    let _ = self.events.get_or_open((c, token, other), || {
                        let h = t
                            .consumer_event(c, other, token)
                            .ok_or(Error::StaleHandle)?;
                        dev.open_event(owner, &h)
                    });
                }
            }
            // A leaving consumer synced its stream before asking: no copy of it is left to wait
            // for (see `serve_departures`).
            if token == 0 || t.leave_request(c) == token {
                return Ok(());
            }
            let opened = self.events.get_or_open((c, token, s), || {
                let h = t.consumer_event(c, s, token).ok_or(Error::StaleHandle)?;
                dev.open_event(owner, &h)
            });
            match opened {
                // The mutation check removes this wait: the ring tests must then see torn frames.
                #[cfg(not(ring_mutant = "cuda_skip_read_waits"))]
                Ok(ev) => return dev.wait_event(stream, ev).map_err(RingError::from),
                #[cfg(ring_mutant = "cuda_skip_read_waits")]
                Ok(_) => return Ok(()),
                Err(_) if t.consumer_token(c) != token => continue,
                Err(source) => {
                    return Err(RingError::ReadEvent {
                        consumer: c,
                        source,
                    })
                }
            }
        }
        Err(RingError::ReadEvent {
            consumer: c,
            source: Error::StaleHandle,
        })
    }
}

/// Publishes device-memory messages: see the [module docs](super).
///
/// The producer holds the ring's [`Role::Producer`] lock (ring-os, kernel-held) for as long as
/// it lives, and each [`DeviceConsumer`](super::DeviceConsumer) the lock of its entry, so a
/// peer's death is vouched for by the kernel, not guessed from a pid: a consumer whose lock is
/// free is reclaimed ([`reclaim_dead_consumer`](Self::reclaim_dead_consumer), called by the
/// publishes it holds back), a producer whose lock is free is waited for no longer.
pub struct DeviceProducer<D: Device, M: RoleFile, T: TableMemory> {
    dev: Arc<D>,
    ring: Producer<M>,
    table: T,
    owner: Owner,
    slots: usize,
    consumers: usize,
    buffer_len: u64,
    stream: Option<StreamId>,
    buffers: Vec<BufferId>,
    write_events: Vec<EventId>,
    /// The consumers' read events opened so far.
    readers: Readers,
    /// How the buffers are exported.
    kind: ExportKind,
    /// The table token published (identifies this producer's buffers to consumers).
    token: u64,
    /// When a publish held back by consumers last probed their role locks.
    probed: Option<Instant>,
    /// [`Role::Producer`]'s lock; declared last, so it is released after the ring-core
    /// producer left its line and the table was withdrawn.
    _role: RoleLock,
}

impl<D: Device, M: RoleFile, T: TableMemory> core::fmt::Debug for DeviceProducer<D, M, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DeviceProducer")
            .field("slots", &self.slots)
            .field("buffer_len", &self.buffer_len)
            .finish_non_exhaustive()
    }
}

impl<D: Device, M: RoleFile, T: TableMemory> DeviceProducer<D, M, T> {
    /// Becomes the producer of the ring in `mem`, allocates and exports one device buffer of
    /// `buffer_len` bytes (legacy IPC) and one write event per slot, and publishes their handles
    /// in `table`.
    ///
    /// # Errors
    /// [`RingError::Segment`] ([`ring_os::Error::ProducerAlive`]: another producer holds the
    /// role lock; [`ring_os::Error::Lock`]), [`RingError::Ring`], [`RingError::Corrupt`]
    /// (table too small), [`RingError::Device`] (allocation, ceilings, export).
    pub fn new(
        dev: Arc<D>,
        mem: M,
        table: T,
        owner: OwnerId,
        buffer_len: u64,
    ) -> Result<Self, RingError> {
        Self::with_export(dev, mem, table, owner, buffer_len, ExportKind::Ipc)
    }

    /// As [`new`](Self::new), with the buffers exported as `kind`. With [`ExportKind::Fd`] (VMM)
    /// the table carries only the events and lengths; each consumer gets the buffers' file
    /// descriptors through [`send_buffers`](Self::send_buffers).
    ///
    /// # Errors
    /// As `new`; [`Error::Unsupported`] when the device cannot export fds.
    pub fn with_export(
        dev: Arc<D>,
        mem: M,
        table: T,
        owner: OwnerId,
        buffer_len: u64,
        kind: ExportKind,
    ) -> Result<Self, RingError> {
        // Bound lock first: on an early return the producer (declared after) drops first, so
        // the lock is released only once the producer line was left.
        let (role, ring) = become_producer(mem, owner)?;
        let g = ring.memory().geometry();
        let (slots, consumers) = (g.slots(), g.consumers());
        if Table::new(table.table(), slots, consumers).is_none() {
            return Err(RingError::Corrupt(
                "the device table is smaller than the geometry needs",
            ));
        }
        if buffer_len == 0 {
            return Err(RingError::Device(Error::InvalidLength { len: 0 }));
        }
        let mut this = Self {
            dev,
            ring,
            table,
            owner: Owner(owner.get()),
            slots,
            consumers,
            buffer_len,
            stream: None,
            buffers: Vec::with_capacity(slots),
            write_events: Vec::with_capacity(slots),
            readers: Readers {
                events: EventCache::new(),
                rows: vec![0; consumers],
            },
            kind,
            token: new_token(),
            probed: None,
            _role: role,
        };
        // Partial failures are cleaned up by Drop.
        this.stream = Some(this.dev.create_stream(this.owner)?);
        let t = Table::new(this.table.table(), slots, consumers).ok_or(RingError::Corrupt(
            "the device table is smaller than the geometry needs",
        ))?;
        let me = ring_os::raw::owner::current().map_or(0, OwnerId::get);
        t.init_header(kind, buffer_len, me);
        for s in 0..slots {
            let b = this.dev.alloc(this.owner, buffer_len, kind)?;
            this.buffers.push(b);
            let e = this.dev.create_event(this.owner)?;
            this.write_events.push(e);
            let mh = match this.dev.export(b, kind)? {
                MemHandle::Ipc(mh) => mh,
                // Only the length goes into the table; the fd travels by `send_buffers`.
                MemHandle::Fd { len, .. } => IpcMemHandle {
                    raw: [0; IPC_HANDLE_SIZE],
                    len,
                },
            };
            let eh = this.dev.export_event(e)?;
            t.set_slot(s, &mh, &eh);
        }
        t.publish_ready(this.token);
        Ok(this)
    }

    /// Sends every slot buffer's file descriptor (VMM export) to one consumer over a Unix
    /// socket (`SCM_RIGHTS`, ring-os fd passing); the consumer takes them with
    /// [`DeviceConsumer::receive_buffers`](super::DeviceConsumer::receive_buffers). Each message
    /// carries `(producer token, slot, length)`.
    ///
    /// # Errors
    /// [`Error::InvalidOperation`] for an IPC-exported ring; export and socket errors.
    pub fn send_buffers(&self, socket: impl AsFd) -> Result<(), RingError> {
        if self.kind != ExportKind::Fd {
            return Err(RingError::Device(Error::InvalidOperation(
                "send_buffers: this ring's buffers are exported as IPC handles, not fds",
            )));
        }
        for (s, &b) in self.buffers.iter().enumerate() {
            let MemHandle::Fd { fd, len } = self.dev.export(b, ExportKind::Fd)? else {
                return Err(RingError::Corrupt("an fd export returned an IPC handle"));
            };
            let mut note = [0u8; 24];
            note[..8].copy_from_slice(&self.token.to_le_bytes());
            note[8..16].copy_from_slice(&(s as u64).to_le_bytes());
            note[16..].copy_from_slice(&len.to_le_bytes());
            ring_os::raw::fdpass::send_fd(&socket, fd.as_fd(), &note)
                .map_err(RingError::Segment)?;
        }
        Ok(())
    }

    /// The device.
    #[must_use]
    pub fn device(&self) -> &Arc<D> {
        &self.dev
    }

    /// The ring-core producer (for `consumers()`, `reclaim`, `published`).
    #[must_use]
    pub fn ring(&self) -> &Producer<M> {
        &self.ring
    }

    /// Bytes per slot buffer.
    #[must_use]
    pub const fn buffer_len(&self) -> u64 {
        self.buffer_len
    }

    /// Claims the next slot without blocking, lets `write` enqueue the message's device writes
    /// on the producer's stream into the slot's buffer, records the slot's write event and
    /// publishes `(buffer, len)`. Returns the sequence number.
    ///
    /// # Errors
    /// [`RingError::Claim`] (`Full`/`Pinned` are transient), [`RingError::Device`]
    /// (`InvalidLength` if `len` is 0 or exceeds the buffer), or what `write` returned — the slot
    /// is then given back unpublished.
    pub fn try_publish_with(
        &mut self,
        len: u64,
        write: impl FnOnce(&D, StreamId, Mem) -> Result<(), Error>,
    ) -> Result<u64, RingError> {
        let mut write = Some(write);
        // A read event that cannot be used belongs to a consumer that is alive (an error) or
        // dead (reclaimed here, then the claim is made again without it): once per row at most.
        for _ in 0..=self.consumers {
            match self.publish_once(len, &mut write) {
                Err(RingError::ReadEvent { consumer, source }) => {
                    if !self.reclaim_dead_consumer(consumer).unwrap_or(false) {
                        return Err(RingError::ReadEvent { consumer, source });
                    }
                }
                other => return other,
            }
        }
        Err(RingError::Corrupt(
            "consumer rows keep failing and being reclaimed",
        ))
    }

    /// One claim: the waits, then `write` (taken only once every wait was enqueued).
    fn publish_once(
        &mut self,
        len: u64,
        write: &mut Option<impl FnOnce(&D, StreamId, Mem) -> Result<(), Error>>,
    ) -> Result<u64, RingError> {
        if len == 0 || len > self.buffer_len {
            return Err(RingError::Device(Error::InvalidLength { len }));
        }
        let stream = self.stream.ok_or(RingError::NotReady)?;
        self.serve_departures()?;
        let mut slot = self.ring.try_claim()?;
        // The slot the ring chose (on a never-stall ring not `seq % slots`).
        let s = slot.slot();
        let t = Table::new(self.table.table(), self.slots, self.consumers)
            .ok_or(RingError::Corrupt("the device table shrank"))?;
        // Wait (on the device) for every registered consumer's last read of this slot. A read
        // event that cannot be used refuses the publish: writing without the wait could
        // overwrite a copy still queued on that consumer's stream.
        for c in 0..self.consumers {
            if let Err(e) = self
                .readers
                .wait(&*self.dev, &t, self.owner, stream, (c, s))
            {
                slot.abort();
                return Err(e);
            }
        }
        let Some(write) = write.take() else {
            slot.abort();
            return Err(RingError::Corrupt("the write closure was already used"));
        };
        let dev = &*self.dev;
        // The frame's timestamp is taken before its writes are enqueued, so a latency measured
        // from it covers the writes whether they are ordered by events or by a host sync.
        let begun = monotonic_ns();
        let done = write(dev, stream, Mem::Buffer(self.buffers[s]))
            .and_then(|()| dev.record(self.write_events[s], stream));
        if let Err(e) = done {
            slot.abort();
            return Err(e.into());
        }
        slot.set_meta([s as u64, len]);
        if slot.write(&begun.to_le_bytes()).is_err() {
            slot.abort();
            return Err(RingError::Corrupt(
                "the ring's slots cannot hold an 8-byte timestamp",
            ));
        }
        slot.publish().map_err(RingError::Claim)
    }

    /// [`try_publish_with`](Self::try_publish_with), retrying transient refusals (ring full,
    /// slot pinned) for at most `timeout`.
    ///
    /// # Errors
    /// As `try_publish_with`; a transient error when the timeout ran out.
    pub fn publish_with(
        &mut self,
        len: u64,
        timeout: Duration,
        mut write: impl FnMut(&D, StreamId, Mem) -> Result<(), Error>,
    ) -> Result<u64, RingError> {
        let start = Instant::now();
        let mut round = 0;
        loop {
            match self.try_publish_with(len, &mut write) {
                Err(e) if e.is_transient() && start.elapsed() < timeout => {
                    // Held back: by a consumer that died? (Its role lock says.)
                    if self.reclaim_holding_back(&e) {
                        continue;
                    }
                    backoff(&mut round);
                }
                other => return other,
            }
        }
    }

    /// Waits on the host until the producer's queued device work is done, at most `timeout`.
    ///
    /// # Errors
    /// [`Error::Timeout`] and device errors.
    pub fn sync(&self, timeout: Duration) -> Result<(), RingError> {
        let s = self.stream.ok_or(RingError::NotReady)?;
        Ok(self.dev.sync_stream(s, timeout)?)
    }

    /// Closes the ring: consumers drain what was published, then see `Closed`.
    pub fn close(&mut self) {
        self.ring.close();
    }
}

impl<D: Device, M: RoleFile, T: TableMemory> Drop for DeviceProducer<D, M, T> {
    /// The producer's half of the teardown protocol (`docs/CUDA.md`): close the ring; sync
    /// the stream, so it waits on no read event any more, and say so in the table; then free
    /// the buffers only once every importer closed its mappings (its row is empty) or died,
    /// at most `TEARDOWN_TIMEOUT` (10 s; past it the buffers are freed anyway and the fact is
    /// printed: the alternative is to leak them until the process exits).
    fn drop(&mut self) {
        self.ring.close();
        let dev = &*self.dev;
        let synced = self
            .stream
            .is_some_and(|s| dev.sync_stream(s, TEARDOWN_TIMEOUT).is_ok());
        let _ = self.readers.events.destroy_all(dev);
        if let Some(t) = Table::new(self.table.table(), self.slots, self.consumers) {
            if synced {
                t.mark_stopped(self.token);
            }
            let start = Instant::now();
            let mut round = 0;
            let mem = self.ring.memory();
            // An importer is a row still published by a consumer whose role lock is held (a
            // dead one's mappings went with its process).
            let importers = |t: &Table<'_>| {
                (0..self.consumers)
                    .filter(|&c| {
                        t.consumer_token(c) != 0
                            && ring_os::raw::lock::probe(mem.role_file(), Role::Consumer(c))
                                == Liveness::Alive
                    })
                    .count()
            };
            while importers(&t) > 0 {
                if start.elapsed() >= TEARDOWN_TIMEOUT {
                    eprintln!(
                        "ring-cuda: producer freeing its buffers with {} importers still \
                         registered after {TEARDOWN_TIMEOUT:?}",
                        importers(&t)
                    );
                    break;
                }
                backoff(&mut round);
            }
            t.withdraw();
        }
        for e in self.write_events.drain(..) {
            let _ = dev.destroy_event(e);
        }
        for b in self.buffers.drain(..) {
            let _ = dev.free(b);
        }
        if let Some(s) = self.stream.take() {
            let _ = dev.destroy_stream(s, TEARDOWN_TIMEOUT);
        }
    }
}

/// Bound on each wait of the teardown protocol (and on a departure's host sync).
pub(crate) const TEARDOWN_TIMEOUT: Duration = Duration::from_secs(10);
