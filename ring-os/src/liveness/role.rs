//! The roles a participant holds a kernel-vouched lock for, and what a probe of one says;
//! shared by every platform's [`lock`](crate::raw::lock) module.

/// A participant's role: what its role lock vouches for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The process that created (and formats) the segment (byte 0 of an OFD-locked file).
    Creator,
    /// The ring's producer (byte 1).
    Producer,
    /// The consumer registered in table entry `i` (byte `2 + i`).
    Consumer(usize),
}

impl core::fmt::Display for Role {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Creator => write!(f, "creator"),
            Self::Producer => write!(f, "producer"),
            Self::Consumer(i) => write!(f, "consumer {i}"),
        }
    }
}

/// Whether a role is held by a running process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// Its lock is held (or the kernel could not say: every doubt counts as alive).
    Alive,
    /// The kernel says its lock is free: no process holds the role.
    Dead,
}
