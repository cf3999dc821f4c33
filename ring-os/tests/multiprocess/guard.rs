//! SIGBUS-guard chaining and memfd rendezvous scenarios (issue 14): a SIGBUS that is not ours
//! still reaches the previous disposition; a memfd ring served over a rendezvous socket cannot
//! be truncated and leaves nothing in /dev/shm when its producer is killed.

use std::io::Write as _;
use std::os::unix::process::ExitStatusExt as _;
use std::time::Duration;

use ring_core::{Config, DeliveryClass};
use ring_os::raw::rendezvous::{Rendezvous, SocketPlace};
#[cfg_attr(
    target_os = "macos",
    allow(unused_imports, reason = "memfd tests are not built on macOS")
)]
use ring_os::{
    raw::{ConsumerExt as _, CreateOptions, ShmRing},
    Error,
};

#[cfg_attr(
    target_os = "macos",
    allow(unused_imports, reason = "memfd tests are not built on macOS")
)]
use crate::support::{
    check_payload, child_env_parsed, child_ring_name, field, publish_payloads, unique_name, Child,
};

const SECS: fn(u64) -> Duration = Duration::from_secs;
/// The exit status of the test's own SIGBUS handler.
const PREV_RAN: i32 = 42;

fn say(line: &str) {
    println!("{line}");
    let _ = std::io::stdout().flush();
}

/// The "host application's" handler: says so and exits (async-signal-safe calls only).
extern "C" fn host_handler(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut core::ffi::c_void) {
    let msg = b"PREV\n";
    // SAFETY: write(2) and _exit(2) are async-signal-safe; the buffer is a static string.
    unsafe {
        libc::write(1, msg.as_ptr().cast(), msg.len());
        libc::_exit(PREV_RAN);
    }
}

/// Child: optionally installs a host handler first, then shows that a ring's truncation is
/// repaired without it, and that a SIGBUS elsewhere (`RING_MODE=fault`: a truncated plain
/// mapping; `sent`: raise(3)) reaches it.
pub fn chain_role(with_prev: bool) -> i32 {
    if with_prev {
        // SAFETY: installs a handler with the SA_SIGINFO signature; the struct is zeroed plain
        // data.
        unsafe {
            let mut act: libc::sigaction = core::mem::zeroed();
            act.sa_sigaction = host_handler as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&raw mut act.sa_mask);
            assert_eq!(
                libc::sigaction(libc::SIGBUS, &raw const act, core::ptr::null_mut()),
                0
            );
        }
    }
    let dir = std::path::PathBuf::from(std::env::var("RING_DIR").expect("RING_DIR"));
    let ring_path = dir.join(format!("ring-{}", std::process::id()));
    let ring = ShmRing::create_file(&ring_path, &Config::new(16, 4096), CreateOptions::new())
        .expect("create");
    let len = ring.segment().len() as u64;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&ring_path)
        .and_then(|f| f.set_len(len / 3))
        .expect("truncate the ring");
    assert!(
        ring.is_truncated(),
        "the guard did not see the ring's truncation"
    );
    say("RING-REPAIRED");
    if std::env::var("RING_MODE").as_deref() == Ok("sent") {
        // SAFETY: raise(3) sends SIGBUS to this thread (si_code SI_TKILL): not a fault.
        unsafe { libc::raise(libc::SIGBUS) };
        say("SURVIVED");
        return 3;
    }
    let plain = dir.join(format!("plain-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&plain)
        .expect("plain file");
    file.set_len(8192).expect("size");
    let map = memmap2::MmapOptions::new()
        .len(8192)
        .map_raw(&file)
        .expect("map plain file");
    file.set_len(0).expect("truncate the plain file");
    // SAFETY: in bounds of the live mapping; the page is gone, which is the point.
    let byte = unsafe { map.as_ptr().add(4096).read_volatile() };
    say(&format!("SURVIVED {byte}"));
    3
}

/// Parent: the three cases.
pub fn chain() {
    let dir = std::env::temp_dir().join(format!("ring-os-guard-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let run = |role: &str, mode: &str| {
        let mut c = Child::spawn(
            role,
            &[
                ("RING_DIR", dir.display().to_string()),
                ("RING_MODE", mode.to_owned()),
            ],
        );
        c.expect_line("RING-REPAIRED", SECS(20));
        let status = c.wait_status(SECS(20));
        (c, status)
    };
    for mode in ["fault", "sent"] {
        let (c, status) = run("guard-chain", mode);
        c.expect_line("PREV", SECS(5));
        assert_eq!(status.code(), Some(PREV_RAN), "{mode}: {status:?}");
    }
    // No host handler: Rust's stack-overflow handler and then the default action kill the
    // process with SIGBUS, as without the guard.
    let (_c, status) = run("guard-default", "fault");
    assert_eq!(status.signal(), Some(libc::SIGBUS), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
    println!("  guard: ring faults repaired; other SIGBUS reached the host handler or killed");
}

/// Child: receives the memfd ring over the rendezvous, fails to truncate it, reads `RING_N`.
pub fn rendezvous_sub() -> i32 {
    let name = child_ring_name();
    let n: u64 = child_env_parsed("RING_N");
    let ring = Rendezvous::new(&name, SocketPlace::Abstract)
        .connect(SECS(20))
        .expect("connect");
    let len = ring.segment().len() as u64;
    match rustix::fs::ftruncate(ring.segment().fd(), len / 3) {
        Err(e) if e == rustix::io::Errno::PERM => say("REFUSED EPERM"),
        other => say(&format!("ODD {other:?}")),
    }
    let mut c = ShmRing::consumer(&ring, DeliveryClass::Gating).expect("register");
    say("READY");
    let mut buf = [0u8; 256];
    for i in 0..n {
        match c.recv(&mut buf, SECS(20)) {
            Ok(m) if check_payload(&buf[..m.len]) == Some(i) => {}
            other => {
                say(&format!("ERR message {i}: {other:?}"));
                return 2;
            }
        }
    }
    say(&format!("RESULT received={n}"));
    0
}

/// Child: serves a memfd ring and waits to be killed.
pub fn rendezvous_pub() -> i32 {
    let name = child_ring_name();
    let (_ring, _server) = Rendezvous::new(&name, SocketPlace::Abstract)
        .create(&Config::new(4, 64), CreateOptions::new())
        .expect("serve");
    say("SERVING");
    std::thread::sleep(SECS(60));
    0
}

/// Parent: a memfd ring served to another process refuses its truncation (EPERM) and carries
/// messages; a SIGKILLed server leaves nothing in /dev/shm and its name free.
#[cfg(not(target_os = "macos"))]
pub fn rendezvous() {
    let n = 2000u64;
    let name = unique_name("rdv");
    let place = Rendezvous::new(&name, SocketPlace::Abstract);
    let (ring, server) = place
        .create(
            &Config::new(16, 256).with_consumers(2),
            CreateOptions::new(),
        )
        .expect("serve");
    let mut child = Child::spawn(
        "rendezvous-sub",
        &[
            ("RING_NAME", name.as_str().to_owned()),
            ("RING_N", n.to_string()),
        ],
    );
    child.expect_line("REFUSED EPERM", SECS(20));
    child.expect_line("READY", SECS(20));
    let mut p = ShmRing::producer(&ring).expect("producer");
    publish_payloads(&mut p, n);
    assert_eq!(field(&child.expect_line("RESULT", SECS(30)), "received"), n);
    assert!(child.wait(SECS(10)), "rendezvous subscriber failed");
    drop(server);
    // A server killed mid-stream: its ring stays mapped here, nothing is left behind.
    let name = unique_name("rdv-kill");
    let mut server = Child::spawn("rendezvous-pub", &[("RING_NAME", name.as_str().to_owned())]);
    server.expect_line("SERVING", SECS(20));
    let place = Rendezvous::new(&name, SocketPlace::Abstract);
    let theirs = place.connect(SECS(10)).expect("connect");
    server.sigkill();
    let _ = server.wait_status(SECS(10));
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .expect("/dev/shm")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|f| f.contains(name.as_str()))
        .collect();
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
    assert!(matches!(
        place.connect(Duration::from_millis(50)),
        Err(Error::NotFound { .. })
    ));
    assert!(ShmRing::consumer(&theirs, DeliveryClass::Gating).is_ok());
    println!("  rendezvous: {n} messages; truncation refused (EPERM); nothing left after SIGKILL");
}

/// Child: a ring file whose payload pages are not backed (a hole punched in it, on a tmpfs that
/// is then filled up, as a hostile creator's `ftruncate`-sized file on a full tmpfs): touching
/// them is a SIGBUS, which the guard turns into the truncation error. Needs a private mount
/// namespace for its own small tmpfs (root); says `SKIP` without one.
#[cfg(target_os = "linux")]
pub fn unbacked_role() -> i32 {
    let dir = std::path::PathBuf::from(std::env::var("RING_DIR").expect("RING_DIR"));
    std::fs::create_dir_all(&dir).expect("dir");
    let Ok(c_dir) = std::ffi::CString::new(dir.display().to_string()) else {
        return 3;
    };
    // SAFETY: plain system calls on valid NUL-terminated strings; the mount namespace is this
    // process's own after unshare, so nothing outside it sees the tmpfs.
    let mounted = unsafe {
        libc::unshare(libc::CLONE_NEWNS) == 0
            && libc::mount(
                c"none".as_ptr(),
                c"/".as_ptr(),
                core::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                core::ptr::null(),
            ) == 0
            && libc::mount(
                c"tmpfs".as_ptr(),
                c_dir.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                c"size=1m".as_ptr().cast(),
            ) == 0
    };
    if !mounted {
        say("SKIP no private tmpfs (needs root)");
        return 0;
    }
    let ring = ShmRing::create_file(
        &dir.join("ring"),
        &Config::new(16, 16384),
        CreateOptions::new(),
    )
    .expect("create");
    let len = ring.segment().len() as u64;
    let half = len / 2 / 4096 * 4096;
    rustix::fs::fallocate(
        ring.segment().fd(),
        rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
        half,
        len - half,
    )
    .expect("punch a hole");
    // Fill the tmpfs so the hole cannot be backed again.
    let mut filler = std::fs::File::create(dir.join("filler")).expect("filler");
    let block = vec![1u8; 64 * 1024];
    while filler.write_all(&block).is_ok() {}
    let _ = filler.flush();
    let mut p = ShmRing::producer(&ring).expect("producer");
    for _ in 0..64 {
        if let Err(e) = ring_os::raw::ProducerExt::publish(&mut *p, &[7; 16384], SECS(1)) {
            let clear = e.to_string().contains(ring_os::raw::TRUNCATED) && ring.is_truncated();
            say(&format!("UNBACKED clear={} {e}", u8::from(clear)));
            return if clear { 0 } else { 2 };
        }
    }
    say("UNBACKED not met");
    2
}

/// Elsewhere there are no mount namespaces to make a private tmpfs in (nor hole punching).
#[cfg(not(target_os = "linux"))]
pub fn unbacked_role() -> i32 {
    say("SKIP needs Linux (a private tmpfs in a mount namespace)");
    0
}

/// Parent: the unbacked-pages child reports the clear error (or skips without root).
pub fn unbacked() {
    let dir = std::env::temp_dir().join(format!("ring-os-unbacked-{}", std::process::id()));
    let mut c = Child::spawn("unbacked", &[("RING_DIR", dir.display().to_string())]);
    let status = c.wait_status(SECS(30));
    assert_eq!(status.signal(), None, "died of a signal: {status:?}");
    let line = c.expect_line("", SECS(5));
    assert!(status.success(), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
    println!("  unbacked pages: {line}");
}
