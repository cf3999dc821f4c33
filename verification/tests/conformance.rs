//! The conformance suite (`ring_verification::conformance`) instantiated for every backend
//! that exists: the heap segment (the `RawMemory` path), the owned segment (the loom shape),
//! and a ring-os memfd mapping.
#![cfg(not(any(ring_loom, ring_shuttle)))]

use ring_core::{Config, HeapSegment, OwnedSegment, OwnerId};
use ring_verification::conformance::{run_all, Backend};
use ring_verification::model::Failure;
use std::sync::Arc;

fn creator() -> OwnerId {
    OwnerId::new(1).expect("non-zero")
}

struct Heap;
impl Backend for Heap {
    type Mem = HeapSegment;
    fn create(&self, config: &Config) -> Result<HeapSegment, Failure> {
        HeapSegment::new(config, creator()).map_err(|e| Failure(e.to_string()))
    }
}

struct Owned;
impl Backend for Owned {
    type Mem = OwnedSegment;
    fn create(&self, config: &Config) -> Result<OwnedSegment, Failure> {
        OwnedSegment::new(config, creator()).map_err(|e| Failure(e.to_string()))
    }
}

/// A sealed memfd mapping from ring-os (real shared memory, futex notify).
struct OsMemfd;
impl Backend for OsMemfd {
    type Mem = Arc<ring_os::Mapping>;
    fn create(&self, config: &Config) -> Result<Self::Mem, Failure> {
        ring_os::ShmRing::create_memfd(config, ring_os::CreateOptions::new())
            .map_err(|e| Failure(e.to_string()))
    }
}

#[test]
fn heap_segment_conforms() {
    run_all(&Heap).unwrap();
}

#[test]
fn owned_segment_conforms() {
    run_all(&Owned).unwrap();
}

#[test]
#[cfg_attr(miri, ignore = "Miri cannot make memfd mappings")]
fn ring_os_memfd_mapping_conforms() {
    run_all(&OsMemfd).unwrap();
}
