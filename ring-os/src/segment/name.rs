//! Validated names of POSIX shared-memory segments.
//!
//! Every segment this crate creates in `/dev/shm` is called [`PREFIX`]` + name`, so that listing
//! and cleaning ([`stale`](crate::raw::stale)) can tell ours from everybody else's without opening
//! foreign files.

use core::fmt;

use crate::Error;

/// The prefix of every named segment's file name in `/dev/shm`.
pub const PREFIX: &str = "shmring.";

/// The longest name a user may give (the prefix is added on top; `NAME_MAX` is 255).
pub const MAX_LEN: usize = 200;

/// A segment name that is safe to hand to `shm_open`: 1 to [`MAX_LEN`] characters from
/// `[A-Za-z0-9._-]`, not starting with `.`, without `..`, and so with no `/` and no NUL.
///
/// # Examples
///
/// ```
/// use ring_os::raw::SegmentName;
/// let name = SegmentName::new("camera-0").unwrap();
/// assert_eq!(name.file_name(), "shmring.camera-0");
/// assert!(SegmentName::new("../etc/passwd").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SegmentName {
    /// The user's part, validated.
    name: String,
}

impl SegmentName {
    /// Validates `name` (without the prefix).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] saying which rule it broke.
    pub fn new(name: &str) -> Result<Self, Error> {
        let bad = |reason| {
            Err(Error::InvalidName {
                name: name.to_owned(),
                reason,
            })
        };
        if name.is_empty() {
            return bad("it is empty");
        }
        if name.len() > MAX_LEN {
            return bad("it is longer than 200 bytes");
        }
        if name.contains('\0') {
            return bad("it contains a NUL byte");
        }
        if name.contains('/') {
            return bad("it contains '/'");
        }
        if name.contains("..") {
            return bad("it contains \"..\"");
        }
        if name.starts_with('.') {
            return bad("it starts with '.'");
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return bad("it contains a character outside [A-Za-z0-9._-]");
        }
        Ok(Self {
            name: name.to_owned(),
        })
    }

    /// Recognises one of our file names in `/dev/shm` (`shmring.<name>`); `None` for anything else.
    #[must_use]
    pub fn from_file_name(file_name: &str) -> Option<Self> {
        Self::new(file_name.strip_prefix(PREFIX)?).ok()
    }

    /// The name as the user gave it, without the prefix.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The file name in `/dev/shm`: `shmring.<name>`.
    #[must_use]
    pub fn file_name(&self) -> String {
        format!("{PREFIX}{}", self.name)
    }

    /// The name to pass to `shm_open`: `/shmring.<name>`; on macOS, whose shared-memory names
    /// hold at most `MACOS_SHM_NAME_MAX` (31) bytes, a longer one is replaced by
    /// `short_shm_name`'s hashed form.
    #[must_use]
    pub fn shm_name(&self) -> String {
        if cfg!(target_os = "macos") {
            short_shm_name(&self.name)
        } else {
            self.full_shm_name()
        }
    }

    /// `/shmring.<name>`, whatever its length.
    fn full_shm_name(&self) -> String {
        format!("/{PREFIX}{}", self.name)
    }
}

/// The longest shared-memory object name macOS accepts (`PSHMNAMLEN`, the leading `/` included).
pub const MACOS_SHM_NAME_MAX: usize = 31;

/// The prefix of a hashed shared-memory name (a `~` where plain names have a `.`, so no plain
/// name can collide with a hashed one).
const HASHED_PREFIX: &str = "/shmring~";

/// `/shmring.<name>` when it fits [`MACOS_SHM_NAME_MAX`] bytes (names of up to 22 bytes), else
/// `/shmring~` followed by the 128-bit FNV-1a hash of the name in 22 URL-safe base64 characters
/// (31 bytes in all). Every process computes the same short name; two different long names
/// share one only if their hashes collide (a chance of about 2^-128 for names not chosen to
/// collide; FNV is not a cryptographic hash, so a peer of the same user could craft a colliding
/// name, which gives it nothing it could not do to the segment anyway).
#[must_use]
pub fn short_shm_name(name: &str) -> String {
    let full = format!("/{PREFIX}{name}");
    if full.len() <= MACOS_SHM_NAME_MAX {
        return full;
    }
    // FNV-1a, 128 bits (the FNV authors' offset basis and prime).
    let mut hash: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for byte in name.bytes() {
        hash ^= u128::from(byte);
        hash = hash.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::from(HASHED_PREFIX);
    for i in 0..22 {
        // 22 digits of 6 bits cover the 128 bits (the last digit holds the top 2).
        let digit = (hash >> (6 * i)) & 63;
        out.push(char::from(ALPHABET[usize::try_from(digit).unwrap_or(0)]));
    }
    out
}

impl fmt::Debug for SegmentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SegmentName({:?})", self.name)
    }
}

impl fmt::Display for SegmentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.full_shm_name())
    }
}

/// The queue a spill segment's name belongs to, `None` for any other name. The Python queue
/// (`python/src/spill.rs`) sends a message too large for its ring in a segment of its own named
/// `<queue>.s<seq>-<16 hex>`: the queue ring's name, `.s`, the message's sequence number in
/// decimal, `-`, 16 lowercase hex digits. Such a file is not a ring (its bytes are the message),
/// so the stale rule for rings never applies to it (see `stale::remove_unheld`).
#[must_use]
pub fn spill_queue(name: &str) -> Option<&str> {
    let (queue, _) = name.rsplit_once(".s")?;
    is_spill_of(name, queue).then_some(queue)
}

/// Whether `name` is a spill segment's name of the queue ring `queue` (see [`spill_queue`]).
#[must_use]
pub fn is_spill_of(name: &str, queue: &str) -> bool {
    name.strip_prefix(queue)
        .and_then(|r| r.strip_prefix(".s"))
        .and_then(|r| r.split_once('-'))
        .is_some_and(|(seq, tag)| {
            !queue.is_empty()
                && !seq.is_empty()
                && seq.bytes().all(|b| b.is_ascii_digit())
                && tag.len() == 16
                && tag.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_names() {
        for ok in [
            "a",
            "cam0",
            "frames.v2",
            "my_ring-3",
            "x".repeat(MAX_LEN).as_str(),
        ] {
            let n = SegmentName::new(ok).unwrap();
            assert_eq!(n.as_str(), ok);
            assert_eq!(n.shm_name(), format!("/shmring.{ok}"));
            assert_eq!(SegmentName::from_file_name(&n.file_name()), Some(n));
        }
    }

    #[test]
    fn rejects_dangerous_names() {
        let long = "x".repeat(MAX_LEN + 1);
        for bad in [
            "", "a/b", "/abs", "..", "a..b", ".hidden", "nul\0", "sp ace", "é", &long,
        ] {
            match SegmentName::new(bad) {
                Err(Error::InvalidName { name, .. }) => assert_eq!(name, bad),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn macos_names_fit_31_bytes_and_stay_apart() {
        let fits = "x".repeat(22);
        assert_eq!(short_shm_name(&fits), format!("/shmring.{fits}"));
        let long = "x".repeat(23);
        let short = short_shm_name(&long);
        assert_eq!(short.len(), MACOS_SHM_NAME_MAX);
        assert!(short.starts_with("/shmring~"), "{short}");
        // The same in every process and build: pinned (the value an independent FNV-1a 128
        // implementation in Python gives, one that also gives the published vector for "a").
        assert_eq!(
            short_shm_name("camera-front-left-1080p-bgra"),
            "/shmring~5Fax7lsmha3-rAg5V9bvHD"
        );
        let mut seen = std::collections::HashSet::new();
        for i in 0..10_000 {
            let name = format!("a-rather-long-ring-name-{i}");
            let short = short_shm_name(&name);
            assert_eq!(short.len(), MACOS_SHM_NAME_MAX);
            assert!(seen.insert(short), "{name} collided");
        }
    }

    #[test]
    fn foreign_file_names_are_not_ours() {
        assert_eq!(SegmentName::from_file_name("pulse-shm-123"), None);
        assert_eq!(SegmentName::from_file_name("shmring."), None);
        assert_eq!(SegmentName::from_file_name("shmring..."), None);
    }
}
