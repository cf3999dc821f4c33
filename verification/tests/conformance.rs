//! The conformance suite (`ring_verification::conformance`) instantiated for every backend
//! that exists: the heap segment (the `RawMemory` path), the owned segment (the loom shape),
//! a ring-os memfd mapping, and ring-cuda's shared ring (a named ring-os segment plus the device
//! table). ring-cuda's device checks are its own tests (`ring-cuda/tests/common/conformance.rs`,
//! run on the emulated device across processes and on a GPU by `gpu-check.sh`).
#![cfg(not(any(ring_loom, ring_shuttle)))]

use core::sync::atomic::{AtomicU32, Ordering};
use ring_core::{Config, HeapSegment, OwnerId};
use ring_oracles::machine::Failure;
use ring_verification::conformance::{run_all, Backend, Owned};
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

/// A sealed memfd mapping from ring-os (real shared memory, futex notify).
struct OsMemfd;
impl Backend for OsMemfd {
    type Mem = Arc<ring_os::raw::Mapping>;
    fn create(&self, config: &Config) -> Result<Self::Mem, Failure> {
        ring_os::raw::ShmRing::create_memfd(config, ring_os::raw::CreateOptions::new())
            .map_err(|e| Failure(e.to_string()))
    }
}

/// ring-cuda's device ring memory: a named segment (unlinked on drop) with the device table.
struct CudaShared;
impl Backend for CudaShared {
    type Mem = ring_cuda::ring::SharedRing;
    fn create(&self, config: &Config) -> Result<Self::Mem, Failure> {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "verif-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        ring_cuda::ring::SharedRing::create(&name, config).map_err(|e| Failure(e.to_string()))
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

#[test]
#[cfg_attr(miri, ignore = "Miri cannot make shared-memory mappings")]
fn ring_cuda_shared_ring_conforms() {
    run_all(&CudaShared).unwrap();
}
