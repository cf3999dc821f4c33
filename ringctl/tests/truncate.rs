//! `ringctl pub` / `ringctl sub` against a peer that truncates their named ring (a clear error
//! and exit 1 or 2, never a signal), and memfd rings (`--memfd`), which no peer can truncate and
//! which leave nothing in /dev/shm, even after a SIGKILL.
//!
//! Unix only (`/dev/shm`, signals, Unix sockets); on Windows `ci/windows.sh` runs `ringctl demo`
//! under Wine instead.
#![cfg(unix)]
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std test crate"
)]

use std::io::{Read as _, Write as _};
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

/// A running `ringctl` with its stdin fed forever (or with `input`) and its stdout counted.
struct Running {
    child: Child,
    /// Bytes it wrote to stdout so far.
    out: Arc<AtomicUsize>,
    /// Everything it wrote to stdout, once it exits.
    bytes: std::sync::mpsc::Receiver<Vec<u8>>,
}

impl Running {
    /// Spawns `ringctl args`; `input: None` feeds an endless stream.
    fn spawn(args: &[&str], input: Option<Vec<u8>>) -> Self {
        let mut child = common::spawn_piped(args);
        let mut stdin = child.stdin.take().expect("stdin");
        std::thread::spawn(move || match input {
            Some(data) => {
                let _ = stdin.write_all(&data);
            }
            None => {
                let chunk = vec![0x5a_u8; 64 * 1024];
                while stdin.write_all(&chunk).is_ok() {}
            }
        });
        let mut stdout = child.stdout.take().expect("stdout");
        let out = Arc::new(AtomicUsize::new(0));
        let (tx, bytes) = std::sync::mpsc::channel();
        let counter = Arc::clone(&out);
        std::thread::spawn(move || {
            let mut all = Vec::new();
            let mut buf = [0u8; 64 * 1024];
            while let Ok(n @ 1..) = stdout.read(&mut buf) {
                all.extend_from_slice(&buf[..n]);
                // Relaxed: a progress counter.
                counter.fetch_add(n, Ordering::Relaxed);
            }
            let _ = tx.send(all);
        });
        Self { child, out, bytes }
    }

    /// Waits until it wrote something to stdout.
    fn wait_output(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        // Relaxed: a progress counter.
        while self.out.load(Ordering::Relaxed) == 0 {
            assert!(Instant::now() < deadline, "no output within {timeout:?}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits for the exit (killing it past `timeout`); returns status, stdout and stderr.
    fn finish(mut self, timeout: Duration) -> (ExitStatus, Vec<u8>, String) {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("ringctl did not finish within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let out = self.bytes.recv_timeout(timeout).unwrap_or_default();
        (status, out, err)
    }
}

/// Files in /dev/shm whose name contains `name`.
fn in_dev_shm(name: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|f| f.contains(name))
                .collect()
        })
        .unwrap_or_default()
}

/// Asserts an exit with status 1 or 2 (not a signal) and a one-line error naming `what`.
fn clear_failure(who: &str, status: ExitStatus, stderr: &str, what: &str) {
    assert_eq!(
        status.signal(),
        None,
        "{who} died of a signal: {status:?}; {stderr}"
    );
    assert!(
        matches!(status.code(), Some(1 | 2)),
        "{who}: {status:?}; {stderr}"
    );
    assert!(stderr.contains(what), "{who}: {stderr}");
    assert!(!stderr.contains("panicked"), "{who}: {stderr}");
}

#[test]
fn pub_and_sub_survive_a_peers_truncate_10_of_10() {
    for trial in 0..10 {
        let name = format!("ringctl-trunc{trial}-{}", std::process::id());
        let path = format!("/dev/shm/shmring.{name}");
        let sub = Running::spawn(&["sub", &name, "--timeout", "10"], Some(Vec::new()));
        let publ = Running::spawn(
            &[
                "pub",
                &name,
                "--frame-size",
                "4096",
                "--slots",
                "8",
                "--timeout",
                "10",
            ],
            None,
        );
        sub.wait_output(Duration::from_secs(20));
        // The peer: any process of this user can truncate a named segment.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open the ring file");
        let len = file.metadata().expect("stat").len();
        file.set_len(len / 3).expect("truncate");
        let (status, _, err) = publ.finish(Duration::from_secs(20));
        clear_failure("pub", status, &err, "truncated");
        let (status, _, err) = sub.finish(Duration::from_secs(20));
        clear_failure("sub", status, &err, "truncated");
        let _ = std::fs::remove_file(&path);
        if trial == 0 {
            println!("sub: {}", err.trim());
        }
    }
}

#[test]
fn memfd_rings_round_trip_and_leave_nothing_in_dev_shm() {
    let data: Vec<u8> = (0..100_000_u32).map(|i| (i % 251) as u8).collect();
    let dir = std::env::temp_dir().join(format!("ringctl-sock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let dir_arg = dir.display().to_string();
    for place in [None, Some(dir_arg.as_str())] {
        let name = format!("ringctl-memfd-{}", std::process::id());
        let mut extra: Vec<&str> = vec!["--memfd"];
        if let Some(d) = place {
            extra.extend(["--socket-dir", d]);
        }
        let sub_args: Vec<&str> = ["sub", name.as_str()]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        let pub_args: Vec<&str> = ["pub", name.as_str(), "--frame-size", "4096"]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        let sub = Running::spawn(&sub_args, Some(Vec::new()));
        let publ = Running::spawn(&pub_args, Some(data.clone()));
        assert!(in_dev_shm(&name).is_empty(), "{:?}", in_dev_shm(&name));
        let (status, _, err) = publ.finish(Duration::from_secs(30));
        assert!(status.success(), "pub {place:?}: {err}");
        let (status, out, err) = sub.finish(Duration::from_secs(30));
        assert!(status.success(), "sub {place:?}: {err}");
        assert!(
            out == data,
            "bytes differ ({} of {})",
            out.len(),
            data.len()
        );
    }
    assert_eq!(
        std::fs::read_dir(&dir).map(Iterator::count).unwrap_or(0),
        0,
        "pub removes its socket file"
    );
    let _ = std::fs::remove_dir_all(&dir);
    // A publisher killed mid-stream: nothing in /dev/shm, and the subscriber says so.
    let name = format!("ringctl-memfd-kill-{}", std::process::id());
    let sub = Running::spawn(
        &["sub", &name, "--memfd", "--timeout", "5"],
        Some(Vec::new()),
    );
    let mut publ = Running::spawn(&["pub", &name, "--memfd", "--frame-size", "4096"], None);
    sub.wait_output(Duration::from_secs(20));
    publ.child.kill().expect("SIGKILL pub");
    let _ = publ.child.wait();
    assert!(in_dev_shm(&name).is_empty(), "{:?}", in_dev_shm(&name));
    let (status, _, err) = sub.finish(Duration::from_secs(20));
    clear_failure("sub", status, &err, "producer");
}
