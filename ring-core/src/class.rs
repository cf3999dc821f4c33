//! [`DeliveryClass`]: how a consumer is served.

/// How a consumer is served. One ring serves consumers of different classes at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum DeliveryClass {
    /// Lossless: the producer waits (or fails its claim) rather than overwrite a message this
    /// consumer has not consumed. The ACK/backpressure mode.
    Gating = 1,
    /// Only the newest message matters (frame grabbers): each read returns the latest message
    /// and reports how many were skipped since the last read.
    LatestOnly = 2,
    /// Follows the sequence in order without holding the producer back by its cursor (a slot it
    /// holds pinned still keeps the producer off that slot, as every pin does): when it falls
    /// more than a ring behind it jumps to the oldest message still there and reports exactly
    /// how many it missed.
    SkipOnLag = 3,
}

impl DeliveryClass {
    /// The class stored as `value` in a consumer entry, if valid.
    pub const fn from_u32(value: u32) -> Option<Self> {
        match value {
            1 => Some(Self::Gating),
            2 => Some(Self::LatestOnly),
            3 => Some(Self::SkipOnLag),
            _ => None,
        }
    }
}
