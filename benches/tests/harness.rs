//! End-to-end: the harness starts its children, runs a few cheap transports and writes JSON that
//! `--verify-json`-style checks accept. Bounded: the run is killed after two minutes.
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std test"
)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test")]

use ring_benches::stats::Record;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn quick_round_trips_produce_json_for_each_transport() {
    let json = std::env::temp_dir().join(format!("ring-bench-test-{}.json", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_transport-bench"))
        .args([
            "--quick",
            "--transports",
            "floor,floor-msg,unix,pipe,ring-pinned,ring-copy,ring-futex",
            "--metrics",
            "round_trip",
            "--json",
        ])
        .arg(&json)
        .spawn()
        .expect("start transport-bench");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("transport-bench did not finish in two minutes");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "transport-bench failed: {status}");
    let text = std::fs::read_to_string(&json).expect("JSON written");
    let _ = std::fs::remove_file(&json);
    let records: Vec<Record> = serde_json::from_str(&text).expect("a JSON array of records");
    for t in [
        "floor",
        "floor-msg",
        "unix",
        "pipe",
        "ring-pinned",
        "ring-copy",
        "ring-futex",
    ] {
        let r = records
            .iter()
            .find(|r| r.transport == t && r.metric == "round_trip" && r.bytes == 64)
            .unwrap_or_else(|| panic!("no 64-byte round trip for {t}: {text}"));
        assert!(
            r.min_ns > 0 && r.min_ns <= r.median_ns && r.median_ns <= r.p99_ns,
            "{r:?}"
        );
        assert!(r.per_s.is_none());
    }
    // The floors only do 64-byte round trips; the others do 1 KiB too (the ring's through a
    // claim written in place, its 64 bytes through `try_publish`).
    assert!(!records
        .iter()
        .any(|r| r.transport.starts_with("floor") && r.bytes != 64));
    assert!(records
        .iter()
        .any(|r| r.transport == "ring-copy" && r.bytes == 1024));
    assert!(records
        .iter()
        .any(|r| r.transport == "unix" && r.bytes == 1024));
}
