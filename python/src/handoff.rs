//! Thread-safe endpoints: a [`Handoff`] holds an endpoint's state (a subscriber and its pin, a
//! publisher and its loan) and lends it to one blocking call at a time.
//!
//! A blocking call takes the state out ([`Handoff::lease`]) and waits with the GIL released
//! while holding no lock; other threads see the state as lent. A second blocking call waits
//! (GIL released, in slices, signals checked) until the lease comes back; `close()` from any
//! thread sets the closing flag, which the lease holder checks between slices, so it gives the
//! state back within one slice and `close()` finishes. The mutex guards only short sections
//! that neither call Python nor take the GIL, so a thread holding the GIL may lock it without
//! risk of deadlock. Giving the state back notifies the condvar only when a call waits on
//! it (counted under the mutex), so an uncontended call makes no futex system call.
//!
//! # References
//!
//! The shape is `std::sync::mpsc`'s and crossbeam's "take the token, park, hand it back";
//! the closing flag is the cancellation token of a cooperative wait.

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::ThreadId;
use std::time::Instant;

use pyo3::prelude::*;

use crate::errors::Fail;
use crate::wait::{sliced, GiveBack};

/// Where the state is.
enum Place<T> {
    /// Idle, in the handoff.
    Here(T),
    /// Taken by a blocking call of this thread.
    Lent(ThreadId),
    /// Closed for good.
    Closed,
}

/// An endpoint's state, lent to one blocking call at a time.
pub(crate) struct Handoff<T> {
    place: Mutex<Place<T>>,
    /// Notified whenever the state comes back or is closed, if anyone waits on it.
    back: Condvar,
    /// Calls waiting on `back`: changed and read only under `place`'s lock (so Relaxed: the
    /// mutex orders them), which a waiter holds from its check of the state until the condvar
    /// releases it. A notifier that reads 0 under the lock thus misses no waiter: a later one
    /// sees the new state before it sleeps.
    waiters: AtomicUsize,
    /// Set by `close()` while the state is lent: the lease holder stops waiting. Relaxed
    /// throughout: a hint polled between slices; the state itself moves under `place`'s lock.
    closing: AtomicBool,
    /// "consumer" or "producer", for messages.
    what: &'static str,
}

impl<T: Send> Handoff<T> {
    /// A handoff holding `state`.
    pub(crate) fn new(state: T, what: &'static str) -> Self {
        Self {
            place: Mutex::new(Place::Here(state)),
            back: Condvar::new(),
            waiters: AtomicUsize::new(0),
            closing: AtomicBool::new(false),
            what,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Place<T>> {
        // A panic never happens under this lock; should one, the state is still consistent.
        self.place.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The `Closed` error of this endpoint.
    pub(crate) fn closed_error(&self) -> Fail {
        Fail::new("Closed", format!("this {} is closed", self.what))
    }

    /// The error a waiting call raises when another thread closes the endpoint.
    pub(crate) fn closed_while_waiting(&self) -> Fail {
        Fail::new(
            "Closed",
            format!(
                "this {} was closed (by another thread) while this call waited",
                self.what
            ),
        )
    }

    /// Whether `close()` was called (it may still be waiting for a lease to come back).
    pub(crate) fn is_closed(&self) -> bool {
        self.closing.load(Ordering::Relaxed) || matches!(*self.lock(), Place::Closed)
    }

    /// Runs `f` on the state when it is idle here; `None` while it is lent or closed. `f`
    /// runs under the lock: it must not call Python.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        match &mut *self.lock() {
            Place::Here(t) => Some(f(t)),
            Place::Lent(_) | Place::Closed => None,
        }
    }

    /// Waits (GIL released, in slices) until the state is no longer lent (or, with
    /// `until_closing`, `close()` was called); `false` when the deadline passed first.
    fn wait_back(
        &self,
        py: Python<'_>,
        end: Option<Instant>,
        until_closing: bool,
    ) -> PyResult<bool> {
        let waiting = |p: &mut Place<T>| {
            matches!(p, Place::Lent(_)) && !(until_closing && self.closing.load(Ordering::Relaxed))
        };
        let back = sliced(py, end, &mut (), |(), slice| {
            let mut guard = self.lock();
            if !waiting(&mut guard) {
                return Ok(Some(()));
            }
            // Relaxed: under the lock (see `waiters`).
            self.waiters.fetch_add(1, Ordering::Relaxed);
            let (mut guard, _) = self
                .back
                .wait_timeout_while(guard, slice, |p| waiting(p))
                .unwrap_or_else(PoisonError::into_inner);
            // Relaxed: under the lock again.
            self.waiters.fetch_sub(1, Ordering::Relaxed);
            Ok((!waiting(&mut guard)).then_some(()))
        })?;
        Ok(back.is_some())
    }

    /// Takes the state for one blocking call, waiting up to `end` while another call has it
    /// (`None` when the deadline passed). `prepare` runs on it first, with the GIL held and
    /// under the lock, so it must not call Python (e.g. releasing the previous pin); its error
    /// leaves the state here.
    pub(crate) fn lease(
        &self,
        py: Python<'_>,
        end: Option<Instant>,
        mut prepare: impl FnMut(&mut T) -> Result<(), Fail>,
    ) -> PyResult<Option<Lease<'_, T>>> {
        loop {
            if let Some(taken) = self.try_take(&mut prepare) {
                return taken.map(Some).map_err(|f| f.into_py(py));
            }
            if self.closing.load(Ordering::Relaxed) {
                return Err(self.closed_while_waiting().into_py(py));
            }
            if !self.wait_back(py, end, true)? {
                return Ok(None);
            }
        }
    }

    /// One try of `lease`: `None` while the state is lent.
    fn try_take(
        &self,
        prepare: &mut impl FnMut(&mut T) -> Result<(), Fail>,
    ) -> Option<Result<Lease<'_, T>, Fail>> {
        let mut place = self.lock();
        match core::mem::replace(&mut *place, Place::Lent(std::thread::current().id())) {
            Place::Here(mut t) => {
                let ready = if self.closing.load(Ordering::Relaxed) {
                    Err(self.closed_error())
                } else {
                    prepare(&mut t)
                };
                Some(match ready {
                    Ok(()) => Ok(Lease {
                        owner: self,
                        state: Some(t),
                    }),
                    Err(f) => {
                        *place = Place::Here(t);
                        Err(f)
                    }
                })
            }
            Place::Closed => {
                *place = Place::Closed;
                Some(Err(self.closed_error()))
            }
            Place::Lent(by) => {
                *place = Place::Lent(by);
                None
            }
        }
    }

    /// Closes: waits (GIL released, in slices) for a lent state to come back — its holder
    /// sees the closing flag within one slice — then runs `check` on it (with the GIL, under
    /// the lock: no Python calls; an error leaves the endpoint open) and returns it for the
    /// caller to finish. `None`: closed before, or called from within this thread's own
    /// blocking call on the endpoint (a signal handler), which then raises `Closed` instead.
    pub(crate) fn close(
        &self,
        py: Python<'_>,
        check: impl Fn(&mut T) -> Result<(), Fail>,
    ) -> PyResult<Option<T>> {
        loop {
            {
                let mut place = self.lock();
                match core::mem::replace(&mut *place, Place::Closed) {
                    Place::Here(mut t) => {
                        if let Err(e) = check(&mut t) {
                            *place = Place::Here(t);
                            self.closing.store(false, Ordering::Relaxed);
                            drop(place);
                            return Err(e.into_py(py));
                        }
                        self.closing.store(true, Ordering::Relaxed);
                        self.notify(place);
                        return Ok(Some(t));
                    }
                    Place::Closed => return Ok(None),
                    Place::Lent(by) => {
                        *place = Place::Lent(by);
                        self.closing.store(true, Ordering::Relaxed);
                        if by == std::thread::current().id() {
                            // Called inside this thread's own blocking call (a signal
                            // handler): waiting would never end. That call raises `Closed`
                            // at its next slice; the state goes when the object does.
                            return Ok(None);
                        }
                    }
                }
            }
            self.wait_back(py, None, false)?;
        }
    }

    /// Puts a lent state back (from a dropped [`Lease`]).
    fn put_back(&self, state: T) {
        let mut place = self.lock();
        debug_assert!(matches!(*place, Place::Lent(_)));
        *place = Place::Here(state);
        self.notify(place);
    }

    /// Unlocks `place` and wakes the calls waiting on `back`, if any (no system call when
    /// none waits).
    fn notify(&self, place: MutexGuard<'_, Place<T>>) {
        // Relaxed: read under the lock (see `waiters`).
        let waiting = self.waiters.load(Ordering::Relaxed) > 0;
        drop(place);
        if waiting {
            self.back.notify_all();
        }
    }
}

/// The state lent to one blocking call; goes back to its [`Handoff`] when dropped.
pub(crate) struct Lease<'a, T: Send> {
    owner: &'a Handoff<T>,
    /// `None` only after `give_back`.
    state: Option<T>,
}

impl<T: Send> Lease<'_, T> {
    /// The state (`None` once given back, which happens only to a thread parked at exit).
    pub(crate) fn get(&mut self) -> Result<&mut T, Fail> {
        self.state.as_mut().ok_or_else(|| self.owner.closed_error())
    }

    /// Whether `close()` was called while this lease is out: stop waiting.
    pub(crate) fn closing(&self) -> bool {
        self.owner.closing.load(Ordering::Relaxed)
    }

    /// `Closed` if `close()` was called (for the slices of a wait).
    pub(crate) fn check_open(&self) -> Result<(), Fail> {
        if self.closing() {
            return Err(self.owner.closed_while_waiting());
        }
        Ok(())
    }
}

impl<T: Send> GiveBack for Lease<'_, T> {
    fn give_back(&mut self) {
        if let Some(t) = self.state.take() {
            self.owner.put_back(t);
        }
    }
}

impl<T: Send> Drop for Lease<'_, T> {
    fn drop(&mut self) {
        self.give_back();
    }
}
