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
//! use ring_cuda::{At, Device, EmulatedDevice, ExportKind, Owner};
//! use std::time::Duration;
//!
//! let producer = EmulatedDevice::new();
//! // A second device; in one process only a VMM (fd) export may be opened: CUDA, and the
//! // emulation, refuse an IPC handle in the process that exported it (across processes,
//! // `ExportKind::Ipc` works the same way).
//! let consumer = EmulatedDevice::new();
//! let buf = producer.alloc(Owner(1), 4096, ExportKind::Fd)?;
//! let stream = producer.create_stream(Owner(1))?;
//! producer.write(stream, buf.into(), 0, b"frame")?;
//! producer.sync_stream(stream, Duration::from_secs(5))?;
//!
//! let handle = producer.export(buf, ExportKind::Fd)?;
//! let mapping = consumer.open(Owner(2), &handle)?;
//! let cs = consumer.create_stream(Owner(2))?;
//! let mut out = [0u8; 5];
//! consumer.read(cs, At(mapping.into(), 0), &mut out, Duration::from_secs(5))?;
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
mod cuda;
mod device;
mod emulated;
mod error;
mod handle;
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
    At, BufferId, EventId, ExportKind, IpcEventHandle, IpcMemHandle, MappingId, Mem, MemHandle,
    MemInfo, Owner, ResourceKind, StreamId, IPC_HANDLE_SIZE,
};
