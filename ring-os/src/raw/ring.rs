//! [`ShmRing`]: the entry points that create or open a ring in OS shared memory, and become its
//! producer or one of its consumers.

use std::path::Path;
use std::sync::Arc;

use ring_core::{AttachError, Config, Consumer, DeliveryClass, Geometry, Memory, Producer};

use crate::liveness::lock::RoleLock;
use crate::liveness::roles;
use crate::raw::Mapping;
use crate::segment::{CreateOptions, Segment, SegmentName};
use crate::Error;

/// A producer over an OS mapping, holding the kernel-held [`Role::Producer`](crate::raw::lock::Role)
/// lock for as long as it lives (see [`crate::raw::lock`]). Dereferences to the ring-core producer.
#[derive(Debug)]
pub struct ShmProducer<T: Memory = Mapping> {
    /// The ring-core producer; declared first, so it closes the ring and leaves the producer
    /// line before the lock below is released.
    producer: Producer<Arc<T>>,
    /// The role lock (`None` for a producer converted with `From`: on a ring-os mapping only
    /// `unsafe` code can make one, whose contract then makes it answer for peers' verdicts).
    lock: Option<RoleLock>,
}

impl<T: Memory> ShmProducer<T> {
    /// The role lock this producer holds, if any.
    #[must_use]
    pub fn role_lock(&self) -> Option<&RoleLock> {
        self.lock.as_ref()
    }
}

/// A producer made directly with ring-core holds no role lock: peers judge it dead.
impl<T: Memory> From<Producer<Arc<T>>> for ShmProducer<T> {
    fn from(producer: Producer<Arc<T>>) -> Self {
        Self {
            producer,
            lock: None,
        }
    }
}

impl<T: Memory> core::ops::Deref for ShmProducer<T> {
    type Target = Producer<Arc<T>>;
    fn deref(&self) -> &Self::Target {
        &self.producer
    }
}

impl<T: Memory> core::ops::DerefMut for ShmProducer<T> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.producer
    }
}

/// A consumer over an OS mapping, holding the [`Role::Consumer`](crate::raw::lock::Role) lock of its
/// entry for as long as it lives. Dereferences to the ring-core consumer.
#[derive(Debug)]
pub struct ShmConsumer<T: Memory = Mapping> {
    /// The ring-core consumer; declared first, so it leaves its entry before the lock below is
    /// released (a reclaimer never sees a free lock on an entry still in use).
    consumer: Consumer<Arc<T>>,
    /// The lock of entry `consumer.index()`.
    lock: RoleLock,
}

impl<T: Memory> ShmConsumer<T> {
    /// The role lock this consumer holds.
    #[must_use]
    pub fn role_lock(&self) -> &RoleLock {
        &self.lock
    }
}

impl<T: Memory> core::ops::Deref for ShmConsumer<T> {
    type Target = Consumer<Arc<T>>;
    fn deref(&self) -> &Self::Target {
        &self.consumer
    }
}

impl<T: Memory> core::ops::DerefMut for ShmConsumer<T> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.consumer
    }
}

/// The plumbing under [`Ring`](crate::Ring): creating and opening rings in OS shared memory as
/// bare mappings, for code that uses ring-core's producer and consumer directly (ringctl,
/// ring-cuda, the benches). Programs should start with `use ring_os::prelude::*` (see
/// `docs/OS.md` for the segment kinds).
///
/// Each constructor returns an `Arc<Mapping>`; make a producer with [`ShmRing::producer`] (which
/// takes over a dead producer's ring) and consumers with [`ShmRing::consumer`].
///
/// # Examples
///
/// ```
/// use core::time::Duration;
/// use ring_core::{Config, DeliveryClass};
/// use ring_os::raw::{ConsumerExt as _, CreateOptions, ShmRing};
/// let ring = ShmRing::create_memfd(&Config::new(8, 256), CreateOptions::new())?;
/// let mut producer = ShmRing::producer(&ring)?;
/// let mut consumer = ShmRing::consumer(&ring, DeliveryClass::Gating)?;
/// producer.try_publish(b"hello").unwrap();
/// let mut buf = [0u8; 256];
/// let got = consumer.recv(&mut buf, Duration::from_secs(1)).unwrap();
/// assert_eq!(&buf[..got.len], b"hello");
/// # Ok::<(), ring_os::Error>(())
/// ```
#[derive(Debug)]
pub struct ShmRing;

/// The segment length a configuration needs.
fn len_for(config: &Config) -> Result<u64, Error> {
    let len = Geometry::new(config)?.total_len();
    u64::try_from(len).map_err(|_| Error::BadLength { len: u64::MAX })
}

impl ShmRing {
    /// Creates a named ring (`/dev/shm/shmring.<name>`, mode 0600, space reserved).
    ///
    /// # Errors
    ///
    /// [`Error::Layout`], [`Error::AlreadyExists`], [`Error::NoSpace`], [`Error::Io`].
    pub fn create_named(
        name: &SegmentName,
        config: &Config,
        opts: CreateOptions,
    ) -> Result<Arc<Mapping>, Error> {
        let segment = Segment::create_named(name, len_for(config)?, opts)?;
        Self::init(segment, config)
    }

    /// Opens an existing named ring, validating the file and the header.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`], [`Error::Insecure`], [`Error::SizeMismatch`], [`Error::Attach`] (for
    /// example `NotInitialized` while the creator is still formatting it: retry).
    pub fn open_named(name: &SegmentName) -> Result<Arc<Mapping>, Error> {
        let segment = Segment::open_named(name, Mapping::open_check())?;
        Ok(Arc::new(Mapping::attach(segment)?))
    }

    /// [`open_named`](Self::open_named), retrying for at most `timeout` while the segment does
    /// not exist yet or its creator is still sizing or formatting it.
    ///
    /// # Errors
    ///
    /// As `open_named`; the last error when `timeout` ran out.
    pub fn open_named_within(
        name: &SegmentName,
        timeout: core::time::Duration,
    ) -> Result<Arc<Mapping>, Error> {
        let deadline = crate::wait::deadline_after(timeout);
        loop {
            match Self::open_named(name) {
                // What a segment looks like while its creator makes it: no file yet, a file not
                // yet sized, zero bytes not yet formatted, a closed init barrier.
                Err(
                    Error::NotFound { .. }
                    | Error::SizeMismatch { .. }
                    | Error::Attach(
                        AttachError::NotInitialized { .. } | AttachError::BadMagic { found: 0 },
                    ),
                ) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(core::time::Duration::from_millis(1));
                }
                other => return other,
            }
        }
    }

    /// Creates an anonymous ring in a sealed memfd; pass `ring.segment().fd()` to peers with
    /// [`fdpass::send_fd`](crate::raw::fdpass::send_fd).
    ///
    /// # Errors
    ///
    /// [`Error::Layout`], [`Error::NoSpace`], [`Error::HugePages`], [`Error::Io`].
    pub fn create_memfd(config: &Config, opts: CreateOptions) -> Result<Arc<Mapping>, Error> {
        let segment = Segment::create_memfd(len_for(config)?, opts)?;
        Self::init(segment, config)
    }

    /// Opens a ring from a memfd received from a peer: checks its seals and size, then the header.
    ///
    /// # Errors
    ///
    /// [`Error::MissingSeals`], [`Error::SizeMismatch`], [`Error::Attach`].
    #[cfg(unix)]
    pub fn from_fd(fd: std::os::fd::OwnedFd) -> Result<Arc<Mapping>, Error> {
        let segment = Segment::from_fd(fd, Mapping::open_check())?;
        Ok(Arc::new(Mapping::attach(segment)?))
    }

    /// Creates a ring in a new file at `path` (mode 0600, space reserved).
    ///
    /// # Errors
    ///
    /// As [`create_named`](Self::create_named).
    pub fn create_file(
        path: &Path,
        config: &Config,
        opts: CreateOptions,
    ) -> Result<Arc<Mapping>, Error> {
        let segment = Segment::create_file(path, len_for(config)?, opts)?;
        Self::init(segment, config)
    }

    /// Opens the ring in the file at `path`.
    ///
    /// # Errors
    ///
    /// As [`open_named`](Self::open_named).
    pub fn open_file(path: &Path) -> Result<Arc<Mapping>, Error> {
        let segment = Segment::open_file(path, Mapping::open_check())?;
        Ok(Arc::new(Mapping::attach(segment)?))
    }

    /// Formats a new segment, removing its name if that fails.
    fn init(segment: Segment, config: &Config) -> Result<Arc<Mapping>, Error> {
        let mut segment = segment;
        segment.set_unlink_on_drop(true);
        let mut mapping = Mapping::initialize(segment, config)?;
        mapping.keep_name();
        Ok(Arc::new(mapping))
    }

    /// Becomes the ring's producer as this process, holding [`Role::Producer`](crate::raw::lock::Role)'s
    /// lock. If another producer is registered and holds no lock (its process is dead), takes
    /// the ring over (see `docs/OS.md`, crash semantics).
    ///
    /// # Errors
    ///
    /// [`Error::ProducerAlive`] when a live producer owns the ring (in any process or pid
    /// namespace that shares the segment); [`Error::Lock`], [`Error::Io`];
    /// [`Error::Truncated`] when a peer truncated the ring.
    pub fn producer(ring: &Arc<Mapping>) -> Result<ShmProducer, Error> {
        ring.check_truncated()?;
        let (producer, lock) = roles::become_producer(ring)?;
        Ok(ShmProducer {
            producer,
            lock: Some(lock),
        })
    }

    /// Registers a consumer of `class` as this process, holding its entry's role lock.
    ///
    /// # Errors
    ///
    /// [`Error::Ring`] (`ConsumerTableFull`), [`Error::Lock`], [`Error::Io`],
    /// [`Error::Truncated`].
    pub fn consumer(ring: &Arc<Mapping>, class: DeliveryClass) -> Result<ShmConsumer, Error> {
        ring.check_truncated()?;
        let (consumer, lock) = roles::register_consumer(ring, roles::Join::Class(class))?;
        Ok(ShmConsumer { consumer, lock })
    }

    /// Joins group `name` (created by the producer, `Producer::create_group`) as a new member,
    /// holding its entry's role lock: each message goes to exactly one member, and a member
    /// that dies holding messages gives them to another (docs/PROTOCOL.md, "Groups").
    ///
    /// # Errors
    ///
    /// [`Error::Ring`] (`NoSuchGroup`, `ConsumerTableFull`), [`Error::Lock`], [`Error::Io`],
    /// [`Error::Truncated`].
    pub fn group_member(ring: &Arc<Mapping>, name: &str) -> Result<ShmConsumer, Error> {
        ring.check_truncated()?;
        let (consumer, lock) = roles::register_consumer(ring, roles::Join::Group(name))?;
        Ok(ShmConsumer { consumer, lock })
    }
}

#[cfg(test)]
mod tests {
    use core::time::Duration;

    use super::*;

    #[test]
    fn open_within_waits_for_the_creator_and_gives_up_on_time() {
        let name = SegmentName::new(&format!("open-within-{}", std::process::id())).unwrap();
        let t = std::time::Instant::now();
        assert!(matches!(
            ShmRing::open_named_within(&name, Duration::from_millis(30)),
            Err(Error::NotFound { .. })
        ));
        assert!(t.elapsed() >= Duration::from_millis(25));
        let n2 = name.clone();
        let creator = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            ShmRing::create_named(&n2, &Config::new(4, 64), CreateOptions::new()).unwrap()
        });
        let opened = ShmRing::open_named_within(&name, Duration::from_secs(10));
        let created = creator.join().unwrap();
        created.segment().unlink().unwrap();
        assert_eq!(opened.unwrap().segment().len(), created.segment().len());
    }

    #[test]
    fn a_second_live_producer_is_refused() {
        let ring = ShmRing::create_memfd(&Config::new(4, 64), CreateOptions::new()).unwrap();
        let _p = ShmRing::producer(&ring).unwrap();
        assert!(matches!(
            ShmRing::producer(&ring),
            Err(Error::ProducerAlive { .. })
        ));
    }
}
