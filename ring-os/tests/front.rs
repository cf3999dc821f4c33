//! The front door's promises about names: the creator's handle removes the name when dropped
//! (also when a panic unwinds through it), `keep_name` keeps it, and `open_or_create` on a
//! name that exists opens it without taking over its removal.
//!
//! Unix only: they watch the name in `/dev/shm`. A Windows section has no name to remove; it
//! vanishes with its last handle (see `docs/OS.md`, Windows).
#![cfg(unix)]
#![allow(clippy::std_instead_of_core, reason = "std test crate")]

use std::path::PathBuf;

use ring_os::prelude::*;

mod common;

use common::small;

fn unique(what: &str) -> String {
    format!("front-{what}-{}", std::process::id())
}

fn file(name: &str) -> PathBuf {
    PathBuf::from(format!("/dev/shm/shmring.{name}"))
}

#[test]
fn dropping_the_creator_removes_the_name() {
    let name = unique("drop");
    let ring = small(Ring::builder(&name), 2).create().unwrap();
    assert!(file(&name).exists());
    drop(ring);
    assert!(
        !file(&name).exists(),
        "the name outlived its creator's handle"
    );
}

#[test]
fn keep_name_keeps_it_and_remove_removes_it() {
    let name = unique("keep");
    let ring = small(Ring::builder(&name), 2)
        .keep_name(true)
        .create()
        .unwrap();
    drop(ring);
    assert!(
        file(&name).exists(),
        "keep_name(true) did not keep the name"
    );
    let again = Ring::builder(&name).open().unwrap();
    again.remove().unwrap();
    assert!(!file(&name).exists());
}

#[test]
fn a_panic_still_removes_the_name() {
    let name = unique("panic");
    let n2 = name.clone();
    let result = std::panic::catch_unwind(move || {
        let _ring = small(Ring::builder(&n2), 2).create().unwrap();
        panic!("the program failed half way");
    });
    assert!(result.is_err());
    assert!(!file(&name).exists(), "a panic left the name behind");
    // So the next run can create it again instead of failing with AlreadyExists.
    drop(Ring::builder(&name).create().unwrap());
}

#[test]
fn open_or_create_opens_an_existing_ring_and_only_the_creator_removes_it() {
    let name = unique("ooc");
    let creator = small(Ring::builder(&name), 4).open_or_create().unwrap();
    let opener = small(Ring::builder(&name), 4).open_or_create().unwrap();
    drop(opener);
    assert!(file(&name).exists(), "an opener removed the creator's name");
    assert!(matches!(
        Ring::builder(&name).slots(8).open(),
        Err(Error::ConfigMismatch {
            field: "slots",
            found: 4,
            expected: 8
        })
    ));
    drop(creator);
    assert!(!file(&name).exists());
}

#[test]
fn already_exists_reads_as_a_hint() {
    let name = unique("exists");
    let _ring = Ring::builder(&name).create().unwrap();
    let err = Ring::builder(&name).create().unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }));
    let text = err.to_string();
    assert!(
        text.contains("ringctl clean") || text.contains("remove"),
        "{text}"
    );
}
