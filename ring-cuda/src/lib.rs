//! CUDA device-memory payloads for `ring-core` rings.
//!
//! The ring's protocol words and slot headers stay in host shared memory (ring-os); each slot's
//! payload is a device buffer, exported once by the producer and opened once per consumer, and
//! every slot carries interprocess completion events so that producer and consumers order their
//! device work without host synchronisation. See `docs/CUDA.md` for the model.
//!
//! - [`Device`]: what the ring needs from a GPU; implemented by [`CudaDevice`] (the CUDA driver
//!   through `cudarc`, loaded at run time) and [`EmulatedDevice`] (host memory, same semantics,
//!   same accounting and errors) so everything is tested on machines without a GPU.
//! - [`probe`]: [`Error::NoDriver`] / [`Error::NoDevice`] without ever letting `cudarc` panic.
//! - [`Ledger`]: ceilings, per-owner live/peak counters, leak reports on drop.
//! - [`MappingCache`] / [`EventCache`]: each handle opened once.
//!
//! # Examples
//!
//! ```
//! use ring_cuda::{Device, EmulatedDevice, EmulatedOptions, ExportKind, Owner};
//! use std::time::Duration;
//!
//! let producer = EmulatedDevice::new();
//! // Stands in for another process (CUDA, and the emulation by default, refuse to open an
//! // IPC handle in the process that exported it).
//! let consumer = EmulatedDevice::with_options(EmulatedOptions::in_process());
//! let buf = producer.alloc(Owner(1), 4096, ExportKind::Ipc)?;
//! let stream = producer.create_stream(Owner(1))?;
//! producer.write(stream, buf.into(), 0, b"frame")?;
//! producer.sync_stream(stream, Duration::from_secs(5))?;
//!
//! let handle = producer.export(buf, ExportKind::Ipc)?;
//! let mapping = consumer.open(Owner(2), &handle)?;
//! let cs = consumer.create_stream(Owner(2))?;
//! let mut out = [0u8; 5];
//! consumer.read(cs, mapping.into(), 0, &mut out, Duration::from_secs(5))?;
//! assert_eq!(&out, b"frame");
//!
//! consumer.close(mapping)?;
//! consumer.destroy_stream(cs, Duration::from_secs(5))?;
//! producer.destroy_stream(stream, Duration::from_secs(5))?;
//! producer.free(buf)?;
//! assert!(producer.ledger().leak_report().is_empty());
//! # Ok::<(), ring_cuda::Error>(())
//! ```
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std crate"
)]

pub mod accounting;
mod cache;
#[cfg(feature = "harness")]
pub mod conformance;
mod cuda;
mod device;
mod emulated;
mod error;
mod handle;
#[cfg(feature = "harness")]
pub mod pipeline;
pub mod ring;

pub use accounting::{
    padded_len, Counters, Leak, LeakHook, LeakReport, Ledger, Limits, OwnerStats, LARGE_PAGE,
};
pub use cache::{CacheStats, EventCache, MappingCache, OpenCache};
pub use cuda::{probe, CudaDevice};
pub use device::Device;
pub use emulated::{EmulatedDevice, EmulatedOptions};
pub use error::{cu_result_name, Error, Result};
pub use handle::{
    BufferId, EventId, ExportKind, IpcEventHandle, IpcMemHandle, MappingId, Mem, MemHandle,
    MemInfo, Owner, ResourceKind, StreamId, IPC_HANDLE_SIZE,
};
