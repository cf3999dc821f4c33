//! The default Linux build (OFD locks in the segment file) also asks the portable backend's
//! lock files before it judges a role free (`liveness/cross.rs`). Asking must not make the
//! portable lock directory: a default build that never meets a portable one leaves no
//! `shmring-locks.<uid>` behind. Only a cleaner makes it, to hold the portable gate.
//!
//! One test in this binary: it points `SHMRING_LOCK_DIR` at a fresh path before anything
//! looks the directory up (the lookup is cached per process).
#![cfg(all(target_os = "linux", not(ring_portable)))]
#![allow(clippy::std_instead_of_core, reason = "std test crate")]

use ring_os::prelude::*;

mod common;

use common::small;

#[test]
fn roles_taken_and_probed_leave_no_lock_directory_and_a_clean_makes_it() {
    let dir = std::env::temp_dir().join(format!("shmring-lock-dir-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // SAFETY: the only test of this binary, before it starts any thread that reads the
    // environment.
    unsafe { std::env::set_var("SHMRING_LOCK_DIR", &dir) };
    let name = format!("lock-dir-{}", std::process::id());
    let ring = small(Ring::builder(&name), 4)
        .keep_name(true)
        .create()
        .unwrap();
    let mut tx = ring.publisher().unwrap();
    let mut rx = ring.subscriber(DeliveryClass::Gating).unwrap();
    // A second publisher probes the live one (through both kinds) and is refused.
    assert!(matches!(
        ring.publisher().err(),
        Some(Error::ProducerAlive { .. })
    ));
    tx.send(b"x").unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(rx.try_recv(&mut buf).unwrap().len, 1);
    // Listing probes every role of the segment, through both kinds.
    let shm = std::path::Path::new("/dev/shm");
    let ours = |list: Vec<ring_os::raw::stale::SegmentInfo>| -> Vec<_> {
        list.into_iter()
            .filter(|s| s.name.as_str() == name)
            .collect()
    };
    assert_eq!(ours(ring_os::raw::stale::list_in(shm).unwrap()).len(), 1);
    assert!(
        !dir.exists(),
        "taking and probing roles made the portable lock directory {}",
        dir.display()
    );
    drop((tx, rx, ring));
    // A cleaner holds the portable gate too, so it makes the directory (only ours is listed).
    let report =
        ring_os::raw::stale::clean_listed(shm, ours(ring_os::raw::stale::list_in(shm).unwrap()));
    assert_eq!(report.removed.len(), 1, "{report:?}");
    assert!(dir.is_dir(), "the cleaner did not make {}", dir.display());
    std::fs::remove_dir_all(&dir).unwrap();
}
