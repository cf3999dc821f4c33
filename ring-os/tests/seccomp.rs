//! A process whose seccomp filter refuses `membarrier(2)`, as a container runtime's profile may:
//! the kernel has the command, this process may not run it. Such a process must not run
//! compiler fences as its per-message side (no barrier of its own would order them), and,
//! where it mapped a ring marked for asymmetric fences, its peers may be asymmetric while its
//! own parks cannot order them: its sleeps must then be bounded by the 1 ms nap
//! (docs/PROTOCOL.md, "Asymmetric fences", *full, napping*). A ring in it must still carry
//! messages both ways with every wait parking.
//!
//! The filter is installed in a child (this binary run again, the test named, an environment
//! variable set): a filter cannot be removed, and the mode is decided once per process. The
//! parent measures the same wait unfiltered, which shows that the count tells the modes apart.
#![cfg(all(
    target_os = "linux",
    not(ring_portable),
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

use core::time::Duration;
use std::process::Command;
use std::time::Instant;

use core::ops::DerefMut;
use ring_core::{Config, Consumer, DeliveryClass, Memory, OwnerId, Producer, ReadError};
use ring_os::raw::{CreateOptions, FutexWait, LocalSegment, ShmRing};

/// Set in the child, which installs the filter and runs the checks.
const CHILD: &str = "RING_SECCOMP_TEST_CHILD";

/// How long the measured wait lasts.
const WAIT: Duration = Duration::from_millis(200);

/// `AUDIT_ARCH_*` of this build (linux/audit.h): the filter allows every call of another ABI.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// Installs, for every thread of this process, a filter that answers `membarrier` with `EPERM`
/// and allows everything else.
fn refuse_membarrier() -> std::io::Result<()> {
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    let mut prog = [
        // `seccomp_data.arch` (offset 4): another ABI's numbers mean other calls.
        stmt(load, 4),
        jeq(AUDIT_ARCH, 0, 3),
        // `seccomp_data.nr` (offset 0).
        stmt(load, 0),
        jeq(libc::SYS_membarrier as u32, 0, 1),
        stmt(ret, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: `prctl(PR_SET_NO_NEW_PRIVS)` takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fprog` points at `prog`, a valid classic BPF program of `len` instructions that
    // outlives the call (the kernel copies it); TSYNC applies it to every thread of this
    // process, so no thread the test harness made escapes it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_TSYNC,
            core::ptr::from_ref(&fprog),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `membarrier` runs in this process: the kernel's query command answers with the
/// commands it has, and with nothing where the call fails (no such call, or refused).
fn membarrier_runs() -> bool {
    !rustix::thread::membarrier_query().is_empty()
}

/// The voluntary context switches of the calling thread so far.
fn sleeps_so_far() -> i64 {
    // SAFETY: `getrusage` writes one `rusage`, which `usage` is.
    let mut usage: libc::rusage = unsafe { core::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD is the calling thread.
    let r = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    assert_eq!(r, 0, "getrusage: {}", std::io::Error::last_os_error());
    usage.ru_nvcsw
}

/// A gating consumer of a marked ring waits `WAIT` on it, empty, parking at once (no spin):
/// the sleeps that took. Also returns the light fence of the mapping (`true`: a full fence).
fn marked_ring_wait() -> (bool, i64) {
    let config = Config::new(8, 64).with_asymmetric_fences(true);
    let ring = ShmRing::create_memfd(&config, CreateOptions::new()).expect("memfd ring");
    let light_is_full = ring.light_fence();
    let _producer = ShmRing::producer(&ring).expect("producer");
    let mut consumer = ShmRing::consumer(&ring, DeliveryClass::Gating).expect("consumer");
    let mut buf = [0u8; 64];
    let before = sleeps_so_far();
    let started = Instant::now();
    let got = consumer.copy(&mut buf, &mut FutexWait::new(WAIT).spins(0));
    let slept = sleeps_so_far() - before;
    assert!(
        matches!(got, Err(ReadError::Timeout)),
        "an empty ring's wait ended with {got:?}"
    );
    assert!(
        started.elapsed() >= WAIT,
        "the wait ended early: {:?}",
        started.elapsed()
    );
    (light_is_full, slept)
}

/// 500 messages there and back over two rings (`ask` and `answer`, a producer and a gating
/// consumer each), every wait parking at once (10 s each): a lost wake-up would cost its 10 s,
/// so the whole must take well under that.
fn parking_echo<A, B, AP, AC, BP, BC>(mut ask_p: AP, ask_c: AC, ans_p: BP, mut ans_c: BC)
where
    A: Memory,
    B: Memory,
    AP: DerefMut<Target = Producer<A>>,
    AC: DerefMut<Target = Consumer<A>> + Send,
    BP: DerefMut<Target = Producer<B>> + Send,
    BC: DerefMut<Target = Consumer<B>>,
{
    const ROUNDS: u32 = 500;
    let started = Instant::now();
    std::thread::scope(|s| {
        let (mut ask_c, mut ans_p) = (ask_c, ans_p);
        s.spawn(move || {
            let mut buf = [0u8; 8];
            for _ in 0..ROUNDS {
                let wait = &mut FutexWait::new(Duration::from_secs(10)).spins(0);
                let n = ask_c.copy(&mut buf, wait).expect("echo's read").len;
                ans_p.try_publish(&buf[..n]).expect("echo's answer");
            }
        });
        let mut buf = [0u8; 8];
        for i in 0..ROUNDS {
            ask_p.try_publish(&i.to_le_bytes()).expect("ask");
            let wait = &mut FutexWait::new(Duration::from_secs(10)).spins(0);
            let n = ans_c.copy(&mut buf, wait).expect("answer's read").len;
            assert_eq!(&buf[..n], &i.to_le_bytes()[..], "round {i}");
        }
    });
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{ROUNDS} parking rounds took {:?}: wake-ups were lost",
        started.elapsed()
    );
}

/// What the child checks, under the filter.
fn child() {
    refuse_membarrier().expect("install the seccomp filter");
    assert!(!membarrier_runs(), "the filter did not refuse membarrier");

    // A marked mapping: full fences per message, sleeps of at most 1 ms (about 200 here).
    let (light_is_full, slept) = marked_ring_wait();
    assert!(
        light_is_full,
        "a process refused membarrier runs compiler fences per message"
    );
    assert!(
        slept >= 50,
        "a process refused membarrier slept {slept} times in {WAIT:?} on a marked ring: its \
         sleeps are not bounded by the 1 ms nap"
    );
    println!("seccomp child: {slept} sleeps in {WAIT:?}");

    // The in-process segment: registration refused, so full fences on both sides.
    let id = |n| OwnerId::new(n).unwrap();
    let ask = LocalSegment::new(&Config::new(8, 64), id(1)).unwrap();
    let answer = LocalSegment::new(&Config::new(8, 64), id(1)).unwrap();
    assert!(
        ask.light_fence(),
        "a local segment of a process refused membarrier runs compiler fences per message"
    );
    parking_echo(
        &mut Producer::new(&ask, id(1)).unwrap(),
        &mut Consumer::new(&ask, DeliveryClass::Gating, id(2)).unwrap(),
        &mut Producer::new(&answer, id(1)).unwrap(),
        &mut Consumer::new(&answer, DeliveryClass::Gating, id(2)).unwrap(),
    );

    // Marked mappings, parked on both ways.
    let config = Config::new(8, 64).with_asymmetric_fences(true);
    let ask = ShmRing::create_memfd(&config, CreateOptions::new()).unwrap();
    let answer = ShmRing::create_memfd(&config, CreateOptions::new()).unwrap();
    parking_echo(
        ShmRing::producer(&ask).unwrap(),
        ShmRing::consumer(&ask, DeliveryClass::Gating).unwrap(),
        ShmRing::producer(&answer).unwrap(),
        ShmRing::consumer(&answer, DeliveryClass::Gating).unwrap(),
    );
}

#[test]
fn a_process_refused_membarrier_runs_full_fences_and_bounded_sleeps() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    // The same wait here, unfiltered (asymmetric on a kernel that has the command, Linux >=
    // 4.16): sleeps of up to 20 ms, about 10. This is what makes the child's count mean
    // something. Where this process is refused already (a container's profile), only the
    // child's checks run.
    let baseline = if membarrier_runs() {
        let (light_is_full, slept_here) = marked_ring_wait();
        assert!(!light_is_full, "an unfiltered process is not asymmetric");
        assert!(
            slept_here < 40,
            "an asymmetric process slept {slept_here} times in {WAIT:?}"
        );
        format!("unfiltered: {slept_here} sleeps in {WAIT:?}")
    } else {
        "unfiltered: membarrier is refused here already, no baseline".to_owned()
    };

    let exe = std::env::current_exe().expect("this test binary");
    let out = Command::new(exe)
        .args([
            "--exact",
            "a_process_refused_membarrier_runs_full_fences_and_bounded_sleeps",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .expect("run the child");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the filtered child failed:\n{text}");
    assert!(
        text.contains("seccomp child:") && text.contains("1 passed"),
        "the child ran no checks:\n{text}"
    );
    let child = text.lines().find(|l| l.contains("seccomp child:"));
    println!("{baseline}; {}", child.unwrap_or("?"));
}
