//! The flock role locks: seen by this process, refused to a second holder, held by a child until
//! it is killed, shared with a forked child, gated by a cleaner, and tidied up by the last holder.

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt as _;
use std::time::Instant;

use super::*;
use crate::settle::heirs::{assert_released, released};
use crate::settle::{in_some_round, settles};

/// A scratch lock directory of this test process.
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ring-os-flock-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `role` of `roles`, which must be free.
fn hold(roles: &Roles, role: Role) -> RoleLock {
    RoleLock::try_acquire(roles, role).unwrap().unwrap()
}

/// Whether `role` of `roles` is free: taken and let go at once.
fn takes(roles: &Roles, role: Role) -> bool {
    RoleLock::try_acquire(roles, role).unwrap().is_some()
}

/// The lock files of `dir`, sorted.
fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_role_is_seen_by_its_own_process_refused_to_a_second_holder_and_freed_on_drop() {
    // The last holder out tidies up once, at its drop; a child another test forks meanwhile may
    // hold one of our locks then (see `crate::settle`), and the files stay, as they must for a
    // held lock. So a round that finds files left behind is run again; a tidy-up that never
    // works fails every round.
    in_some_round(5, own_round);
}

/// One round of `a_role_is_seen_by_its_own_process_refused_to_a_second_holder_and_freed_on_drop`;
/// `Err` names the files the last holder out left behind.
fn own_round(round: u32) -> Result<(), String> {
    let dir = scratch(&format!("own{round}"));
    let roles = Roles::in_dir(&dir, "ring");
    assert_eq!(probe(&roles, Role::Producer), Liveness::Dead);
    assert_eq!(probe_any(&roles), Liveness::Dead);
    let held = hold(&roles, Role::Producer);
    assert_eq!(held.role(), Role::Producer);
    assert_eq!(probe(&roles, Role::Producer), Liveness::Alive);
    assert_eq!(probe_any(&roles), Liveness::Alive);
    assert!(!takes(&roles, Role::Producer));
    assert!(AllRoles::try_acquire(&roles).unwrap().is_none());
    // Other roles are other files.
    assert_eq!(probe(&roles, Role::Consumer(0)), Liveness::Dead);
    let c7 = hold(&roles, Role::Consumer(7));
    assert_eq!(probe(&roles, Role::Consumer(7)), Liveness::Alive);
    drop(held);
    // Just released: a child forked meanwhile may hold it until it execs (see `crate::settle`).
    settles("the released producer role still looks held", || {
        (probe(&roles, Role::Producer) == Liveness::Dead).then_some(())
    });
    // Another segment's roles are untouched.
    assert_eq!(
        probe(&Roles::in_dir(&dir, "other"), Role::Consumer(7)),
        Liveness::Dead
    );
    assert_eq!(files_in(&dir), ["ring.c7", "ring.gate", "ring.producer"]);
    drop(c7);
    // The last holder out removed the segment's lock files.
    let left = files_in(&dir);
    let any = probe_any(&roles);
    std::fs::remove_dir_all(&dir).unwrap();
    if !left.is_empty() {
        return Err(format!("the last holder out left {left:?}"));
    }
    assert_eq!(any, Liveness::Dead);
    Ok(())
}

#[test]
fn a_cleaner_holding_every_role_keeps_participants_out_and_removes_the_files() {
    let dir = scratch("all");
    let roles = Roles::in_dir(&dir, "ring");
    drop(hold(&roles, Role::Creator));
    // Each grant below follows a release (a child forked meanwhile may hold the lock until it
    // execs, see `crate::settle`), so it settles; the refusal is asked once.
    let creator = settles("the released creator role was not granted", || {
        RoleLock::try_acquire(&roles, Role::Creator).unwrap()
    });
    let all = AllRoles::try_acquire(&roles).unwrap();
    assert!(all.is_none(), "a held role must refuse the cleaner");
    drop(creator);
    let all = settles("the cleaner was refused once the role was let go", || {
        AllRoles::try_acquire(&roles).unwrap()
    });
    assert!(!takes(&roles, Role::Consumer(3)));
    assert_eq!(probe_any(&roles), Liveness::Alive);
    drop(all);
    assert!(files_in(&dir).is_empty(), "{:?}", files_in(&dir));
    assert!(takes(&roles, Role::Consumer(3)));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Spawns `sleep 30` holding `fds` (as its descriptors 3, 4, ...), as a forked heir would.
fn child_holding(fds: &[BorrowedFd<'_>]) -> std::process::Child {
    let raws: Vec<i32> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    // All moved out of the way (to 100, 101, ...) before any is placed, so that placing one
    // cannot close another that sits at 3, 4, ... (the gate's descriptor was sometimes 3 or 4,
    // and the child then held the role file twice and the gate not at all).
    let mut cmd = std::process::Command::new("sleep");
    cmd.arg("30");
    // SAFETY: `dup2` and `fcntl` are async-signal-safe, and the descriptors stay open in the
    // parent until after `spawn` returns; `raws` is not reallocated in the child.
    unsafe {
        cmd.pre_exec(move || {
            for (i, &raw) in raws.iter().enumerate() {
                let high = 100 + i32::try_from(i).unwrap_or(0);
                if libc::dup2(raw, high) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for i in 0..raws.len() {
                let i = i32::try_from(i).unwrap_or(0);
                if libc::dup2(100 + i, 3 + i) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn().unwrap()
}

#[test]
fn a_role_held_by_another_process_is_alive_until_it_is_killed() {
    let dir = scratch("child");
    let roles = Roles::in_dir(&dir, "ring");
    let lock = hold(&roles, Role::Consumer(1));
    // The child shares both descriptions (as a forked heir would); then ours go.
    let mut child = child_holding(&[
        lock.file.as_ref().unwrap().as_fd(),
        lock.gate.as_ref().unwrap().as_fd(),
    ]);
    drop(lock);
    assert_eq!(probe(&roles, Role::Consumer(1)), Liveness::Alive);
    assert!(!takes(&roles, Role::Consumer(1)));
    child.kill().unwrap();
    // Killed, not yet reaped: the kernel closed its files at exit, so the role is free.
    let deadline = Instant::now() + Duration::from_secs(10);
    while probe(&roles, Role::Consumer(1)) == Liveness::Alive {
        assert!(Instant::now() < deadline, "a killed holder still holds it");
        std::thread::sleep(Duration::from_millis(2));
    }
    // Free now; but a child another test forked while we held the role may hold our copies of
    // its descriptions until it execs (a held role is released by its close alone; see
    // `crate::settle`).
    settles("the killed holder's role was not granted", || {
        takes(&roles, Role::Consumer(1)).then_some(())
    });
    child.wait().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tidying_up_a_segment_leaves_a_dotted_neighbour_alone() {
    // A child that another test of this binary forks holds a copy of every open descriptor
    // until its exec closes them, and with it our lock for that moment: a tidy-up that runs
    // then leaves the files (as it must for a lock someone holds). So a round that finds files
    // left behind is tried again; a tidy-up that never works fails every round. A tidy-up that
    // removes the neighbour's files fails at once.
    in_some_round(5, dotted_neighbour_round);
    assert!(is_role_suffix(b"c12") && is_role_suffix(b"creator"));
    assert!(!is_role_suffix(b"c") && !is_role_suffix(b"c1.producer") && !is_role_suffix(b"gate"));
}

/// One round of `tidying_up_a_segment_leaves_a_dotted_neighbour_alone`; `Err` names the files
/// a tidy-up left behind.
fn dotted_neighbour_round(round: u32) -> Result<(), String> {
    let dir = scratch(&format!("dotted{round}"));
    // Keys as macOS gives named segments: `cam` and `cam.c1` (names may contain dots).
    let cam = Roles::in_dir(&dir, "n.cam");
    let neighbour = Roles::in_dir(&dir, "n.cam.c1");
    let held = hold(&neighbour, Role::Producer);
    drop(hold(&cam, Role::Consumer(1)));
    let mid = files_in(&dir);
    // The neighbour's files are never removed while it holds its lock.
    assert!(
        mid.iter().any(|f| f == "n.cam.c1.gate") && mid.iter().any(|f| f == "n.cam.c1.producer"),
        "{mid:?}"
    );
    assert_eq!(probe(&neighbour, Role::Producer), Liveness::Alive);
    drop(held);
    let left = files_in(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    if mid.len() == 2 && left.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "left after cam's tidy-up: {mid:?}; after the neighbour's: {left:?}"
        ))
    }
}

#[test]
fn a_sweep_removes_the_files_of_dead_holders_only() {
    // The live holder's tidy-up at its drop runs once: rounds, as for
    // `tidying_up_a_segment_leaves_a_dotted_neighbour_alone`.
    in_some_round(5, sweep_round);
}

/// One round of `a_sweep_removes_the_files_of_dead_holders_only`; `Err` names the files the
/// live holder's tidy-up left behind.
fn sweep_round(round: u32) -> Result<(), String> {
    let dir = scratch(&format!("sweep{round}"));
    let live = Roles::in_dir(&dir, "i.1.7");
    let held = hold(&live, Role::Consumer(2));
    // What a holder killed before its tidy-up leaves: files nobody has locked (the kernel closed
    // its descriptors), here a gate-less remnant too; and a file that is not a lock file.
    for orphan in ["n.cam.gate", "n.cam.producer", "n.cam.c3", "n.old.creator"] {
        std::fs::write(dir.join(orphan), b"").unwrap();
    }
    std::fs::write(dir.join("unrelated.txt"), b"x").unwrap();
    assert_eq!(sweep_in(&dir).unwrap(), 2);
    assert_eq!(files_in(&dir), ["i.1.7.c2", "i.1.7.gate", "unrelated.txt"]);
    assert_eq!(probe(&live, Role::Consumer(2)), Liveness::Alive);
    drop(held);
    let left = files_in(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    if left == ["unrelated.txt"] {
        Ok(())
    } else {
        Err(format!("left after the live holder's tidy-up: {left:?}"))
    }
}

#[test]
fn a_lock_on_a_removed_file_is_not_the_role() {
    let dir = scratch("removed");
    let roles = Roles::in_dir(&dir, "ring");
    let path = roles.role_file(Role::Producer);
    // Someone holds the producer file that a (misbehaving) peer then removed: a new holder gets
    // the role on the new file, and a probe sees the new holder.
    let stale = open(&path, true).unwrap();
    rustix::fs::flock(&stale, FlockOperation::NonBlockingLockExclusive).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(probe(&roles, Role::Producer), Liveness::Dead);
    let held = hold(&roles, Role::Producer);
    assert_eq!(probe(&roles, Role::Producer), Liveness::Alive);
    assert!(still_named(&path, held.file.as_ref().unwrap().as_fd()).unwrap());
    drop((held, stale));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_lock_directory_is_private() {
    let dir = lock_dir().unwrap();
    let st = rustix::fs::lstat(dir).unwrap();
    assert_eq!(crate::segment::mode_bits(&st) & 0o077, 0);
    assert_eq!(st.st_uid, rustix::process::geteuid().as_raw());
}

/// A description of the file `path` names (made if missing) of the test's own, holding nothing.
fn watch(path: &Path) -> OwnedFd {
    open(path, true).unwrap()
}

/// Whether the file open as `fd` (a description that holds nothing) can be locked exclusive at
/// once; unlocked again.
fn free_through(fd: &OwnedFd) -> bool {
    let free = rustix::fs::flock(fd, FlockOperation::NonBlockingLockExclusive).is_ok();
    let _ = rustix::fs::flock(fd, FlockOperation::Unlock);
    free
}

// Momentary locks (see the module docs): each path below lets one go with `released` forking a
// child just before (`crate::settle::heirs`); the lock must be free at once all the same. The
// keys are fresh (nobody held a role of them, so no other test's child holds a copy of their
// descriptions) and every check is asked once.

/// A scratch lock directory `tag` and the lock files of a segment in it.
fn fresh(tag: &str) -> (PathBuf, Roles) {
    let dir = scratch(tag);
    let roles = Roles::in_dir(&dir, "ring");
    (dir, roles)
}

#[test]
fn a_probe_leaves_no_lock_to_a_child_forked_meanwhile() {
    let (dir, roles) = fresh("momentary-probe");
    let file = watch(&roles.role_file(Role::Consumer(1)));
    assert_released(
        "probe",
        || probe(&roles, Role::Consumer(1)) == Liveness::Dead,
        || free_through(&file),
    );
    let gate = watch(&roles.file("gate"));
    assert_released(
        "probe_any",
        || probe_any(&roles) == Liveness::Dead,
        || free_through(&gate),
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_refused_role_lock_leaves_no_gate_lock_to_a_child_forked_meanwhile() {
    // Refused because the role's file is held: the gate, taken shared first, is let go.
    let (dir, roles) = fresh("momentary-refused");
    let gate = watch(&roles.file("gate"));
    let role = lock_file(
        &roles.role_file(Role::Producer),
        FlockOperation::NonBlockingLockExclusive,
    )
    .unwrap()
    .unwrap();
    assert_released(
        "a refused role lock",
        || !takes(&roles, Role::Producer),
        || free_through(&gate),
    );
    drop(role);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_cleaner_leaves_no_gate_lock_to_a_child_forked_meanwhile() {
    let (dir, roles) = fresh("momentary-cleaner");
    let gate = watch(&roles.file("gate"));
    assert_released(
        "a cleaner",
        || AllRoles::try_acquire(&roles).unwrap().is_some(),
        || free_through(&gate),
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_last_holders_tidy_up_leaves_no_gate_lock_to_a_child_forked_meanwhile() {
    // The held role is released by its close alone: a child another test forks meanwhile may
    // keep it until it execs, and then no tidy-up runs (such a round is run again).
    let dir = scratch("momentary-tidy");
    in_some_round(20, |n| {
        let roles = Roles::in_dir(&dir, &format!("ring{n}"));
        let held = hold(&roles, Role::Consumer(2));
        let gate = watch(&roles.file("gate"));
        let last_out = || {
            drop(held);
            true
        };
        released("the tidy-up", last_out, || free_through(&gate))
    });
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_released_role_lock_leaves_nothing_to_a_child_forked_meanwhile() {
    // `release` (a reclaim's lock, a registration given up) unlocks both descriptions, copies
    // or not; then the last holder's tidy-up removes the files.
    let (dir, roles) = fresh("momentary-release");
    let held = hold(&roles, Role::Consumer(3));
    let file = watch(&roles.role_file(Role::Consumer(3)));
    let gate = watch(&roles.file("gate"));
    let release = || {
        // A child forked while it is held (not only at the moment it is let go).
        crate::settle::heirs::at_release();
        held.release();
        true
    };
    assert_released("a released role lock", release, || {
        free_through(&file) && free_through(&gate)
    });
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The portable build on Linux: refused because a default build holds the role through its OFD
/// lock, this build's own momentary locks are let go.
#[cfg(all(ring_cross, ring_portable))]
#[test]
fn locks_refused_by_the_other_kind_leave_nothing_to_a_child_forked_meanwhile() {
    let memfd = rustix::fs::memfd_create("momentary", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    let roles = Roles::of_file(memfd.as_fd()).unwrap();
    let ofd = crate::liveness::other::RoleLock::try_acquire(memfd.as_fd(), Role::Consumer(1))
        .unwrap()
        .unwrap();
    let file = watch(&roles.role_file(Role::Consumer(1)));
    let gate = watch(&roles.file("gate"));
    assert_released(
        "a role lock refused by the other kind",
        || !takes(&roles, Role::Consumer(1)),
        || free_through(&file) && free_through(&gate),
    );
    // That refusal's tidy-up removed the files: watch the gate the cleaner makes again.
    let gate = watch(&roles.file("gate"));
    assert_released(
        "a cleaner refused by the other kind",
        || AllRoles::try_acquire(&roles).unwrap().is_none(),
        || free_through(&gate),
    );
    drop(ofd);
    roles.remove_files();
}
