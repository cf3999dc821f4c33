//! The hardware floor: a cache-line ping-pong between two processes on a shared mapping.
//!
//! The mapping holds two 128-byte-aligned lines; the parent writes the sequence number into line 0
//! and the child answers in line 1. One round trip moves each line across the cores once: nothing
//! that shares memory between processes can answer faster.

use super::{AtPublish, Link, Pending, Rx, Tx};
use crate::case::Transport;
use crate::ctl::Setup;
use crate::wait::spin_until;
use crate::BenchError;
use memmap2::MmapMut;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Distance between the two lines: 128 bytes keeps them off each other's (adjacent-line
/// prefetched) cache-line pair on x86_64 and aarch64 (crossbeam `CachePadded`'s table).
const LINE: usize = 128;

struct Lines {
    map: MmapMut,
}

impl Lines {
    fn line(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < 2);
        // SAFETY: the mapping is at least 2 * LINE bytes (checked at setup) and page-aligned, so
        // `i * LINE` is in bounds and 8-byte aligned; the bytes are only ever accessed through
        // this atomic (by both processes), and the reference cannot outlive `self.map`.
        unsafe { &*self.map.as_ptr().add(i * LINE).cast::<AtomicU64>() }
    }
}

struct FloorTx {
    lines: Rc<Lines>,
    mine: usize,
    seq: u64,
}

impl Tx for FloorTx {
    fn send(&mut self, _len: usize, at_publish: AtPublish<'_>) -> Result<(), BenchError> {
        at_publish()?;
        self.seq += 1;
        // Release: pairs with the peer's Acquire load in `FloorRx::recv`, the same ordering a
        // real message hand-off needs.
        self.lines
            .line(self.mine)
            .store(self.seq, Ordering::Release);
        Ok(())
    }
}

struct FloorRx {
    lines: Rc<Lines>,
    theirs: usize,
    seq: u64,
}

impl Rx for FloorRx {
    fn recv(&mut self, _peer: usize, _len: usize, deadline: Instant) -> Result<(), BenchError> {
        let want = self.seq + 1;
        let line = self.lines.line(self.theirs);
        // Acquire: pairs with the peer's Release store in `FloorTx::send`.
        spin_until(deadline, "the floor ping-pong", || {
            Ok((line.load(Ordering::Acquire) == want).then_some(()))
        })?;
        self.seq = want;
        Ok(())
    }
}

fn link(map: MmapMut, mine: usize) -> Result<Link, BenchError> {
    if map.len() < 2 * LINE {
        return Err(BenchError::Corrupt {
            what: "floor mapping too small".to_owned(),
        });
    }
    let lines = Rc::new(Lines { map });
    Ok(Link {
        tx: Box::new(FloorTx {
            lines: Rc::clone(&lines),
            mine,
            seq: 0,
        }),
        rx: Box::new(FloorRx {
            lines,
            theirs: 1 - mine,
            seq: 0,
        }),
    })
}

/// Parent side, first half (see [`super::parent_begin`]).
pub fn parent_begin(setups: &mut [Setup]) -> Result<Pending, BenchError> {
    let map = parent_mapping(setups, Transport::Floor, "floor", 4096)?;
    Ok(Box::new(move |_| link(map, 0)))
}

/// The parent's mapping for a floor (`transport`, this one or [`super::floor_msg`]): checks
/// that the run has exactly one child and creates the file `name` of `len` bytes in its
/// directory, which the child opens.
pub(super) fn parent_mapping(
    setups: &mut [Setup],
    transport: Transport,
    name: &str,
    len: usize,
) -> Result<MmapMut, BenchError> {
    let [s] = setups else {
        return Err(BenchError::Usage {
            what: format!("{transport} has exactly one child"),
        });
    };
    debug_assert_eq!(s.transport, transport);
    crate::shm::create(&s.dir.join(name), len)
}

/// Child side (see [`super::child_setup`]).
pub fn child_setup(s: &Setup) -> Result<Link, BenchError> {
    link(crate::shm::open(&s.dir.join("floor"))?, 1)
}
