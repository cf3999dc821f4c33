//! The allocator's entry snapshot against reuse of the same entry, sized for Miri.
//!
//! Miri's weak-memory emulation lets a Relaxed load return an older store whenever the memory
//! model allows it; without the snapshot's `fence(Acquire)` it may pair an entry's old meta word
//! with a newer allocation's fields, which this check reports. Natively (x86's loads are not
//! reordered) it only checks the logic. `mutants.sh` runs it under Miri for `alloc-snapshot-fence`.

use ring_verification::conformance::{alloc_lookup_races_reuse_for, Owned};

#[test]
fn alloc_lookup_never_mixes_generations() {
    // Under Miri: 8 × 400 reuse rounds, about a minute; the fence-less mutant fails within it
    // (seed 1). Natively: 2 × 2,000 rounds.
    let (repeats, rounds) = if cfg!(miri) { (8, 400) } else { (2, 2_000) };
    for _ in 0..repeats {
        if let Err(e) = alloc_lookup_races_reuse_for(&Owned, rounds) {
            panic!("{e:?}");
        }
    }
}
