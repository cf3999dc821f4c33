//! [`RingBuilder`]: one place to say what a ring is made of and where it lives, then
//! `create()`, `open()` or `open_or_create()`.

use core::time::Duration;
use std::path::{Path, PathBuf};

use ring_core::{Config, Memory as _};

use super::Ring;
use crate::raw::ShmRing;
use crate::segment::{CreateOptions, SegmentName};
use crate::Error;

/// Where the ring lives.
#[derive(Clone, Debug)]
enum Place {
    Named(String),
    Memfd,
    File(PathBuf),
}

/// Builds a [`Ring`]: [`Ring::builder`] (named), [`Ring::memfd`], [`Ring::file`].
///
/// Defaults: 8 slots of 64 KiB, 8 subscribers, no allocator, optimistic copy readers allowed
/// (not pin-only), `open` waits up to 5 s for a creator that is still formatting.
///
/// # Examples
///
/// ```
/// use ring_os::prelude::*;
/// # let name = format!("doc-builder-{}", std::process::id());
/// let created = Ring::builder(&name).slots(4).slot_size(1024).open_or_create()?;
/// let opened = Ring::builder(&name).slots(4).slot_size(1024).open_or_create()?;
/// assert_eq!(opened.slot_size(), 1024);
/// // A mismatching geometry is refused rather than silently used.
/// assert!(Ring::builder(&name).slots(16).open().is_err());
/// drop(opened);
/// drop(created); // the creator's handle removes the name
/// assert!(matches!(Ring::builder(&name).open(), Err(Error::NotFound { .. })));
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct RingBuilder {
    place: Place,
    config: Config,
    /// Which geometry fields the caller set (an `open` checks those against the ring).
    set: Set,
    opts: CreateOptions,
    keep_name: bool,
    open_timeout: Duration,
    /// The pins a never-stall ring must absorb ([`RingBuilder::never_stall`]).
    never_stall_pins: Option<u32>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Set {
    slots: bool,
    slot_size: bool,
    consumers: bool,
    pin_only: bool,
    history: bool,
    never_stall: bool,
    asymmetric_fences: bool,
}

impl RingBuilder {
    fn new(place: Place) -> Self {
        Self {
            place,
            config: Config::new(8, 64 * 1024),
            set: Set::default(),
            opts: CreateOptions::new(),
            keep_name: false,
            open_timeout: Duration::from_secs(5),
            never_stall_pins: None,
        }
    }

    pub(super) fn named(name: &str) -> Self {
        Self::new(Place::Named(name.to_owned()))
    }

    pub(super) fn memfd() -> Self {
        Self::new(Place::Memfd)
    }

    pub(super) fn file(path: &Path) -> Self {
        Self::new(Place::File(path.to_owned()))
    }

    /// Number of slots (messages in flight).
    pub fn slots(mut self, slots: u32) -> Self {
        self.config.slots = slots;
        self.set.slots = true;
        self
    }

    /// Payload bytes per slot (rounded up to a multiple of 8).
    pub fn slot_size(mut self, bytes: u32) -> Self {
        self.config.slot_capacity = bytes;
        self.set.slot_size = true;
        self
    }

    /// Subscriber-table entries (1..=32).
    pub fn consumers(mut self, consumers: u32) -> Self {
        self.config.consumers = consumers;
        self.set.consumers = true;
        self
    }

    /// An allocator region for variable-size payloads.
    pub fn allocator(mut self, arena_bytes: u64, max_live: u32) -> Self {
        self.config = self.config.with_allocator(arena_bytes, max_live);
        self
    }

    /// Subscribers only read what they pin, so the publisher may write in place
    /// ([`Publisher::loan`](super::Publisher::loan)).
    pub fn pin_only(mut self, on: bool) -> Self {
        self.config.pin_only = on;
        self.set.pin_only = true;
        self
    }

    /// History for late joiners (`0..=slots`): a gating or skip-on-lag subscriber that joins
    /// starts up to `n` messages back, as far as the ring still holds them (a gating one is
    /// lossless from where it joined; history messages overwritten before it read them count
    /// as missed); a latest-only subscriber starts at the newest message present anyway.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), ring_os::Error> {
    /// let ring = ring_os::Ring::builder("frames").slots(8).history(4).create()?;
    /// # Ok(()) }
    /// ```
    pub fn history(mut self, n: u32) -> Self {
        self.config.history = n;
        self.set.history = true;
        self
    }

    /// A never-stall ring for readers that pin up to `max_pins` messages at once, all
    /// latest-only and skip-on-lag subscribers together (each held message and each
    /// subscriber's current pin counts once): the publisher writes each message into a slot
    /// nobody pins, so those pins never make it wait. The rule: **`slots >= max_pins + 2`**
    /// (one slot keeps the newest message, one takes the next; at least 3 in all); `create`
    /// refuses fewer with [`Error::NeverStallPins`], and `open` refuses a ring that is not
    /// never-stall ([`Error::ConfigMismatch`]) or has too few slots. Gating subscribers and
    /// groups still hold the publisher back (lossless by design), and readers that pin more
    /// than `max_pins` at once can make it wait again (it never writes over a pinned message).
    /// See [`Config::with_never_stall`](ring_core::Config::with_never_stall).
    ///
    /// ```
    /// use ring_os::prelude::*;
    /// # use core::time::Duration;
    /// let ring = Ring::memfd().slots(6).slot_size(64).never_stall(4).create()?;
    /// let mut publisher = ring.publisher()?;
    /// let mut grabber = ring.subscriber(DeliveryClass::LatestOnly)?;
    /// publisher.send(b"frame 0")?;
    /// let held = grabber.recv_held_timeout(Duration::from_secs(1))?;
    /// // The grabber keeps frame 0 while the publisher laps the ring many times.
    /// for i in 1..100u64 {
    ///     publisher.try_send(&i.to_le_bytes())?;
    /// }
    /// assert_eq!(grabber.held_bytes(&held), Some(&b"frame 0"[..]));
    /// grabber.release(held)?;
    /// // Four pins need six slots: five are refused.
    /// assert!(matches!(
    ///     Ring::memfd().slots(5).never_stall(4).create(),
    ///     Err(Error::NeverStallPins { slots: 5, max_pins: 4 })
    /// ));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn never_stall(mut self, max_pins: u32) -> Self {
        self.config = self.config.with_never_stall(true);
        self.never_stall_pins = Some(max_pins);
        self.set.never_stall = true;
        self
    }

    /// Asymmetric fences, for rings whose subscribers and publisher poll (`try_*` calls in a
    /// loop) rather than block: each message then costs no hardware fence on either side, and
    /// every blocking wait that goes to sleep costs a `membarrier(2)` system call instead
    /// (Linux 4.16 and later; elsewhere the flag changes nothing). Measured on the test
    /// machine: a polled 64-byte round trip about 15 % shorter, a sleeping wait several
    /// microseconds longer (docs/benchmarks.md, "Asymmetric fences"). Peers built before the
    /// option refuse the ring.
    ///
    /// ```
    /// use ring_os::prelude::*;
    /// # use core::time::Duration;
    /// let ring = Ring::memfd().slots(8).slot_size(64).asymmetric_fences(true).create()?;
    /// let mut publisher = ring.publisher()?;
    /// let mut subscriber = ring.subscriber(DeliveryClass::Gating)?;
    /// publisher.send(b"polled")?;
    /// let mut buf = [0u8; 64];
    /// let n = subscriber.recv_timeout(&mut buf, Duration::from_secs(1))?.len;
    /// assert_eq!(&buf[..n], b"polled");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn asymmetric_fences(mut self, on: bool) -> Self {
        self.config = self.config.with_asymmetric_fences(on);
        self.set.asymmetric_fences = true;
        self
    }

    /// Segment options (huge pages, pre-faulting).
    pub fn options(mut self, opts: CreateOptions) -> Self {
        self.opts = opts;
        self
    }

    /// Keep the name when the creating handle drops (default: remove it).
    pub fn keep_name(mut self, keep: bool) -> Self {
        self.keep_name = keep;
        self
    }

    /// How long `open` waits for the ring to appear and its creator to finish formatting.
    pub fn open_timeout(mut self, timeout: Duration) -> Self {
        self.open_timeout = timeout;
        self
    }

    /// Creates the ring (a name that exists is an error: `AlreadyExists`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`], [`Error::Layout`], [`Error::NeverStallPins`],
    /// [`Error::AlreadyExists`], [`Error::NoSpace`], [`Error::Io`].
    pub fn create(self) -> Result<Ring, Error> {
        self.check_pins(self.config.slots)?;
        let mapping = match &self.place {
            Place::Named(name) => {
                ShmRing::create_named(&SegmentName::new(name)?, &self.config, self.opts)?
            }
            Place::Memfd => ShmRing::create_memfd(&self.config, self.opts)?,
            Place::File(path) => ShmRing::create_file(path, &self.config, self.opts)?,
        };
        let has_name = !matches!(self.place, Place::Memfd);
        Ok(Ring::wrap(mapping, has_name && !self.keep_name))
    }

    /// Opens an existing ring and checks the geometry fields this builder set.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] (after the open timeout), [`Error::ConfigMismatch`],
    /// [`Error::NeverStallPins`] (a never-stall ring too small for the pins asked for), the errors of
    /// [`ShmRing::open_named`]; a memfd ring cannot be opened by name: use
    /// [`Ring::from_fd`].
    pub fn open(self) -> Result<Ring, Error> {
        let mapping = match &self.place {
            Place::Named(name) => {
                ShmRing::open_named_within(&SegmentName::new(name)?, self.open_timeout)?
            }
            Place::Memfd => {
                return Err(Error::NotFound {
                    what: "a memfd ring has no name: receive its descriptor and use Ring::from_fd"
                        .into(),
                })
            }
            Place::File(path) => ShmRing::open_file(path)?,
        };
        self.check(&mapping.geometry().config().clone())?;
        Ok(Ring::wrap(mapping, false))
    }

    /// Creates the ring, or opens it if it exists (then only the creator removes the name).
    ///
    /// # Errors
    ///
    /// As [`create`](Self::create) and [`open`](Self::open).
    pub fn open_or_create(self) -> Result<Ring, Error> {
        match self.clone().create() {
            Err(Error::AlreadyExists { .. }) => self.open(),
            other => other,
        }
    }

    /// Refuses a ring whose geometry differs from what this builder asked for.
    fn check(&self, found: &Config) -> Result<(), Error> {
        let want = Config {
            slot_capacity: self.config.slot_capacity.next_multiple_of(8),
            ..self.config
        };
        let fields = [
            (
                "slots",
                self.set.slots,
                found.slots.into(),
                want.slots.into(),
            ),
            (
                "slot_size",
                self.set.slot_size,
                found.slot_capacity.into(),
                want.slot_capacity.into(),
            ),
            (
                "consumers",
                self.set.consumers,
                found.consumers.into(),
                want.consumers.into(),
            ),
            (
                "pin_only",
                self.set.pin_only,
                u64::from(found.pin_only),
                u64::from(want.pin_only),
            ),
            (
                "history",
                self.set.history,
                found.history.into(),
                want.history.into(),
            ),
            (
                "never_stall",
                self.set.never_stall,
                u64::from(found.never_stall),
                u64::from(want.never_stall),
            ),
            (
                "asymmetric_fences",
                self.set.asymmetric_fences,
                u64::from(found.asymmetric_fences),
                u64::from(want.asymmetric_fences),
            ),
        ];
        for (field, set, found, expected) in fields {
            if set && found != expected {
                return Err(Error::ConfigMismatch {
                    field,
                    found,
                    expected,
                });
            }
        }
        self.check_pins(found.slots)
    }

    /// Refuses a never-stall ring of `slots` slots too small for the pins asked for.
    fn check_pins(&self, slots: u32) -> Result<(), Error> {
        match self.never_stall_pins {
            Some(max_pins) => check_never_stall(slots, max_pins),
            None => Ok(()),
        }
    }
}

/// The rule of [`RingBuilder::never_stall`] for callers that build a
/// [`Config`](ring_core::Config) themselves: a never-stall ring of `slots` slots whose readers
/// pin up to `max_pins` messages at once needs `slots >= max_pins + 2` (and at least 3).
///
/// ```
/// assert!(ring_os::check_never_stall(6, 4).is_ok());
/// assert!(matches!(
///     ring_os::check_never_stall(5, 4),
///     Err(ring_os::Error::NeverStallPins { slots: 5, max_pins: 4 })
/// ));
/// ```
///
/// # Errors
///
/// [`Error::NeverStallPins`] when the rule does not hold.
pub fn check_never_stall(slots: u32, max_pins: u32) -> Result<(), Error> {
    if slots < max_pins.saturating_add(2).max(3) {
        return Err(Error::NeverStallPins { slots, max_pins });
    }
    Ok(())
}
