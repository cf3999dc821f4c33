//! How the helper sleeps: the list of words of each backend and the blocking call on it
//! (`futex_waitv` on Linux, the segments' wait semaphores on Windows).

#[cfg(windows)]
use std::sync::Arc;
use std::time::Instant;

#[cfg(any(target_os = "linux", target_os = "android", windows))]
use super::NAP_MAX;
#[cfg(any(target_os = "linux", target_os = "android"))]
use super::WAITV_MAX;
use super::{Reactor, State, Word};
use core::sync::atomic::Ordering;

impl Reactor {
    /// The words to sleep on: the kick word first, then each distinct registered word once
    /// (with the value every entry on it expects: entries that expected another value were
    /// woken by the scan just before), at most `WAITV_MAX` in all.
    pub(super) fn waitv_list(&self, st: &State) -> Vec<(Word, u32)> {
        // Acquire: pairs with `register`'s Release bump: a registration made after this load
        // changes the word, so the coming `futex_waitv` returns at once.
        let kick = self.kick.load(Ordering::Acquire);
        let mut list = vec![(Word(core::ptr::from_ref(&self.kick)), kick)];
        let mut seen = std::collections::HashSet::new();
        // Armed entries wait in the io_uring (a driver reaps them).
        for e in st.entries.values().filter(|e| !e.armed) {
            if seen.insert(e.word) {
                list.push((e.word, e.expected));
            }
        }
        list
    }

    /// The semaphore backend's words: each distinct registered word once, with the value its
    /// entries expect and a clone of what keeps it mapped (the helper reads the words itself
    /// after the lock is dropped, so an entry cancelled meanwhile must not unmap them).
    #[cfg(windows)]
    pub(super) fn sems_list(&self, st: &State) -> Vec<(Word, u32, Arc<dyn Send + Sync>)> {
        let mut seen = std::collections::HashSet::new();
        st.entries
            .values()
            .filter(|e| seen.insert(e.word))
            .map(|e| (e.word, e.expected, Arc::clone(&e._keep)))
            .collect()
    }

    /// Sleeps on the semaphores of the buckets of `list`'s words and the kick event until one
    /// is signalled or `deadline`: counts itself on each bucket, fences, and sleeps only if
    /// every word still holds the value expected (the blocking wait's handshake, many buckets
    /// at once); the counts go back when it returns.
    #[cfg(windows)]
    pub(super) fn sleep_sems(
        &self,
        list: &[(Word, u32, Arc<dyn Send + Sync>)],
        deadline: Option<Instant>,
    ) {
        use crate::wait::windows::Bucket;
        use windows_sys::Win32::System::Threading::{WaitForMultipleObjects, INFINITE};
        /// `MAXIMUM_WAIT_OBJECTS`.
        const MAX_HANDLES: usize = 64;
        let Some(event) = &self.event else {
            return;
        };
        let mut handles = vec![event.raw()];
        let mut held = Vec::new();
        let mut keys = std::collections::HashSet::new();
        // A word outside any segment, or more buckets than one wait takes: poll as well.
        let mut poll = false;
        for (word, _, _) in list {
            // SAFETY: the list holds the entry's `keep`, which keeps the word mapped.
            let Some(bucket) = Bucket::of(unsafe { &*word.0 }) else {
                poll = true;
                continue;
            };
            if !keys.insert(bucket.key()) {
                continue;
            }
            if handles.len() == MAX_HANDLES {
                poll = true;
                continue;
            }
            match bucket.announce() {
                Some(announced) => {
                    handles.push(announced.handle());
                    held.push(announced);
                }
                None => poll = true,
            }
        }
        // SeqCst: the Dekker pair with the waker's fence in `wait::windows::wake_all` (after its
        // change of the word): either it sees our counts and releases permits, or we see its
        // change below and do not sleep.
        core::sync::atomic::fence(Ordering::SeqCst);
        let changed = list.iter().any(|(w, e, _)| {
            // SAFETY: as above, the list's `keep` holds each word's memory. Acquire: as
            // `Entry::load`.
            let now = unsafe { &*w.0 }.load(Ordering::Acquire);
            now != *e
        });
        if changed {
            return; // A word changed: the next scan wakes its entries.
        }
        let now = Instant::now();
        let mut left = deadline.map(|d| d.saturating_duration_since(now));
        if poll {
            left = Some(left.map_or(NAP_MAX, |l| l.min(NAP_MAX)));
        }
        let ms = left.map_or(INFINITE, crate::windows::sys::wait_ms);
        let count = u32::try_from(handles.len()).unwrap_or(1);
        // SAFETY: `handles` holds `count` open handles: the reactor's event and the semaphores
        // that `held` keeps open. Any outcome (a handle, a timeout, a failure) sends the helper
        // round its loop, which re-scans; a failure naps first so that it cannot spin.
        let r = unsafe { WaitForMultipleObjects(count, handles.as_ptr(), 0, ms) };
        if r == windows_sys::Win32::Foundation::WAIT_FAILED {
            std::thread::sleep(NAP_MAX);
        }
        let mut st = self.lock();
        st.sem_wakes += u64::from(
            r > windows_sys::Win32::Foundation::WAIT_OBJECT_0
                && r < windows_sys::Win32::Foundation::WAIT_OBJECT_0 + count,
        );
        drop(st);
        drop(held);
    }

    /// Sleeps in `futex_waitv` until a word in `list` changes, is woken, or `deadline`; false
    /// when the kernel lacks the system call.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(super) fn sleep_waitv(&self, list: &[(Word, u32)], deadline: Option<Instant>) -> bool {
        use rustix::io::Errno;
        use rustix::thread::futex;

        let overflow = list.len() > WAITV_MAX;
        let waits: Vec<futex::Wait> = list
            .iter()
            .take(WAITV_MAX)
            .map(|&(word, val)| {
                let mut w = futex::Wait::new();
                w.val = u64::from(val);
                w.uaddr = futex::WaitPtr::new(word.0.cast_mut().cast());
                // Shared (no FUTEX2_PRIVATE): the kernel keys the word by its page, so a
                // waker in another process mapping the segment finds us.
                w.flags = futex::WaitFlags::SIZE_U32;
                w
            })
            .collect();
        let now = Instant::now();
        // More words than one call takes: poll the rest every millisecond.
        let deadline = if overflow {
            Some(deadline.map_or(now + NAP_MAX, |d| d.min(now + NAP_MAX)))
        } else {
            deadline
        };
        // futex_waitv takes an absolute CLOCK_MONOTONIC time (Instant's clock on Linux).
        let timeout = deadline.map(|d| {
            let left = d.saturating_duration_since(now);
            let base = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
            let nanos = u64::try_from(base.tv_nsec).unwrap_or(0) + u64::from(left.subsec_nanos());
            rustix::time::Timespec {
                tv_sec: base
                    .tv_sec
                    .saturating_add(i64::try_from(left.as_secs()).unwrap_or(i64::MAX / 2))
                    .saturating_add(i64::try_from(nanos / 1_000_000_000).unwrap_or(0)),
                tv_nsec: i64::try_from(nanos % 1_000_000_000).unwrap_or(0),
            }
        });
        // The words in `list` belong to entries that may be cancelled (and their mappings
        // unmapped) while we sleep: the kernel reads them itself and reports a bad address as
        // EFAULT, never touching our memory unsafely; the next scan drops the entry.
        match futex::waitv(
            &waits,
            futex::WaitvFlags::empty(),
            timeout.as_ref(),
            futex::ClockId::Monotonic,
        ) {
            Err(Errno::NOSYS) => false,
            // Woken (the index of a word), a word that already changed (AGAIN), a timeout, a
            // signal or a fault: the next scan sorts it out.
            _ => true,
        }
    }

    /// No `futex_waitv` here: the helper polls.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub(super) fn sleep_waitv(&self, _list: &[(Word, u32)], _deadline: Option<Instant>) -> bool {
        false
    }
}
