//! The opaque handles and who owns what: a publisher lends its loan, a subscriber its pin.

use core::ptr;
use std::sync::Arc;
#[cfg(unix)]
use std::sync::Mutex;

use ring_core::{Pinned, WriteSlot};
use ring_os::prelude::*;
#[cfg(unix)]
use ring_os::raw::rendezvous::Server;
use ring_os::raw::Mapping;

use crate::status::{fail, Res};
use crate::{SHMRING_E_BUSY, SHMRING_E_INVALID_ARGUMENT};

/// A ring mapping (named, or a memfd). Owned by the caller; release with `shmring_ring_free`.
///
/// Thread safety: functions taking a `const shmring_ring *` may be called from several threads
/// at once; `shmring_ring_free` and `shmring_ring_keep_name` need exclusive use.
pub struct shmring_ring {
    pub(crate) ring: Ring,
    /// A rendezvous server that hands the memfd to subscribers (`shmring_ring_serve`).
    #[cfg(unix)]
    pub(crate) server: Mutex<Option<Server>>,
}

/// The ring's one publisher. Owned by the caller; release with `shmring_publisher_free` (which
/// aborts the stream unless `shmring_publisher_close` was called). It keeps the mapping alive,
/// so it may outlive its `shmring_ring`.
///
/// Thread safety: one thread at a time (it may move between threads).
pub struct shmring_publisher {
    pub(crate) lender: Lender<Publisher, shmring_loan>,
}

/// A registered subscriber. Owned by the caller; release with `shmring_subscriber_free` (which
/// also releases a pin it still holds). It keeps the mapping alive, so it may outlive its
/// `shmring_ring`.
///
/// Thread safety: one thread at a time (it may move between threads).
pub struct shmring_subscriber {
    pub(crate) lender: Lender<Subscriber, shmring_pinned>,
    /// The publisher's abort code, once a read returned `SHMRING_E_ABORTED`
    /// (`shmring_subscriber_abort_code`).
    pub(crate) abort_code: Option<u16>,
    /// The messages held by `shmring_subscriber_hold`: hold id `i + 1` is entry `i`.
    pub(crate) holds: Vec<Option<Hold>>,
}

/// A value at a stable heap address, lent to at most one child handle at a time: a publisher
/// and its loan, a subscriber and its pin (both borrow their parent mutably in ring-core).
/// While the child lives, the parent refuses every call (`SHMRING_E_BUSY`); dropping the lender
/// drops the child first.
pub(crate) struct Lender<T, C> {
    /// From `Box::into_raw`; freed in `drop`.
    value: *mut T,
    /// The outstanding child (from `Box::into_raw`), or null.
    child: *mut C,
    /// What to say when a call comes while the child lives.
    busy: &'static str,
}

impl<T, C> Lender<T, C> {
    pub(crate) fn new(value: T, busy: &'static str) -> Self {
        Self {
            value: Box::into_raw(Box::new(value)),
            child: ptr::null_mut(),
            busy,
        }
    }

    /// The value, unless it is lent.
    pub(crate) fn get(&mut self) -> Res<&mut T> {
        if !self.child.is_null() {
            return Err(fail(SHMRING_E_BUSY, self.busy));
        }
        // SAFETY: `value` came from `Box::into_raw` and lives as long as `self`; with no child
        // out, nothing else refers to it, and `&mut self` makes this borrow unique.
        Ok(unsafe { &mut *self.value })
    }

    /// Records `child` as the outstanding child.
    pub(crate) fn lend(&mut self, child: C) -> *mut C {
        self.child = Box::into_raw(Box::new(child));
        self.child
    }

    /// Takes the outstanding child back, if `child` is it.
    pub(crate) fn take(&mut self, child: *mut C, what: &str) -> Res<Box<C>> {
        if self.child != child {
            return Err(fail(
                SHMRING_E_INVALID_ARGUMENT,
                format!("this {what} is not the outstanding one of its parent"),
            ));
        }
        self.child = ptr::null_mut();
        // SAFETY: made by `Box::into_raw` in `lend`, and detached from `self` just now.
        Ok(unsafe { Box::from_raw(child) })
    }
}

impl<T, C> Drop for Lender<T, C> {
    fn drop(&mut self) {
        if !self.child.is_null() {
            // SAFETY: the outstanding child (from `lend`), dropped before the value it borrows.
            drop(unsafe { Box::from_raw(self.child) });
        }
        // SAFETY: from `Box::into_raw` in `new`; no child refers to it any more.
        drop(unsafe { Box::from_raw(self.value) });
    }
}

/// A pinned message: a zero-copy view the publisher cannot overwrite until it is released
/// with `shmring_pinned_release`. Owned by the caller; it belongs to its subscriber, which
/// accepts no other call until it is released (`SHMRING_E_BUSY`); freeing the subscriber
/// releases it too (the pointer is then invalid).
///
/// Thread safety: as its subscriber.
pub struct shmring_pinned {
    pub(crate) pin: Pinned<'static, Arc<Mapping>>,
    pub(crate) owner: *mut shmring_subscriber,
}

/// A slot claimed for writing in place. Owned by the caller until `shmring_loan_send` or
/// `shmring_loan_abort`, which both consume it; it belongs to its publisher, which accepts no
/// other call until then (`SHMRING_E_BUSY`); freeing the publisher aborts it too (the pointer
/// is then invalid).
///
/// Thread safety: as its publisher.
pub struct shmring_loan {
    pub(crate) slot: WriteSlot<'static, Arc<Mapping>>,
    pub(crate) owner: *mut shmring_publisher,
    /// The writable bytes of a pin-only ring's slot (null in other rings).
    pub(crate) data: *mut u8,
    pub(crate) capacity: usize,
}

// The ring handle is shared between threads (see its docs); the others move between them.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<Ring>();
    #[cfg(unix)]
    shared::<Mutex<Option<Server>>>();
    const fn sendable<T: Send>() {}
    sendable::<Publisher>();
    sendable::<Subscriber>();
};

/// Makes the handle of `ring` and stores it in the out-handle `out`.
pub(crate) fn new_ring(ring: Ring, out: *mut *mut shmring_ring) {
    let handle = Box::into_raw(Box::new(shmring_ring {
        ring,
        #[cfg(unix)]
        server: Mutex::new(None),
    }));
    // SAFETY: `out` was checked by `out_handle` at entry.
    unsafe { out.write(handle) };
}
