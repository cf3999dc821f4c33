//! End-to-end tests of the `ringctl` binary: every subcommand, a corrupt segment, a dead owner,
//! `--kill-consumer-every`, a pub/sub round trip and `demo --json`.
//!
//! Every process is waited for with a deadline (and killed past it), every segment name
//! includes the test's pid, and every test removes what it created.
//!
//! Unix only (`/dev/shm`, signals, Unix sockets); on Windows `ci/windows.sh` runs `ringctl demo`
//! under Wine instead.
#![cfg(unix)]
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std test crate"
)]

use std::io::Write as _;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

mod common;

use common::{eventually, finish, scratch, shm_path, spawn, text, unique, Cleanup, BIN};

/// Runs `ringctl args` with `stdin` as input, within `timeout`.
fn ringctl(args: &[&str], stdin: &[u8], timeout: Duration) -> Output {
    let mut child = common::spawn_piped(args);
    let mut input = child.stdin.take().expect("stdin");
    let data = stdin.to_vec();
    std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    finish(child, timeout)
}

/// Runs `ringctl args` with `stdin` as input (within 60 s) and checks that it succeeded.
fn succeeds(args: &[&str], stdin: &[u8]) -> Output {
    let out = ringctl(args, stdin, Duration::from_secs(60));
    let what = args.first().copied().unwrap_or_default();
    assert!(out.status.success(), "{what}: {}", text(&out.stderr));
    out
}

/// `ringctl pub NAME --keep --wait-consumers 0 --frame-size FRAME_SIZE EXTRA...` of `data`,
/// checked to succeed: it publishes to nobody and leaves the ring for subs started after it.
fn kept_pub(name: &str, frame_size: &str, extra: &[&str], data: &[u8]) -> Output {
    let args = [
        "pub",
        name,
        "--keep",
        "--wait-consumers",
        "0",
        "--frame-size",
        frame_size,
    ];
    succeeds(&[&args[..], extra].concat(), data)
}

/// Asserts that segment `name` is gone (`why` says who should have removed it).
fn assert_gone(name: &str, why: &str) {
    assert!(!shm_path(name).exists(), "{why}: {name}");
}

/// `line` split at spaces, each word `NAME` replaced by `name`: an argument list on one line.
fn argv<'a>(line: &'a str, name: &'a str) -> Vec<&'a str> {
    line.split_whitespace()
        .map(|w| if w == "NAME" { name } else { w })
        .collect()
}

fn run(args: &[&str]) -> Output {
    ringctl(args, b"", Duration::from_secs(60))
}

/// The last line of stdout, parsed as JSON.
fn last_json(out: &Output) -> Value {
    let stdout = text(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\nstderr: {}", text(&out.stderr)))
}

/// Asserts a failure reported as exactly one line on stderr, and returns that line.
fn one_line_error(out: &Output) -> String {
    assert!(!out.status.success(), "expected a failure");
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "error must be one line: {stderr:?}");
    assert!(lines[0].starts_with("ringctl: "), "{stderr:?}");
    assert!(!stderr.contains("panicked"), "{stderr:?}");
    lines[0].to_owned()
}

/// Spawns `ringctl sub ARGS` with no stdin and stdout/stderr piped.
fn spawn_sub(args: &[&str]) -> Child {
    let args: Vec<&str> = ["sub"].iter().chain(args).copied().collect();
    spawn(&args, Stdio::null(), Stdio::piped(), Stdio::piped())
}

#[test]
fn help_names_every_subcommand_and_hides_the_internal_ones() {
    let out = run(&["--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for cmd in ["demo", "inspect", "list", "clean", "pub", "sub"] {
        assert!(help.contains(cmd), "{cmd} missing from: {help}");
    }
    assert!(!help.contains("__demo"), "{help}");
    let demo = text(&run(&["demo", "--help"]).stdout);
    for opt in [
        "--frame-size",
        "--fps",
        "--kill-consumer-every",
        "--json",
        "--classes",
    ] {
        assert!(demo.contains(opt), "{opt} missing from demo help");
    }
}

#[test]
fn bad_arguments_fail_with_one_line() {
    let line = one_line_error(&run(&["demo", "--fps", "fast"]));
    assert!(line.contains("fps"), "{line}");
    one_line_error(&run(&["demo", "--frame-size", "12xq"]));
    one_line_error(&run(&["no-such-command"]));
    let line = one_line_error(&run(&["inspect", "../etc"]));
    assert!(line.contains("invalid segment name"), "{line}");
}

#[test]
fn demo_json_reports_a_clean_run() {
    let (name, _cleanup) = scratch("demo");
    let out = run(&argv(
        "demo --frame-size 4096 --duration 1 --fps 300 --name NAME --json",
        &name,
    ));
    let v = last_json(&out);
    assert!(out.status.success(), "{v}\n{}", text(&out.stderr));
    assert_eq!(v["torn"], 0, "{v}");
    assert_eq!(v["lost"], 0, "{v}");
    assert_eq!(v["leaked_allocations"], 0, "{v}");
    assert_eq!(v["consumers"], 3, "{v}");
    assert_eq!(v["ok"], true, "{v}");
    let messages = v["messages"].as_u64().expect("messages");
    assert!(messages > 50, "{v}");
    assert!(v["p50_us"].as_f64().expect("p50") > 0.0, "{v}");
    assert!(v["p99_us"].as_f64() >= v["p50_us"].as_f64(), "{v}");
    assert!(v["fps"].as_f64().expect("fps") > 0.0, "{v}");
    for key in ["skipped", "reclaimed_pins"] {
        assert!(v[key].is_u64(), "{key} missing: {v}");
    }
    // The gating consumer receives every message.
    let rows = v["per_consumer"].as_array().expect("rows");
    let gating = rows
        .iter()
        .find(|r| r["class"] == "gating")
        .expect("gating");
    assert_eq!(gating["frames"].as_u64(), Some(messages), "{v}");
    assert_gone(&name, "demo must remove its segment");
}

#[test]
fn demo_publishes_exactly_the_requested_messages() {
    let out = run(&argv(
        "demo --frame-size 64x4 --messages 150 --fps 0 --classes gating,gating,skip \
         --read copy --json",
        "",
    ));
    let v = last_json(&out);
    assert!(out.status.success(), "{v}");
    assert_eq!(v["messages"], 150, "{v}");
    assert_eq!(v["lost"], 0, "{v}");
    assert_eq!(v["torn"], 0, "{v}");
}

#[test]
fn demo_recovers_from_killed_consumers() {
    let (name, _cleanup) = scratch("kill");
    let out = run(&argv(
        "demo --frame-size 16384 --messages 800 --fps 800 --kill-consumer-every 150 \
         --hold-us 2000 --name NAME --json",
        &name,
    ));
    let v = last_json(&out);
    assert!(out.status.success(), "{v}\n{}", text(&out.stderr));
    assert_eq!(v["messages"], 800, "{v}");
    let killed = v["killed"].as_u64().expect("killed");
    assert!(killed >= 3, "expected a kill every 150 messages: {v}");
    assert_eq!(v["reclaimed_consumers"].as_u64(), Some(killed), "{v}");
    // The skip-on-lag consumer (killed third) pins with its reader bit, and the demo kills it
    // while it holds one (a gating reader's pin is its cursor: no pin word to reclaim).
    assert!(v["reclaimed_pins"].as_u64() >= Some(1), "{v}");
    assert_eq!(v["lost"], 0, "{v}");
    assert_eq!(v["torn"], 0, "{v}");
    assert_eq!(v["leaked_allocations"], 0, "{v}");
    // The replacements ran to the end: three consumers finished.
    assert_eq!(v["consumers"], 3, "{v}");
}

#[test]
fn pub_sub_round_trips_bytes() {
    pub_sub_round_trip("pipe", None);
}

/// A subscriber preempted between registering and fixing its start point (a 50 ms pause
/// injected there) still receives every byte: `pub` waits for subscribers that are *ready*.
/// With the old handshake (counting ACTIVE entries) the first 32 KiB were lost.
#[test]
fn pub_sub_loses_nothing_to_a_slow_registration() {
    pub_sub_round_trip("slowjoin", Some("50"));
}

fn pub_sub_round_trip(what: &str, join_delay_ms: Option<&str>) {
    let (name, _cleanup) = scratch(what);
    // 300 000 pseudo-random bytes: not a multiple of the frame size, so the last message is short.
    let mut x = 0x1234_5678_u64;
    let data: Vec<u8> = (0..300_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut sub = Command::new(BIN);
    sub.args(["sub", &name])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(ms) = join_delay_ms {
        sub.env("SHMRING_TEST_JOIN_DELAY_MS", ms);
    }
    let sub = sub.spawn().expect("spawning sub");
    succeeds(&["pub", &name, "--frame-size", "4096"], &data);
    let got = finish(sub, Duration::from_secs(60));
    assert!(got.status.success(), "sub: {}", text(&got.stderr));
    assert_eq!(got.stdout.len(), data.len());
    assert!(got.stdout == data, "bytes differ");
    assert_gone(&name, "pub must remove the ring it created");
}

#[test]
fn inspect_shows_producer_and_consumers() {
    let (name, _cleanup) = scratch("inspect");
    let mut publ = spawn(
        &["pub", &name, "--frame-size", "256", "--wait-consumers", "1"],
        Stdio::piped(),
        Stdio::null(),
        Stdio::piped(),
    );
    let sub = spawn_sub(&[&name, "--class", "skip"]);
    let registered = eventually(Duration::from_secs(20), || {
        let out = run(&["inspect", &name, "--json"]);
        out.status.success()
            && last_json(&out)["consumers"]
                .as_array()
                .is_some_and(|c| c.len() == 1)
    });
    assert!(registered, "the subscriber never showed up");
    let v = last_json(&run(&["inspect", &name, "--json"]));
    assert_eq!(v["slots"], 8, "{v}");
    assert_eq!(v["producer"]["alive"], true, "{v}");
    assert_eq!(v["consumers"][0]["class"], "skip", "{v}");
    assert_eq!(v["consumers"][0]["owner"]["alive"], true, "{v}");
    assert_eq!(v["closed"], false, "{v}");
    let table = text(&run(&["inspect", &name]).stdout);
    assert!(table.contains("geometry: 8 slots x 256 bytes"), "{table}");
    let watch = run(&[
        "inspect",
        &name,
        "--json",
        "--watch",
        "--interval",
        "0.05",
        "--count",
        "3",
    ]);
    assert_eq!(text(&watch.stdout).lines().count(), 3);
    // End of input: pub closes the ring, sub ends.
    if let Some(mut stdin) = publ.stdin.take() {
        stdin.write_all(b"hello").expect("writing to pub");
    }
    let publ_out = finish(publ, Duration::from_secs(30));
    assert!(publ_out.status.success(), "{}", text(&publ_out.stderr));
    let sub_out = finish(sub, Duration::from_secs(30));
    assert!(sub_out.status.success(), "{}", text(&sub_out.stderr));
    assert_eq!(sub_out.stdout, b"hello");
}

#[test]
fn inspect_of_a_corrupt_or_missing_segment_is_a_clear_error() {
    use std::os::unix::fs::OpenOptionsExt as _;
    let (name, _cleanup) = scratch("corrupt");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(shm_path(&name))
        .expect("creating a garbage segment");
    f.write_all(&[0xA5; 8192]).expect("writing garbage");
    drop(f);
    let line = one_line_error(&run(&["inspect", &name]));
    assert!(line.contains("not a ring segment"), "{line}");
    // A real header followed by too few bytes: truncated.
    let real = unique("trunc");
    let _cleanup2 = Cleanup(real.clone());
    let publ = spawn(
        &[
            "pub",
            &real,
            "--frame-size",
            "4096",
            "--wait-consumers",
            "0",
            "--keep",
        ],
        Stdio::null(),
        Stdio::null(),
        Stdio::piped(),
    );
    let out = finish(publ, Duration::from_secs(30));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(shm_path(&real))
        .expect("opening the kept ring");
    file.set_len(4096).expect("truncating");
    drop(file);
    let line = one_line_error(&run(&["inspect", &real]));
    assert!(line.contains("truncated"), "{line}");
    // A corrupt segment is listed as unreadable and never cleaned.
    let listed = last_json(&run(&["list", "--json"]));
    let entry = listed
        .as_array()
        .and_then(|a| a.iter().find(|e| e["name"] == name.as_str()))
        .cloned()
        .expect("listed");
    assert_eq!(entry["status"], "unreadable", "{entry}");
    assert!(run(&["clean", &name]).status.success());
    assert!(
        shm_path(&name).exists(),
        "clean must keep unreadable segments"
    );
    let missing = one_line_error(&run(&["inspect", &unique("missing")]));
    assert!(missing.contains("does not exist"), "{missing}");
}

/// A publisher of ring `name` that blocks on its (open, empty) stdin: the live owner of that
/// ring, once this returns.
fn idle_pub(name: &str) -> Child {
    started_pub(name, &["--frame-size", "128", "--wait-consumers", "0"])
}

/// `ringctl pub NAME ARGS...` (stdin piped: it ends when stdin closes), once its ring exists.
fn started_pub(name: &str, args: &[&str]) -> Child {
    let mut argv = vec!["pub", name];
    argv.extend_from_slice(args);
    let publ = spawn(&argv, Stdio::piped(), Stdio::null(), Stdio::null());
    let ready = eventually(Duration::from_secs(20), || {
        run(&["inspect", name, "--json"]).status.success()
    });
    assert!(ready, "pub never created its ring");
    publ
}

#[test]
fn a_ring_published_with_asymmetric_fences_is_shown_as_one() {
    let (name, _cleanup) = scratch("asym");
    let publ = started_pub(
        &name,
        &[
            "--frame-size",
            "128",
            "--asymmetric-fences",
            "--wait-consumers",
            "0",
        ],
    );
    let v = last_json(&run(&["inspect", &name, "--json"]));
    assert_eq!(v["asymmetric_fences"], true, "{v}");
    let table = text(&run(&["inspect", &name]).stdout);
    assert!(table.contains("asymmetric fences"), "{table}");
    drop(finish(publ, Duration::from_secs(30)));
}

#[test]
fn list_and_clean_handle_a_dead_owner() {
    let (name, _cleanup) = scratch("dead");
    let mut publ = idle_pub(&name);
    let status_of = || {
        let v = last_json(&run(&["list", "--json"]));
        v.as_array()
            .and_then(|a| a.iter().find(|e| e["name"] == name.as_str()).cloned())
            .map(|e| e["status"].as_str().unwrap_or_default().to_owned())
    };
    assert_eq!(status_of().as_deref(), Some("live"));
    // A live ring is never cleaned.
    assert!(run(&["clean", &name]).status.success());
    assert!(shm_path(&name).exists());
    publ.kill().expect("killing pub");
    publ.wait().expect("reaping pub");
    assert_eq!(status_of().as_deref(), Some("stale"));
    let v = last_json(&run(&["inspect", &name, "--json"]));
    assert_eq!(v["producer"]["alive"], false, "{v}");
    let dry = run(&["clean", "--dry-run", &name]);
    assert!(dry.status.success());
    assert!(
        text(&dry.stdout).contains("would remove"),
        "{}",
        text(&dry.stdout)
    );
    assert!(
        shm_path(&name).exists(),
        "--dry-run must not remove anything"
    );
    let clean = run(&["clean", &name]);
    assert!(clean.status.success());
    assert!(text(&clean.stdout).contains(&format!("removed {name}")));
    assert_gone(&name, "clean must remove the stale ring");
}

#[test]
fn sigterm_ends_the_demo_and_removes_its_ring() {
    let (name, _cleanup) = scratch("sigterm");
    let demo = spawn(
        &argv("demo --frame-size 4096 --duration 60 --name NAME", &name),
        Stdio::null(),
        Stdio::piped(),
        Stdio::piped(),
    );
    let streaming = eventually(Duration::from_secs(20), || {
        let out = run(&["inspect", &name, "--json"]);
        out.status.success() && last_json(&out)["head"].as_u64() > Some(0)
    });
    assert!(streaming, "the demo never started streaming");
    let sent = Command::new("kill")
        .args(["-TERM", &demo.id().to_string()])
        .status()
        .expect("running kill");
    assert!(sent.success());
    let out = finish(demo, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    let line = one_line_error(&out);
    assert!(line.contains("interrupted"), "{line}");
    assert_gone(&name, "the ring must be removed");
}

#[test]
fn integrity_checks_catch_bad_checksums_and_leaks() {
    let base = "demo --frame-size 1024 --messages 100 --fps 0 --json --inject-fault";
    let out = run(&argv(&format!("{base} checksum"), ""));
    let v = last_json(&out);
    assert_eq!(out.status.code(), Some(1), "{v}");
    assert_eq!(v["ok"], false, "{v}");
    // Every 7th frame (seq % 7 == 3) has a wrong checksum; the gating consumer sees all 100.
    let gating = v["per_consumer"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["class"] == "gating"))
        .cloned()
        .expect("gating row");
    assert_eq!(gating["torn"], 14, "{v}");
    let out = run(&argv(&format!("{base} leak"), ""));
    let v = last_json(&out);
    assert_eq!(out.status.code(), Some(1), "{v}");
    assert_eq!(v["leaked_allocations"], 20, "{v}");
    assert_eq!(v["torn"], 0, "{v}");
}

#[test]
fn list_inspect_and_clean_report_half_created_zero_length_truncated_and_foreign_files() {
    use std::os::unix::fs::OpenOptionsExt as _;
    let write = |name: &str, bytes: &[u8]| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(shm_path(name))
            .expect("creating a segment file");
        f.write_all(bytes).expect("writing it");
    };
    let (zero, half, foreign, trunc) = (
        unique("zero"),
        unique("half"),
        unique("foreign"),
        unique("truncated"),
    );
    let _c = [&zero, &half, &foreign, &trunc].map(|n| Cleanup(n.clone()));
    // A creator killed between creating and sizing, and one killed while formatting (a zeroed
    // header, no role lock held): both abandoned.
    write(&zero, b"");
    write(&half, &[0; 8192]);
    write(&foreign, &[0xA5; 8192]);
    // A valid ring cut to a third of its size by a peer.
    let name = ring_os::raw::SegmentName::new(&trunc).expect("name");
    let ring = ring_os::raw::ShmRing::create_named(
        &name,
        &ring_core::Config::new(8, 1024),
        ring_os::raw::CreateOptions::new(),
    )
    .expect("create");
    let len = ring.segment().len() as u64;
    drop(ring);
    std::fs::OpenOptions::new()
        .write(true)
        .open(shm_path(&trunc))
        .expect("open")
        .set_len(len / 3)
        .expect("truncate");

    let out = run(&["list", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed = last_json(&out);
    let status = |n: &str| {
        listed
            .as_array()
            .and_then(|a| a.iter().find(|e| e["name"] == n))
            .map(|e| e["status"].clone())
            .unwrap_or_else(|| panic!("{n} not listed: {listed}"))
    };
    assert_eq!(status(&zero), "abandoned");
    assert_eq!(status(&half), "abandoned");
    assert_eq!(status(&foreign), "unreadable");
    assert_eq!(status(&trunc), "unreadable");
    let plain = run(&["list"]);
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    for n in [&zero, &half, &foreign, &trunc] {
        // A clear one-line error (checked not to be a signal or a panic), never a crash.
        let out = run(&["inspect", n]);
        assert!(
            out.status.code().is_some(),
            "inspect {n} died: {:?}",
            out.status
        );
        one_line_error(&out);
    }
    let clean = run(&["clean", &zero, &half, &foreign, &trunc]);
    assert!(clean.status.success(), "{}", text(&clean.stderr));
    assert!(
        !shm_path(&zero).exists() && !shm_path(&half).exists(),
        "{}",
        text(&clean.stdout)
    );
    assert!(
        shm_path(&foreign).exists() && shm_path(&trunc).exists(),
        "{}",
        text(&clean.stdout)
    );
}

/// A gating `ringctl sub` in another pid namespace (a container sharing /dev/shm) that reads
/// slowly holds the publisher back, and the publisher must not judge it dead: every byte
/// arrives. With pid-based liveness the publisher reclaimed it (its pid means nothing here):
/// the old binary's sub exited 2 ("reclaimed as dead") after 1 MiB of 4.
#[test]
fn a_slow_gating_sub_in_another_pid_namespace_gets_every_byte() {
    if !can_make_a_pid_namespace() {
        return;
    }
    let (name, _cleanup) = scratch("pidns");
    // More than sub's 1 MiB output buffer, the pipe and the ring together, so the slow reader
    // really holds the publisher back.
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i * 7 + i / 4096) as u8).collect();
    let mut sub = ringctl_in_a_pid_namespace(&["sub", &name])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning sub under unshare");
    let mut out = sub.stdout.take().expect("stdout");
    // Read slowly: every 8 reads, pause longer than the publisher's liveness period, so the
    // publisher, held back, checks whether its subscriber is alive many times.
    let reader = std::thread::spawn(move || {
        use std::io::Read as _;
        let mut got = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        for i in 0.. {
            match out.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            if i % 8 == 7 {
                std::thread::sleep(Duration::from_millis(60));
            }
        }
        got
    });
    succeeds(
        &["pub", &name, "--frame-size", "4096", "--timeout", "30"],
        &data,
    );
    let got = reader.join().expect("reader");
    let status = finish(sub, Duration::from_secs(30));
    assert!(status.status.success(), "sub: {}", text(&status.stderr));
    assert_eq!(got.len(), data.len(), "bytes lost");
    assert!(got == data, "bytes differ");
}

/// `Some(())` when this process is root and `unshare --pid` works.
fn rustix_is_root_with_unshare() -> Option<()> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if text(&uid.stdout).trim() != "0" {
        return None;
    }
    let ok = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .status()
        .ok()?
        .success();
    ok.then_some(())
}

/// Whether this test can run `ringctl` in a pid namespace of its own (root and `unshare`);
/// says the test is skipped when not.
fn can_make_a_pid_namespace() -> bool {
    let can = rustix_is_root_with_unshare().is_some();
    if !can {
        eprintln!("skipped: needs root and `unshare` for a pid namespace");
    }
    can
}

/// `ringctl args` in a new pid namespace (killed with the `unshare` that runs it).
fn ringctl_in_a_pid_namespace(args: &[&str]) -> Command {
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc", "--kill-child", BIN])
        .args(args);
    cmd
}

/// A `pub` that fails (here: its stdin cannot be read) ends the stream as aborted, and a
/// gating `sub` reports that instead of exiting 0 as if the stream were complete.
#[test]
fn an_aborted_stream_is_not_a_finished_one() {
    let (name, _cleanup) = scratch("abort");
    let sub = spawn_sub(&[&name]);
    // A directory as stdin: the first read fails after `pub` created the ring and the
    // subscriber joined.
    let dir = std::fs::File::open("/").expect("open /");
    let publ = spawn(
        &["pub", &name, "--frame-size", "64"],
        dir.into(),
        Stdio::null(),
        Stdio::piped(),
    );
    let publ = finish(publ, Duration::from_secs(30));
    assert_eq!(publ.status.code(), Some(2), "pub: {}", text(&publ.stderr));
    let got = finish(sub, Duration::from_secs(30));
    assert!(
        !got.status.success(),
        "sub exited 0 after an aborted stream: {}",
        text(&got.stderr)
    );
    assert!(
        text(&got.stderr).contains("aborted"),
        "sub does not say the stream was aborted: {}",
        text(&got.stderr)
    );
}

/// Spawns a gating `ringctl sub NAME` whose stdout the returned thread reads, pausing `pause`
/// after every 64 KiB it reads (so a publisher is held back), until `stop_after` bytes or EOF.
fn slow_sub(
    name: &str,
    pause: Duration,
    stop_after: usize,
) -> (Child, std::thread::JoinHandle<usize>) {
    let mut sub = spawn_sub(&[name]);
    let mut out = sub.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        use std::io::Read as _;
        let mut got = 0;
        let mut buf = vec![0u8; 64 * 1024];
        while got < stop_after {
            match out.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
            std::thread::sleep(pause);
        }
        got
    });
    (sub, reader)
}

/// A gating `ringctl sub` SIGKILLed mid-stream is a lost reader, not a finished one: `pub`
/// exits 1 (an integrity failure) and names it. Before, `pub` reclaimed it, streamed the rest
/// to nobody and exited 0 with nothing on stderr.
#[test]
fn pub_exits_nonzero_when_its_only_gating_sub_is_killed_mid_stream() {
    let (name, _cleanup) = scratch("lostsub");
    let data = vec![0x5a_u8; 8 << 20];
    let (mut sub, reader) = slow_sub(&name, Duration::from_millis(2), 1 << 20);
    let mut publ = common::spawn_piped(&["pub", &name, "--frame-size", "4096", "--timeout", "30"]);
    let mut input = publ.stdin.take().expect("stdin");
    std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    // Mid-stream: the reader has had 1 MiB of the 8, the publisher is held back.
    let got = reader.join().expect("reader");
    assert!(got >= 1 << 20, "sub delivered only {got} bytes");
    sub.kill().expect("SIGKILL sub");
    let _ = sub.wait();
    let out = finish(publ, Duration::from_secs(60));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "pub: {stderr}");
    assert!(
        stderr.contains("gating reader in entry") && stderr.contains("unread"),
        "pub does not name the lost reader: {stderr}"
    );
}

/// A `pub` that gives up waiting for a stalled gating `sub` ends the stream with the shared
/// abort code for it, and the `sub` says why (it used to say "aborted (code 0)").
#[test]
fn a_pub_that_times_out_tells_its_sub_why() {
    let (name, _cleanup) = scratch("timeout");
    // The sub's stdout is read only after the publisher gave up: it stalls behind its pipe and
    // its 1 MiB buffer, holding the 4-slot ring.
    let mut sub = spawn_sub(&[&name]);
    let publ = ringctl(
        &[
            "pub",
            &name,
            "--frame-size",
            "4096",
            "--slots",
            "4",
            "--timeout",
            "1",
        ],
        &vec![1u8; 4 << 20],
        Duration::from_secs(60),
    );
    assert_eq!(publ.status.code(), Some(2), "pub: {}", text(&publ.stderr));
    // Now drain the sub: it reads what is there, then meets the abort.
    let mut out = sub.stdout.take().expect("stdout");
    let drain = std::thread::spawn(move || {
        let _ = std::io::copy(&mut out, &mut std::io::sink());
    });
    let got = finish(sub, Duration::from_secs(30));
    let _ = drain.join();
    let stderr = text(&got.stderr);
    assert!(
        !got.status.success(),
        "sub exited 0 after an aborted stream"
    );
    assert!(
        stderr.contains("code 1: the producer gave up waiting for its consumers"),
        "sub does not say why the stream was aborted: {stderr}"
    );
}

/// A producer in another pid namespace is listed as such: its pid means nothing on the host
/// (it showed as `creator pid 3 (alive)`, host pid 3 being a kernel thread).
#[test]
fn list_says_when_a_live_owner_is_in_another_pid_namespace() {
    if !can_make_a_pid_namespace() {
        return;
    }
    let (name, _cleanup) = scratch("nslist");
    // A publisher that waits on its stdin (kept open) inside a new pid namespace.
    let mut publ = ringctl_in_a_pid_namespace(&["pub", &name])
        .args(["--wait-consumers", "0", "--frame-size", "64"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning pub under unshare");
    assert!(
        eventually(Duration::from_secs(20), || shm_path(&name).exists()),
        "pub did not create its ring"
    );
    let mut listed = Value::Null;
    let found = eventually(Duration::from_secs(20), || {
        let out = run(&["list", "--json"]);
        let rows = last_json(&out);
        listed = rows
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["name"] == name.as_str()).cloned())
            .unwrap_or(Value::Null);
        listed["owners"]
            .as_array()
            .is_some_and(|o| o.iter().any(|o| o["role"] == "producer"))
    });
    let plain = text(&run(&["list"]).stdout);
    drop(publ.stdin.take());
    let _ = finish(publ, Duration::from_secs(30));
    assert!(found, "no producer listed: {listed}");
    for owner in listed["owners"].as_array().expect("owners") {
        assert_eq!(owner["alive"], true, "{listed}");
        assert_eq!(
            owner["pid_namespace"], "another pid namespace",
            "a namespaced owner's pid shown as usable: {listed}"
        );
    }
    assert!(
        plain.contains("in another pid namespace"),
        "the table does not say so: {plain}"
    );
}

/// The frame grabber's flow from the shell: a frame is published, then a latest-only `sub`
/// opens the ring and gets that frame (it used to wait for the next one, which never came).
#[test]
fn a_latest_sub_started_after_a_publish_gets_that_message() {
    let (name, _cleanup) = scratch("latejoin");
    kept_pub(&name, "64", &[], b"the frame that is already there");
    let sub = succeeds(&["sub", &name, "--class", "latest", "--timeout", "5"], b"");
    assert_eq!(text(&sub.stdout), "the frame that is already there");
}

/// `ringctl sub --class skip --history N` started after a publish gets the last N messages
/// the ring still holds, and so does a gating one; `--history` with a latest reader is a
/// usage error.
#[test]
fn a_skip_sub_with_history_gets_what_the_ring_still_holds() {
    let (name, _cleanup) = scratch("history");
    // Ten 8-byte frames into a 4-slot ring: frames 6..9 are still there.
    let data: Vec<u8> = (0..10u8).flat_map(|i| [b'a' + i; 8]).collect();
    kept_pub(&name, "8", &["--slots", "4"], &data);
    let sub = succeeds(
        &[
            "sub",
            &name,
            "--class",
            "skip",
            "--history",
            "3",
            "--timeout",
            "2",
        ],
        b"",
    );
    assert_eq!(sub.stdout, data[7 * 8..], "the last three frames");
    // A gating reader may start back too.
    let gating = ringctl(
        &["sub", &name, "--history", "3", "--timeout", "2"],
        b"",
        Duration::from_secs(60),
    );
    assert!(
        gating.status.success(),
        "gating sub: {}",
        text(&gating.stderr)
    );
    assert_eq!(gating.stdout, data[7 * 8..], "the last three frames");
    // A latest reader starts at the newest message anyway: history is a usage error.
    let latest = ringctl(
        &[
            "sub",
            &name,
            "--class",
            "latest",
            "--history",
            "3",
            "--timeout",
            "2",
        ],
        b"",
        Duration::from_secs(60),
    );
    assert_eq!(latest.status.code(), Some(2));
    assert!(one_line_error(&latest).contains("--history"));
}

/// `ringctl pub --group w` and three `ringctl sub --group w` started before it: each of 3000
/// frames reaches exactly one of the three.
#[test]
fn three_group_subs_share_a_stream_exactly_once() {
    let (name, _cleanup) = scratch("group");
    let data: Vec<u8> = (0..3000u64).flat_map(u64::to_le_bytes).collect();
    let subs: Vec<Child> = (0..3)
        .map(|_| spawn_sub(&[&name, "--group", "w", "--timeout", "30"]))
        .collect();
    succeeds(
        &[
            "pub",
            &name,
            "--group",
            "w",
            "--wait-consumers",
            "3",
            "--frame-size",
            "8",
            "--timeout",
            "30",
        ],
        &data,
    );
    let mut frames = Vec::new();
    for sub in subs {
        let got = finish(sub, Duration::from_secs(60));
        assert!(got.status.success(), "sub: {}", text(&got.stderr));
        assert_eq!(got.stdout.len() % 8, 0, "whole frames only");
        frames.extend(
            got.stdout
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))),
        );
    }
    frames.sort_unstable();
    assert_eq!(
        frames,
        (0..3000).collect::<Vec<_>>(),
        "each frame exactly once"
    );
}

/// Writes a fake spill segment of the Python queue `queue` (a message in a segment of its own,
/// `<queue>.s<seq>-<16 hex>`: bytes that are no ring), this user's and mode 0600 as the queue
/// makes them; returns its name.
fn fake_spill(queue: &str) -> String {
    use std::os::unix::fs::PermissionsExt as _;
    let name = format!("{queue}.s7-00c0ffee00c0ffee");
    let path = shm_path(&name);
    std::fs::write(&path, vec![0x5a_u8; 8192]).expect("writing the fake spill");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    name
}

/// The `list --json` entry named `name`.
fn listed_entry(name: &str) -> Option<Value> {
    let v = last_json(&run(&["list", "--json"]));
    v.as_array()
        .and_then(|a| a.iter().find(|e| e["name"] == name).cloned())
}

#[test]
fn a_spill_of_a_missing_queue_is_listed_as_such_and_cleaned() {
    let queue = unique("spillq-missing");
    let spill = fake_spill(&queue);
    let _cleanup = Cleanup(spill.clone());
    let e = listed_entry(&spill).expect("the spill is listed");
    assert_eq!(e["kind"], "spill", "{e}");
    assert_eq!(e["queue"], queue.as_str(), "{e}");
    assert_eq!(e["queue_status"], "missing", "{e}");
    assert_eq!(e["status"], "orphaned", "{e}");
    assert_eq!(e["bytes"], 8192, "{e}");
    let plain = text(&run(&["list"]).stdout);
    let line = plain
        .lines()
        .find(|l| l.starts_with(&spill))
        .unwrap_or_else(|| panic!("{plain}"));
    assert!(
        line.contains(&format!("spill of queue {queue} (queue missing)")),
        "{line}"
    );
    assert!(!line.contains("unreadable"), "{line}");
    let dry = text(&run(&["clean", "--dry-run", &spill]).stdout);
    assert!(dry.contains(&format!("would remove {spill}")), "{dry}");
    assert!(dry.contains("1 orphaned spill(s)"), "{dry}");
    assert!(shm_path(&spill).exists(), "--dry-run removes nothing");
    // By name: a bare `clean` here would clean up after every other test running.
    let out = run(&["clean", &spill]);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    assert!(stdout.contains(&format!("removed {spill}")), "{stdout}");
    assert_gone(&spill, "clean must remove the orphaned spill");
}

#[test]
fn a_spill_of_a_live_queue_is_kept_and_cleaned_once_its_owners_died() {
    let queue = unique("spillq-live");
    let _queue_cleanup = Cleanup(queue.clone());
    // The live owner of the queue's ring.
    let mut publ = idle_pub(&queue);
    let spill = fake_spill(&queue);
    let _cleanup = Cleanup(spill.clone());
    let e = listed_entry(&spill).expect("the spill is listed");
    assert_eq!(e["kind"], "spill", "{e}");
    assert_eq!(e["queue_status"], "live", "{e}");
    assert_eq!(e["status"], "in use", "{e}");
    let ring = listed_entry(&queue).expect("the queue's ring is listed");
    assert_eq!(ring["kind"], "ring", "{ring}");
    assert_eq!(ring["queue"], Value::Null, "{ring}");
    // Never a spill of a live queue (named with its queue, or alone).
    for args in [
        vec!["clean", spill.as_str(), queue.as_str()],
        vec!["clean", spill.as_str()],
    ] {
        let out = run(&args);
        assert!(out.status.success());
        let stdout = text(&out.stdout);
        assert!(stdout.contains(&format!("kept {spill}")), "{stdout}");
        assert!(shm_path(&spill).exists(), "a live queue's spill is kept");
        assert!(shm_path(&queue).exists(), "a live ring is kept");
    }
    publ.kill().expect("killing pub");
    publ.wait().expect("reaping pub");
    let e = listed_entry(&spill).expect("the spill is listed");
    assert_eq!(e["queue_status"], "dead", "{e}");
    assert_eq!(e["status"], "orphaned", "{e}");
    let out = run(&["clean", &spill]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains(&format!("removed {spill}")), "{stdout}");
    assert_gone(&spill, "a dead queue's spill is removed");
    assert!(
        shm_path(&queue).exists(),
        "only the named segment is cleaned"
    );
    assert!(run(&["clean", &queue]).status.success());
    assert!(!shm_path(&queue).exists());
}

#[test]
fn never_stall_rings_are_created_checked_and_shown() {
    // The rule: slots >= PINS + 2, refused before anything is created.
    let small = unique("nostall-small");
    let _c = Cleanup(small.clone());
    let out = run(&[
        "pub",
        &small,
        "--frame-size",
        "64",
        "--slots",
        "5",
        "--never-stall",
        "4",
        "--wait-consumers",
        "0",
    ]);
    let err = one_line_error(&out);
    assert!(err.contains("slots >= max_pins + 2"), "{err}");
    assert_gone(&small, "a refused ring was left behind");

    // A never-stall ring shows as one in inspect (JSON and table); a plain one does not.
    let (name, _cleanup) = scratch("nostall");
    let publ = started_pub(
        &name,
        &[
            "--frame-size",
            "128",
            "--slots",
            "4",
            "--never-stall",
            "2",
            "--wait-consumers",
            "0",
        ],
    );
    let v = last_json(&run(&["inspect", &name, "--json"]));
    assert_eq!(v["never_stall"], true, "{v}");
    let table = text(&run(&["inspect", &name]).stdout);
    assert!(table.contains("never-stall"), "{table}");
    drop(finish(publ, Duration::from_secs(30)));

    let plain = unique("nostall-plain");
    let _cleanup_plain = Cleanup(plain.clone());
    let idle = idle_pub(&plain);
    let v = last_json(&run(&["inspect", &plain, "--json"]));
    assert_eq!(v["never_stall"], false, "{v}");
    assert_eq!(v["asymmetric_fences"], false, "{v}");
    let table = text(&run(&["inspect", &plain]).stdout);
    assert!(!table.contains("never-stall"), "{table}");
    assert!(!table.contains("asymmetric"), "{table}");
    drop(finish(idle, Duration::from_secs(30)));

    // The demo: on a never-stall ring, and refused with too few slots.
    let out = run(&argv(
        "demo --never-stall --classes latest,skip --read pin --frame-size 4096 --messages 200 \
         --fps 0 --json",
        "",
    ));
    let v = last_json(&out);
    assert_eq!(v["never_stall"], true, "{v}");
    assert_eq!(v["ok"], true, "{v}");
    let err = one_line_error(&run(&["demo", "--never-stall", "3", "--slots", "4"]));
    assert!(err.contains("never-stall"), "{err}");
}
