//! Plain identifiers and handle types shared by every [`Device`](crate::Device) implementation.

use core::fmt;
use std::os::fd::OwnedFd;

/// Size of a CUDA IPC handle (`CU_IPC_HANDLE_SIZE`); emulated handles use the same size so that
/// the ring's descriptor table has one layout for both devices.
pub const IPC_HANDLE_SIZE: usize = 64;

/// Who an allocation, mapping or event is charged to, for accounting and leak reports.
///
/// An opaque number; the device ring uses the ring's owner ids (pid and start time), tests use
/// small constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Owner(pub u64);

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "owner#{:#x}", self.0)
    }
}

/// The kinds of device resources that are accounted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceKind {
    /// A device buffer allocated by this process.
    Buffer,
    /// An IPC or VMM mapping of another process's buffer, opened by this process.
    Mapping,
    /// A CUDA event (created or opened from an IPC handle).
    Event,
    /// A stream.
    Stream,
}

impl fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Buffer => "device buffer",
            Self::Mapping => "IPC mapping",
            Self::Event => "event",
            Self::Stream => "stream",
        })
    }
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub(crate) u64);

        impl $name {
            /// The raw number (unique per device instance, never reused).
            #[must_use]
            pub const fn raw(self) -> u64 {
                self.0
            }
        }
    };
}

id_type!(
    /// A device buffer allocated through [`Device::alloc`](crate::Device::alloc).
    BufferId
);
id_type!(
    /// A mapping opened through [`Device::open`](crate::Device::open).
    MappingId
);
id_type!(
    /// An event created or opened on a device.
    EventId
);
id_type!(
    /// A stream (an in-order queue of device work).
    StreamId
);

/// Device memory that copies can read or write: an own buffer or an opened mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mem {
    /// A buffer this device allocated.
    Buffer(BufferId),
    /// A mapping this device opened.
    Mapping(MappingId),
}

/// A place in device memory: a buffer or mapping and a byte offset into it, where a copy or a
/// read starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct At(pub Mem, pub u64);

impl From<BufferId> for Mem {
    fn from(b: BufferId) -> Self {
        Self::Buffer(b)
    }
}

impl From<MappingId> for Mem {
    fn from(m: MappingId) -> Self {
        Self::Mapping(m)
    }
}

/// How a buffer is exported to other processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExportKind {
    /// Legacy CUDA IPC (`cuIpcGetMemHandle`): 64 bytes that can travel through shared memory.
    /// Needs `--ipc=host` (or a shared IPC namespace) between containers.
    Ipc,
    /// Virtual memory management (`cuMemCreate` + `cuMemExportToShareableHandle`): a POSIX file
    /// descriptor, passed with `SCM_RIGHTS` (ring-os fd passing) or `pidfd_getfd`.
    Fd,
}

/// A legacy IPC memory handle plus the length its exporter allocated.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpcMemHandle {
    /// The opaque handle bytes.
    pub raw: [u8; IPC_HANDLE_SIZE],
    /// Length of the exported buffer in bytes.
    pub len: u64,
}

impl fmt::Debug for IpcMemHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IpcMemHandle")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// An exported buffer, as produced by [`Device::export`](crate::Device::export).
#[derive(Debug)]
pub enum MemHandle {
    /// Bytes that can be written into shared memory.
    Ipc(IpcMemHandle),
    /// A file descriptor (VMM shareable handle) and the buffer's length.
    Fd {
        /// The descriptor; it must reach the importer through fd passing.
        fd: OwnedFd,
        /// Length of the exported buffer in bytes.
        len: u64,
    },
}

impl MemHandle {
    /// Length of the exported buffer.
    #[must_use]
    pub const fn len(&self) -> u64 {
        match self {
            Self::Ipc(h) => h.len,
            Self::Fd { len, .. } => *len,
        }
    }

    /// How the buffer was exported.
    #[must_use]
    pub const fn kind(&self) -> ExportKind {
        match self {
            Self::Ipc(_) => ExportKind::Ipc,
            Self::Fd { .. } => ExportKind::Fd,
        }
    }

    /// Whether the exported buffer is empty (never true for a handle a device issued).
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An interprocess event handle (`cuIpcGetEventHandle`, or the emulated equivalent).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpcEventHandle {
    /// The opaque handle bytes.
    pub raw: [u8; IPC_HANDLE_SIZE],
}

impl fmt::Debug for IpcEventHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IpcEventHandle(..)")
    }
}

/// Free and total device memory, as the driver reports it (`cuMemGetInfo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemInfo {
    /// Bytes free on the device.
    pub free: u64,
    /// Bytes on the device.
    pub total: u64,
}
