//! The participants' side of an async wait: the same handshake as the blocking waits (the
//! waiter count and `parked` flag for consumers, `producer_waiting` for the producer, with the
//! same SeqCst fences, `docs/PROTOCOL.md` W1–W4), kept while the future is pending and given
//! back when it is polled again or dropped, and the liveness checks the blocking calls make
//! between wait slices.

use core::task::{Context, Poll, Waker};
use std::sync::Arc;
use std::time::Instant;

use core::sync::atomic::Ordering;
use ring_core::{AtomicU32, ClaimError, Memory as _, ReadError, WaitStrategy};

use super::reactor::{reactor, Token};
use crate::liveness::lock::{Liveness, Role};
use crate::raw::{Mapping, ProducerExt as _, ShmConsumer, ShmProducer, LIVENESS_PERIOD, TRUNCATED};
use crate::segment::sigbus::memory_truncated;
use crate::wait::futex::as_futex;
use crate::ShmReadError;

/// When the next liveness probe of a wait is due (set at its first `Pending`), and whether it
/// is due now. The wake-up deadline returned is the probe's, or sooner where this process's
/// wake-ups can be lost (`barrier::nap`: it then wakes and re-checks after a nap).
fn probe_due(at: &mut Option<Instant>, now: Instant) -> (Instant, bool) {
    let due = *at.get_or_insert(now + LIVENESS_PERIOD);
    let (next, probe) = if now >= due {
        let next = now + LIVENESS_PERIOD;
        *at = Some(next);
        (next, true)
    } else {
        (due, false)
    };
    let wake = crate::wait::barrier::nap().map_or(next, |nap| next.min(now + nap));
    (wake, probe)
}

/// Registers the word `Consumer::wait_ready` would sleep on with the reactor instead of
/// sleeping, and keeps the waiter count that `wait_ready` took (it gives one back when this
/// strategy returns `false`, so this adds one first: the count never drops to zero between
/// the handshake's fence and the pending future's next poll).
struct Register<'a> {
    waker: &'a Waker,
    mapping: &'a Arc<Mapping>,
    deadline: Instant,
    token: Option<Token>,
}

impl WaitStrategy for Register<'_> {
    fn wait(&mut self, word: &AtomicU32, expected: u32) -> bool {
        if self.token.is_some() {
            return false; // One registration per poll.
        }
        // Relaxed: as `wait_ready`'s own increment, ordered for the producer by the SeqCst
        // fence `wait_ready` ran after it (this one only keeps the count from falling).
        self.mapping
            .producer_line()
            .consumer_waiters
            .fetch_add(1, Ordering::Relaxed);
        let keep: Arc<dyn Send + Sync> = Arc::clone(self.mapping) as _;
        // SAFETY: `word` is the publish futex in the producer line of `self.mapping`, which
        // `keep` keeps mapped while the entry is registered.
        self.token = Some(unsafe {
            reactor().register(
                as_futex(word),
                expected,
                self.waker.clone(),
                self.deadline,
                Some(Arc::clone(self.mapping)),
                keep,
            )
        });
        false
    }
}

/// A subscriber's wait in progress: its reactor entry and the waiter count it holds.
#[derive(Debug, Default)]
pub(crate) struct SubWait {
    parked: Option<Token>,
    probe_at: Option<Instant>,
}

impl SubWait {
    /// `Ready(Ok)` once a read of `c` would find a message or an ending; `Pending` after
    /// registering `cx`'s waker (counted as a parked consumer, so a publish wakes it).
    pub(crate) fn poll_ready(
        &mut self,
        c: &mut ShmConsumer,
        cx: &Context<'_>,
    ) -> Poll<Result<(), ShmReadError>> {
        self.unpark(c);
        let (deadline, probe) = probe_due(&mut self.probe_at, Instant::now());
        if memory_truncated(c.memory(), probe) {
            return Poll::Ready(Err(ReadError::Corrupt(TRUNCATED).into()));
        }
        let mapping = Arc::clone(c.memory());
        let mut reg = Register {
            waker: cx.waker(),
            mapping: &mapping,
            deadline,
            token: None,
        };
        let outcome = c.wait_ready(&mut reg);
        match (outcome, reg.token) {
            (Ok(()), _) => Poll::Ready(Ok(())),
            (Err(ReadError::Timeout), Some(token)) => {
                // `wait_ready` cleared `parked` as it gave its count back; ours is still held,
                // so mark it again for a reclaimer (Relaxed: read only by the reclaimer of this
                // entry once our process is dead).
                c.memory()
                    .consumer_entry(c.index())
                    .parked
                    .store(1, Ordering::Relaxed);
                self.parked = Some(token);
                // A wait slice passed with nothing to read: is anyone still writing?
                if probe
                    && c.producer_owner() != 0
                    && crate::liveness::roles::liveness(c.memory(), Role::Producer)
                        == Liveness::Dead
                {
                    self.unpark(c);
                    return Poll::Ready(Err(ShmReadError::ProducerGone));
                }
                Poll::Pending
            }
            (Err(ReadError::Timeout), None) => {
                // Unreachable: `wait_ready` times out only through the strategy. Poll again.
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            (Err(e), token) => {
                if let Some(token) = token {
                    // Evicted while registering: `wait_ready` gave nothing back, the reclaimer
                    // gave back the count `parked` stood for; this one is ours.
                    reactor().cancel(token);
                    // Relaxed: as the increment.
                    mapping
                        .producer_line()
                        .consumer_waiters
                        .fetch_sub(1, Ordering::Relaxed);
                }
                Poll::Ready(Err(e.into()))
            }
        }
    }

    /// Whether a reactor entry and a waiter count are held (the last poll was `Pending`).
    pub(crate) fn is_parked(&self) -> bool {
        self.parked.is_some()
    }

    /// [`unpark`](Self::unpark) without the consumer, for a wait that outlives its borrow
    /// (`ReadyWait`): `entry` names the consumer-table entry the count was taken for, as it
    /// was when the count was taken.
    pub(crate) fn unpark_entry(&mut self, entry: &EntryRef) {
        let Some(token) = self.parked.take() else {
            return;
        };
        reactor().cancel(token);
        if entry.still_ours() {
            let e = entry.mapping.consumer_entry(entry.index);
            // Relaxed, `parked` before the count: as `unpark`.
            e.parked.store(0, Ordering::Relaxed);
            entry
                .mapping
                .producer_line()
                .consumer_waiters
                .fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Forgets the reactor entry and gives the waiter count back, as `wait_ready` does after
    /// its sleep (not when the entry was reclaimed meanwhile: the reclaimer gave it back).
    pub(crate) fn unpark(&mut self, c: &ShmConsumer) {
        let Some(token) = self.parked.take() else {
            return;
        };
        reactor().cancel(token);
        if c.is_registered() {
            // Relaxed, `parked` before the count: as `wait_ready` (over-count, never under).
            c.memory()
                .consumer_entry(c.index())
                .parked
                .store(0, Ordering::Relaxed);
            c.memory()
                .producer_line()
                .consumer_waiters
                .fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A consumer-table entry as it was when a wait took its count: what ring-core's
/// `Consumer::is_registered` compares (generation, owner, state), so that the count can be given
/// back without the consumer, and not to an entry that was reclaimed (and maybe reused) since.
#[derive(Debug)]
pub(crate) struct EntryRef {
    mapping: Arc<Mapping>,
    index: usize,
    generation: u64,
    owner: u64,
}

impl EntryRef {
    /// `c`'s entry now (call while `c` is registered).
    pub(crate) fn of(c: &ShmConsumer) -> Self {
        let e = c.memory().consumer_entry(c.index());
        Self {
            mapping: Arc::clone(c.memory()),
            index: c.index(),
            generation: c.generation(),
            // Relaxed: our own entry's owner, written before our registration completed (the
            // same load `Consumer::is_registered` makes).
            owner: e.owner.load(Ordering::Relaxed),
        }
    }

    /// Whether the entry still belongs to the consumer it was taken from (as
    /// `Consumer::is_registered`: a reclaim changes the generation first).
    fn still_ours(&self) -> bool {
        let e = self.mapping.consumer_entry(self.index);
        // Relaxed: as `Consumer::is_registered`'s loads of its own entry.
        e.generation.load(Ordering::Relaxed) == self.generation
            && e.owner.load(Ordering::Relaxed) == self.owner
            && e.state.load(Ordering::Relaxed) == ring_core::layout::CONSUMER_ACTIVE
    }
}

/// One attempt of a producer's operation.
pub(crate) enum Attempt<R> {
    /// It went through.
    Done(R),
    /// Held back by consumers (`Full`, `Pinned`): wait for them.
    Again,
    /// Failed for good.
    Fail(ClaimError),
}

impl<R> From<Result<R, ClaimError>> for Attempt<R> {
    fn from(r: Result<R, ClaimError>) -> Self {
        match r {
            Ok(r) => Self::Done(r),
            Err(ClaimError::Full { .. } | ClaimError::Pinned { .. }) => Self::Again,
            Err(e) => Self::Fail(e),
        }
    }
}

/// A producer's wait in progress: its reactor entry while it announces `producer_waiting`.
#[derive(Debug, Default)]
pub(crate) struct PubWait {
    parked: Option<Token>,
    probe_at: Option<Instant>,
}

/// Attempts per poll before the future yields to its executor (an attempt that keeps failing
/// although the slot looked claimable: a reader's transient pin bit).
const ATTEMPTS: usize = 4;

impl PubWait {
    /// Runs `attempt` until it is done or fails; while consumers hold the ring back, registers
    /// `cx`'s waker on the drain word (announcing `producer_waiting`, so a consumer's progress
    /// wakes it) and returns `Pending`. Every liveness period it reclaims dead consumers and
    /// checks the segment's length, as the blocking send does.
    pub(crate) fn poll<R>(
        &mut self,
        p: &mut ShmProducer,
        cx: &Context<'_>,
        mut attempt: impl FnMut(&mut ShmProducer) -> Attempt<R>,
    ) -> Poll<Result<R, ClaimError>> {
        self.unpark(p);
        if memory_truncated(p.memory(), false) {
            return Poll::Ready(Err(ClaimError::Corrupt(TRUNCATED)));
        }
        for _ in 0..ATTEMPTS {
            match attempt(p) {
                Attempt::Done(r) => return Poll::Ready(Ok(r)),
                Attempt::Fail(e) => return Poll::Ready(Err(e)),
                Attempt::Again => {}
            }
            let (deadline, probe) = probe_due(&mut self.probe_at, Instant::now());
            if probe {
                if memory_truncated(p.memory(), true) {
                    return Poll::Ready(Err(ClaimError::Corrupt(TRUNCATED)));
                }
                if !p.reclaim_dead().is_empty() {
                    continue;
                }
            }
            let line = p.memory().producer_line();
            // Acquire: pairs with the consumers' Release bump of `drain_futex` (C11).
            let seen = line.drain_futex.load(Ordering::Acquire);
            // Relaxed + the heavy fence: the Dekker handshake of `Producer::park` (W4) with the
            // consumers' light fence and `producer_waiting` load (C10): either they see 1 and bump
            // the word, or the re-check below sees their progress.
            line.producer_waiting.store(1, Ordering::Relaxed);
            // The heavy side of the pair (as `Producer::park`).
            p.memory().heavy_fence();
            if p.is_claimable() {
                // Relaxed: as `Producer::park`'s clear.
                line.producer_waiting.store(0, Ordering::Relaxed);
                continue;
            }
            let keep: Arc<dyn Send + Sync> = Arc::clone(p.memory()) as _;
            // SAFETY: the drain word is in the producer line of `p`'s mapping, which `keep`
            // keeps mapped while the entry is registered.
            let token = unsafe {
                reactor().register(
                    as_futex(&line.drain_futex),
                    seen,
                    cx.waker().clone(),
                    deadline,
                    // Woken at every deadline: the publisher reclaims dead subscribers itself.
                    None,
                    keep,
                )
            };
            self.parked = Some(token);
            return Poll::Pending;
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Forgets the reactor entry and stops announcing `producer_waiting`.
    pub(crate) fn unpark(&mut self, p: &ShmProducer) {
        if let Some(token) = self.parked.take() {
            reactor().cancel(token);
            // Relaxed: as `Producer::park`'s clear.
            p.memory()
                .producer_line()
                .producer_waiting
                .store(0, Ordering::Relaxed);
        }
    }
}
