//! The SIGBUS guard: a peer that truncates a mapped segment costs a clear error, not the process.
//!
//! Touching a page of a shared file mapping that lies beyond the file's end (a peer truncated
//! it) or that the file system cannot back (a hostile creator's tmpfs file that was sized but
//! never allocated, on a full tmpfs) raises `SIGBUS` with `si_code == BUS_ADRERR`. A process-wide
//! handler, installed once when the first segment is mapped, looks the faulting address up in a
//! lock-free registry of the ranges ring-os mapped. Inside one, it marks that range truncated
//! and maps private anonymous zero pages (`MAP_FIXED`) over the faulting page and the rest of the
//! range, so the faulting instruction re-runs on zeros; ring-os then reports
//! [`Error::Truncated`] (or ring-core's `Corrupt` read/claim error)
//! for every later operation on that mapping instead of trusting those zeros. Any other
//! `SIGBUS` goes to the disposition that was in place before (a host application's handler,
//! Rust's stack-overflow handler, or the default action). See `docs/OS.md`.
//!
//! # References
//! - The Wayland compositors' `wl_shm` pool guard (weston `os-compatibility`/`shm` SIGBUS
//!   handling, wlroots `wlr_shm`): the same remap-zeros-and-flag technique for client buffers.
//! - POSIX `sigaction(2)`, `signal-safety(7)`.
//!
//! `libc` is used here, and only here, for `sigaction`, `siginfo_t` and `raise`: rustix offers no
//! signal-handler installation outside its unstable `runtime` module.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Once;

use rustix::mm::{mmap_anonymous, MapFlags, ProtFlags};

use crate::Error;

/// Registry slots: how many segments one process can have mapped at once.
pub const MAX_MAPPINGS: usize = 256;

/// Entry states (`Entry::state`).
const FREE: usize = 0;
/// Being filled in or emptied by its owner; the handler skips it.
const CLAIMED: usize = 1;
/// A live range.
const LIVE: usize = 2;
/// A live range that faulted: its tail reads zeros now.
const TRUNCATED: usize = 3;

/// One registered range.
struct Entry {
    /// `FREE`, `CLAIMED`, `LIVE` or `TRUNCATED`. Written by the registering thread (`FREE` →
    /// `CLAIMED` → `LIVE`, back to `CLAIMED` → `FREE` on unregistration) and by the handler
    /// (`LIVE` → `TRUNCATED`).
    state: AtomicUsize,
    /// First byte of the range (page-aligned); written only while `CLAIMED`.
    start: AtomicUsize,
    /// Length in bytes (> 0); written only while `CLAIMED`.
    len: AtomicUsize,
    /// The mapping's page size (a huge page for hugetlbfs); written only while `CLAIMED`.
    granule: AtomicUsize,
}

/// The registry: fixed-size, so the handler never allocates or locks.
static ENTRIES: [Entry; MAX_MAPPINGS] = [const {
    Entry {
        state: AtomicUsize::new(FREE),
        start: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
        granule: AtomicUsize::new(0),
    }
}; MAX_MAPPINGS];

/// One past the highest entry index ever claimed: lookups scan no further.
static HIGH: AtomicUsize = AtomicUsize::new(0);

/// Faults repaired in this process (0 on the fast path: no lookup needed).
static REPAIRED: AtomicU64 = AtomicU64::new(0);

/// The disposition that was in place when the guard was installed.
struct Previous(core::cell::UnsafeCell<core::mem::MaybeUninit<libc::sigaction>>);
// SAFETY: written once, inside `INSTALL`, before `PREVIOUS_SET` is released; only read after
// `PREVIOUS_SET` is observed true (Acquire).
unsafe impl Sync for Previous {}
static PREVIOUS: Previous = Previous(core::cell::UnsafeCell::new(core::mem::MaybeUninit::uninit()));
/// Whether `PREVIOUS` holds the previous disposition.
static PREVIOUS_SET: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();
/// Whether installation succeeded.
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The `errno` of a failed installation.
static INSTALL_ERRNO: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(0);

/// Installs the process-wide `SIGBUS` handler (once; later calls return at once). ring-os calls
/// it before mapping any segment; a host application that installs its own `SIGBUS` handler
/// should call it first and chain to the previous disposition from its handler (see
/// `docs/OS.md`).
///
/// # Errors
///
/// [`Error::Io`] when `sigaction` fails.
pub fn install() -> Result<(), Error> {
    INSTALL.call_once(|| {
        // SAFETY: `sigaction` with a null new action only reads the current one into `PREVIOUS`,
        // which nothing reads before `PREVIOUS_SET`; then we install our handler, whose
        // function has the `SA_SIGINFO` signature. The struct is plain data, zeroed then filled.
        unsafe {
            let prev = (*PREVIOUS.0.get()).as_mut_ptr();
            let failed = || {
                let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
                // Relaxed: read after the `Once` completed, which orders it.
                INSTALL_ERRNO.store(errno, Ordering::Relaxed);
            };
            if libc::sigaction(libc::SIGBUS, core::ptr::null(), prev) != 0 {
                failed();
                return;
            }
            // Release: pairs with the handler's Acquire load before it reads `PREVIOUS`.
            PREVIOUS_SET.store(true, Ordering::Release);
            let mut act: libc::sigaction = core::mem::zeroed();
            act.sa_sigaction = on_sigbus as *const () as usize;
            // SA_ONSTACK: run on the thread's alternate stack when it has one (Rust threads do);
            // SA_NODEFER: a fault inside a chained handler must not be blocked (that would be a
            // silent kill); SA_SIGINFO: we need `si_addr` and `si_code`.
            act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
            libc::sigemptyset(&raw mut act.sa_mask);
            if libc::sigaction(libc::SIGBUS, &raw const act, core::ptr::null_mut()) == 0 {
                INSTALLED.store(true, Ordering::Release);
            } else {
                failed();
            }
        }
    });
    // Acquire: pairs with the Release store above (a concurrent first call has finished).
    if INSTALLED.load(Ordering::Acquire) {
        Ok(())
    } else {
        // Relaxed: written inside the completed `Once`, which orders it before this load.
        let errno = INSTALL_ERRNO.load(Ordering::Relaxed);
        Err(Error::io(
            "sigaction(SIGBUS)",
            std::io::Error::from_raw_os_error(errno),
        ))
    }
}

/// A registered range; unregisters on drop (before the range is unmapped).
#[derive(Debug)]
pub(crate) struct Registration {
    /// Index into `ENTRIES`.
    index: usize,
}

/// Registers `[start, start + len)` (a fresh shared mapping whose pages are `granule` bytes),
/// installing the handler first.
///
/// # Errors
///
/// [`Error::TooManyMappings`] when the registry is full, [`Error::Io`] when the handler could
/// not be installed.
pub(crate) fn register(
    start: *const u8,
    len: usize,
    granule: usize,
) -> Result<Registration, Error> {
    install()?;
    for (index, e) in ENTRIES.iter().enumerate() {
        // Acquire on success: orders our field writes after the previous owner's release of the
        // entry (its FREE store). Relaxed on failure: we only move on.
        if e.state
            .compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            // Release: a lookup that sees the new mark (Acquire) scans this entry; it still
            // skips it until the LIVE store below.
            HIGH.fetch_max(index + 1, Ordering::Release);
            // Relaxed: published by the Release store of LIVE below.
            e.start.store(start as usize, Ordering::Relaxed);
            e.len.store(len, Ordering::Relaxed);
            e.granule.store(granule.max(1), Ordering::Relaxed);
            // Release: pairs with the handler's and lookups' Acquire loads of `state`.
            e.state.store(LIVE, Ordering::Release);
            return Ok(Registration { index });
        }
    }
    Err(Error::TooManyMappings { max: MAX_MAPPINGS })
}

impl Registration {
    /// Whether the handler repaired a fault in this range.
    pub(crate) fn is_truncated(&self) -> bool {
        // SeqCst: pairs with the handler's SeqCst store, made before it remapped the pages, so a
        // thread that read the replacement zeros sees the mark.
        ENTRIES
            .get(self.index)
            .is_some_and(|e| e.state.load(Ordering::SeqCst) == TRUNCATED)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(e) = ENTRIES.get(self.index) {
            // Release (both): the handler stops matching the range before it is unmapped, and
            // the next owner's Acquire claim sees the entry emptied.
            e.state.store(CLAIMED, Ordering::Release);
            e.state.store(FREE, Ordering::Release);
        }
    }
}

/// Whether `addr` lies in a registered range that the handler repaired. One load unless a fault
/// was ever repaired in this process.
pub(crate) fn truncated_at(addr: usize) -> bool {
    // SeqCst: pairs with the handler's SeqCst increment (see `Registration::is_truncated`).
    if REPAIRED.load(Ordering::SeqCst) == 0 {
        return false;
    }
    find(addr).is_some_and(|e| e.state.load(Ordering::SeqCst) == TRUNCATED)
}

/// The live entry whose range holds `addr`. Lock-free and allocation-free (the handler uses it).
fn find(addr: usize) -> Option<&'static Entry> {
    // Acquire: pairs with the Release `fetch_max` in `register`.
    let high = HIGH.load(Ordering::Acquire).min(MAX_MAPPINGS);
    ENTRIES.iter().take(high).find(|e| {
        // Acquire: pairs with the registering Release store, so `start`/`len` are its values.
        let state = e.state.load(Ordering::Acquire);
        if state != LIVE && state != TRUNCATED {
            return false;
        }
        // Relaxed: ordered by the Acquire load of `state`.
        let start = e.start.load(Ordering::Relaxed);
        let len = e.len.load(Ordering::Relaxed);
        addr >= start && addr - start < len
    })
}

/// How many faults the guard repaired in this process.
#[must_use]
pub fn repaired_faults() -> u64 {
    // Relaxed: a statistic.
    REPAIRED.load(Ordering::Relaxed)
}

/// Maps zero pages over the faulting page and the rest of its range; false when `addr` is not
/// ours or the remap failed.
fn repair(addr: usize) -> bool {
    let Some(e) = find(addr) else {
        return false;
    };
    // Relaxed: ordered by `find`'s Acquire load of `state`.
    let start = e.start.load(Ordering::Relaxed);
    let len = e.len.load(Ordering::Relaxed);
    let granule = e.granule.load(Ordering::Relaxed).max(1);
    let from = start + (addr - start) / granule * granule;
    // SeqCst (both): mark before remapping, so whoever reads the zeros sees the mark (pairs
    // with the SeqCst loads in `Registration::is_truncated` and `truncated_at`).
    e.state.store(TRUNCATED, Ordering::SeqCst);
    REPAIRED.fetch_add(1, Ordering::SeqCst);
    // SAFETY: `[from, start + len)` lies inside a shared mapping ring-os made and still owns
    // (registered entries are unregistered before unmapping); replacing its pages with private
    // zero pages keeps every reference into it valid (same addresses, readable and writable).
    // Async-signal-safety: rustix's Linux backend issues the raw `mmap` system call (no locks,
    // no allocation, and `errno` is left as the interrupted code had it; its libc backend,
    // elsewhere, writes `errno` only when the remap fails, and the process then dies).
    let remapped = unsafe {
        mmap_anonymous(
            from as *mut c_void,
            start + len - from,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE | MapFlags::FIXED,
        )
    };
    remapped.is_ok()
}

/// The `SIGBUS` handler (`SA_SIGINFO`).
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: with SA_SIGINFO the kernel passes a valid `siginfo_t`; reading `si_code` and
    // `si_addr` is a plain load (async-signal-safe).
    let (code, addr) = unsafe {
        if info.is_null() {
            (0, 0)
        } else {
            ((*info).si_code, (*info).si_addr() as usize)
        }
    };
    // Only a kernel-reported access beyond the file (si_code BUS_ADRERR) is a truncation; a
    // SIGBUS sent with kill(2) (si_code <= 0) or a hardware memory error is not ours.
    if code == libc::BUS_ADRERR && repair(addr) {
        return;
    }
    chain(sig, info, ctx, code > 0);
}

/// Hands a `SIGBUS` that is not ours to the previous disposition.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void, fault: bool) {
    // Acquire: pairs with the Release store after `PREVIOUS` was written.
    let prev = if PREVIOUS_SET.load(Ordering::Acquire) {
        // SAFETY: written once before `PREVIOUS_SET` was set, never again.
        Some(unsafe { (*PREVIOUS.0.get()).assume_init_ref() })
    } else {
        None
    };
    let handler = prev.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
    let flags = prev.map_or(0, |p| p.sa_flags);
    if handler == libc::SIG_IGN && !fault {
        return;
    }
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // SAFETY: `sigaction` and `raise` are async-signal-safe (signal-safety(7)). With the
        // default action restored, a fault kills the process when the faulting instruction
        // re-runs on return (with the right address in the core dump); a sent signal is raised
        // again, and SA_NODEFER lets it through at once.
        unsafe {
            let mut dfl: libc::sigaction = core::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigemptyset(&raw mut dfl.sa_mask);
            libc::sigaction(libc::SIGBUS, &raw const dfl, core::ptr::null_mut());
            if !fault {
                libc::raise(libc::SIGBUS);
            }
        }
        return;
    }
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this signature;
        // calling it with our own arguments is what the kernel would have done.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
            unsafe { core::mem::transmute(handler) };
        f(sig, info, ctx);
    } else {
        // SAFETY: a handler installed without SA_SIGINFO takes only the signal number.
        let f: extern "C" fn(libc::c_int) = unsafe { core::mem::transmute(handler) };
        f(sig);
    }
}

/// Whether `mem` lies in a range the guard repaired. With `probe`, first touches the last byte
/// of its mapping, so a truncation that no operation has met yet faults now and is found (a
/// truncation always cuts the file's tail). Memory that ring-os did not map is never probed.
pub(crate) fn memory_truncated<M: ring_core::Memory + ?Sized>(mem: &M, probe: bool) -> bool {
    let addr = core::ptr::from_ref(mem.header()) as usize;
    if probe {
        // SAFETY: `mem` is borrowed for this call, so the mapping holding its header stays
        // mapped.
        unsafe { probe_at(addr) }
    } else {
        truncated_at(addr)
    }
}

/// Touches the last byte of the registered mapping that holds `addr`, then says whether the
/// guard marked it truncated (false for an address ring-os did not map).
///
/// # Safety
///
/// The mapping that holds `addr` must stay mapped for the duration of the call (the caller
/// holds the segment, directly or through a ring endpoint).
pub(crate) unsafe fn probe_at(addr: usize) -> bool {
    let Some(e) = find(addr) else {
        return false;
    };
    // Relaxed: ordered by `find`'s Acquire load of `state`.
    let last = e.start.load(Ordering::Relaxed) + e.len.load(Ordering::Relaxed) - 1;
    // SAFETY: `last` is the mapping's last byte, mapped per the caller's promise; peers write
    // the segment only through atomics, and this is an atomic load.
    let byte = unsafe { core::sync::atomic::AtomicU8::from_ptr(last as *mut u8) };
    // Relaxed: only the page's presence matters.
    core::hint::black_box(byte.load(Ordering::Relaxed));
    // SeqCst: pairs with the handler's SeqCst store (see `Registration::is_truncated`).
    e.state.load(Ordering::SeqCst) == TRUNCATED
}
