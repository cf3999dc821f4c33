//! Futex wait and wake across processes on Windows, for words in a ring-os segment.
//!
//! `WaitOnAddress` does not cross processes, so every segment comes with named kernel objects
//! of its own (created with it, owner-only): a small waiters section `Local\<key>.waiters` of
//! [`BUCKETS`] counters and, per bucket, a semaphore `Local\<key>.wait<b>`. A word belongs to
//! bucket `(offset / 4) % BUCKETS`; two words in one bucket only cost spurious wake-ups.
//!
//! The handshake is "announce, re-check, sleep": a waiter increments its bucket's counter,
//! fences, and sleeps on the semaphore only if the word still holds the expected value; a waker
//! (who changed the word before calling) fences, reads the counter and releases that many
//! permits only if someone announced. One of the two sees the other (a Dekker pair of SeqCst
//! fences), and a permit released before the waiter sleeps stays until it does, so no wake-up is
//! lost. A waiter that timed out, or died, after it was counted leaves at most a spurious permit
//! (bounded by the semaphore's maximum); every wait has a timeout. ring-core's own announcement
//! (`consumer_waiters`, `producer_waiting`) still decides whether a publisher calls wake at all.
//!
//! Words outside any registered segment (in-process memory) fall back to the polling wait.

use core::sync::atomic::{fence, AtomicU32, Ordering};
use core::time::Duration;
use std::sync::{Arc, Mutex, OnceLock};

use windows_sys::Win32::Foundation::{INVALID_HANDLE_VALUE, WAIT_OBJECT_0, WAIT_TIMEOUT};
use windows_sys::Win32::System::Memory::{
    CreateFileMappingW, MapViewOfFile, UnmapViewOfFile, FILE_MAP_ALL_ACCESS,
    MEMORY_MAPPED_VIEW_ADDRESS, PAGE_READWRITE,
};
use windows_sys::Win32::System::Threading::{
    CreateSemaphoreW, ReleaseSemaphore, WaitForSingleObject,
};

use crate::wait::futex::WaitOutcome;
use crate::windows::sys::{self, Handle, OwnerOnly};

/// Counter/semaphore pairs per segment.
pub(crate) const BUCKETS: usize = 8;

/// Most permits a semaphore holds: bounds the spurious wake-ups that stale permits can cause.
const MAX_PERMITS: i32 = 64;

/// The wait objects of one segment.
#[derive(Debug)]
pub(crate) struct Waits {
    /// The objects' name prefix.
    key: String,
    /// The waiters section's handle (keeps it alive) and its view.
    _section: Handle,
    /// The view of the waiters section: `BUCKETS` counters at its start.
    counters: *mut core::ffi::c_void,
    /// Per bucket, its semaphore (opened on first use).
    sems: [OnceLock<Option<Handle>>; BUCKETS],
}

// SAFETY: the view is shared memory accessed only through atomics; handles are thread-safe.
unsafe impl Send for Waits {}
// SAFETY: as above.
unsafe impl Sync for Waits {}

impl Waits {
    /// Opens (or creates) the wait objects of the ring keyed `key`.
    pub(crate) fn open(key: &str) -> std::io::Result<Self> {
        let sd = OwnerOnly::get()?;
        let attrs = sd.attributes();
        let name = sys::object_name(key, "waiters");
        // SAFETY: a pagefile-backed section of one page; `attrs` and `name` live across the call.
        let raw = unsafe {
            CreateFileMappingW(
                INVALID_HANDLE_VALUE,
                &raw const attrs,
                PAGE_READWRITE,
                0,
                4096,
                name.as_ptr(),
            )
        };
        let section = Handle::new(raw).ok_or_else(sys::last_error)?;
        // SAFETY: maps the whole (one-page) section read-write; unmapped in Drop.
        let view = unsafe { MapViewOfFile(section.raw(), FILE_MAP_ALL_ACCESS, 0, 0, 0) };
        if view.Value.is_null() {
            return Err(sys::last_error());
        }
        Ok(Self {
            key: key.to_owned(),
            _section: section,
            counters: view.Value,
            sems: Default::default(),
        })
    }

    /// Bucket `b`'s waiter counter.
    fn counter(&self, b: usize) -> &AtomicU32 {
        debug_assert!(b < BUCKETS);
        // SAFETY: the view is at least one page, 4096 >= BUCKETS * 4, page-aligned; it stays
        // mapped while `self` lives; peers access it only through atomics.
        unsafe { AtomicU32::from_ptr(self.counters.cast::<u32>().add(b % BUCKETS)) }
    }

    /// Bucket `b`'s semaphore, opened (or created, empty) on first use.
    fn sem(&self, b: usize) -> Option<&Handle> {
        self.sems[b % BUCKETS]
            .get_or_init(|| {
                let sd = OwnerOnly::get().ok()?;
                let attrs = sd.attributes();
                let name = sys::object_name(&self.key, &format!("wait{}", b % BUCKETS));
                // SAFETY: `attrs` and `name` live across the call.
                let raw =
                    unsafe { CreateSemaphoreW(&raw const attrs, 0, MAX_PERMITS, name.as_ptr()) };
                Handle::new(raw)
            })
            .as_ref()
    }
}

impl Drop for Waits {
    fn drop(&mut self) {
        // SAFETY: the view came from MapViewOfFile and is unmapped once; no reference into it
        // outlives `self`.
        unsafe {
            UnmapViewOfFile(MEMORY_MAPPED_VIEW_ADDRESS {
                Value: self.counters,
            })
        };
    }
}

/// A mapped range and its wait objects, as the registry holds them.
struct Entry {
    /// First byte of the mapping.
    start: usize,
    /// Its length.
    len: usize,
    /// Its wait objects.
    waits: Arc<Waits>,
}

/// Every segment this process has mapped.
static REGISTRY: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// Keeps a mapping in the registry; removes it on drop (before the view is unmapped).
#[derive(Debug)]
pub(crate) struct Registration {
    /// The registered range's first byte.
    start: usize,
}

/// Registers `[start, start + len)` with `waits`.
pub(crate) fn register(start: usize, len: usize, waits: Waits) -> Registration {
    let mut reg = REGISTRY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    reg.push(Entry {
        start,
        len,
        waits: Arc::new(waits),
    });
    Registration { start }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut reg = REGISTRY
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        reg.retain(|e| e.start != self.start);
    }
}

/// The wait objects and bucket of the word at `addr`, if it lies in a registered segment.
fn find(addr: usize) -> Option<(Arc<Waits>, usize)> {
    let reg = REGISTRY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    reg.iter()
        .find(|e| addr >= e.start && addr - e.start < e.len)
        .map(|e| (Arc::clone(&e.waits), ((addr - e.start) / 4) % BUCKETS))
}

/// Waits while `word == expected`, at most `timeout`; `None` when `word` lies in no registered
/// segment (the caller polls it instead).
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> Option<WaitOutcome> {
    let (waits, b) = find(word.as_ptr() as usize)?;
    let sem = waits.sem(b)?;
    let counter = waits.counter(b);
    // Announce first. Relaxed: ordered by the SeqCst fence below.
    counter.fetch_add(1, Ordering::Relaxed);
    // SeqCst: Dekker pair with the fence in `wake_all` (after the waker's change of `word`):
    // either it sees our count or we see its change.
    fence(Ordering::SeqCst);
    // Acquire: pairs with the waker's Release change of the word.
    let outcome = if word.load(Ordering::Acquire) == expected {
        // SAFETY: `sem` is an open semaphore handle (held by `waits`, which we hold).
        match unsafe { WaitForSingleObject(sem.raw(), sys::wait_ms(timeout)) } {
            WAIT_OBJECT_0 => WaitOutcome::Woken,
            WAIT_TIMEOUT => WaitOutcome::TimedOut,
            // A failed wait: let the caller re-check (its deadline bounds the loop), after a
            // short nap so a persistent failure does not spin.
            _ => {
                std::thread::sleep(timeout.min(Duration::from_millis(1)));
                WaitOutcome::Woken
            }
        }
    } else {
        WaitOutcome::Changed
    };
    // Relaxed: a count; never below zero (a peer may have scribbled it).
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    Some(outcome)
}

#[cfg(feature = "async")]
/// A word's bucket (its segment's wait objects and the bucket's index), for a waiter that
/// sleeps on many buckets at once: the async reactor (`asyncio/reactor.rs`).
pub(crate) struct Bucket {
    waits: Arc<Waits>,
    b: usize,
}

#[cfg(feature = "async")]
impl Bucket {
    /// The bucket of `word`; `None` when it lies in no registered segment.
    pub(crate) fn of(word: &AtomicU32) -> Option<Self> {
        let (waits, b) = find(word.as_ptr() as usize)?;
        Some(Self { waits, b })
    }

    /// Names the semaphore: two words with the same key share one.
    pub(crate) fn key(&self) -> (usize, usize) {
        (Arc::as_ptr(&self.waits) as usize, self.b)
    }

    /// Counts one waiter on the bucket (as `wait` does before its fence); the count is given
    /// back when the result is dropped. `None` when the semaphore cannot be opened.
    pub(crate) fn announce(self) -> Option<Announced> {
        let handle = self.waits.sem(self.b)?.raw();
        // Relaxed: ordered by the SeqCst fence the caller runs after its announcements, before
        // it re-checks the words (the Dekker pair with `wake_all`'s fence, as in `wait`).
        self.waits.counter(self.b).fetch_add(1, Ordering::Relaxed);
        Some(Announced {
            bucket: self,
            handle,
        })
    }
}

#[cfg(feature = "async")]
/// A waiter counted on a bucket (see [`Bucket::announce`]), and the semaphore to sleep on.
pub(crate) struct Announced {
    bucket: Bucket,
    handle: windows_sys::Win32::Foundation::HANDLE,
}

#[cfg(feature = "async")]
impl Announced {
    /// The bucket's semaphore (open while `self` lives: `self` holds its wait objects).
    pub(crate) fn handle(&self) -> windows_sys::Win32::Foundation::HANDLE {
        self.handle
    }
}

#[cfg(feature = "async")]
impl Drop for Announced {
    fn drop(&mut self) {
        // Relaxed: a count; never below zero (a peer may have scribbled it), as `wait`.
        let _ = self.bucket.waits.counter(self.bucket.b).fetch_update(
            Ordering::Relaxed,
            Ordering::Relaxed,
            |n| n.checked_sub(1),
        );
    }
}

/// Wakes every waiter announced on `word`'s bucket; returns how many permits were released.
pub(crate) fn wake_all(word: &AtomicU32) -> usize {
    let Some((waits, b)) = find(word.as_ptr() as usize) else {
        return 0;
    };
    // SeqCst: pairs with the waiter's fence (see `wait`); the caller changed `word` before.
    fence(Ordering::SeqCst);
    // Relaxed: ordered by the fence.
    let n = waits.counter(b).load(Ordering::Relaxed);
    if n == 0 {
        return 0;
    }
    let Some(sem) = waits.sem(b) else {
        return 0;
    };
    let want = i32::try_from(n).unwrap_or(MAX_PERMITS).min(MAX_PERMITS);
    // SAFETY: `sem` is an open semaphore handle; the previous-count pointer may be null.
    if unsafe { ReleaseSemaphore(sem.raw(), want, core::ptr::null_mut()) } != 0 {
        return want.unsigned_abs() as usize;
    }
    // Too many posts: the semaphore is (nearly) full, so waiters pass anyway; add what fits.
    // SAFETY: as above.
    usize::from(unsafe { ReleaseSemaphore(sem.raw(), 1, core::ptr::null_mut()) } != 0)
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::segment::{CreateOptions, Segment, SegmentName, SizeCheck};

    /// Two views of one named section at different addresses, as two processes have them: a
    /// wait through one is ended by a wake through the other, long before its timeout (without
    /// the semaphore it would sleep the full 20 s; a word outside any segment would poll).
    #[test]
    fn a_wake_through_one_view_ends_a_wait_through_another() {
        let name = SegmentName::new(&format!("futex-views-{}", std::process::id())).unwrap();
        let a = Segment::create_named(&name, 4096, CreateOptions::new()).unwrap();
        let b = Segment::open_named(&name, SizeCheck::Exactly(4096)).unwrap();
        assert_ne!(a.as_ptr(), b.as_ptr());
        // SAFETY: offset 64 is 4-aligned and inside both 4096-byte views, which outlive the
        // references; both sides access the word only atomically.
        let (wa, wb) = unsafe {
            (
                AtomicU32::from_ptr(a.as_ptr().as_ptr().add(64).cast()),
                AtomicU32::from_ptr(b.as_ptr().as_ptr().add(64).cast()),
            )
        };
        let start = Instant::now();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| wait(wa, 0, Duration::from_secs(20)));
            // Let it announce and sleep; the handshake is correct either way.
            std::thread::sleep(Duration::from_millis(100));
            // Release: pairs with the waiter's Acquire re-check.
            wb.store(1, Ordering::Release);
            let _ = wake_all(wb);
            let outcome = waiter.join().unwrap();
            assert!(
                matches!(outcome, Some(WaitOutcome::Woken | WaitOutcome::Changed)),
                "{outcome:?}"
            );
        });
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        // Nobody announced: a wake releases nothing.
        assert_eq!(wake_all(wb), 0);
        // A word in no segment is not ours to wait on.
        assert!(wait(&AtomicU32::new(0), 0, Duration::from_millis(1)).is_none());
    }
}
