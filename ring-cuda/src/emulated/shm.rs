//! Host memory that stands in for device memory: sealed memfds, shareable between device
//! instances and processes.
//!
//! An emulated IPC handle names the exporter's descriptor as `/proc/<pid>/fd/<fd>` plus a nonce
//! that is also the memfd's name, so an importer can check that the descriptor it opened is the
//! exported one and not a later file that reused the number ([`Error::StaleHandle`]). Like a
//! CUDA IPC handle, it stays openable only while the exporter keeps the buffer. Opening through
//! `/proc` needs the same uid (as CUDA IPC needs the same user and an IPC namespace).

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use memmap2::{MmapOptions, MmapRaw};
use rustix::fs::{FallocateFlags, MemfdFlags, Mode, OFlags, SealFlags};

use crate::error::{Error, Result};
use crate::handle::IPC_HANDLE_SIZE;

/// Magic of an emulated memory handle.
pub(crate) const MEM_MAGIC: [u8; 8] = *b"RCEMUMEM";
/// Magic of an emulated event handle.
pub(crate) const EVENT_MAGIC: [u8; 8] = *b"RCEMUEVT";
/// Bytes of an emulated event's shared state (two counters, padded to a cache line pair).
pub(crate) const EVENT_BYTES: u64 = 128;
/// Largest emulated buffer (1 TiB): a corrupt length in a handle cannot ask for more.
const MAX_LEN: u64 = 1 << 40;

/// One shared mapping of a sealed memfd.
pub(crate) struct Region {
    map: MmapRaw,
    file: File,
    nonce: u64,
    len: u64,
    /// The device-memory counter this region is counted in, and by how much (buffers only:
    /// what the exporter's device really holds until the last reference goes).
    resident: Option<(Arc<AtomicU64>, u64)>,
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Some((counter, bytes)) = self.resident.take() {
            // Relaxed: a statistic read by `mem_info`; nothing is published through it.
            counter.fetch_sub(bytes, Ordering::Relaxed);
        }
    }
}

impl core::fmt::Debug for Region {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Region")
            .field("len", &self.len)
            .field("nonce", &self.nonce)
            .finish()
    }
}

fn next_nonce() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static BASE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(|| {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        t ^ (u64::from(own_pid()) << 40)
    });
    // Relaxed: only uniqueness matters, not ordering with other memory.
    base.wrapping_add(
        COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15),
    )
}

/// This process's pid, as handles carry it.
pub(crate) fn own_pid() -> u32 {
    rustix::process::getpid()
        .as_raw_nonzero()
        .get()
        .unsigned_abs()
}

/// The exporter's pid recorded in handle bytes (untrusted: only compared).
pub(crate) fn exporter_pid(raw: &[u8; IPC_HANDLE_SIZE]) -> u32 {
    read_u32(raw, 8)
}

fn memfd_name(kind: &str, nonce: u64) -> String {
    format!("ring-cuda-emu-{kind}-{nonce:016x}")
}

fn read_u32(raw: &[u8; IPC_HANDLE_SIZE], at: usize) -> u32 {
    let mut b = [0; 4];
    b.copy_from_slice(&raw[at..at + 4]);
    u32::from_le_bytes(b)
}

fn read_u64(raw: &[u8; IPC_HANDLE_SIZE], at: usize) -> u64 {
    let mut b = [0; 8];
    b.copy_from_slice(&raw[at..at + 8]);
    u64::from_le_bytes(b)
}

impl Region {
    /// A fresh zeroed region of `len` bytes, reserved up front (a full `/dev/shm` is an error
    /// here, not a SIGBUS later) and sealed against resizing.
    pub(crate) fn create(kind: &str, len: u64) -> Result<Self> {
        if len == 0 || len > MAX_LEN {
            return Err(Error::InvalidLength { len });
        }
        let nonce = next_nonce();
        let fd = rustix::fs::memfd_create(
            memfd_name(kind, nonce),
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )?;
        rustix::fs::fallocate(&fd, FallocateFlags::empty(), 0, len)?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
        Self::map(File::from(fd), nonce, len)
    }

    fn map(file: File, nonce: u64, len: u64) -> Result<Self> {
        let map_len = usize::try_from(len).map_err(|_| Error::InvalidLength { len })?;
        let map = MmapOptions::new().len(map_len).map_raw(&file)?;
        Ok(Self {
            map,
            file,
            nonce,
            len,
            resident: None,
        })
    }

    /// Counts `bytes` in `counter` for as long as this region lives.
    pub(crate) fn count_in(mut self, counter: &Arc<AtomicU64>, bytes: u64) -> Self {
        // Relaxed: see `Drop`.
        counter.fetch_add(bytes, Ordering::Relaxed);
        self.resident = Some((Arc::clone(counter), bytes));
        self
    }

    /// Checks that `fd` is a sealed memfd of exactly `len` bytes, so that mapping it can never
    /// fault (the exporter cannot shrink it).
    fn check_sealed(fd: impl AsFd, len: u64) -> Result<()> {
        let seals = rustix::fs::fcntl_get_seals(&fd)
            .map_err(|_| Error::InvalidHandle("not a sealable memfd"))?;
        if !seals.contains(SealFlags::SHRINK | SealFlags::GROW) {
            return Err(Error::InvalidHandle("memfd not sealed against resizing"));
        }
        let st = rustix::fs::fstat(&fd)?;
        if u64::try_from(st.st_size).ok() != Some(len) || len == 0 || len > MAX_LEN {
            return Err(Error::InvalidHandle(
                "size does not match the handle's length",
            ));
        }
        Ok(())
    }

    /// The handle bytes: magic, pid, fd, nonce, len.
    pub(crate) fn handle(&self, magic: [u8; 8]) -> [u8; IPC_HANDLE_SIZE] {
        use std::os::fd::AsRawFd;
        let mut raw = [0u8; IPC_HANDLE_SIZE];
        raw[0..8].copy_from_slice(&magic);
        raw[8..12].copy_from_slice(&own_pid().to_le_bytes());
        raw[12..16].copy_from_slice(&self.file.as_raw_fd().unsigned_abs().to_le_bytes());
        raw[16..24].copy_from_slice(&self.nonce.to_le_bytes());
        raw[24..32].copy_from_slice(&self.len.to_le_bytes());
        raw
    }

    /// Opens the region named by handle bytes (untrusted).
    pub(crate) fn open_handle(
        raw: &[u8; IPC_HANDLE_SIZE],
        magic: [u8; 8],
        kind: &str,
    ) -> Result<Self> {
        if raw[0..8] != magic {
            return Err(Error::InvalidHandle(
                "wrong magic (not an emulated handle of this kind)",
            ));
        }
        let (pid, fd, nonce, len) = (
            read_u32(raw, 8),
            read_u32(raw, 12),
            read_u64(raw, 16),
            read_u64(raw, 24),
        );
        if raw[32..].iter().any(|&b| b != 0) {
            return Err(Error::InvalidHandle("reserved bytes are not zero"));
        }
        let path = format!("/proc/{pid}/fd/{fd}");
        let opened = rustix::fs::open(&path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| match e {
                rustix::io::Errno::NOENT | rustix::io::Errno::SRCH => Error::StaleHandle,
                other => Error::from(other),
            })?;
        // Check the name of what was actually opened: the exporter may have freed the buffer
        // and reused the descriptor number between the handle's creation and now.
        let own = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&opened));
        let name = rustix::fs::readlink(own.as_str(), Vec::new())?;
        let expect = format!("/memfd:{} (deleted)", memfd_name(kind, nonce));
        if name.as_bytes() != expect.as_bytes() {
            return Err(Error::StaleHandle);
        }
        Self::check_sealed(&opened, len)?;
        Self::map(File::from(opened), nonce, len)
    }

    /// A duplicate of the descriptor, for VMM-style fd export.
    pub(crate) fn export_fd(&self) -> Result<OwnedFd> {
        Ok(rustix::io::fcntl_dupfd_cloexec(&self.file, 0)?)
    }

    /// Maps an exported descriptor (untrusted: it is checked like a handle).
    pub(crate) fn open_fd(fd: &OwnedFd, len: u64) -> Result<Self> {
        Self::check_sealed(fd, len)?;
        let own = rustix::io::fcntl_dupfd_cloexec(fd, 0)?;
        Self::map(File::from(own), 0, len)
    }

    /// Length in bytes.
    pub(crate) const fn len(&self) -> u64 {
        self.len
    }

    /// Base address of the mapping.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// One of the event counters (`index` 0 or 1) of an event region.
    pub(crate) fn counter(&self, index: usize) -> &AtomicU64 {
        assert!(
            index < 2 && self.len >= EVENT_BYTES,
            "event region too small"
        );
        // SAFETY:
        // - the mapping is at least EVENT_BYTES long and page-aligned, so offset index * 64 is
        //   in bounds and 8-aligned;
        // - every process touches these bytes only through AtomicU64, so no non-atomic access
        //   races with this one;
        // - the mapping lives as long as `self`, which bounds the returned reference.
        unsafe { &*self.ptr().add(index * 64).cast::<AtomicU64>() }
    }
}
