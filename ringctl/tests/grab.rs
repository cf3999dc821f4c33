//! `ringctl grab` against a stand-in capture endpoint (the frame-server protocol served from
//! this test): the sum it reports is the frame's, and a frame whose stamp does not match the
//! descriptor fails the command. Every wait is bounded.
#![cfg(unix)]
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std test crate"
)]

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixListener;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ring_os::prelude::*;

const BIN: &str = env!("CARGO_BIN_EXE_ringctl");

fn word_sum(bytes: &[u8]) -> u64 {
    bytes
        .chunks(8)
        .map(|w| {
            let mut b = [0u8; 8];
            b[..w.len()].copy_from_slice(w);
            u64::from_le_bytes(b)
        })
        .fold(0, u64::wrapping_add)
}

/// A 1 KiB frame stamped `stamp`, the rest a pattern of `n`.
fn frame(n: u64, stamp: u64) -> Vec<u8> {
    let mut f: Vec<u8> = (0..1024u64).map(|i| (i * 7 + n) as u8).collect();
    f[..8].copy_from_slice(&stamp.to_le_bytes());
    f
}

#[test]
fn grab_pins_the_described_frame_and_checks_its_stamp() {
    let name = format!("ringctl-grab-{}", std::process::id());
    let ring = Ring::builder(&name)
        .slots(4)
        .slot_size(1024)
        .pin_only(true)
        .create()
        .expect("create");
    let mut publisher = ring.publisher().expect("publisher");
    let socket = std::env::temp_dir().join(format!("{name}.sock"));
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).expect("bind");
    // The endpoint: answers each "latest" with the descriptor of the last frame published
    // (seq and checksum).
    let latest = Arc::new(AtomicU64::new(0));
    let checksum = Arc::new(AtomicU64::new(0));
    let sums = Arc::clone(&checksum);
    let served = Arc::clone(&latest);
    let endpoint = std::thread::spawn(move || {
        let (stream, _) = listener.accept().expect("accept");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut out = stream.try_clone().unwrap();
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            assert_eq!(line, "latest");
            let seq = served.load(Ordering::SeqCst);
            let sum = sums.load(Ordering::SeqCst);
            writeln!(
                out,
                r#"{{"ring":"x","seq":{seq},"format":"BGRA8","sum":{sum}}}"#
            )
            .unwrap();
        }
    });
    let mut child = Command::new(BIN)
        .args(["grab", &name, "--socket", socket.to_str().unwrap()])
        .args(["--timeout", "20"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ringctl");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim_end(), r#"{"ready":true}"#);

    for n in 0..3u64 {
        let f = frame(n, n);
        assert_eq!(publisher.send(&f).expect("send"), n);
        latest.store(n, Ordering::SeqCst);
        checksum.store(word_sum(&f), Ordering::SeqCst);
        stdin.write_all(b"\n").unwrap();
        line.clear();
        stdout.read_line(&mut line).unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(v["seq"], n, "{line}");
        assert_eq!(v["sum"].as_u64(), Some(word_sum(&f)), "{line}");
        let (d, u, s) = (
            v["descriptor_ns"].as_u64().unwrap(),
            v["usable_ns"].as_u64().unwrap(),
            v["summed_ns"].as_u64().unwrap(),
        );
        assert!(0 < d && d <= u && u <= s, "{line}");
    }
    // A frame stamped with another number than its sequence: the capture fails.
    let bad = frame(3, 99);
    publisher.send(&bad).expect("send");
    latest.store(3, Ordering::SeqCst);
    checksum.store(word_sum(&bad), Ordering::SeqCst);
    stdin.write_all(b"\n").unwrap();
    drop(stdin);
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("pinned message 3 stamped 99"), "{stderr}");
    endpoint.join().unwrap();
    let _ = std::fs::remove_file(&socket);
}

#[test]
fn grab_fails_when_the_sum_differs_from_the_announced_one() {
    let name = format!("ringctl-grab-sum-{}", std::process::id());
    let ring = Ring::builder(&name)
        .slots(4)
        .slot_size(1024)
        .pin_only(true)
        .create()
        .expect("create");
    let mut publisher = ring.publisher().expect("publisher");
    let socket = std::env::temp_dir().join(format!("{name}.sock"));
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).expect("bind");
    let mut child = Command::new(BIN)
        .args(["grab", &name, "--socket", socket.to_str().unwrap()])
        .args(["--timeout", "20", "--count", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ringctl");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim_end(), r#"{"ready":true}"#);
    let f = frame(0, 0);
    publisher.send(&f).expect("send");
    let (stream, _) = listener.accept().expect("accept");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut out = stream.try_clone().unwrap();
    let mut request = String::new();
    BufReader::new(stream).read_line(&mut request).unwrap();
    assert_eq!(request, "latest\n");
    let wrong = word_sum(&f).wrapping_add(1);
    writeln!(out, r#"{{"seq":0,"sum":{wrong}}}"#).unwrap();
    let result = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("announced Some({wrong})")),
        "{stderr}"
    );
    let _ = std::fs::remove_file(&socket);
}
