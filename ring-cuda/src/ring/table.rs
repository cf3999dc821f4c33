//! The device table: the handles a device ring's peers exchange, in host shared memory next to
//! the ring.
//!
//! Every field is a `u64` word accessed atomically (handles are 8 words each), so peers never
//! race on plain bytes. The producer fills the header and the per-slot rows, then publishes the
//! header's `ready` word (Release); each consumer fills its row (one per ring consumer index),
//! then publishes the row's token (Release). Readers treat everything as untrusted: geometry is
//! checked against the ring's, indices and lengths are bounds-checked before use.
//!
//! ```text
//! word 0            magic "RCDEVTB1"
//! word 1            ready: the producer's token (0 until every slot row is written)
//! word 2            slots (low 32) | export kind (high 32: 1 = IPC, 2 = fd)
//! word 3            buffer length in bytes
//! word 4            consumer rows
//! word 5            stopped: the token of a producer whose stream no longer waits on any read
//!                   event (set at teardown after its final sync; consumers may then destroy)
//! word 6            the producer's ring-os owner id (for diagnostics: liveness is told by the
//!                   ring-os role locks on the segment's file, not by this word)
//! word 7            reserved
//! slot row s        8 words memory handle, 1 word length, 8 words write-event handle, 1 spare
//! consumer row c    token (0 = empty), leave (the token, when the consumer asks to leave),
//!                   ack (the token, once the producer stopped waiting on the row's events),
//!                   the consumer's ring-os owner id (diagnostics), then 8 words per slot:
//!                   read-event handles
//! ```
//!
//! # Teardown
//!
//! See `docs/CUDA.md` ("Teardown"): a consumer destroys its read events only after the
//! producer acknowledged its leave request (`ack`), stopped (`stopped`) or died; the producer
//! frees its buffers only after every row is empty (the importers closed their mappings) or
//! its consumer died. Death is what the ring-os role locks say (a free lock: the kernel
//! released it with the process), never a guess from an id in this table.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::handle::{ExportKind, IpcEventHandle, IpcMemHandle, IPC_HANDLE_SIZE};

/// Magic of a device table.
pub const TABLE_MAGIC: u64 = u64::from_le_bytes(*b"RCDEVTB1");
const HEADER_WORDS: usize = 8;
const HANDLE_WORDS: usize = IPC_HANDLE_SIZE / 8;
const SLOT_ROW_WORDS: usize = 2 * HANDLE_WORDS + 2;
/// Words of a consumer row before its handles: token, leave, ack, owner.
const ROW_META: usize = 4;

/// Words of memory a table for `slots` slots and `consumers` consumer rows needs.
#[must_use]
pub const fn table_words(slots: usize, consumers: usize) -> usize {
    HEADER_WORDS + slots * SLOT_ROW_WORDS + consumers * (ROW_META + slots * HANDLE_WORDS)
}

/// Where a device table's words live.
pub trait TableMemory: Send + Sync {
    /// The table's words (at least [`table_words`] of the ring's geometry).
    fn table(&self) -> &[AtomicU64];

    /// Whether the ring next to this table wakes futex waiters on publish (a ring-os mapping
    /// does; in-process heap memory does not), so a consumer may park on the ring's futex
    /// word instead of polling.
    fn wakes_waiters(&self) -> bool {
        false
    }
}

impl<T: TableMemory + ?Sized> TableMemory for std::sync::Arc<T> {
    fn table(&self) -> &[AtomicU64] {
        (**self).table()
    }
    fn wakes_waiters(&self) -> bool {
        (**self).wakes_waiters()
    }
}

impl<T: TableMemory + ?Sized> TableMemory for &T {
    fn table(&self) -> &[AtomicU64] {
        (**self).table()
    }
    fn wakes_waiters(&self) -> bool {
        (**self).wakes_waiters()
    }
}

/// The table's header, as read (once) by a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TableHeader {
    pub token: u64,
    pub kind: ExportKind,
    pub buffer_len: u64,
}

/// Typed, bounds-checked access to a table of a known geometry.
pub(crate) struct Table<'a> {
    words: &'a [AtomicU64],
    slots: usize,
    consumers: usize,
}

/// Where slot `s`'s read-event handle starts in a consumer row.
const fn handle_at(s: usize) -> usize {
    ROW_META + s * HANDLE_WORDS
}

fn store_handle(words: &[AtomicU64], raw: &[u8; IPC_HANDLE_SIZE]) {
    for (w, chunk) in words.iter().zip(raw.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        // Relaxed: published by the Release store of the ready word or row token.
        w.store(u64::from_le_bytes(b), Ordering::Relaxed);
    }
}

fn load_handle(words: &[AtomicU64]) -> [u8; IPC_HANDLE_SIZE] {
    let mut raw = [0u8; IPC_HANDLE_SIZE];
    for (w, chunk) in words.iter().zip(raw.chunks_exact_mut(8)) {
        // Relaxed: ordered by the Acquire load of the ready word or row token before this.
        chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
    raw
}

impl<'a> Table<'a> {
    /// A view of `words` for this geometry; `None` if the memory is too short.
    pub(crate) fn new(words: &'a [AtomicU64], slots: usize, consumers: usize) -> Option<Self> {
        (words.len() >= table_words(slots, consumers)).then_some(Self {
            words,
            slots,
            consumers,
        })
    }

    /// Slots of this geometry.
    pub(crate) const fn slots(&self) -> usize {
        self.slots
    }

    fn slot_row(&self, s: usize) -> &'a [AtomicU64] {
        let at = HEADER_WORDS + s * SLOT_ROW_WORDS;
        &self.words[at..at + SLOT_ROW_WORDS]
    }

    fn consumer_row(&self, c: usize) -> &'a [AtomicU64] {
        let row = ROW_META + self.slots * HANDLE_WORDS;
        let at = HEADER_WORDS + self.slots * SLOT_ROW_WORDS + c * row;
        &self.words[at..at + row]
    }

    /// Producer: writes the geometry words and its owner id (not yet ready).
    pub(crate) fn init_header(&self, kind: ExportKind, buffer_len: u64, owner: u64) {
        let k = match kind {
            ExportKind::Ipc => 1u64,
            ExportKind::Fd => 2,
        };
        // Relaxed (all seven): published by `publish_ready`.
        self.words[1].store(0, Ordering::Relaxed);
        self.words[5].store(0, Ordering::Relaxed);
        self.words[6].store(owner, Ordering::Relaxed);
        self.words[2].store(self.slots as u64 | (k << 32), Ordering::Relaxed);
        self.words[3].store(buffer_len, Ordering::Relaxed);
        self.words[4].store(self.consumers as u64, Ordering::Relaxed);
        self.words[0].store(TABLE_MAGIC, Ordering::Relaxed);
    }

    /// Producer: writes slot `s`'s handles.
    pub(crate) fn set_slot(&self, s: usize, mem: &IpcMemHandle, write_event: &IpcEventHandle) {
        let row = self.slot_row(s);
        store_handle(&row[..HANDLE_WORDS], &mem.raw);
        // Relaxed: published by `publish_ready`.
        row[HANDLE_WORDS].store(mem.len, Ordering::Relaxed);
        store_handle(
            &row[HANDLE_WORDS + 1..2 * HANDLE_WORDS + 1],
            &write_event.raw,
        );
    }

    /// Producer: makes everything written so far visible under `token`.
    pub(crate) fn publish_ready(&self, token: u64) {
        // Release: pairs with the Acquire load in `header`, so a peer that sees the token sees
        // the header and every slot row written before it.
        self.words[1].store(token, Ordering::Release);
    }

    /// Producer: withdraws the table (on drop), so late peers do not open stale handles.
    pub(crate) fn withdraw(&self) {
        // Relaxed: withdrawing publishes nothing; peers only compare the token.
        self.words[1].store(0, Ordering::Relaxed);
    }

    /// Producer: says that its stream no longer waits on any consumer's read event.
    pub(crate) fn mark_stopped(&self, token: u64) {
        // Release: pairs with the Acquire in `producer_stopped`: the producer's final host sync
        // (its stream passed every wait) happens before a consumer destroys its events.
        self.words[5].store(token, Ordering::Release);
    }

    /// Consumer: whether the producer of `token` stopped waiting on read events.
    pub(crate) fn producer_stopped(&self, token: u64) -> bool {
        // Acquire: pairs with `mark_stopped`.
        self.words[5].load(Ordering::Acquire) == token
    }

    /// Any peer: the header, if the table is ready and well-formed for this geometry.
    pub(crate) fn header(&self) -> Option<TableHeader> {
        // Acquire: pairs with `publish_ready`.
        let token = self.words[1].load(Ordering::Acquire);
        // Relaxed (all four): ordered by the Acquire above.
        let magic = self.words[0].load(Ordering::Relaxed);
        let w2 = self.words[2].load(Ordering::Relaxed);
        let buffer_len = self.words[3].load(Ordering::Relaxed);
        let consumers = self.words[4].load(Ordering::Relaxed);
        let kind = match w2 >> 32 {
            1 => ExportKind::Ipc,
            2 => ExportKind::Fd,
            _ => return None,
        };
        let ok = token != 0
            && magic == TABLE_MAGIC
            && (w2 & 0xFFFF_FFFF) == self.slots as u64
            && consumers == self.consumers as u64
            && buffer_len > 0;
        ok.then_some(TableHeader {
            token,
            kind,
            buffer_len,
        })
    }

    /// Any peer: slot `s`'s handles (`s < slots`, checked by the caller).
    pub(crate) fn slot(&self, s: usize) -> (IpcMemHandle, IpcEventHandle) {
        let row = self.slot_row(s);
        let raw = load_handle(&row[..HANDLE_WORDS]);
        // Relaxed: ordered by the Acquire in `header`.
        let len = row[HANDLE_WORDS].load(Ordering::Relaxed);
        let ev = load_handle(&row[HANDLE_WORDS + 1..2 * HANDLE_WORDS + 1]);
        (IpcMemHandle { raw, len }, IpcEventHandle { raw: ev })
    }

    /// Consumer: writes its owner id and read-event handles into row `c` and publishes them
    /// under `token`.
    pub(crate) fn publish_consumer(
        &self,
        c: usize,
        token: u64,
        owner: u64,
        events: &[IpcEventHandle],
    ) {
        let row = self.consumer_row(c);
        // Relaxed (all four): the row is ours (ring consumer index `c` is registered to us);
        // the Release store of the token below publishes them.
        row[0].store(0, Ordering::Relaxed);
        row[1].store(0, Ordering::Relaxed);
        row[2].store(0, Ordering::Relaxed);
        row[3].store(owner, Ordering::Relaxed);
        // Release fence: a producer that reads any handle word stored below, then fences with
        // Acquire, sees the 0 above (or later) in its token re-check (a seqlock write window).
        core::sync::atomic::fence(Ordering::Release);
        for (s, e) in events.iter().enumerate().take(self.slots) {
            store_handle(&row[handle_at(s)..handle_at(s + 1)], &e.raw);
        }
        // Release: pairs with the producer's Acquire load in `consumer_token`.
        row[0].store(token, Ordering::Release);
    }

    /// Consumer: asks the producer to stop waiting on row `c`'s read events (its stream has
    /// finished every copy: it synced before asking).
    pub(crate) fn request_leave(&self, c: usize, token: u64) {
        // Release: pairs with the producer's Acquire in `leave_request`: the consumer's host
        // sync of its stream happens before the producer stops waiting on its events.
        self.consumer_row(c)[1].store(token, Ordering::Release);
    }

    /// Producer: the token row `c` asked to leave with (0 if none).
    pub(crate) fn leave_request(&self, c: usize) -> u64 {
        // Acquire: pairs with `request_leave`.
        self.consumer_row(c)[1].load(Ordering::Acquire)
    }

    /// Producer: acknowledges row `c`'s leave: its stream no longer waits on the row's events.
    pub(crate) fn ack_leave(&self, c: usize, token: u64) {
        // Release: pairs with the consumer's Acquire in `leave_acked`: the producer's host sync
        // (its stream passed its waits on the events) happens before the consumer destroys them.
        self.consumer_row(c)[2].store(token, Ordering::Release);
    }

    /// Consumer: whether the producer acknowledged row `c`'s leave under `token`.
    pub(crate) fn leave_acked(&self, c: usize, token: u64) -> bool {
        // Acquire: pairs with `ack_leave`.
        self.consumer_row(c)[2].load(Ordering::Acquire) == token
    }

    /// Consumer: empties row `c` if it still holds `token`.
    pub(crate) fn withdraw_consumer(&self, c: usize, token: u64) {
        // Success Release: pairs with the producer's Acquire in `consumer_token`: the closes of
        // this consumer's mappings happen before the producer frees the buffers. Failure
        // Relaxed: the row is someone else's; nothing is read from it.
        let _ = self.consumer_row(c)[0].compare_exchange(
            token,
            0,
            Ordering::Release,
            Ordering::Relaxed,
        );
    }

    /// Producer: row `c`'s token (0 = empty).
    pub(crate) fn consumer_token(&self, c: usize) -> u64 {
        // Acquire: pairs with `publish_consumer`'s Release, so the handles read after are whole.
        self.consumer_row(c)[0].load(Ordering::Acquire)
    }

    /// Producer: row `c`'s read-event handle for slot `s`, if the row still holds `token`
    /// after the read (a seqlock read: a consumer re-registering meanwhile yields `None`).
    pub(crate) fn consumer_event(&self, c: usize, s: usize, token: u64) -> Option<IpcEventHandle> {
        let row = self.consumer_row(c);
        if self.consumer_token(c) != token {
            return None;
        }
        let raw = load_handle(&row[handle_at(s)..handle_at(s + 1)]);
        // Acquire fence: pairs with the Release fence in `publish_consumer`, so if any word
        // above came from a newer registration, the re-check below sees its token change.
        core::sync::atomic::fence(Ordering::Acquire);
        // Relaxed: ordered by the fence.
        (row[0].load(Ordering::Relaxed) == token).then_some(IpcEventHandle { raw })
    }
}
