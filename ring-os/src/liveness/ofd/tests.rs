//! Role locks on every kind of file a segment can live in, held by this process and by others.

use std::os::fd::{AsFd as _, AsRawFd as _, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::time::{Duration, Instant};

use super::*;
use crate::settle::heirs::assert_released;

/// A memfd, a file in `/dev/shm` and a file in `/tmp`, each with a name to remove afterwards.
fn files(tag: &str) -> Vec<(&'static str, OwnedFd, Option<std::path::PathBuf>)> {
    let memfd = rustix::fs::memfd_create("lock-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    let mut out = vec![("memfd", memfd, None)];
    for (what, dir) in [("/dev/shm", "/dev/shm"), ("/tmp", "/tmp")] {
        let path =
            std::path::PathBuf::from(format!("{dir}/ring-os-lock-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        out.push((what, OwnedFd::from(f), Some(path)));
    }
    out
}

/// `role` on `file`, which must be free.
fn hold(file: BorrowedFd<'_>, role: Role) -> RoleLock {
    RoleLock::try_acquire(file, role).unwrap().unwrap()
}

/// Whether `role` on `file` is free: taken and let go at once.
fn takes(file: BorrowedFd<'_>, role: Role) -> bool {
    RoleLock::try_acquire(file, role).unwrap().is_some()
}

/// Waits (at most 10 s) for `check` to say dead. A lock is released when the last reference to
/// its open file description closes; a child that another test forks meanwhile holds a
/// reference until it execs (the descriptors are close-on-exec), so a release can take a moment.
fn settles_dead(check: impl Fn() -> Liveness) -> Liveness {
    let deadline = Instant::now() + Duration::from_secs(10);
    while check() == Liveness::Alive && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    check()
}

#[test]
fn a_lock_is_seen_through_the_segment_descriptor_and_freed_on_drop() {
    for (what, fd, path) in files("own") {
        let file = fd.as_fd();
        assert_eq!(probe(file, Role::Producer), Liveness::Dead, "{what}");
        let held = hold(file, Role::Producer);
        assert_eq!(held.role(), Role::Producer);
        // Same process, another description: must be seen, and must refuse a second holder.
        assert_eq!(probe(file, Role::Producer), Liveness::Alive, "{what}");
        assert_eq!(probe_any(file), Liveness::Alive, "{what}");
        assert!(!takes(file, Role::Producer), "{what}");
        assert!(
            AllRoles::try_acquire(file, None).unwrap().is_none(),
            "{what}"
        );
        // Other roles are other bytes.
        assert_eq!(probe(file, Role::Creator), Liveness::Dead, "{what}");
        assert_eq!(probe(file, Role::Consumer(0)), Liveness::Dead, "{what}");
        let c7 = hold(file, Role::Consumer(7));
        assert_eq!(probe(file, Role::Consumer(7)), Liveness::Alive, "{what}");
        assert_eq!(probe(file, Role::Consumer(6)), Liveness::Dead, "{what}");
        drop(held);
        assert_eq!(
            settles_dead(|| probe(file, Role::Producer)),
            Liveness::Dead,
            "{what}"
        );
        drop(c7);
        assert_eq!(settles_dead(|| probe_any(file)), Liveness::Dead, "{what}");
        let all = AllRoles::try_acquire(file, None).unwrap().unwrap();
        assert!(!takes(file, Role::Consumer(3)), "{what}");
        drop(all);
        settles_dead(|| probe_any(file));
        assert!(takes(file, Role::Consumer(3)), "{what}");
        if let Some(p) = path {
            std::fs::remove_file(p).unwrap();
        }
    }
}

#[test]
fn a_lock_held_by_another_process_is_alive_until_it_is_killed() {
    for (what, fd, path) in files("child") {
        let file = fd.as_fd();
        let lock = hold(file, Role::Consumer(1));
        // Hand the lock's own description to a child (as fd 3), then let go of ours: the lock
        // now lives exactly as long as the child.
        let raw = lock.lock.fd.as_raw_fd();
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("30");
        // SAFETY: `dup2` and `fcntl` are async-signal-safe, and `raw` stays open in the parent
        // until after `spawn` returns.
        unsafe {
            cmd.pre_exec(move || {
                // `dup2(3, 3)` is a no-op that keeps the close-on-exec flag: when the lock's
                // descriptor already is 3, clear the flag instead, or the child holds nothing.
                let ok = if raw == 3 {
                    libc::fcntl(3, libc::F_SETFD, 0) >= 0
                } else {
                    libc::dup2(raw, 3) >= 0
                };
                if !ok {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        drop(lock);
        assert_eq!(probe(file, Role::Consumer(1)), Liveness::Alive, "{what}");
        assert!(!takes(file, Role::Consumer(1)), "{what}");
        child.kill().unwrap();
        // Killed, not yet reaped: the kernel closed its files at exit, so the byte is free.
        let deadline = Instant::now() + Duration::from_secs(10);
        while probe(file, Role::Consumer(1)) == Liveness::Alive {
            assert!(
                Instant::now() < deadline,
                "{what}: killed holder still holds the lock"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(takes(file, Role::Consumer(1)), "{what}");
        child.wait().unwrap();
        if let Some(p) = path {
            std::fs::remove_file(p).unwrap();
        }
    }
}

#[test]
fn the_path_fallback_must_name_the_same_file() {
    let files = files("path");
    let (_, shm_fd, shm_path) = &files[1];
    let (_, tmp_fd, tmp_path) = &files[2];
    let (shm_path, tmp_path) = (shm_path.clone().unwrap(), tmp_path.clone().unwrap());
    let want = identity(tmp_fd.as_fd()).unwrap();
    assert!(open_same(&tmp_path, want).is_ok());
    // A path that names another file now (replaced under us) is refused, never locked.
    assert!(open_same(&shm_path, want).is_err());
    assert_ne!(identity(shm_fd.as_fd()).unwrap(), want);
    std::fs::remove_file(shm_path).unwrap();
    std::fs::remove_file(tmp_path).unwrap();
}

#[test]
fn role_offsets() {
    assert_eq!(Role::Creator.offset(), Some(0));
    assert_eq!(Role::Producer.offset(), Some(1));
    assert_eq!(Role::Consumer(0).offset(), Some(2));
    assert_eq!(Role::Consumer(31).offset(), Some(33));
    assert_eq!(Role::Consumer(usize::MAX).offset(), None);
    let fd = rustix::fs::memfd_create("x", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    assert_eq!(
        probe(fd.as_fd(), Role::Consumer(usize::MAX)),
        Liveness::Alive
    );
    assert!(RoleLock::try_acquire(fd.as_fd(), Role::Consumer(usize::MAX)).is_err());
}

/// Whether no lock of another description conflicts with a write lock on `[start, start + len)`
/// of `file`, asked once (this backend's own locks only).
fn free_range(file: BorrowedFd<'_>, start: i64, len: i64) -> bool {
    sys::conflicting(file, start, len).is_ok_and(|held| !held)
}

// Momentary locks (see the module docs): each path below lets one go with `released` forking a
// child just before (`crate::settle::heirs`); the lock must be free at once all the same. Each
// test locks a memfd nobody else ever locked (no other test's child holds a copy of its
// descriptions), and every check is asked once.

#[test]
fn a_cleaner_leaves_no_lock_to_a_child_forked_meanwhile() {
    let memfd = rustix::fs::memfd_create("momentary", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    let file = memfd.as_fd();
    assert_released(
        "a cleaner",
        || AllRoles::try_acquire(file, None).unwrap().is_some(),
        || free_range(file, 0, 0),
    );
}

#[test]
fn a_released_role_lock_leaves_nothing_to_a_child_forked_meanwhile() {
    // `release` (a reclaim's lock, a registration given up) unlocks, copies or not.
    let memfd = rustix::fs::memfd_create("momentary", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    let file = memfd.as_fd();
    let held = hold(file, Role::Consumer(3));
    let release = || {
        // A child forked while it is held (not only at the moment it is let go).
        crate::settle::heirs::at_release();
        held.release();
        true
    };
    assert_released("a released role lock", release, || free_range(file, 5, 1));
}

/// The default build on Linux: refused because a portable build holds the role through its lock
/// file, the OFD lock taken first is let go.
#[cfg(not(ring_portable))]
#[test]
fn locks_refused_by_the_other_kind_leave_nothing_to_a_child_forked_meanwhile() {
    let memfd = rustix::fs::memfd_create("momentary", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    let file = memfd.as_fd();
    let roles = crate::liveness::other::Roles::of_file(file).unwrap();
    let portable = crate::liveness::other::RoleLock::try_acquire(&roles, Role::Consumer(1))
        .unwrap()
        .unwrap();
    assert_released(
        "a role lock refused by the other kind",
        || !takes(file, Role::Consumer(1)),
        || free_range(file, 0, 0),
    );
    assert_released(
        "a cleaner refused by the other kind",
        || AllRoles::try_acquire(file, None).unwrap().is_none(),
        || free_range(file, 0, 0),
    );
    drop(portable);
}
