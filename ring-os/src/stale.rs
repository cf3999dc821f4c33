//! Listing our named segments and removing the stale ones.
//!
//! A named segment outlives its processes: if every process that used it died without unlinking
//! it, its memory stays in `/dev/shm` until reboot. [`list`] finds ours (file names starting with
//! [`PREFIX`](crate::NAME_PREFIX)), reads the owners recorded in each (creator, producer,
//! registered consumers) and checks them with [`owner::liveness`](crate::owner::liveness).
//! [`clean`] removes only segments whose owners are *all* dead; a segment whose header cannot be
//! read (being created right now, foreign, corrupt) is reported and left alone.

use std::path::Path;

use ring_core::OwnerId;

use crate::owner::{liveness, Liveness};
use crate::{Error, Segment, SegmentName, SizeCheck};

/// The directory POSIX shared memory lives in on Linux.
pub const SHM_DIR: &str = "/dev/shm";

/// What the owners of a segment are, as far as its header tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owners {
    /// The owner ids recorded in the segment, each with its liveness now.
    Known(Vec<(OwnerId, Liveness)>),
    /// The header could not be read; the reason. Such segments are never removed.
    Unreadable(String),
}

/// One of our segments in `/dev/shm`.
#[derive(Clone, Debug)]
pub struct SegmentInfo {
    /// Its name (without the prefix).
    pub name: SegmentName,
    /// Its size in bytes.
    pub len: u64,
    /// Its owners.
    pub owners: Owners,
}

impl SegmentInfo {
    /// True when the owners are known and none of them runs.
    #[must_use]
    pub fn is_stale(&self) -> bool {
        match &self.owners {
            Owners::Known(ids) => ids.iter().all(|(_, l)| *l == Liveness::Dead),
            Owners::Unreadable(_) => false,
        }
    }
}

/// What [`clean`] did.
#[derive(Clone, Debug, Default)]
pub struct CleanReport {
    /// Segments removed (all owners dead).
    pub removed: Vec<SegmentName>,
    /// Segments kept, with why.
    pub kept: Vec<(SegmentName, String)>,
}

/// Reads the owner ids recorded in a mapped segment.
pub type OwnerReader = dyn Fn(&Segment) -> Result<Vec<OwnerId>, String>;

/// Lists our segments in `dir`, reading owners with `read`.
///
/// # Errors
///
/// [`Error::Io`] when the directory cannot be read. Segments that cannot be opened are listed
/// with [`Owners::Unreadable`].
pub fn list_with(dir: &Path, read: &OwnerReader) -> Result<Vec<SegmentInfo>, Error> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io("read_dir", e))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("read_dir", e))?;
        let Some(name) = entry
            .file_name()
            .to_str()
            .and_then(SegmentName::from_file_name)
        else {
            continue;
        };
        let len = entry.metadata().map(|m| m.len()).unwrap_or(0);
        let owners = match open_in(dir, &name) {
            Ok(seg) => match read(&seg) {
                Ok(ids) => Owners::Known(ids.into_iter().map(|id| (id, liveness(id))).collect()),
                Err(why) => Owners::Unreadable(why),
            },
            Err(e) => Owners::Unreadable(e.to_string()),
        };
        out.push(SegmentInfo { name, len, owners });
    }
    out.sort_by(|a, b| a.name.as_str().cmp(b.name.as_str()));
    Ok(out)
}

/// Lists our segments in `/dev/shm`, reading owners from each ring header (validated as
/// untrusted input).
///
/// # Errors
///
/// [`Error::Io`] when `/dev/shm` cannot be read.
pub fn list() -> Result<Vec<SegmentInfo>, Error> {
    list_with(Path::new(SHM_DIR), &ring_owners)
}

/// Removes our segments in `/dev/shm` whose owners are all dead; see [`CleanReport`].
///
/// # Errors
///
/// [`Error::Io`] when `/dev/shm` cannot be read.
pub fn clean() -> Result<CleanReport, Error> {
    Ok(clean_listed(Path::new(SHM_DIR), list()?))
}

/// Reads the owners from a segment's ring header.
pub fn ring_owners(seg: &Segment) -> Result<Vec<OwnerId>, String> {
    // SAFETY: the mapping is `seg.len()` bytes, readable and writable, and stays mapped while
    // `seg` is borrowed, which outlives the `RawMemory` made here.
    let raw = unsafe { ring_core::RawMemory::attach(seg.as_ptr(), seg.len()) }
        .map_err(|e| e.to_string())?;
    Ok(crate::mapping::owners_of(&raw))
}

/// Removes the stale segments among `list` (see [`SegmentInfo::is_stale`]) from `dir`.
#[must_use]
pub fn clean_listed(dir: &Path, list: Vec<SegmentInfo>) -> CleanReport {
    let mut report = CleanReport::default();
    for info in list {
        if !info.is_stale() {
            let why = match &info.owners {
                Owners::Unreadable(why) => format!("unreadable: {why}"),
                Owners::Known(_) => "an owner is alive".to_owned(),
            };
            report.kept.push((info.name, why));
            continue;
        }
        match std::fs::remove_file(dir.join(info.name.file_name())) {
            Ok(()) => report.removed.push(info.name),
            Err(e) => report.kept.push((info.name, format!("remove failed: {e}"))),
        }
    }
    report
}

/// Opens a segment file in `dir` by name (the named-segment checks, through a path so tests can
/// use a scratch directory).
fn open_in(dir: &Path, name: &SegmentName) -> Result<Segment, Error> {
    if dir == Path::new(SHM_DIR) {
        Segment::open_named(name, SizeCheck::AtLeast(1))
    } else {
        Segment::open_file(&dir.join(name.file_name()), SizeCheck::AtLeast(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{owner, CreateOptions};

    /// A test header: the first word is the only owner id, 0 meaning "not initialised".
    fn first_word(seg: &Segment) -> Result<Vec<OwnerId>, String> {
        // SAFETY: segments are at least 8 bytes and page-aligned; no one writes them concurrently
        // in this test.
        let word = unsafe { seg.as_ptr().cast::<u64>().read_volatile() };
        OwnerId::new(word)
            .map(|id| vec![id])
            .ok_or_else(|| "not initialised".to_owned())
    }

    fn make(dir: &Path, name: &str, id: u64) {
        let path = dir.join(format!("{}{name}", crate::NAME_PREFIX));
        let seg = Segment::create_file(&path, 4096, CreateOptions::new()).unwrap();
        // SAFETY: in bounds and aligned; this test is the only user.
        unsafe { seg.as_ptr().cast::<u64>().write_volatile(id) };
    }

    #[test]
    fn clean_removes_only_segments_whose_owners_are_all_dead() {
        let dir = std::env::temp_dir().join(format!("ring-os-stale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();

        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = child.id();
        child.wait().unwrap();
        // Start time 1 tick after boot: certainly not the start time of whoever has this pid now.
        let dead = owner::pack(dead_pid, 1).unwrap();
        let alive = owner::current().unwrap();

        make(&dir, "alive", alive.get());
        make(&dir, "dead", dead.get());
        make(&dir, "fresh", 0);
        std::fs::write(dir.join("someone-elses"), b"x").unwrap();

        let listed = list_with(&dir, &first_word).unwrap();
        let names: Vec<_> = listed.iter().map(|i| i.name.as_str().to_owned()).collect();
        assert_eq!(names, ["alive", "dead", "fresh"]);
        let stale: Vec<_> = listed
            .iter()
            .filter(|i| i.is_stale())
            .map(|i| i.name.as_str())
            .collect();
        assert_eq!(stale, ["dead"]);

        let report = clean_listed(&dir, listed);
        assert_eq!(report.removed.len(), 1);
        assert_eq!(report.removed[0].as_str(), "dead");
        assert_eq!(report.kept.len(), 2);
        assert!(!dir.join("shmring.dead").exists());
        assert!(dir.join("shmring.alive").exists());
        assert!(dir.join("shmring.fresh").exists());
        assert!(dir.join("someone-elses").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
