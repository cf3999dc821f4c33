//! The heavy fence of asymmetric fences really is `membarrier(2)`: a thread of this (registered)
//! process spinning on another CPU is interrupted by it, through a marked mapping and through a
//! `LocalSegment`. Without the system call the count barely moves.
//!
//! A binary of its own, with nothing else in it: the count is of the kernel's function-call
//! interrupts on one CPU, and other tests beside it move threads of this process on and off
//! that CPU, which decides what the global command reaches (below).
//!
//! **What the kernel's global command skips.** `MEMBARRIER_CMD_GLOBAL_EXPEDITED` picks the CPUs
//! to interrupt by a per-CPU copy of the running process's registration, which the kernel
//! updates when a CPU switches between processes. On this machine's kernel (6.18) that copy was
//! seen unset for the CPU of a spinning thread of a registered process: the command skipped the
//! thread for whole seconds (0 interrupts in 3 s) in 9 of 20 runs of these two tests one after
//! the other, when neither prepared the CPU; running a short child process on that CPU first
//! (a switch to another process and back) made it 0 of 20. What leaves it unset is not pinned
//! down (a thread of ours that spins there and exits first did not reproduce it). So the
//! mapping's test refreshes the CPU first: it checks that the heavy fence issues the command.
//! The local segment's test does not, because its private command
//! (`MEMBARRIER_CMD_PRIVATE_EXPEDITED`) checks each CPU's current thread instead of that copy,
//! and must reach the spinner whatever ran before.
#![cfg(all(target_os = "linux", not(ring_portable)))]

use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ring_core::layout::RING_ASYMMETRIC_FENCES;
use ring_core::{Config, Memory, OwnerId};
use ring_os::raw::{CreateOptions, LocalSegment, ShmRing};

/// Interrupts in one burst of 2000 heavy fences that only the system call reaches: each call
/// finds the spinner running on its CPU unless another process has the CPU then, and some burst
/// has it most of the time. Without the call no burst gets near: only other processes' calls
/// of the command interrupt a spinning thread, far fewer than this in a burst's milliseconds.
const ENOUGH: u64 = 500;

/// One test at a time: one's calls would interrupt the other's spinner.
static SERIAL: Mutex<()> = Mutex::new(());

/// The function-call interrupts the kernel has counted on `cpu` (its column of x86's `CAL`
/// line of /proc/interrupts), or `None` where there is no such line or column.
fn call_interrupts_on(cpu: usize) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/interrupts").ok()?;
    let mut lines = text.lines();
    let name = format!("CPU{cpu}");
    let column = lines.next()?.split_whitespace().position(|c| c == name)?;
    let line = lines.find(|l| l.trim_start().starts_with("CAL:"))?;
    line.split_whitespace().nth(column + 1)?.parse().ok()
}

/// Pins the calling thread to `cpu`.
fn only(cpu: usize) -> bool {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).is_ok()
}

/// The most function-call interrupts that one burst of 2000 `heavy` calls caused on the CPU of
/// a spinning thread of this process, over bursts for at most 3 s or until one reaches
/// [`ENOUGH`]; `None` where it cannot be measured (one CPU, no affinity, no `CAL` line).
///
/// The spinner runs on one CPU and this thread on another: a thread of ours must be running on
/// a CPU other than the caller's for the call to interrupt anything, and two threads left to
/// the scheduler on a loaded machine may share one CPU for a whole burst. Before the spinner
/// starts, the spinner's CPU runs what `before` says (see the module's text).
fn best_burst(before_spinner: Cpu, heavy: impl Fn()) -> Option<u64> {
    let Ok(saved) = rustix::thread::sched_getaffinity(None) else {
        eprintln!("the affinity cannot be read: nothing to place the threads with");
        return None;
    };
    let cpus: Vec<usize> = (0..rustix::thread::CpuSet::MAX_CPU)
        .filter(|&c| saved.is_set(c))
        .collect();
    let &[here, there, ..] = cpus.as_slice() else {
        eprintln!("one CPU only: no other CPU to interrupt");
        return None;
    };
    // The spinner's CPU only: interrupts of the other CPUs are not ours to count.
    let Some(before) = call_interrupts_on(there) else {
        eprintln!("no CAL line in /proc/interrupts: nothing to count on this architecture");
        return None;
    };
    match before_spinner {
        Cpu::Refreshed => {
            // A child inherits the affinity of the thread that starts it.
            assert!(only(there), "cannot pin this thread");
            let ran = std::process::Command::new("true").status();
            assert!(ran.is_ok_and(|s| s.success()), "`true` did not run");
        }
        Cpu::AsItIs => {}
    }
    assert!(only(here), "cannot pin this thread");
    let stop = Arc::new(AtomicBool::new(false));
    let spinner = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            assert!(only(there), "cannot pin the spinner");
            while !stop.load(Ordering::Relaxed) {
                core::hint::spin_loop();
            }
        })
    };
    std::thread::sleep(Duration::from_millis(20));
    let mut best = 0;
    let mut last = before;
    let end = Instant::now() + Duration::from_secs(3);
    while best < ENOUGH && Instant::now() < end {
        for _ in 0..2000 {
            heavy();
        }
        let now = call_interrupts_on(there).unwrap_or(last);
        best = best.max(now - last);
        last = now;
    }
    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
    let _ = rustix::thread::sched_setaffinity(None, &saved);
    Some(best)
}

/// What the spinner's CPU runs just before the spinner comes to it.
#[derive(Clone, Copy)]
enum Cpu {
    /// Another process: the kernel's copy of our registration there is set again.
    Refreshed,
    /// Whatever ran there last.
    AsItIs,
}

/// Asserts that `mem` runs asymmetric fences here (its light fence is `light`: a compiler
/// fence, `false`) and that its heavy fence interrupts.
fn heavy_fence_interrupts(mem: &impl Memory, before_spinner: Cpu, light: bool) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // This machine's kernel has the command (Linux >= 4.16) and the tests run without a
    // seccomp filter: the light fence of a ring marked at attach is a compiler fence.
    assert_eq!(mem.light_fence(), light, "unexpected light fence");
    // One barrier first: a process's first may register it, and a registration refreshes the
    // copy on every CPU running one of its threads; the CPU is set up after that.
    mem.heavy_fence();
    let Some(best) = best_burst(before_spinner, || mem.heavy_fence()) else {
        return;
    };
    assert!(
        best >= ENOUGH,
        "no burst of 2000 heavy fences interrupted the spinner's CPU {ENOUGH} times (at most {best})"
    );
}

#[test]
fn barrier_heavy_fence_of_a_marked_mapping_interrupts_a_thread_running_elsewhere() {
    let config = Config::new(4, 64).with_asymmetric_fences(true);
    let ring = ShmRing::create_memfd(&config, CreateOptions::new()).unwrap();
    heavy_fence_interrupts(&ring, Cpu::Refreshed, false);
}

/// The private command needs no refreshed CPU.
#[test]
fn barrier_heavy_fence_of_a_local_segment_interrupts_a_thread_running_elsewhere() {
    let seg = LocalSegment::new(&Config::new(4, 64), OwnerId::new(1).unwrap()).unwrap();
    heavy_fence_interrupts(&seg, Cpu::AsItIs, false);
}

/// A peer marks an unmarked ring after this process attached it: participants that attach from
/// then on run compiler fences per message, so this mapping's parks must issue the barrier too.
/// Its own per-message side stays a full fence (what it read at attach: safe either way).
#[test]
fn barrier_heavy_fence_of_a_mapping_marked_after_attach_interrupts_a_thread_running_elsewhere() {
    let ring = ShmRing::create_memfd(&Config::new(4, 64), CreateOptions::new()).unwrap();
    assert!(ring.light_fence(), "an unmarked ring runs full fences");
    // The scribble: the mark set in the live header, as a peer with the mapping could.
    ring.header()
        .ring_flags
        .fetch_or(RING_ASYMMETRIC_FENCES, Ordering::Relaxed);
    heavy_fence_interrupts(&ring, Cpu::Refreshed, true);
}
