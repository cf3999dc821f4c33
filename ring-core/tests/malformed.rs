//! Attaching to corrupt bytes: each header field corrupted in turn gives its specific error.
#![cfg(not(any(ring_loom, ring_shuttle)))]

use ring_core::layout::{SegmentHeader, ABI_VERSION, INIT_BUSY, LAYOUT_FINGERPRINT, MAGIC};
use ring_core::{AttachError, Config, HeapSegment, LayoutError, Memory, OwnerId};
use std::mem::offset_of;

fn good() -> Vec<u8> {
    let cfg = Config::new(4, 64)
        .with_consumers(4)
        .with_allocator(4096, 16);
    HeapSegment::new(&cfg, OwnerId::new(1).unwrap())
        .unwrap()
        .to_bytes()
}

fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
}

fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}

fn attach(b: &[u8]) -> Result<HeapSegment, AttachError> {
    HeapSegment::from_bytes(b)
}

#[test]
fn the_good_segment_attaches_with_its_geometry() {
    let seg = attach(&good()).unwrap();
    assert_eq!(seg.geometry().slots(), 4);
    assert_eq!(seg.geometry().consumers(), 4);
}

#[test]
fn each_corrupt_field_is_named() {
    type Case = (&'static str, fn(&mut Vec<u8>), fn(&AttachError) -> bool);
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        ("magic", |b| put_u64(b, offset_of!(SegmentHeader, magic), MAGIC ^ 1), |e| matches!(e, AttachError::BadMagic { found } if *found == MAGIC ^ 1)),
        ("abi", |b| put_u32(b, offset_of!(SegmentHeader, abi_version), 99), |e| *e == AttachError::AbiMismatch { found: 99, expected: ABI_VERSION }),
        ("init", |b| put_u32(b, offset_of!(SegmentHeader, init_state), 1), |e| *e == AttachError::NotInitialized { state: 1 }),
        ("fingerprint", |b| put_u64(b, offset_of!(SegmentHeader, fingerprint), 5), |e| *e == AttachError::LayoutMismatch { found: 5, expected: LAYOUT_FINGERPRINT }),
        ("slots=0", |b| put_u32(b, offset_of!(SegmentHeader, slots), 0), |e| matches!(e, AttachError::BadGeometry(LayoutError::Slots { value: 0, .. }))),
        ("slots huge", |b| put_u32(b, offset_of!(SegmentHeader, slots), u32::MAX), |e| matches!(e, AttachError::BadGeometry(LayoutError::Slots { .. }))),
        ("capacity", |b| put_u32(b, offset_of!(SegmentHeader, slot_capacity), 3), |e| matches!(e, AttachError::BadGeometry(LayoutError::SlotCapacity { value: 3, .. }))),
        ("consumers", |b| put_u32(b, offset_of!(SegmentHeader, consumers), 33), |e| matches!(e, AttachError::BadGeometry(LayoutError::Consumers { value: 33, .. }))),
        ("alloc ceiling", |b| put_u32(b, offset_of!(SegmentHeader, alloc_max_live), 0), |e| matches!(e, AttachError::BadGeometry(LayoutError::Allocator))),
        ("alloc arena", |b| put_u64(b, offset_of!(SegmentHeader, alloc_arena), u64::MAX), |e| matches!(e, AttachError::BadGeometry(LayoutError::Allocator))),
        ("producer_off", |b| put_u64(b, offset_of!(SegmentHeader, producer_off), 8), |e| matches!(e, AttachError::FieldMismatch { field: "producer_off", found: 8, .. })),
        ("truncated", |b| b.truncate(b.len() - 128), |e| matches!(e, AttachError::Truncated { .. })),
        ("header only", |b| b.truncate(100), |e| matches!(e, AttachError::Truncated { .. })),
        ("empty", |b| b.clear(), |e| matches!(e, AttachError::Truncated { needed: _, len: 0 })),
    ];
    for (name, corrupt, expect) in cases {
        let err = corrupted(name, corrupt);
        assert!(expect(&err), "{name}: unexpected error {err:?}");
    }
    // Fields whose corruption the attacher finds when it recomputes the layout: the error names
    // the field that disagrees.
    type Named = (&'static str, fn(&mut Vec<u8>), &'static str);
    #[rustfmt::skip]
    let named: Vec<Named> = vec![
        ("slots bigger", |b| put_u32(b, offset_of!(SegmentHeader, slots), 5), "payloads_off"),
        ("capacity unaligned", |b| put_u32(b, offset_of!(SegmentHeader, slot_capacity), 60), "slot_capacity"),
        ("consumers_off", |b| put_u64(b, offset_of!(SegmentHeader, consumers_off), 1 << 40), "consumers_off"),
        ("slots_off", |b| put_u64(b, offset_of!(SegmentHeader, slots_off), 0), "slots_off"),
        ("payloads_off", |b| put_u64(b, offset_of!(SegmentHeader, payloads_off), 1), "payloads_off"),
        ("alloc_off", |b| put_u64(b, offset_of!(SegmentHeader, alloc_off), u64::MAX), "alloc_off"),
        ("alloc_len", |b| put_u64(b, offset_of!(SegmentHeader, alloc_len), 7), "alloc_len"),
        ("total_len", |b| put_u64(b, offset_of!(SegmentHeader, total_len), 1 << 62), "total_len"),
    ];
    for (name, corrupt, field) in named {
        let err = corrupted(name, corrupt);
        assert!(
            matches!(err, AttachError::FieldMismatch { field: f, .. } if f == field),
            "{name}: unexpected error {err:?}"
        );
    }
}

/// The error attaching to the good segment corrupted by `corrupt` gives (it must fail, and
/// say something); `name` names the case in a failure.
fn corrupted(name: &str, corrupt: fn(&mut Vec<u8>)) -> AttachError {
    let mut b = good();
    corrupt(&mut b);
    let err = attach(&b).expect_err(name);
    assert!(!err.to_string().is_empty());
    err
}

#[test]
fn random_garbage_never_panics() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let base = good();
    let rounds = if cfg!(miri) { 20 } else { 2000 };
    let mut refused = 0;
    for _ in 0..rounds {
        let mut b = base.clone();
        for _ in 0..4 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let pos = (x as usize) % 128;
            b[pos] = (x >> 32) as u8;
        }
        match attach(&b) {
            Ok(seg) => assert!(seg.geometry().total_len() <= b.len()),
            Err(e) => {
                assert!(!e.to_string().is_empty());
                refused += 1;
            }
        }
    }
    // Four random bytes in the header almost always hit a checked field.
    assert!(
        refused > rounds / 2,
        "only {refused} of {rounds} corrupt headers were refused"
    );
}

/// A header caught while its creator formats it (magic written, ABI version not yet, the init
/// barrier closed) is "not initialised yet", which openers retry, not an ABI mismatch: the
/// barrier is loaded before every other field.
#[test]
fn a_half_formatted_header_is_not_initialized_yet() {
    let mut b = good();
    put_u32(&mut b, offset_of!(SegmentHeader, abi_version), 0);
    put_u32(&mut b, offset_of!(SegmentHeader, init_state), INIT_BUSY);
    assert_eq!(
        attach(&b).err(),
        Some(AttachError::NotInitialized { state: INIT_BUSY })
    );
}
