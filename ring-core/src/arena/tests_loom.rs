//! Loom model of the entry seqlock: a reader that looked up a handle and copies its bytes while
//! the mutator frees it and reuses the same entry and granule either gets the old allocation's
//! bytes or an error, never the new one's. Run with
//! `RUSTFLAGS="--cfg ring_loom" cargo test -p ring-core --lib --release arena::tests_loom`.

extern crate std;

use super::*;
use crate::sync::new_u64;
use loom::sync::Arc;
use std::vec::Vec;

/// One granule, one entry: the reuse lands on exactly the bytes the reader copies.
const ARENA: u64 = 64;

fn region() -> Arc<Vec<AtomicU64>> {
    let n = region_len(ARENA, 1).unwrap_or(0) / 8;
    Arc::new((0..n).map(|_| new_u64(0)).collect())
}

#[test]
fn reader_never_returns_a_reused_allocations_bytes() {
    let mut model = loom::model::Builder::new();
    // Formatting the region is ~1,100 atomic stores, each a loom branch.
    model.max_branches = 100_000;
    model.preemption_bound = model.preemption_bound.or(Some(3));
    model.check(|| {
        let words = region();
        let first = {
            let mut al = Allocator::init(
                &words,
                AllocConfig {
                    arena_bytes: ARENA,
                    max_live: 1,
                    byte_ceiling: ARENA,
                },
            )
            .unwrap();
            let a = al.alloc(8, 0, 0).unwrap();
            al.writer(&a).unwrap().write(&[0xAA; 8]).unwrap();
            a
        };
        let producer = {
            let words = Arc::clone(&words);
            loom::thread::spawn(move || {
                let mut al = Allocator::attach(&words).unwrap();
                al.free(first.handle, 0).unwrap();
                let b = al.alloc(8, 0, 1).unwrap();
                assert_eq!(b.offset, first.offset, "same granule reused");
                al.writer(&b).unwrap().write(&[0xBB; 8]).unwrap();
            })
        };
        let reader = Allocator::attach(&words).unwrap();
        let mut out = [0u8; 8];
        if reader.read(&first, &mut out).is_ok() {
            assert_eq!(out, [0xAA; 8], "a reused allocation's bytes were returned");
        }
        producer.join().unwrap();
    });
}
