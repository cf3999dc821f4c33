//! File segments on Windows: a file at a path (created with the owner-only DACL, its clusters
//! reserved first), mapped through an unnamed section over it; its role mutexes are keyed by the
//! volume and file index, so every path to the file finds the same ones.

use std::os::windows::io::AsRawHandle as _;
use std::path::Path;

use windows_sys::Win32::Foundation::{
    ERROR_DISK_FULL, GENERIC_READ, GENERIC_WRITE, HANDLE, INVALID_HANDLE_VALUE,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, FileAllocationInfo, GetFileInformationByHandle, SetFileInformationByHandle,
    BY_HANDLE_FILE_INFORMATION, CREATE_NEW, FILE_ALLOCATION_INFO, FILE_ATTRIBUTE_NORMAL,
    FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE,
};
use windows_sys::Win32::System::Memory::{CreateFileMappingW, PAGE_READWRITE};

use super::{check_options, os_error, Segment};
use crate::segment::{CreateOptions, SegmentKind, SizeCheck};
use crate::windows::sys::{self, Handle, OwnerOnly};
use crate::Error;

/// The key of a file segment: its volume serial number and file index (the inode analogue), so
/// every path to the same file finds the same role mutexes.
fn file_key(file: &std::fs::File) -> Result<String, Error> {
    // SAFETY: all-zero is a valid BY_HANDLE_FILE_INFORMATION (plain integers).
    let mut info: BY_HANDLE_FILE_INFORMATION = unsafe { core::mem::zeroed() };
    // SAFETY: the handle is open for the borrow of `file`; `info` is a valid out pointer.
    if unsafe { GetFileInformationByHandle(file.as_raw_handle() as HANDLE, &raw mut info) } == 0 {
        return Err(Error::io("GetFileInformationByHandle", sys::last_error()));
    }
    Ok(format!(
        "shmring-file#{:08x}-{:08x}{:08x}",
        info.dwVolumeSerialNumber, info.nFileIndexHigh, info.nFileIndexLow
    ))
}

impl Segment {
    /// Creates a file segment of `len` bytes at `path` (which must not exist), reserving its
    /// clusters first.
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyExists`], [`Error::NoSpace`] when the volume cannot hold it,
    /// [`Error::HugePages`], [`Error::BadLength`], [`Error::Io`].
    pub fn create_file(path: &Path, len: u64, opts: CreateOptions) -> Result<Self, Error> {
        check_options(len, opts)?;
        let file = open_segment_file(path, true)?;
        let made = Self::finish_create_file(file, path, len);
        if made.is_err() {
            // We created the file: do not leave a half-made segment behind.
            let _ = std::fs::remove_file(path);
        }
        made
    }

    /// Reserves, maps and claims a freshly created file.
    fn finish_create_file(file: std::fs::File, path: &Path, len: u64) -> Result<Self, Error> {
        let alloc = FILE_ALLOCATION_INFO {
            AllocationSize: i64::try_from(len).map_err(|_| Error::BadLength { len })?,
        };
        let size = u32::try_from(core::mem::size_of::<FILE_ALLOCATION_INFO>()).unwrap_or(8);
        // SAFETY: the handle is open; `alloc` is a valid FILE_ALLOCATION_INFO of `size` bytes.
        let ok = unsafe {
            SetFileInformationByHandle(
                file.as_raw_handle() as HANDLE,
                FileAllocationInfo,
                (&raw const alloc).cast(),
                size,
            )
        };
        if ok == 0 && sys::last_code() == ERROR_DISK_FULL {
            return Err(Error::NoSpace {
                needed: len,
                available: 0,
            });
        }
        file.set_len(len).map_err(|e| {
            if e.raw_os_error() == i32::try_from(ERROR_DISK_FULL).ok() {
                Error::NoSpace {
                    needed: len,
                    available: 0,
                }
            } else {
                Error::io("SetEndOfFile", e)
            }
        })?;
        let key = file_key(&file)?;
        let section = Self::file_section(&file, path)?;
        let mut seg = Self::map(
            section,
            Some(file),
            len,
            key,
            SegmentKind::File(path.to_owned()),
        )?;
        seg.claim_creator()?;
        Ok(seg)
    }

    /// Opens the file segment at `path`, checking its size.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`], [`Error::PermissionDenied`], [`Error::SizeMismatch`],
    /// [`Error::Io`].
    pub fn open_file(path: &Path, size: SizeCheck) -> Result<Self, Error> {
        let what = || format!("segment file {}", path.display());
        let file = open_segment_file(path, false)?;
        let meta = file
            .metadata()
            .map_err(|e| Error::io("GetFileInformation", e))?;
        if !meta.is_file() {
            return Err(Error::NotRegularFile { what: what() });
        }
        let len = meta.len();
        size.check(len)?;
        if len == 0 {
            return Err(Error::BadLength { len });
        }
        let key = file_key(&file)?;
        let section = Self::file_section(&file, path)?;
        Self::map(
            section,
            Some(file),
            len,
            key,
            SegmentKind::File(path.to_owned()),
        )
    }

    /// An unnamed section over the whole of `file`.
    fn file_section(file: &std::fs::File, path: &Path) -> Result<Handle, Error> {
        // SAFETY: the file handle is open; null attributes and name: an unnamed section of the
        // file's current size.
        let raw = unsafe {
            CreateFileMappingW(
                file.as_raw_handle() as HANDLE,
                core::ptr::null(),
                PAGE_READWRITE,
                0,
                0,
                core::ptr::null(),
            )
        };
        Handle::new(raw).ok_or_else(|| {
            os_error(
                || format!("segment file {}", path.display()),
                "CreateFileMapping",
                0,
            )
        })
    }
}

/// Opens (`create`: creates, failing if it exists) a segment file read-write, with read, write
/// and delete sharing: peers map it, and a cleaner may remove it. A new file is created with the
/// owner-only descriptor (the counterpart of mode `0600`) in the create call itself, so no other
/// user can open it in between.
fn open_segment_file(path: &Path, create: bool) -> Result<std::fs::File, Error> {
    use std::os::windows::fs::OpenOptionsExt as _;
    let what = || format!("segment file {}", path.display());
    let opened = if create {
        create_owner_only(path)
    } else {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .share_mode(7)
            .open(path)
    };
    opened.map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => Error::AlreadyExists { what: what() },
        std::io::ErrorKind::NotFound => Error::NotFound { what: what() },
        std::io::ErrorKind::PermissionDenied => Error::PermissionDenied { what: what() },
        _ => Error::io("CreateFile", e),
    })
}

/// `CreateFileW(CREATE_NEW)` with [`OwnerOnly`]'s security attributes, as a `File`.
fn create_owner_only(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::windows::ffi::OsStrExt as _;
    use std::os::windows::io::FromRawHandle as _;
    let wide: Vec<u16> = path
        .as_os_str()
        .encode_wide()
        .chain(core::iter::once(0))
        .collect();
    let sd = OwnerOnly::get()?;
    let attributes = sd.attributes();
    // SAFETY: `wide` is NUL-terminated and outlives the call; `attributes` points at the
    // process-wide descriptor, which lives for the whole process; no template handle.
    let raw = unsafe {
        CreateFileW(
            wide.as_ptr(),
            GENERIC_READ | GENERIC_WRITE,
            FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
            &raw const attributes,
            CREATE_NEW,
            FILE_ATTRIBUTE_NORMAL,
            core::ptr::null_mut(),
        )
    };
    if raw == INVALID_HANDLE_VALUE {
        return Err(sys::last_error());
    }
    // SAFETY: `raw` is a valid file handle this function owns; the `File` takes it over.
    Ok(unsafe { std::fs::File::from_raw_handle(raw.cast()) })
}
