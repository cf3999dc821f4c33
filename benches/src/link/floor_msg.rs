//! The message floor: a 64-byte message ping-pong between two processes through rings of
//! 128-byte message lines laid out as the slot ring's, with no protocol at all.
//!
//! Each direction has `SLOTS` (64) message lines. A message's 64 bytes start 32 bytes into its
//! line, so on a CPU with 64-byte cache lines they lie across both halves, as a small message
//! in the slot ring does; the sender stores them, then the line's first word (the stamp) with
//! Release. The receiver spins on the stamp, asking for the line's far half on every empty
//! poll (as the ring's reader does), then copies the 64 bytes out and checks them. So this is
//! what the ring's layout costs on its own (two cache lines per message, a new line each
//! message): the ring's round trip over this one is what its protocol costs, this one over
//! [`floor`](super::floor) what the layout does.

use super::{AtPublish, Link, Pending, Rx, Tx};
use crate::case::Transport;
use crate::ctl::Setup;
use crate::wait::spin_until;
use crate::BenchError;
use memmap2::MmapMut;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Message lines per direction: as many as the slot ring's round-trip rings have slots by
/// default ([`ROUND_TRIP_DEPTH`](crate::case::ROUND_TRIP_DEPTH)), so a line is reused as rarely.
const SLOTS: usize = crate::case::ROUND_TRIP_DEPTH as usize;
/// Words per message line (128 bytes).
const LINE_WORDS: usize = 16;
/// The message's first word in its line (byte 32, after the stamp and three header words).
const FIRST: usize = 4;
/// The message's words (64 bytes).
const WORDS: usize = 8;
/// Bytes of one direction's lines.
const DIRECTION: usize = SLOTS * LINE_WORDS * 8;

struct Lines {
    map: MmapMut,
}

impl Lines {
    /// Word `w` of direction `dir`'s lines.
    fn word(&self, dir: usize, w: usize) -> &AtomicU64 {
        debug_assert!(dir < 2 && w < SLOTS * LINE_WORDS);
        // SAFETY: the mapping is at least `2 * DIRECTION` bytes (checked at setup) and
        // page-aligned, so the word is in bounds and 8-byte aligned; both processes only ever
        // access these bytes through atomics, and the reference cannot outlive `self.map`.
        unsafe {
            &*self
                .map
                .as_ptr()
                .add(dir * DIRECTION + w * 8)
                .cast::<AtomicU64>()
        }
    }
}

/// The first word of message `seq`'s line.
fn line_of(seq: u64) -> usize {
    (seq % SLOTS as u64) as usize * LINE_WORDS
}

struct MsgTx {
    lines: Rc<Lines>,
    mine: usize,
    seq: u64,
}

impl Tx for MsgTx {
    fn send(&mut self, _len: usize, at_publish: AtPublish<'_>) -> Result<(), BenchError> {
        at_publish()?;
        self.seq += 1;
        let line = line_of(self.seq);
        for i in 0..WORDS {
            // Relaxed: published by the stamp's Release store below.
            self.lines
                .word(self.mine, line + FIRST + i)
                .store(self.seq + i as u64, Ordering::Relaxed);
        }
        // Release: pairs with the receiver's Acquire stamp load; the message words are before it.
        self.lines
            .word(self.mine, line)
            .store(self.seq, Ordering::Release);
        Ok(())
    }
}

struct MsgRx {
    lines: Rc<Lines>,
    theirs: usize,
    seq: u64,
}

impl Rx for MsgRx {
    fn recv(&mut self, _peer: usize, _len: usize, deadline: Instant) -> Result<(), BenchError> {
        let want = self.seq + 1;
        let line = line_of(want);
        let stamp = self.lines.word(self.theirs, line);
        let far = self.lines.word(self.theirs, line + LINE_WORDS - 1);
        // Acquire: pairs with the sender's Release stamp store.
        spin_until(deadline, "the message-floor ping-pong", || {
            if stamp.load(Ordering::Acquire) == want {
                return Ok(Some(()));
            }
            prefetch(far);
            Ok(None)
        })?;
        let mut got = [0u64; WORDS];
        for (i, w) in got.iter_mut().enumerate() {
            // Relaxed: ordered after the Acquire stamp load above.
            *w = self
                .lines
                .word(self.theirs, line + FIRST + i)
                .load(Ordering::Relaxed);
        }
        let got = std::hint::black_box(got);
        if got[0] != want || got[WORDS - 1] != want + WORDS as u64 - 1 {
            return Err(BenchError::Corrupt {
                what: format!("message floor: message {want} read as {got:?}"),
            });
        }
        self.seq = want;
        Ok(())
    }
}

/// A hint to bring `w`'s cache line to this core (the slot ring's empty-poll hint).
fn prefetch(w: &AtomicU64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and changes nothing the program sees.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(core::ptr::from_ref(w).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = w;
}

fn link(map: MmapMut, mine: usize) -> Result<Link, BenchError> {
    if map.len() < 2 * DIRECTION {
        return Err(BenchError::Corrupt {
            what: "message-floor mapping too small".to_owned(),
        });
    }
    let lines = Rc::new(Lines { map });
    Ok(Link {
        tx: Box::new(MsgTx {
            lines: Rc::clone(&lines),
            mine,
            seq: 0,
        }),
        rx: Box::new(MsgRx {
            lines,
            theirs: 1 - mine,
            seq: 0,
        }),
    })
}

/// Parent side, first half (see [`super::parent_begin`]).
pub fn parent_begin(setups: &mut [Setup]) -> Result<Pending, BenchError> {
    let map =
        super::floor::parent_mapping(setups, Transport::FloorMsg, "floor-msg", 2 * DIRECTION)?;
    Ok(Box::new(move |_| link(map, 0)))
}

/// Child side (see [`super::child_setup`]).
pub fn child_setup(s: &Setup) -> Result<Link, BenchError> {
    link(crate::shm::open(&s.dir.join("floor-msg"))?, 1)
}
