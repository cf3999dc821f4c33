//! A ring held only through the backend this build did not choose (as a program built the other
//! way holds it: `other`'s role locks, on descriptions of their own) must look alive to every
//! verdict of this build: probes, role locks (take-over, reclaim), the cleaner. Run with and
//! without `portable`, so both directions are covered: OFD holder against the portable
//! cleaner, lock-file holder against the default one.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ring_core::inspect::consumer_info;
use ring_core::{Config, Consumer, DeliveryClass, OwnerId, Producer};

use super::*;
use crate::raw::ShmRing;
use crate::segment::stale::{self, SegmentInfo};
use crate::segment::{CreateOptions, Segment, SizeCheck};
use crate::settle::settles;

/// A scratch directory of segment files, removed on drop.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The scratch directory `tag` and the path of its segment `name` (as `stale` lists them).
fn dir_and_file(tag: &str, name: &str) -> (Dir, PathBuf) {
    let dir = std::env::temp_dir().join(format!("ring-os-cross-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{}{name}", crate::raw::NAME_PREFIX));
    (Dir(dir), file)
}

/// Takes `role` of `seg` the other backend's way; `None` when it is held.
fn hold_other(seg: &Segment, role: Role) -> Option<other::RoleLock> {
    #[cfg(not(ring_portable))]
    let held = other::RoleLock::try_acquire(&other::Roles::of_file(seg.fd()).unwrap(), role);
    #[cfg(ring_portable)]
    let held = other::RoleLock::try_acquire(seg.fd(), role);
    held.unwrap()
}

/// This build's "any role held?" verdict on `seg`.
fn any_held(seg: &Segment) -> Liveness {
    #[cfg(not(ring_portable))]
    let verdict = crate::liveness::lock::probe_any(seg.fd());
    #[cfg(ring_portable)]
    let verdict = crate::liveness::lock::probe_any(seg.roles());
    verdict
}

/// A segment file nobody holds a role of in this build (its creator's handle dropped), opened.
fn unheld_segment(path: &Path) -> Segment {
    drop(Segment::create_file(path, 8192, CreateOptions::new()).unwrap());
    Segment::open_file(path, SizeCheck::AtLeast(1)).unwrap()
}

#[test]
fn a_role_held_through_the_other_backend_is_alive_to_probes_and_refused_to_role_locks() {
    let (_dir, path) = dir_and_file("probe", "probe");
    let seg = unheld_segment(&path);
    // The creator's handle is dropped; a child forked meanwhile may hold its lock until it execs.
    settles("a segment whose creator let go still looks held", || {
        (any_held(&seg) == Liveness::Dead).then_some(())
    });
    settles("the unheld producer role was not granted", || {
        seg.lock_role(Role::Producer).unwrap().map(drop)
    });

    let held = hold_other(&seg, Role::Producer).expect("free");
    assert_eq!(seg.probe(Role::Producer), Liveness::Alive);
    assert_eq!(any_held(&seg), Liveness::Alive);
    assert!(
        seg.lock_role(Role::Producer).unwrap().is_none(),
        "a role held through the other backend must not be granted (a take-over would follow)"
    );
    assert!(
        seg.lock_all_roles().unwrap().is_none(),
        "nor may a cleaner hold the segment"
    );
    // Per role: another role is still free. Settled: the two refusals above took this build's
    // lock first (the cleaner's covers every role) and let go once the other kind said held; a
    // child forked meanwhile may hold those until it execs (seen failing here in a loop of
    // this binary: `Alive`).
    settles("an unheld role looks held beside the held one", || {
        (seg.probe(Role::Consumer(1)) == Liveness::Dead).then_some(())
    });
    settles("an unheld role was not granted beside the held one", || {
        seg.lock_role(Role::Consumer(1)).unwrap().map(drop)
    });

    drop(held);
    // Every lock this test took is released now, but a child another test forked meanwhile may
    // still hold a description of one (the role lock just dropped, or the ones taken and dropped
    // above) until it execs: each verdict below settles rather than being asked once.
    settles("the released role still looks held", || {
        (seg.probe(Role::Producer) == Liveness::Dead).then_some(())
    });
    settles("a role still looks held once every holder let go", || {
        (any_held(&seg) == Liveness::Dead).then_some(())
    });
    settles("the released producer role was not granted", || {
        seg.lock_role(Role::Producer).unwrap().map(drop)
    });
    settles("a cleaner could not hold the released segment", || {
        seg.lock_all_roles().unwrap().map(drop)
    });
}

#[test]
fn a_cleaner_keeps_a_ring_held_only_through_the_other_backend() {
    let (dir, path) = dir_and_file("clean", "held");
    let config = Config::new(4, 64).with_consumers(2);
    drop(ShmRing::create_file(&path, &config, CreateOptions::new()).unwrap());
    let seg = Segment::open_file(&path, SizeCheck::AtLeast(1)).unwrap();
    // Listed while nobody held it: a stale candidate, which the removal must re-check. (The
    // creator let go; a child forked meanwhile may hold its lock until it execs.)
    let before: Vec<SegmentInfo> = settles("the unheld ring was never listed stale", || {
        let listed = stale::list_in(&dir.0).unwrap();
        assert_eq!(listed.len(), 1);
        (listed[0].status() == "stale").then_some(listed)
    });

    let held = hold_other(&seg, Role::Consumer(0)).expect("free");
    drop(seg);
    let listed = stale::list_in(&dir.0).unwrap();
    assert_eq!(listed[0].status(), "live", "{listed:?}");
    let report = stale::clean_listed(&dir.0, listed);
    assert!(report.removed.is_empty(), "{report:?}");
    // The stale listing from before the holder joined: the removal's own lock must refuse.
    let report = stale::clean_listed(&dir.0, before);
    assert!(report.removed.is_empty(), "{report:?}");
    assert!(path.exists(), "a live ring was removed");

    drop(held);
    settles("the ring was not removed once nobody held it", || {
        let report = stale::clean_listed(&dir.0, stale::list_in(&dir.0).unwrap());
        (report.removed.len() == 1).then_some(())
    });
    assert!(!path.exists());
}

#[test]
fn a_producer_or_consumer_held_through_the_other_backend_is_neither_taken_over_nor_reclaimed() {
    let (_dir, path) = dir_and_file("takeover", "ring");
    let config = Config::new(4, 64).with_consumers(2);
    let ring = ShmRing::create_file(&path, &config, CreateOptions::new()).unwrap();
    let them = OwnerId::new(0x5eed_0000_0001).unwrap();

    // A producer of a program built the other way: its lock, then its registration.
    let producer_lock = hold_other(ring.segment(), Role::Producer).expect("free");
    // SAFETY: `producer_lock` (the other backend's lock of the role) is held for as long as `p`
    // lives, as that program would hold it; this build's verdicts must judge it alive.
    let p = unsafe { Producer::new_unchecked(Arc::clone(&ring), them) }.unwrap();
    assert!(
        matches!(
            crate::liveness::roles::become_producer(&ring),
            Err(Error::ProducerAlive { .. })
        ),
        "a live producer of the other backend was taken over"
    );
    drop(p);
    drop(producer_lock);

    // A consumer of such a program in entry 1, and a producer of this build that reclaims.
    let consumer_lock = hold_other(ring.segment(), Role::Consumer(1)).expect("free");
    // SAFETY: as above, with the consumer's lock held while `c` lives.
    let c = unsafe {
        Consumer::new_at_unchecked(Arc::clone(&ring), 1, DeliveryClass::Gating, them)
            .map_err(|(_, e)| e)
    }
    .unwrap();
    // The released producer role (a child forked meanwhile may hold it until it execs).
    let (mut ours, _our_lock) = settles("the released producer role was not granted", || {
        crate::liveness::roles::become_producer(&ring).ok()
    });
    assert_eq!(
        crate::liveness::roles::reclaim_if_dead(&mut ours, 1),
        None,
        "a live consumer of the other backend was reclaimed"
    );
    assert_eq!(consumer_info(&*ring, 1).unwrap().owner, them.get());
    // Its process dies: the consumer runs no destructor, the kernel releases its lock.
    core::mem::forget(c);
    drop(consumer_lock);
    settles("the dead consumer was not reclaimed", || {
        crate::liveness::roles::reclaim_if_dead(&mut ours, 1)
    });
    assert_eq!(consumer_info(&*ring, 1).unwrap().owner, 0);
}
