//! Listing and cleaning a scratch directory of segment files: rings, half-created, zero-length,
//! truncated and foreign files, and a cleaner racing a creator that re-creates the same name.

use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ring_core::{Config, Consumer, DeliveryClass, OwnerId, Producer};

use super::*;
use crate::liveness::lock::Role;
use crate::raw::ShmRing;
use crate::segment::CreateOptions;
use crate::settle::settles;

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("ring-os-stale-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(format!("{}{name}", crate::raw::NAME_PREFIX))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An owner id no process holds a lock for (the pid does not matter any more).
fn some_owner() -> OwnerId {
    OwnerId::new(0x1234_0000_4321).unwrap()
}

fn status_of(list: &[SegmentInfo]) -> Vec<(String, &'static str)> {
    list.iter()
        .map(|i| (i.name.as_str().to_owned(), i.status()))
        .collect()
}

#[test]
fn clean_removes_exactly_the_segments_no_process_holds() {
    let dir = Scratch::new("clean");
    let config = Config::new(4, 64).with_consumers(2);
    // A live ring: its creator's mapping holds the creator lock.
    let alive = ShmRing::create_file(&dir.path("alive"), &config, CreateOptions::new()).unwrap();
    let _p = ShmRing::producer(&alive).unwrap();
    // A ring whose participants all died: its creator's mapping is gone, and a producer and a
    // consumer registered (through a mapping of their own, without locks) and ran no destructor.
    drop(ShmRing::create_file(&dir.path("dead"), &config, CreateOptions::new()).unwrap());
    {
        let dead = ShmRing::open_file(&dir.path("dead")).unwrap();
        // SAFETY: both stand for processes that died: forgotten at once, never used again.
        let (p, c) = unsafe {
            (
                Producer::new_unchecked(Arc::clone(&dead), some_owner()).unwrap(),
                Consumer::new_unchecked(Arc::clone(&dead), DeliveryClass::Gating, some_owner())
                    .unwrap(),
            )
        };
        core::mem::forget(p);
        core::mem::forget(c);
    }
    // Half-created: the creator holds its lock but has not formatted; then it "dies".
    let creating = Segment::create_file(&dir.path("creating"), 8192, CreateOptions::new()).unwrap();
    drop(Segment::create_file(&dir.path("abandoned"), 8192, CreateOptions::new()).unwrap());
    // Zero-length: a creator that died between open and sizing.
    let zero = std::fs::File::create(dir.path("zero")).unwrap();
    zero.set_permissions(std::fs::Permissions::from_mode(0o600))
        .unwrap();
    // Truncated: a valid ring cut to a third of its size.
    {
        let t =
            ShmRing::create_file(&dir.path("truncated"), &config, CreateOptions::new()).unwrap();
        let len = t.segment().len() as u64;
        zero.set_len(0).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path("truncated"))
            .unwrap()
            .set_len(len / 3)
            .unwrap();
    }
    // Foreign: garbage, a world-writable file, a FIFO (must not hang us), a directory.
    std::fs::write(dir.path("garbage"), vec![0xA5; 8192]).unwrap();
    std::fs::set_permissions(dir.path("garbage"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(dir.path("writable"), vec![0; 8192]).unwrap();
    std::fs::set_permissions(dir.path("writable"), std::fs::Permissions::from_mode(0o666)).unwrap();
    make_fifo(&dir.path("fifo"));
    std::fs::create_dir(dir.path("dir")).unwrap();
    std::fs::write(dir.0.join("someone-elses"), b"x").unwrap();

    // Locks are released when the last reference closes: a child another test forks meanwhile
    // holds one until it execs (see `crate::settle`), so give releases a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut listed = list_in(&dir.0).unwrap();
    while status_of(&listed)
        .iter()
        .any(|(n, s)| (n == "dead" && *s == "live") || (n == "abandoned" && *s == "creating"))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(1));
        listed = list_in(&dir.0).unwrap();
    }
    assert_eq!(
        status_of(&listed),
        [
            ("abandoned".to_owned(), "abandoned"),
            ("alive".to_owned(), "live"),
            ("creating".to_owned(), "creating"),
            ("dead".to_owned(), "stale"),
            ("dir".to_owned(), "unreadable"),
            ("fifo".to_owned(), "unreadable"),
            ("garbage".to_owned(), "unreadable"),
            ("truncated".to_owned(), "unreadable"),
            ("writable".to_owned(), "unreadable"),
            ("zero".to_owned(), "abandoned"),
        ]
    );
    let alive_info = listed.iter().find(|i| i.name.as_str() == "alive").unwrap();
    let Owners::Known(parts) = &alive_info.owners else {
        panic!("{alive_info:?}")
    };
    let roles: Vec<_> = parts.iter().map(|p| (p.role, p.liveness)).collect();
    assert_eq!(
        roles,
        [
            (Role::Creator, Liveness::Alive),
            (Role::Producer, Liveness::Alive)
        ]
    );

    // The removal re-checks each candidate under its own every-role lock. A creator lock just
    // released may still be held by a child another test forked meanwhile until it execs (see
    // `crate::settle`): a candidate refused so is listed and cleaned again. What any clean removes counts, so a live or unreadable segment removed
    // by a later one fails the test as well.
    let mut removed: Vec<String> = Vec::new();
    let mut listed = Some(listed);
    settles("the unheld segments were not all removed", || {
        let listed = listed.take().unwrap_or_else(|| list_in(&dir.0).unwrap());
        let report = clean_listed(&dir.0, listed);
        removed.extend(report.removed.iter().map(|n| n.as_str().to_owned()));
        removed.sort_unstable();
        (removed.len() >= 3).then_some(())
    });
    assert_eq!(removed, ["abandoned", "dead", "zero"]);
    for kept in [
        "alive",
        "creating",
        "truncated",
        "garbage",
        "writable",
        "fifo",
        "dir",
    ] {
        assert!(dir.path(kept).exists(), "{kept} was removed");
    }
    assert!(dir.0.join("someone-elses").exists());
    drop(creating);
}

#[test]
fn a_candidate_that_changed_since_listing_is_kept() {
    let dir = Scratch::new("recheck");
    drop(Segment::create_file(&dir.path("gone"), 4096, CreateOptions::new()).unwrap());
    drop(Segment::create_file(&dir.path("joined"), 4096, CreateOptions::new()).unwrap());
    drop(Segment::create_file(&dir.path("replaced"), 4096, CreateOptions::new()).unwrap());
    // The creators just let go; a child forked meanwhile may hold a lock until it execs (see
    // `crate::settle`), and so may the portable backend's probes of the listing: the listing
    // and the grant after it settle.
    let listed = settles("the released segments were not all listed stale", || {
        let listed = list_in(&dir.0).unwrap();
        assert_eq!(listed.len(), 3, "{listed:?}");
        listed.iter().all(SegmentInfo::is_stale).then_some(listed)
    });
    // After the listing: one is removed, one gets a participant, one is re-created.
    std::fs::remove_file(dir.path("gone")).unwrap();
    let joined = Segment::open_file(&dir.path("joined"), SizeCheck::AtLeast(1)).unwrap();
    let _held = settles("an unheld consumer role was not granted", || {
        joined.lock_role(Role::Consumer(0)).unwrap()
    });
    std::fs::remove_file(dir.path("replaced")).unwrap();
    let new = Segment::create_file(&dir.path("replaced"), 4096, CreateOptions::new()).unwrap();
    drop(new.lock_role(Role::Creator).unwrap());
    let report = clean_listed(&dir.0, listed);
    assert!(report.removed.is_empty(), "{report:?}");
    assert!(dir.path("joined").exists() && dir.path("replaced").exists());
    // The replacement is not the listed file: even with no lock held it stays until re-listed.
    drop(new);
    // Just released (see above): cleaned again until it goes; anything else removed fails.
    settles("the released replacement was not removed", || {
        let report = clean_listed(&dir.0, list_in(&dir.0).unwrap());
        assert!(report.removed.len() <= 1, "{report:?}");
        let first = report.removed.first()?;
        assert_eq!(first.as_str(), "replaced", "{report:?}");
        Some(())
    });
}

#[test]
fn a_cleaner_racing_a_creator_of_the_same_name_never_removes_the_live_ring() {
    let dir = Scratch::new("race");
    let path = dir.path("contended");
    let stop = Arc::new(AtomicBool::new(false));
    let cleaner = {
        let (dir, stop) = (dir.0.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut removed = 0usize;
            while !stop.load(Ordering::Relaxed) {
                removed += clean_listed(&dir, list_in(&dir).unwrap()).removed.len();
            }
            removed
        })
    };
    let config = Config::new(4, 64);
    let deadline = Instant::now() + Duration::from_secs(60);
    let rounds = 200;
    for round in 0..rounds {
        // Re-create the name as soon as the cleaner has removed the previous (abandoned) ring.
        let ring = loop {
            match ShmRing::create_file(&path, &config, CreateOptions::new()) {
                Ok(ring) => break ring,
                Err(crate::Error::AlreadyExists { .. }) => {
                    assert!(Instant::now() < deadline, "round {round}: never cleaned");
                    std::thread::yield_now();
                }
                Err(e) => panic!("round {round}: {e}"),
            }
        };
        let _p = ShmRing::producer(&ring).unwrap();
        for _ in 0..3 {
            std::thread::yield_now();
            // While we live, the path names our file.
            assert_eq!(
                lock::path_identity(&path).ok(),
                lock::identity(ring.segment().fd()).ok(),
                "round {round}: the live ring was removed or replaced"
            );
        }
        // Die without unlinking: leave an abandoned ring for the cleaner.
    }
    stop.store(true, Ordering::Relaxed);
    let removed = cleaner.join().unwrap();
    assert!(
        removed >= rounds - 1,
        "cleaner removed {removed} of {rounds}"
    );
}

/// Makes a FIFO at `path` (`mkfifo(3)`: rustix has no `mkfifoat` for Apple targets).
fn make_fifo(path: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt as _;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c_path` is a NUL-terminated path that lives across the call.
    let rc = unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo: {}", std::io::Error::last_os_error());
}

#[test]
fn spill_names_parse_and_an_unheld_spill_is_removed_a_held_one_kept() {
    assert_eq!(
        spill_queue("q-12-0123456789ab.s7-0123456789abcdef"),
        Some("q-12-0123456789ab")
    );
    assert_eq!(spill_queue("a.s.s10-ffffffffffffffff"), Some("a.s"));
    for not in [
        "q.s7-0123456789abcde",
        "q.s7-0123456789abcdeF",
        "q.s-0123456789abcdef",
        "q.sx-0123456789abcdef",
        ".s7-0123456789abcdef",
        "q-12-0123456789ab",
    ] {
        assert_eq!(spill_queue(not), None, "{not}");
    }
    assert!(is_spill_of("q.s7-0123456789abcdef", "q"));
    assert!(!is_spill_of("q.s7-0123456789abcdef", "p"));

    let dir = Scratch::new("spill");
    let name = "gone.s3-0123456789abcdef";
    // Its creator writing it: the creator lock is held.
    let seg =
        crate::segment::Segment::create_file(&dir.path(name), 4096, CreateOptions::new()).unwrap();
    // SAFETY: the mapping is 4096 bytes and this is its only user.
    unsafe { core::ptr::write_bytes(seg.as_ptr().as_ptr(), 0x5a, 4096) };
    let listed = || {
        list_in(&dir.0)
            .unwrap()
            .into_iter()
            .find(|i| i.name.as_str() == name)
            .unwrap()
    };
    let info = listed();
    assert!(
        matches!(info.owners, Owners::Unreadable(_)),
        "{:?}",
        info.owners
    );
    assert!(!info.is_stale(), "a spill is never a stale ring");
    assert!(remove_unheld(&dir.0, &info).is_err());
    assert!(dir.path(name).exists(), "a held spill is kept");
    drop(seg);
    // Just released: a child forked meanwhile may hold the creator lock until it execs (see
    // `crate::settle`).
    settles("the released spill was not removed", || {
        let info = listed();
        (info.locks == Liveness::Dead && remove_unheld(&dir.0, &info).is_ok()).then_some(())
    });
    assert!(!dir.path(name).exists());
}
