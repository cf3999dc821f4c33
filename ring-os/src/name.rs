//! Validated names of POSIX shared-memory segments.
//!
//! Every segment this crate creates in `/dev/shm` is called [`PREFIX`]` + name`, so that listing
//! and cleaning ([`stale`](crate::stale)) can tell ours from everybody else's without opening
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
/// use ring_os::SegmentName;
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

    /// The name to pass to `shm_open`: `/shmring.<name>`.
    #[must_use]
    pub fn shm_name(&self) -> String {
        format!("/{PREFIX}{}", self.name)
    }
}

impl fmt::Debug for SegmentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SegmentName({:?})", self.name)
    }
}

impl fmt::Display for SegmentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shm_name())
    }
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
    fn foreign_file_names_are_not_ours() {
        assert_eq!(SegmentName::from_file_name("pulse-shm-123"), None);
        assert_eq!(SegmentName::from_file_name("shmring."), None);
        assert_eq!(SegmentName::from_file_name("shmring..."), None);
    }
}
