//! Helpers shared by the `ringctl` integration tests: spawning the binary and waiting for it
//! with a deadline, unique segment names, and removing what a test made even when it fails.
#![allow(dead_code, reason = "each test binary uses its own part of these")]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_ringctl");

/// Spawns `ringctl args` with the given stdin, stdout and stderr.
pub fn spawn(args: &[&str], stdin: Stdio, stdout: Stdio, stderr: Stdio) -> Child {
    Command::new(BIN)
        .args(args)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("spawning ringctl {args:?}: {e}"))
}

/// Spawns `ringctl args` with stdin, stdout and stderr piped.
pub fn spawn_piped(args: &[&str]) -> Child {
    spawn(args, Stdio::piped(), Stdio::piped(), Stdio::piped())
}

/// A segment name unique to this test process and `what`.
pub fn unique(what: &str) -> String {
    format!("ringctl-test-{what}-{}", std::process::id())
}

/// A unique segment name for `what` and the guard that removes its file.
pub fn scratch(what: &str) -> (String, Cleanup) {
    let name = unique(what);
    (name.clone(), Cleanup(name))
}

/// The file behind a named segment.
pub fn shm_path(name: &str) -> PathBuf {
    PathBuf::from(format!("/dev/shm/shmring.{name}"))
}

/// Removes a named segment's file when dropped (tests clean up even when they fail).
pub struct Cleanup(pub String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(shm_path(&self.0));
    }
}

/// Waits for a spawned child with a deadline; kills it (and fails the test) past it.
pub fn finish(child: Child, timeout: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(out) => out.expect("waiting for ringctl"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("ringctl (pid {pid}) did not finish within {timeout:?}");
        }
    }
}

/// Polls `cond` every 10 ms for at most `timeout`.
pub fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// A TCP port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Output bytes as text, for messages.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
