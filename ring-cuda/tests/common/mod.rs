//! What ring-cuda's test binaries share: the device conformance checks, and the two-process
//! plumbing — a test re-runs its own binary as the child process (`RING_CUDA_TEST_ROLE` names
//! the child's part) and the two talk in lines over the child's stdin and stdout.
#![allow(dead_code, reason = "each test binary uses part of the shared support")]

pub mod conformance;

use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// The environment variable that makes a test binary a child in a two-process test.
pub const ROLE: &str = "RING_CUDA_TEST_ROLE";

/// Generous bound on every wait of the two-process tests.
pub const T: Duration = Duration::from_secs(10);

/// The part this process plays, if it is a child of a two-process test.
#[must_use]
pub fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// An environment variable the parent passed (panics in the child if it is missing).
#[must_use]
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("the parent did not set {name}"))
}

/// Hex of `bytes`, to pass handles on a command line.
#[must_use]
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes of a [`hex`] string.
#[must_use]
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// A child process: this test binary running test `name` with `ROLE=role`.
pub struct Child {
    child: std::process::Child,
    lines: Lines<BufReader<ChildStdout>>,
    stdin: Option<ChildStdin>,
    seen: String,
}

impl Child {
    /// Starts the child with `env`.
    #[must_use]
    pub fn spawn(name: &str, role: &str, env: &[(&str, String)]) -> Self {
        let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
        cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn the child test");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let stdin = child.stdin.take();
        Self {
            child,
            lines,
            stdin,
            seen: String::new(),
        }
    }

    /// The child's pid.
    #[must_use]
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Reads the child's output up to the first line containing `marker` and returns that
    /// line (the child's test harness prints its own text on the same lines). Panics if the
    /// child ends first.
    pub fn expect(&mut self, marker: &str) -> String {
        for line in self.lines.by_ref() {
            let line = line.expect("read the child's output");
            self.seen.push_str(&line);
            self.seen.push('\n');
            if line.contains(marker) {
                return line;
            }
        }
        let status = self.child.wait();
        panic!(
            "the child ended ({status:?}) before {marker:?}:\n{}",
            self.seen
        );
    }

    /// Sends one line to the child's stdin.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write to the child");
    }

    /// Sends SIGKILL to the child (by its own pid) and reaps it.
    pub fn kill(mut self) {
        self.child.kill().expect("kill the child");
        let _ = self.child.wait();
    }

    /// Closes the child's stdin, waits for it to exit and checks that it succeeded.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        for line in self.lines.by_ref().map_while(Result::ok) {
            self.seen.push_str(&line);
            self.seen.push('\n');
        }
        let status = self.child.wait().expect("wait for the child");
        assert!(
            status.success(),
            "the child failed ({status}):\n{}",
            self.seen
        );
    }
}

/// A child still running when its test ends (a failed assertion unwinding) is killed — it is
/// this test's own child, by its pid — so no process outlives the test.
impl Drop for Child {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// In a child: waits for the parent's next line on stdin (`None` once it closed).
#[must_use]
pub fn next_line() -> Option<String> {
    std::io::stdin().lock().lines().next().and_then(Result::ok)
}
