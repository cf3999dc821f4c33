//! The front door: [`Ring`] and its builder, [`Publisher`], [`Subscriber`], and the errors
//! named after crossbeam-channel's. `use ring_os::prelude::*` brings all of it.
//!
//! ```
//! use ring_os::prelude::*;
//!
//! # fn main() -> Result<(), Error> {
//! # let name = format!("doc-front-{}", std::process::id());
//! let ring = Ring::builder(&name).slots(8).slot_size(256).create()?;
//! let mut publisher = ring.publisher()?;
//! let mut subscriber = ring.subscriber(DeliveryClass::Gating)?;
//! publisher.send(b"hello")?;
//! let mut buf = [0u8; 256];
//! let got = subscriber.recv(&mut buf)?;
//! assert_eq!(&buf[..got.len], b"hello");
//! publisher.close(); // the stream is complete: the subscriber drains, then is disconnected
//! assert!(matches!(subscriber.try_recv(&mut buf), Err(TryRecvError::Disconnected)));
//! // (A publisher dropped without `close` ends the stream as *aborted*: subscribers then get
//! // `Failed(ReadError::Aborted { .. })` after draining, never a clean disconnection.)
//! # Ok(())
//! # }
//! // Dropping `ring`, the creator's handle, removes the name.
//! ```

mod builder;
mod errors;
mod publisher;
mod subscriber;

pub use builder::{check_never_stall, RingBuilder};
pub use errors::{
    RecvError, RecvTimeoutError, SendError, SendTimeoutError, TryRecvError, TrySendError,
};
pub use publisher::{Loan, Publisher};
pub use subscriber::{Iter, Message, Pinned, Subscriber};

#[cfg(unix)]
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use ring_core::{DeliveryClass, Memory as _};

use crate::Error;

use crate::raw::Mapping;

use crate::raw::ShmRing;

/// A ring in OS shared memory: named (`/dev/shm`), a sealed memfd, or a file.
///
/// The handle that *created* a named or file ring removes its name when dropped — also when a
/// panic unwinds through it — unless [`keep_name`](Self::keep_name) was called, so a crashed
/// run does not leave a name behind that makes the next run fail with `AlreadyExists`. (A
/// process killed outright cannot run destructors: `ringctl clean` removes what it left.)
#[derive(Debug)]
pub struct Ring {
    mapping: Arc<Mapping>,
    remove_on_drop: bool,
}

impl Ring {
    /// A builder for the named ring `name` (`/dev/shm/shmring.<name>`).
    pub fn builder(name: &str) -> RingBuilder {
        RingBuilder::named(name)
    }

    /// A builder for a ring in a new sealed memfd (no name; share it with
    /// [`fd`](Self::fd) over a Unix socket, see [`crate::raw::fdpass`]).
    pub fn memfd() -> RingBuilder {
        RingBuilder::memfd()
    }

    /// A builder for a ring in the file at `path`.
    pub fn file(path: &Path) -> RingBuilder {
        RingBuilder::file(path)
    }

    /// Opens a memfd ring received from a peer (checks its seals, its size and its header).
    ///
    /// # Errors
    ///
    /// [`Error::MissingSeals`], [`Error::SizeMismatch`], [`Error::Attach`].
    #[cfg(unix)]
    pub fn from_fd(fd: OwnedFd) -> Result<Self, Error> {
        Ok(Self::wrap(ShmRing::from_fd(fd)?, false))
    }

    pub(crate) fn wrap(mapping: Arc<Mapping>, remove_on_drop: bool) -> Self {
        Self {
            mapping,
            remove_on_drop,
        }
    }

    /// Becomes the ring's one publisher (taking over from a dead one).
    ///
    /// # Errors
    ///
    /// [`Error::ProducerAlive`] when a live publisher owns the ring; [`Error::Io`].
    pub fn publisher(&self) -> Result<Publisher, Error> {
        Ok(Publisher::new(ShmRing::producer(&self.mapping)?))
    }

    /// Registers a subscriber of `class`. It receives what is published from now on; a
    /// publisher that waits for it with
    /// [`Publisher::wait_for_subscribers`] loses nothing to it.
    ///
    /// # Errors
    ///
    /// [`Error::Ring`] (`ConsumerTableFull`), [`Error::Io`].
    pub fn subscriber(&self, class: DeliveryClass) -> Result<Subscriber, Error> {
        Ok(Subscriber::new(ShmRing::consumer(&self.mapping, class)?))
    }

    /// Joins group `name` as a new member: members share one cursor, so each message goes to
    /// exactly one of them (a work queue); a member that dies holding messages gives them to
    /// another, flagged as redelivered ([`Message::redelivered`]). The publisher creates the
    /// group ([`Publisher::create_group`]); the group gates the publisher as one gating
    /// subscriber would.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), ring_os::Error> {
    /// let ring = ring_os::Ring::builder("jobs").open()?;
    /// let mut worker = ring.join_group("workers")?;
    /// for job in worker.iter() {
    ///     let job = job?;
    ///     println!("job {} ({} bytes, again: {})", job.seq, job.data.len(), job.redelivered);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Ring`] (`NoSuchGroup` until the publisher created it, `ConsumerTableFull`),
    /// [`Error::Io`].
    pub fn join_group(&self, name: &str) -> Result<Subscriber, Error> {
        Ok(Subscriber::new(ShmRing::group_member(&self.mapping, name)?))
    }

    /// Keeps the name when this handle drops (for rings meant to outlive their creator).
    pub fn keep_name(&mut self) {
        self.remove_on_drop = false;
    }

    /// Removes the name now (later opens fail with `NotFound`; open handles keep working).
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the name cannot be removed.
    pub fn remove(mut self) -> Result<(), Error> {
        self.remove_on_drop = false;
        self.mapping.segment().unlink()
    }

    /// The mapping: for the allocator ([`AllocReader`](crate::raw::AllocReader)), inspection
    /// (`ring_core::inspect`) and the segment's descriptor.
    ///
    /// It makes no participant by safe code: a producer or consumer on it would hold no role
    /// lock, so a publisher would judge it dead, reclaim its entry and overwrite the bytes it
    /// pins (or take its ring over while it writes). [`Mapping`] is not
    /// [`ring_core::OpenJoin`], so ring-core's safe constructors refuse it; participants come
    /// from [`publisher`](Self::publisher) and [`subscriber`](Self::subscriber) (or
    /// [`ShmRing`](crate::raw::ShmRing)'s, for ring-core's lower-level API), which hold their locks.
    ///
    /// ```compile_fail,E0277
    /// #![forbid(unsafe_code)]
    /// use std::sync::Arc;
    /// use ring_os::prelude::*;
    /// let ring = Ring::memfd().slots(2).slot_size(64).create().unwrap();
    /// let owner = ring_core::OwnerId::new(9).unwrap();
    /// // A consumer without its role lock: refused at compile time.
    /// let c = ring_core::Consumer::new(Arc::clone(ring.mapping()), DeliveryClass::Gating, owner);
    /// ```
    ///
    /// ```compile_fail,E0277
    /// #![forbid(unsafe_code)]
    /// use ring_os::prelude::*;
    /// let ring = Ring::memfd().slots(2).slot_size(64).create().unwrap();
    /// // A second writer without the producer lock: refused at compile time.
    /// let p = ring_core::Producer::new(ring.mapping(), ring_core::OwnerId::new(9).unwrap());
    /// ```
    ///
    /// ```compile_fail,E0277
    /// #![forbid(unsafe_code)]
    /// use ring_os::raw::{Mapping, Segment, SizeCheck};
    /// // Any other mapping of the segment is no different.
    /// let ring = ring_os::prelude::Ring::memfd().slots(2).slot_size(64).create().unwrap();
    /// let seg = Segment::from_fd(ring.fd().try_clone_to_owned().unwrap(), SizeCheck::AtLeast(64));
    /// let mapping = Mapping::attach(seg.unwrap()).unwrap();
    /// let p = ring_core::Producer::new(&mapping, ring_core::OwnerId::new(9).unwrap());
    /// ```
    ///
    /// The unchecked constructors exist, but only in `unsafe` code, with the liveness contract
    /// as their safety condition:
    ///
    /// ```compile_fail
    /// #![forbid(unsafe_code)]
    /// use ring_os::prelude::*;
    /// let ring = Ring::memfd().slots(2).slot_size(64).create().unwrap();
    /// let owner = ring_core::OwnerId::new(9).unwrap();
    /// let p = unsafe { ring_core::Producer::new_unchecked(ring.mapping(), owner) };
    /// ```
    #[must_use]
    pub fn mapping(&self) -> &Arc<Mapping> {
        &self.mapping
    }

    /// The memfd or file descriptor, to pass a memfd ring to a peer.
    #[must_use]
    #[cfg(unix)]
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.mapping.segment().fd()
    }

    /// Payload capacity of one slot in bytes.
    #[must_use]
    pub fn slot_size(&self) -> usize {
        self.mapping.geometry().slot_capacity()
    }

    /// True when `ptr` points into this ring's mapping (zero-copy checks).
    #[must_use]
    pub fn contains(&self, ptr: *const u8) -> bool {
        let seg = self.mapping.segment();
        let start = seg.as_ptr().as_ptr() as usize;
        (start..start + seg.len()).contains(&(ptr as usize))
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if self.remove_on_drop {
            // Nothing to report to in a destructor; a name that is already gone is fine.
            let _ = self.mapping.segment().unlink();
        }
    }
}

/// Everything a pub/sub program needs, in one import.
pub mod prelude {
    pub use super::{
        Loan, Message, Pinned, Publisher, RecvError, RecvTimeoutError, Ring, RingBuilder,
        SendError, SendTimeoutError, Subscriber, TryRecvError, TrySendError,
    };
    pub use crate::Error;
    pub use ring_core::{
        abort_code, ClaimError, Copied, DeliveryClass, Hold, LostReader, LostReaders, ReadError,
    };
}
