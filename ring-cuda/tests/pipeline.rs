//! The `gpu-pipeline` example in `--emulated` mode: a real cross-process run (producer process,
//! consumer processes, a ring-os named segment, emulated IPC handles opened through /proc).
//!
//! `cargo test -p ring-cuda` builds the example first; run alone (`--test pipeline`), this
//! suite needs `cargo build -p ring-cuda --example gpu-pipeline` before.
#![allow(clippy::std_instead_of_core, reason = "std test")]

use std::path::PathBuf;
use std::process::Command;

/// The example's executable: `target/<profile>/examples/gpu-pipeline`, next to this test's
/// `target/<profile>/deps/`.
fn exe() -> PathBuf {
    let me = std::env::current_exe().expect("current_exe");
    let profile = me
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target/<profile>/deps/<test>");
    let exe = profile.join("examples").join("gpu-pipeline");
    assert!(
        exe.is_file(),
        "{} is missing: run `cargo build -p ring-cuda --example gpu-pipeline` (plain `cargo \
         test -p ring-cuda` builds it)",
        exe.display()
    );
    exe
}

fn run(args: &[&str]) -> String {
    let out = Command::new(exe())
        .arg("--emulated")
        .args(["--timeout", "30"])
        .args(args)
        .output()
        .expect("spawn gpu-pipeline");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "gpu-pipeline {args:?} failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn consumer_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.starts_with("consumer "))
        .collect()
}

/// `text` reports `n` consumers, each line saying every one of `wants`.
fn assert_consumers(text: &str, n: usize, wants: &[&str]) {
    let lines = consumer_lines(text);
    assert_eq!(lines.len(), n, "{text}");
    for l in lines {
        for want in wants {
            assert!(l.contains(want), "{want:?} missing: {l}");
        }
    }
}

#[test]
fn emulated_pipeline_full_speed_three_consumers() {
    let text = run(&[
        "--frames",
        "80",
        "--full-speed",
        "--width",
        "320",
        "--height",
        "240",
    ]);
    // opens=4: each slot buffer opened once.
    assert_consumers(&text, 3, &["received=80 torn=0 skipped=0", "opens=4"]);
    assert!(text.contains("\nOK"), "{text}");
}

#[test]
fn emulated_pipeline_paced_nv12() {
    let text = run(&["--frames", "10", "--fps", "100", "--consumers", "2"]);
    assert!(text.contains("3110400 bytes/frame"), "{text}");
    assert_eq!(consumer_lines(&text).len(), 2, "{text}");
    assert!(text.contains("\nOK"), "{text}");
}

#[test]
fn emulated_leak_run_returns_to_baseline() {
    // Three consumer processes, each measuring its own device memory after a warm-up cycle
    // (the emulated context's one-time 2 MiB is not a leak), the producer its own.
    let text = run(&["--leak-cycles", "1000", "--width", "64", "--height", "64"]);
    let wants = ["received=1000 torn=0 skipped=0", "live_after=0 mem_drift=0"];
    assert_consumers(&text, 3, &wants);
    assert!(text.contains("live resources after 0"), "{text}");
    assert!(text.contains("(drift 0 bytes, slack 6143)"), "{text}");
}

#[test]
fn without_a_gpu_the_binary_says_so() {
    if ring_cuda::probe().is_ok() {
        eprintln!("a GPU is present: the no-GPU message cannot be checked here");
        return;
    }
    let out = Command::new(exe())
        .args(["--frames", "1"])
        .output()
        .expect("spawn gpu-pipeline");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no GPU"));
}

#[test]
fn emulated_pipeline_with_vmm_fd_export() {
    let text = run(&[
        "--export",
        "fd",
        "--frames",
        "40",
        "--full-speed",
        "--width",
        "256",
        "--height",
        "128",
    ]);
    assert!(text.contains("VMM fd export"), "{text}");
    assert_consumers(&text, 3, &["received=40 torn=0 skipped=0"]);
    assert!(text.contains("\nOK"), "{text}");
}

/// The latency check: the scenario runs with events and again host-synced in the same
/// invocation, the first `slots` frames are reported apart, and the events run's p99 is
/// checked as a ratio to the host-synced one (checked failing before the change: the flags
/// did not exist and nothing was compared). A bound of 0 must fail, which shows the check
/// can.
#[test]
fn emulated_latency_is_checked_against_a_host_synced_run() {
    let small = [
        "--frames", "30", "--fps", "200", "--width", "128", "--height", "64",
    ];
    let mut args = small.to_vec();
    args.extend(["--compare-host-sync", "--max-p99-ratio", "1000"]);
    let text = run(&args);
    assert!(text.contains("host-synced |"), "{text}");
    assert_eq!(consumer_lines(&text).len(), 6, "{text}");
    assert!(text.contains("first4_max_us="), "{text}");
    assert!(text.contains("latency: p99 with events"), "{text}");
    let bounds: [&[&str]; 2] = [
        &["--compare-host-sync", "--max-p99-ratio", "0"],
        &["--max-p99-us", "0", "--consumers", "1"],
    ];
    for bound in bounds {
        let out = Command::new(exe())
            .arg("--emulated")
            .args(small)
            .args(bound)
            .output()
            .expect("spawn gpu-pipeline");
        assert!(!out.status.success(), "a bound of 0 passed: {bound:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("p99"), "{err}");
    }
}

/// The tearing check of the whole pipeline on the strict emulated device (the ring's own is
/// `tests/ring.rs::slow_peers_never_tear`): slow consumers with a fast producer, then a
/// slow producer with fast consumers, 2 slots; any copy not ordered by the events reads a
/// torn frame and the run fails.
#[test]
fn emulated_slow_peers_never_tear_across_processes() {
    let base = [
        "--frames",
        "40",
        "--full-speed",
        "--slots",
        "2",
        "--consumers",
        "2",
        "--width",
        "64",
        "--height",
        "32",
    ];
    for delay in [
        ["--consumer-delay-us", "2000"],
        ["--producer-delay-us", "2000"],
    ] {
        let mut args = base.to_vec();
        args.extend(delay);
        let text = run(&args);
        eprintln!("delay {delay:?}"); // shown with a failure
        assert_consumers(&text, 2, &["received=40 torn=0 skipped=0"]);
    }
}
