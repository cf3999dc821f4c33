//! Segment tests with real system calls.

use core::sync::atomic::{AtomicU32, Ordering};
#[cfg_attr(
    target_os = "macos",
    allow(unused_imports, reason = "memfd tests are not built on macOS")
)]
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::PathBuf;

use super::*;
use crate::segment::SizeCheck;
use crate::segment::{fdpass, SegmentName};

/// A name unique to this process and call site.
fn unique(tag: &str) -> SegmentName {
    static N: AtomicU32 = AtomicU32::new(0);
    // Relaxed: only uniqueness matters.
    let n = N.fetch_add(1, Ordering::Relaxed);
    SegmentName::new(&format!("test-{tag}-{}-{n}", std::process::id())).unwrap()
}

/// Removes a named segment when the test ends, whatever happens.
struct Cleanup(SegmentName);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = named::unlink(&self.0);
    }
}

/// A unique name (see [`unique`]) and the guard that removes its segment.
fn scratch_name(tag: &str) -> (SegmentName, Cleanup) {
    let name = unique(tag);
    (name.clone(), Cleanup(name))
}

/// A scratch directory unique to this test.
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ring-os-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `v` at byte `off` of a segment and reads it back through another.
fn shares(a: &Segment, b: &Segment, off: usize, v: u8) -> bool {
    assert!(off < a.len() && off < b.len());
    // SAFETY: `off` is in bounds of both mappings; the test is the only user of these bytes.
    unsafe {
        a.as_ptr().as_ptr().add(off).write_volatile(v);
        b.as_ptr().as_ptr().add(off).read_volatile() == v
    }
}

#[test]
fn named_create_open_share_and_unlink() {
    let (name, _c) = scratch_name("named");
    let a = Segment::create_named(&name, 8192, CreateOptions::new()).unwrap();
    assert_eq!(a.len(), 8192);
    assert_eq!(a.as_ptr().as_ptr() as usize % 4096, 0, "page-aligned");
    let st = rustix::fs::fstat(a.fd()).unwrap();
    assert_eq!(st.st_mode & 0o777, 0o600);
    assert!(st.st_blocks * 512 >= 8192, "pages reserved at creation");

    let b = Segment::open_named(&name, SizeCheck::Exactly(8192)).unwrap();
    assert!(shares(&a, &b, 4097, 0x5a));
    assert!(matches!(
        Segment::create_named(&name, 8192, CreateOptions::new()),
        Err(Error::AlreadyExists { .. })
    ));
    assert!(matches!(
        Segment::open_named(&name, SizeCheck::Exactly(4096)),
        Err(Error::SizeMismatch {
            expected: 4096,
            actual: 8192
        })
    ));
    assert!(Segment::open_named(&name, SizeCheck::AtLeast(8192)).is_ok());
    a.unlink().unwrap();
    assert!(matches!(
        Segment::open_named(&name, SizeCheck::AtLeast(1)),
        Err(Error::NotFound { .. })
    ));
    assert!(shares(&a, &b, 0, 7), "mappings outlive the name");
}

#[test]
fn unlink_on_drop_removes_the_name() {
    let (name, _c) = scratch_name("drop");
    let mut a = Segment::create_named(&name, 4096, CreateOptions::new()).unwrap();
    a.set_unlink_on_drop(true);
    drop(a);
    assert!(matches!(
        Segment::open_named(&name, SizeCheck::AtLeast(1)),
        Err(Error::NotFound { .. })
    ));
}

#[test]
fn zero_length_is_refused() {
    let (name, _c) = scratch_name("zero");
    assert!(matches!(
        Segment::create_named(&name, 0, CreateOptions::new()),
        Err(Error::BadLength { len: 0 })
    ));
    assert!(matches!(
        Segment::create_memfd(0, CreateOptions::new()),
        Err(Error::BadLength { len: 0 })
    ));
}

#[test]
fn more_than_the_file_system_holds_is_no_space_and_leaves_nothing() {
    let (name, _c) = scratch_name("nospace");
    let vfs = rustix::fs::statvfs("/dev/shm").unwrap();
    let available = vfs.f_bavail * vfs.f_frsize;
    assert!(vfs.f_blocks != 0, "/dev/shm reports no size limit");
    let needed = available + (64 << 20);
    match Segment::create_named(&name, needed, CreateOptions::new()) {
        Err(Error::NoSpace {
            needed: n,
            available: a,
        }) => {
            assert_eq!(n, needed);
            assert!(a <= available + (64 << 20), "available {a} is implausible");
        }
        other => panic!("expected NoSpace, got {other:?}"),
    }
    assert!(
        matches!(
            Segment::open_named(&name, SizeCheck::AtLeast(1)),
            Err(Error::NotFound { .. })
        ),
        "a failed creation must not leave its name behind"
    );
}

#[test]
fn a_planted_symlink_is_not_followed() {
    let (name, _c) = scratch_name("link");
    let target = scratch("link").join("target");
    std::fs::write(&target, [0_u8; 4096]).unwrap();
    let path = PathBuf::from("/dev/shm").join(name.file_name());
    std::os::unix::fs::symlink(&target, &path).unwrap();
    assert!(matches!(
        Segment::open_named(&name, SizeCheck::AtLeast(1)),
        Err(Error::NotRegularFile { .. })
    ));
    assert!(matches!(
        Segment::create_named(&name, 4096, CreateOptions::new()),
        Err(Error::AlreadyExists { .. })
    ));
    assert!(matches!(
        Segment::open_file(&path, SizeCheck::AtLeast(1)),
        Err(Error::NotRegularFile { .. })
    ));
    let _ = std::fs::remove_dir_all(target.parent().unwrap());
}

#[test]
fn a_segment_writable_by_others_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let (name, _c) = scratch_name("perm");
    let a = Segment::create_named(&name, 4096, CreateOptions::new()).unwrap();
    let path = PathBuf::from("/dev/shm").join(name.file_name());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(matches!(
        Segment::open_named(&name, SizeCheck::AtLeast(1)),
        Err(Error::Insecure { mode: 0o666, .. })
    ));
    drop(a);
}

#[test]
fn truncation_by_a_peer_is_detected() {
    let (name, _c) = scratch_name("trunc");
    let a = Segment::create_named(&name, 3 * 4096, CreateOptions::new()).unwrap();
    a.check_len().unwrap();
    // The "peer": any process of this user can open and truncate a named segment.
    let path = PathBuf::from("/dev/shm").join(name.file_name());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(4096)
        .unwrap();
    assert!(matches!(
        a.check_len(),
        Err(Error::Truncated {
            mapped: 12288,
            actual: Some(4096)
        })
    ));
    // The guard repaired the probe's fault: the lost pages read zeros, the mark stays.
    assert!(a.is_truncated());
    assert!(matches!(
        Segment::open_named(&name, SizeCheck::Exactly(3 * 4096)),
        Err(Error::SizeMismatch {
            expected: 12288,
            actual: 4096
        })
    ));
}

#[cfg(not(target_os = "macos"))]
#[test]
fn memfd_is_sealed_and_maps_again_from_its_fd() {
    let a = Segment::create_memfd(10_000, CreateOptions::new()).unwrap();
    assert_eq!(a.kind(), &SegmentKind::Memfd);
    let seals = rustix::fs::fcntl_get_seals(a.fd()).unwrap();
    assert!(seals.contains(memfd::REQUIRED_SEALS));
    // The seals hold: the size cannot change.
    assert!(rustix::fs::ftruncate(a.fd(), 4096).is_err());
    assert!(rustix::fs::ftruncate(a.fd(), 1 << 20).is_err());
    let fd: OwnedFd = a.fd().try_clone_to_owned().unwrap();
    let b = Segment::from_fd(fd, SizeCheck::Exactly(10_000)).unwrap();
    assert!(shares(&a, &b, 9_999, 0x33));
    let fd: OwnedFd = a.fd().try_clone_to_owned().unwrap();
    assert!(matches!(
        Segment::from_fd(fd, SizeCheck::AtLeast(20_000)),
        Err(Error::SizeMismatch {
            expected: 20_000,
            actual: 10_000
        })
    ));
}

#[cfg(not(target_os = "macos"))]
#[test]
fn unsealed_or_foreign_descriptors_are_refused() {
    use rustix::fs::{memfd_create, MemfdFlags, SealFlags};
    // No seals at all.
    let fd = memfd_create("x", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
    rustix::fs::ftruncate(&fd, 4096).unwrap();
    match Segment::from_fd(fd, SizeCheck::AtLeast(1)) {
        Err(Error::MissingSeals { missing, .. }) => {
            assert_eq!(missing, memfd::REQUIRED_SEALS.bits());
        }
        other => panic!("expected MissingSeals, got {other:?}"),
    }
    // Sealed against shrinking only: it could still grow, and more seals could be added.
    let fd = memfd_create("x", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
    rustix::fs::ftruncate(&fd, 4096).unwrap();
    rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK).unwrap();
    assert!(matches!(
        Segment::from_fd(fd, SizeCheck::AtLeast(1)),
        Err(Error::MissingSeals { .. })
    ));
    // A socket is no segment.
    let (r, _w) = std::os::unix::net::UnixStream::pair().unwrap();
    assert!(matches!(
        Segment::from_fd(OwnedFd::from(r), SizeCheck::AtLeast(1)),
        Err(Error::MissingSeals { .. })
    ));
}

#[test]
fn memfd_passes_over_a_socket() {
    let (tx, rx) = std::os::unix::net::UnixStream::pair().unwrap();
    let a = Segment::create_memfd(4096, CreateOptions::new()).unwrap();
    fdpass::send_fd(&tx, a.fd(), &4096_u64.to_le_bytes()).unwrap();
    let mut buf = [0_u8; 8];
    let (fd, n) = fdpass::recv_fd(&rx, &mut buf, core::time::Duration::from_secs(5)).unwrap();
    assert_eq!(n, 8);
    let b = Segment::from_fd(fd, SizeCheck::Exactly(u64::from_le_bytes(buf))).unwrap();
    assert!(shares(&a, &b, 100, 0x77));
    assert!(rx.as_fd().try_clone_to_owned().is_ok());
}

#[test]
fn file_segments_round_trip() {
    let dir = scratch("file");
    let path = dir.join("ring");
    let a = Segment::create_file(&path, 5000, CreateOptions::new().populate(true)).unwrap();
    let b = Segment::open_file(&path, SizeCheck::Exactly(5000)).unwrap();
    assert!(shares(&a, &b, 4999, 1));
    assert!(matches!(
        Segment::create_file(&path, 5000, CreateOptions::new()),
        Err(Error::AlreadyExists { .. })
    ));
    a.unlink().unwrap();
    assert!(matches!(
        Segment::open_file(&path, SizeCheck::AtLeast(1)),
        Err(Error::NotFound { .. })
    ));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn huge_pages_work_or_say_why_not() {
    let (name, _c) = scratch_name("huge");
    assert!(matches!(
        Segment::create_named(&name, 4096, CreateOptions::new().huge_pages(true)),
        Err(Error::HugePages { .. })
    ));
    let dir = scratch("huge");
    assert!(matches!(
        Segment::create_file(&dir.join("h"), 4096, CreateOptions::new().huge_pages(true)),
        Err(Error::HugePages { .. })
    ));
    let free = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("HugePages_Free:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .unwrap_or(0);
    match Segment::create_memfd(4096, CreateOptions::new().huge_pages(true)) {
        Ok(seg) => {
            assert!(free > 0, "huge pages granted although none were free");
            assert!(seg.len() >= 4096 && seg.len() % (1 << 20) == 0);
        }
        Err(Error::HugePages { reason }) => {
            assert!(!reason.is_empty());
        }
        Err(e) => panic!("unexpected error {e}"),
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn unlink_leaves_a_re_created_name_alone() {
    let (name, _c) = scratch_name("recreated");
    let mut old = Segment::create_named(&name, 4096, CreateOptions::new()).unwrap();
    old.set_unlink_on_drop(true);
    // Someone else removes our name and creates a new segment under it.
    named::unlink(&name).unwrap();
    let new = Segment::create_named(&name, 4096, CreateOptions::new()).unwrap();
    assert!(matches!(old.unlink(), Err(Error::Replaced { .. })));
    drop(old);
    let reopened = Segment::open_named(&name, SizeCheck::AtLeast(1)).unwrap();
    assert_eq!(
        lock::identity(reopened.fd()).unwrap(),
        lock::identity(new.fd()).unwrap(),
        "unlink-on-drop removed the new segment"
    );
    new.unlink().unwrap();
    assert!(matches!(new.unlink(), Err(Error::NotFound { .. })));
}

#[test]
fn a_creating_handle_holds_the_creator_lock() {
    let (name, _c) = scratch_name("creator-lock");
    let seg = Segment::create_named(&name, 4096, CreateOptions::new()).unwrap();
    let other = Segment::open_named(&name, SizeCheck::AtLeast(1)).unwrap();
    assert_eq!(other.probe(Role::Creator), Liveness::Alive);
    assert!(other.lock_role(Role::Creator).unwrap().is_none());
    let memfd = Segment::create_memfd(4096, CreateOptions::new()).unwrap();
    assert_eq!(memfd.probe(Role::Creator), Liveness::Alive);
    seg.unlink().unwrap();
}
