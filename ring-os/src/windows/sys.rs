//! Small safe wrappers over the Win32 calls the Windows backend makes (through `windows-sys`):
//! owned handles, wide names in the session-local namespace, and the owner-only security
//! descriptor every named object is created with.

use std::io;

use windows_sys::Win32::Foundation::{
    CloseHandle, GetLastError, LocalFree, ERROR_ALREADY_EXISTS, HANDLE, HLOCAL,
};
use windows_sys::Win32::Security::Authorization::{
    ConvertSidToStringSidW, ConvertStringSecurityDescriptorToSecurityDescriptorW, SDDL_REVISION_1,
};
use windows_sys::Win32::Security::{
    GetTokenInformation, TokenUser, PSECURITY_DESCRIPTOR, SECURITY_ATTRIBUTES, TOKEN_QUERY,
    TOKEN_USER,
};
use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};

/// An owned kernel handle, closed on drop.
#[derive(Debug)]
pub(crate) struct Handle(HANDLE);

// SAFETY: a kernel handle is a process-wide index into the handle table, usable from any thread;
// `Handle` only ever closes it once (on drop).
unsafe impl Send for Handle {}
// SAFETY: as above; every call made through `&Handle` is thread-safe in the kernel.
unsafe impl Sync for Handle {}

impl Handle {
    /// Takes ownership of `raw`; `None` for the null handle that failed calls return.
    pub(crate) fn new(raw: HANDLE) -> Option<Self> {
        (!raw.is_null()).then_some(Self(raw))
    }

    /// The raw handle, borrowed for as long as `self`.
    pub(crate) fn raw(&self) -> HANDLE {
        self.0
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: we own the handle (from `new`) and close it exactly once.
        unsafe { CloseHandle(self.0) };
    }
}

/// The calling thread's last Win32 error, as an `io::Error`.
pub(crate) fn last_error() -> io::Error {
    io::Error::last_os_error()
}

/// The calling thread's last Win32 error code.
pub(crate) fn last_code() -> u32 {
    // SAFETY: reads thread-local state; no preconditions.
    unsafe { GetLastError() }
}

/// Clears the calling thread's last Win32 error.
pub(crate) fn clear_error() {
    // SAFETY: writes thread-local state; no preconditions.
    unsafe { windows_sys::Win32::Foundation::SetLastError(0) };
}

/// Whether the create call that just returned opened an existing object.
pub(crate) fn existed() -> bool {
    last_code() == ERROR_ALREADY_EXISTS
}

/// `s` as a NUL-terminated UTF-16 string.
pub(crate) fn wide(s: &str) -> Vec<u16> {
    s.encode_utf16().chain(core::iter::once(0)).collect()
}

/// The name of object `what` of the ring keyed `key`, in this session's namespace (`Local\`);
/// `#` (never in a validated segment name) keeps every ring's objects apart.
pub(crate) fn object_name(key: &str, what: &str) -> Vec<u16> {
    if what.is_empty() {
        wide(&format!("Local\\{key}"))
    } else {
        wide(&format!("Local\\{key}#{what}"))
    }
}

/// A security descriptor whose DACL admits only the current user (full access), protected from
/// inheritance: the counterpart of mode `0600`. Built once per process.
#[derive(Debug)]
pub(crate) struct OwnerOnly {
    /// From `ConvertStringSecurityDescriptorToSecurityDescriptorW`, freed with `LocalFree`.
    sd: PSECURITY_DESCRIPTOR,
}

// SAFETY: the descriptor is immutable after creation and only read by the kernel.
unsafe impl Send for OwnerOnly {}
// SAFETY: as above.
unsafe impl Sync for OwnerOnly {}

impl OwnerOnly {
    /// The process-wide descriptor (made on first use).
    pub(crate) fn get() -> io::Result<&'static Self> {
        static ONCE: std::sync::OnceLock<Result<OwnerOnly, i32>> = std::sync::OnceLock::new();
        match ONCE.get_or_init(|| Self::make().map_err(|e| e.raw_os_error().unwrap_or(0))) {
            Ok(sd) => Ok(sd),
            Err(code) => Err(io::Error::from_raw_os_error(*code)),
        }
    }

    /// `SECURITY_ATTRIBUTES` pointing at the descriptor, not inheritable; valid while `self` is.
    pub(crate) fn attributes(&self) -> SECURITY_ATTRIBUTES {
        SECURITY_ATTRIBUTES {
            nLength: u32::try_from(core::mem::size_of::<SECURITY_ATTRIBUTES>()).unwrap_or(0),
            lpSecurityDescriptor: self.sd,
            bInheritHandle: 0,
        }
    }

    /// The SDDL `D:P(A;;GA;;;<user SID>)`: protected DACL, one entry, generic-all for the user.
    fn make() -> io::Result<Self> {
        let sid = user_sid()?;
        let sddl = wide(&format!("D:P(A;;GA;;;{sid})"));
        let mut sd: PSECURITY_DESCRIPTOR = core::ptr::null_mut();
        // SAFETY: `sddl` is NUL-terminated and lives across the call; `sd` is a valid out
        // pointer; the size out pointer may be null.
        let ok = unsafe {
            ConvertStringSecurityDescriptorToSecurityDescriptorW(
                sddl.as_ptr(),
                SDDL_REVISION_1,
                &raw mut sd,
                core::ptr::null_mut(),
            )
        };
        if ok == 0 || sd.is_null() {
            return Err(last_error());
        }
        Ok(Self { sd })
    }
}

/// The current user's SID in string form (`S-1-5-21-...`).
fn user_sid() -> io::Result<String> {
    let mut token: HANDLE = core::ptr::null_mut();
    // SAFETY: the pseudo-handle of the current process is always valid; `token` is a valid
    // out pointer.
    if unsafe { OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &raw mut token) } == 0 {
        return Err(last_error());
    }
    let token = Handle::new(token).ok_or_else(last_error)?;
    let mut need = 0u32;
    // SAFETY: a size query (null buffer, length 0); `need` is a valid out pointer. It fails
    // with ERROR_INSUFFICIENT_BUFFER and sets `need`.
    unsafe {
        GetTokenInformation(
            token.raw(),
            TokenUser,
            core::ptr::null_mut(),
            0,
            &raw mut need,
        )
    };
    if need == 0 {
        return Err(last_error());
    }
    // u64 words: aligned for TOKEN_USER (pointers inside).
    let words = (need as usize).div_ceil(8);
    let mut buf = vec![0u64; words];
    let len = u32::try_from(words * 8).map_err(|_| io::Error::other("token too large"))?;
    // SAFETY: `buf` is `len` writable bytes, 8-aligned; `need` is a valid out pointer.
    let ok = unsafe {
        GetTokenInformation(
            token.raw(),
            TokenUser,
            buf.as_mut_ptr().cast(),
            len,
            &raw mut need,
        )
    };
    if ok == 0 {
        return Err(last_error());
    }
    // SAFETY: on success the buffer starts with a TOKEN_USER (aligned, see above) whose SID
    // pointer points into the same buffer, which lives until the end of this function.
    let sid = unsafe { (*buf.as_ptr().cast::<TOKEN_USER>()).User.Sid };
    let mut text: *mut u16 = core::ptr::null_mut();
    // SAFETY: `sid` is a valid SID (see above); `text` is a valid out pointer.
    if unsafe { ConvertSidToStringSidW(sid, &raw mut text) } == 0 || text.is_null() {
        return Err(last_error());
    }
    // SAFETY: on success `text` is a NUL-terminated wide string that we own (LocalFree).
    let s = unsafe {
        let mut n = 0;
        while *text.add(n) != 0 {
            n += 1;
        }
        String::from_utf16_lossy(core::slice::from_raw_parts(text, n))
    };
    // SAFETY: `text` came from ConvertSidToStringSidW, which documents LocalFree; freed once.
    unsafe { LocalFree(text as HLOCAL) };
    Ok(s)
}

/// Milliseconds for a Win32 wait: rounded up (a wait never ends early), below `INFINITE`.
pub(crate) fn wait_ms(timeout: core::time::Duration) -> u32 {
    let ms = timeout.as_nanos().div_ceil(1_000_000);
    u32::try_from(ms).unwrap_or(u32::MAX - 1).min(u32::MAX - 1)
}

/// The creation time (100 ns units since 1601) of the running process `pid`; `None` when no
/// running process has that id (or it has exited and only its handle lingers).
pub(crate) fn process_start(pid: u32) -> Option<u64> {
    use windows_sys::Win32::Foundation::{FILETIME, STILL_ACTIVE};
    use windows_sys::Win32::System::Threading::{
        GetExitCodeProcess, GetProcessTimes, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
    };
    // SAFETY: no pointers; a null result is handled.
    let h = Handle::new(unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) })?;
    let mut code = 0u32;
    // SAFETY: `h` is an open process handle; `code` is a valid out pointer.
    if unsafe { GetExitCodeProcess(h.raw(), &raw mut code) } == 0
        || code != STILL_ACTIVE.unsigned_abs()
    {
        return None;
    }
    let zero = FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
    // SAFETY: `h` is an open process handle; the four out pointers are valid FILETIMEs.
    let ok = unsafe {
        GetProcessTimes(
            h.raw(),
            &raw mut created,
            &raw mut exited,
            &raw mut kernel,
            &raw mut user,
        )
    };
    (ok != 0).then(|| u64::from(created.dwHighDateTime) << 32 | u64::from(created.dwLowDateTime))
}
