//! Child-process plumbing and checksummed payloads shared by the scenarios.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use std::sync::Arc;

use ring_core::Config;
use ring_os::raw::{CreateOptions, Mapping, SegmentName, ShmRing};

/// The environment variable that selects a child role.
pub const ROLE: &str = "RING_OS_TEST_ROLE";

/// A child role's environment variable `key` (the parent sets it; a child fails without it).
pub fn child_env(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| panic!("child needs {key}"))
}

/// A child role's environment variable `key`, parsed.
pub fn child_env_parsed<T: core::str::FromStr>(key: &str) -> T {
    child_env(key)
        .parse()
        .unwrap_or_else(|_| panic!("child's {key} does not parse"))
}

/// The segment name a child role is given in `RING_NAME`.
pub fn child_ring_name() -> SegmentName {
    SegmentName::new(&child_env("RING_NAME")).expect("valid name")
}

/// Children in `role` on ring `name`, one per delivery class (`RING_CLASS` gating, latest,
/// skip), each seen to print `READY` within `ready_within`.
pub fn one_of_each_class(role: &str, name: &SegmentName, ready_within: Duration) -> Vec<Child> {
    let kids: Vec<Child> = ["gating", "latest", "skip"]
        .iter()
        .map(|class| {
            Child::spawn(
                role,
                &[
                    ("RING_NAME", name.as_str().to_owned()),
                    ("RING_CLASS", (*class).to_owned()),
                ],
            )
        })
        .collect();
    for k in &kids {
        k.expect_line("READY", ready_within);
    }
    kids
}

/// A child process running this test binary in a role, with its stdout lines on a channel.
/// Dropping it kills the process (every test ends in bounded time even when one fails).
pub struct Child {
    pub child: std::process::Child,
    lines: Receiver<String>,
}

impl Child {
    /// Spawns this binary with `role` and extra environment variables.
    pub fn spawn(role: &str, env: &[(&str, String)]) -> Self {
        Self::spawn_under(&[], role, env)
    }

    /// Spawns this binary with `role` under a wrapper command (`wrapper[0]` with the rest as its
    /// arguments, then the binary), for example `unshare --pid --fork`.
    pub fn spawn_under(wrapper: &[&str], role: &str, env: &[(&str, String)]) -> Self {
        let exe = std::env::current_exe().expect("current_exe");
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(exe);
                cmd
            }
            None => Command::new(exe),
        };
        cmd.env(ROLE, role)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn child");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for a line starting with `prefix` (other lines are skipped); panics on timeout or
    /// when the child's stdout closes first.
    pub fn expect_line(&self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => panic!("no {prefix:?} line within {timeout:?}"),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("child exited before printing {prefix:?}")
                }
            }
        }
    }

    /// The lines the child printed so far and nobody read yet.
    pub fn drain(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }

    /// Every line until one starting with `end` (included), or until the child's stdout closes
    /// (a killed child); panics after `timeout`.
    pub fn lines_until(&self, end: &str, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut lines = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let last = line.starts_with(end);
                    lines.push(line);
                    if last {
                        return lines;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!("no {end:?} line within {timeout:?}"),
                Err(RecvTimeoutError::Disconnected) => return lines,
            }
        }
    }

    /// Waits for the child to exit; panics after `timeout`. Returns whether it succeeded.
    pub fn wait(&mut self, timeout: Duration) -> bool {
        self.wait_status(timeout).success()
    }

    /// Waits for the child to exit; panics after `timeout`. Returns its status.
    pub fn wait_status(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "child {} did not exit within {timeout:?}",
                self.pid()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// SIGKILLs the child (without reaping it: a zombie must already count as dead).
    pub fn sigkill(&mut self) {
        self.child.kill().expect("kill");
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Parses `key=value` fields of a result line.
pub fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
}

/// A new named ring for `tag` made with `config`, with the guard that removes its name.
pub fn named_ring(tag: &str, config: &Config) -> (SegmentName, Unlink, Arc<Mapping>) {
    let name = unique_name(tag);
    let unlink = Unlink(name.clone());
    let ring = ShmRing::create_named(&name, config, CreateOptions::new()).expect("create");
    (name, unlink, ring)
}

/// A segment name unique to this process and tag.
pub fn unique_name(tag: &str) -> SegmentName {
    SegmentName::new(&format!("mp-{tag}-{}", std::process::id())).expect("valid name")
}

/// Removes a named segment when dropped.
pub struct Unlink(pub SegmentName);

impl Drop for Unlink {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(format!("/dev/shm/{}", self.0.file_name()));
    }
}

/// A cheap 64-bit mixer (splitmix64).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a over `bytes`.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Fills `buf` with message `seq`: `seq`, pseudo-random bytes, FNV checksum; 24..=`max` bytes.
pub fn make_payload(seq: u64, max: usize, buf: &mut Vec<u8>) {
    let len = 24 + (mix(seq) % (max as u64 - 23)) as usize;
    buf.clear();
    buf.extend_from_slice(&seq.to_le_bytes());
    let mut x = mix(seq ^ 0xABCD);
    while buf.len() < len - 8 {
        buf.push(x as u8);
        x = x.rotate_right(8) ^ 0x5A;
    }
    let sum = fnv(buf);
    buf.extend_from_slice(&sum.to_le_bytes());
}

/// Publishes messages `0..n` (checksummed, 24-200 bytes), each within 10 s.
#[cfg(unix)]
#[cfg_attr(
    target_os = "macos",
    allow(dead_code, reason = "memfd scenarios are not built on macOS")
)]
pub fn publish_payloads(p: &mut ring_os::raw::ShmProducer, n: u64) {
    let mut buf = Vec::new();
    for i in 0..n {
        make_payload(i, 200, &mut buf);
        ring_os::raw::ProducerExt::publish(&mut **p, &buf, Duration::from_secs(10))
            .expect("publish");
    }
}

/// Checks a payload; returns its sequence number when the checksum holds.
pub fn check_payload(buf: &[u8]) -> Option<u64> {
    if buf.len() < 24 {
        return None;
    }
    let (body, sum) = buf.split_at(buf.len() - 8);
    if fnv(body).to_le_bytes() != sum {
        return None;
    }
    Some(u64::from_le_bytes(body[..8].try_into().ok()?))
}

/// [`stale::clean`](ring_os::raw::stale::clean) limited to the test's own segments: a test
/// never removes another program's rings, not even stale ones (live ones are safe from any
/// cleaner: on Linux both backends' locks are asked, see docs/OS.md, "Both Linux backends at
/// once").
#[cfg(unix)]
pub fn clean_only(names: &[&SegmentName]) -> ring_os::raw::stale::CleanReport {
    use ring_os::raw::stale;
    #[cfg(ring_portable)]
    let _ = ring_os::raw::lock::sweep();
    let mine = stale::list()
        .expect("list")
        .into_iter()
        .filter(|i| names.contains(&&i.name))
        .collect();
    stale::clean_listed(std::path::Path::new(stale::SHM_DIR), mine)
}
