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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ring_os::prelude::*;

mod common;

/// A pin-only ring `name` of four 1 KiB slots, its publisher, and a listening socket for the
/// stand-in endpoint (`<tmp>/<name>.sock`); the ring's name goes when the ring drops.
fn grab_setup(name: &str) -> (Ring, Publisher, std::path::PathBuf, UnixListener) {
    let ring = Ring::builder(name)
        .slots(4)
        .slot_size(1024)
        .pin_only(true)
        .create()
        .expect("create");
    let publisher = ring.publisher().expect("publisher");
    let socket = std::env::temp_dir().join(format!("{name}.sock"));
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).expect("bind");
    (ring, publisher, socket, listener)
}

/// Spawns `ringctl grab` on `name` through `socket` with `extra` arguments, and reads its
/// ready line.
fn spawn_grab(
    name: &str,
    socket: &std::path::Path,
    extra: &[&str],
) -> (std::process::Child, BufReader<std::process::ChildStdout>) {
    let mut args = vec![
        "grab",
        name,
        "--socket",
        socket.to_str().unwrap(),
        "--timeout",
        "20",
    ];
    args.extend_from_slice(extra);
    let mut child = common::spawn_piped(&args);
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim_end(), r#"{"ready":true}"#);
    (child, stdout)
}

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
    let (_ring, mut publisher, socket, listener) = grab_setup(&name);
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
    let (mut child, mut stdout) = spawn_grab(&name, &socket, &[]);
    let mut stdin = child.stdin.take().unwrap();
    let mut line = String::new();
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
    let (_ring, mut publisher, socket, listener) = grab_setup(&name);
    let (child, _stdout) = spawn_grab(&name, &socket, &["--count", "1"]);
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
