//! The C ABI from C and C++: `tests/c/peer.c` and `tests/c/peer.cpp` are compiled with the
//! system compiler against the built `libshmring.so` (plainly, and with
//! `-fsanitize=address,undefined`) and run against a Rust peer (ring-os) in another process.
#![cfg(unix)]

use core::time::Duration;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

use ring_os::prelude::*;
use ring_os::raw::ProducerExt as _;

/// `target/debug` (or the profile's directory): the test binary lives in its `deps/`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test binary lives in <target>/<profile>/deps")
        .to_path_buf()
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The compiled peers: (C plain, C sanitized, C++ plain, C++ sanitized).
struct Peers {
    c: PathBuf,
    c_asan: PathBuf,
    cpp: PathBuf,
    cpp_asan: PathBuf,
    frame_server: PathBuf,
}

fn compile(compiler: &str, source: &str, out: &Path, extra: &[&str]) {
    let lib = library_dir();
    assert!(
        lib.join("libshmring.so").exists(),
        "libshmring.so not found in {}",
        lib.display()
    );
    let include = manifest_dir().join("../include");
    let mut cmd = Command::new(compiler);
    cmd.args(extra)
        .args(["-g", "-Wall", "-Wextra", "-Werror", "-D_DEFAULT_SOURCE"])
        .arg("-I")
        .arg(&include)
        .arg(manifest_dir().join(source))
        .arg("-L")
        .arg(&lib)
        .arg("-lshmring")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(out);
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("running {compiler}: {e}"));
    assert!(
        status.success(),
        "{compiler} failed to build {source}: {cmd:?}"
    );
}

/// The directory holding a `libshmring.so` built from the sources as they are now. A test
/// build does not reliably rebuild (or copy up) the cdylib, so build it explicitly, in the same
/// target directory and profile as this test binary.
fn library_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = target_dir();
        let root = dir.parent().expect("<target>/<profile>");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-p", "ring-ffi", "--lib", "--target-dir"])
            .arg(root)
            .current_dir(manifest_dir());
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("running cargo build");
        assert!(status.success(), "cargo build -p ring-ffi failed");
        dir
    })
    .clone()
}

fn peers() -> &'static Peers {
    static PEERS: OnceLock<Peers> = OnceLock::new();
    PEERS.get_or_init(|| {
        let dir = target_dir().join("ffi-peers");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let asan = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"];
        let peers = Peers {
            c: dir.join("peer"),
            c_asan: dir.join("peer-asan"),
            cpp: dir.join("peer-cpp"),
            cpp_asan: dir.join("peer-cpp-asan"),
            frame_server: dir.join("frame-server"),
        };
        let c = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        compile(&c, "tests/c/peer.c", &peers.c, &["-std=c11"]);
        compile(
            &c,
            "tests/c/peer.c",
            &peers.c_asan,
            &[&["-std=c11"][..], &asan].concat(),
        );
        compile(&cxx, "tests/c/peer.cpp", &peers.cpp, &["-std=c++17"]);
        compile(
            &cxx,
            "tests/c/peer.cpp",
            &peers.cpp_asan,
            &[&["-std=c++17"][..], &asan].concat(),
        );
        compile(
            &cxx,
            "../examples/frame-server/frame_server.cpp",
            &peers.frame_server,
            &[&["-std=c++17"][..], &asan].concat(),
        );
        peers
    })
}

fn all_peers() -> [&'static Path; 4] {
    let p = peers();
    [&p.c, &p.c_asan, &p.cpp, &p.cpp_asan]
}

fn name(tag: &str) -> String {
    format!("ffi-{}-{tag}", std::process::id())
}

fn command(peer: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(peer);
    cmd.args(args)
        // Leaks fail the run; UBSan findings too.
        .env(
            "ASAN_OPTIONS",
            "detect_leaks=1:abort_on_error=0:exitcode=23",
        )
        .env(
            "UBSAN_OPTIONS",
            "halt_on_error=1:print_stacktrace=1:exitcode=24",
        );
    cmd
}

fn run(peer: &Path, args: &[&str]) -> Output {
    let out = command(peer, args).output().expect("spawn peer");
    eprintln!(
        "{} {args:?}: {}\nstdout:\n{}\nstderr:\n{}",
        peer.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A peer process, killed if a failing test drops it before it exited.
struct Peer(Child);

impl Drop for Peer {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn spawn(peer: &Path, args: &[&str]) -> (Peer, BufReader<std::process::ChildStdout>) {
    let mut child = command(peer, args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn peer");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    (Peer(child), stdout)
}

fn line(out: &mut BufReader<std::process::ChildStdout>) -> String {
    let mut s = String::new();
    out.read_line(&mut s).expect("read peer stdout");
    s.trim_end().to_owned()
}

fn wait_ok(mut child: Peer, what: &str) {
    let status = child.0.wait().expect("wait");
    assert!(status.success(), "{what}: {status}");
}

/// Every peer runs `mode` on a ring of its own (named `tag` and the peer's number), `args`
/// after the name, and exits reporting `<mode>: ok`.
fn every_peer_reports_ok(mode: &str, tag: &str, args: &[&str]) {
    for (i, peer) in all_peers().into_iter().enumerate() {
        let name = name(&format!("{tag}{i}"));
        let out = run(peer, &[&[mode, name.as_str()], args].concat());
        assert!(out.status.success(), "{}: {}", peer.display(), out.status);
        assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("{mode}: ok")));
    }
}

/// Runs `case` for every peer with each `(tag, mode, pin_only)` of `modes` (the tag numbered by
/// the peer), in that order.
fn for_every_peer(modes: &[(&str, &str, bool)], case: fn(&Path, &str, &str, bool)) {
    for (i, peer) in all_peers().into_iter().enumerate() {
        for &(tag, mode, pin_only) in modes {
            case(peer, &format!("{tag}{i}"), mode, pin_only);
        }
    }
}

#[test]
fn error_paths_give_the_documented_codes_and_messages() {
    every_peer_reports_ok("errors", "errors", &[]);
}

#[test]
fn a_c_pin_on_a_never_stall_ring_never_stalls_the_publisher() {
    every_peer_reports_ok("never-stall", "nostall", &["20"]);
}

#[test]
fn the_sanitizer_reports_a_leaked_handle() {
    // The leak check above is only worth something if it can fail.
    for peer in [&peers().c_asan, &peers().cpp_asan] {
        let out = command(peer, &["errors", &name("leak")])
            .env("PEER_LEAK", "1")
            .output()
            .expect("spawn");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(23), "{stderr}");
        assert!(stderr.contains("detected memory leaks"), "{stderr}");
    }
}

/// A new named ring of `slots` 64-byte slots (`pin_only`: for loans written in place).
fn ring64(name: &str, slots: u32, pin_only: bool) -> Ring {
    Ring::builder(name)
        .slots(slots)
        .slot_size(64)
        .pin_only(pin_only)
        .create()
        .expect("create")
}

/// What the peers send: "msg <i>" with metadata {i, 7}.
fn expected(i: u64) -> Vec<u8> {
    format!("msg {i}").into_bytes()
}

/// A peer publishes `n` messages into a ring Rust created, Rust reads them (gating).
fn peer_publishes(peer: &Path, tag: &str, mode: &str, pin_only: bool) {
    const N: u64 = 500;
    let name = name(tag);
    let ring = ring64(&name, 8, pin_only);
    let mut sub = ring.subscriber(DeliveryClass::Gating).expect("subscribe");
    let (child, _out) = spawn(peer, &[mode, &name, &N.to_string()]);
    for i in 0..N {
        let m = sub.recv_pinned().expect("recv");
        assert_eq!(m.bytes(), expected(i), "message {i}");
        assert_eq!((m.seq(), m.meta()), (i, [i, 7]));
    }
    assert!(matches!(sub.recv_pinned(), Err(RecvError::Disconnected)));
    wait_ok(child, &format!("{} {mode}", peer.display()));
}

#[test]
fn a_c_publisher_feeds_a_rust_subscriber() {
    for_every_peer(
        &[("pub", "pub", false), ("loan", "loan-pub", true)],
        peer_publishes,
    );
}

/// Rust publishes `N` messages (with metadata) to a peer that subscribed, then closes the ring
/// (`abort: None`) or aborts it with a code.
fn rust_publishes(peer: &Path, tag: &str, mode: &str, pin_only: bool) {
    rust_publishes_then(peer, tag, mode, pin_only, None);
}

fn rust_publishes_then(peer: &Path, tag: &str, mode: &str, pin_only: bool, abort: Option<u16>) {
    const N: u64 = 500;
    let name = name(tag);
    let ring = ring64(&name, 4, pin_only);
    let mut publisher = ring.publisher().expect("publisher");
    let (child, mut out) = spawn(peer, &[mode, &name, &N.to_string()]);
    assert_eq!(line(&mut out), "ready");
    assert!(publisher.wait_for_subscribers(1, Duration::from_secs(10)));
    for i in 0..N {
        let data = expected(i);
        let seq = publisher
            .inner()
            .claim_with(Duration::from_secs(10), |mut slot| {
                slot.write(&data).expect("fits");
                slot.set_meta([i, 7]);
                slot.publish()
            })
            .expect("claim")
            .expect("publish");
        assert_eq!(seq, i);
    }
    let end = match abort {
        None => {
            publisher.close();
            "ok".to_owned()
        }
        Some(code) => {
            publisher.abort(code);
            format!("aborted {code}")
        }
    };
    assert!(publisher.wait_drained(Duration::from_secs(10)));
    assert_eq!(line(&mut out), format!("sub: {N} {end}"));
    wait_ok(child, &format!("{} {mode}", peer.display()));
}

#[test]
fn a_rust_publisher_feeds_a_c_subscriber() {
    for_every_peer(
        &[("sub", "sub", false), ("pinsub", "pin-sub", true)],
        rust_publishes,
    );
}

/// A C subscriber holds up to three messages at once (`shmring_subscriber_hold`), releases
/// them out of order, and receives the whole stream (plain and under ASan + UBSan).
#[test]
fn a_c_subscriber_holds_several_messages_at_once() {
    let p = peers();
    for (i, peer) in [&p.c, &p.c_asan].into_iter().enumerate() {
        rust_publishes(peer, &format!("holdsub{i}"), "hold-sub", false);
    }
}

/// Three processes join a group a Rust publisher created (C under ASan + UBSan, and C++ through
/// `Ring::join_group`): each of 300 messages reaches exactly one of them, whole and not flagged
/// as redelivered.
#[test]
fn c_and_cpp_group_members_share_a_stream_exactly_once() {
    const N: u64 = 300;
    let p = peers();
    let name = name("group");
    let ring = Ring::builder(&name)
        .slots(4)
        .slot_size(64)
        .consumers(5)
        .create()
        .expect("create");
    let mut publisher = ring.publisher().expect("publisher");
    publisher.create_group("workers").expect("group");
    let members: Vec<_> = [&p.c, &p.c_asan, &p.cpp]
        .into_iter()
        .map(|peer| spawn(peer, &["group-member", &name]))
        .collect();
    let mut outs: Vec<_> = members
        .into_iter()
        .map(|(child, mut out)| {
            assert_eq!(line(&mut out), "ready");
            (child, out)
        })
        .collect();
    for i in 0..N {
        let data = expected(i);
        publisher
            .inner()
            .claim_with(Duration::from_secs(10), |mut slot| {
                slot.write(&data).expect("fits");
                slot.set_meta([i, 7]);
                slot.publish()
            })
            .expect("claim")
            .expect("publish");
    }
    publisher.close();
    let mut all = Vec::new();
    for (child, out) in &mut outs {
        let mut count = 0;
        loop {
            let l = line(out);
            if let Some(seq) = l.strip_prefix("seq ") {
                all.push(seq.parse::<u64>().expect("a sequence"));
                count += 1;
            } else {
                assert_eq!(l, format!("member: {count} ok"));
                break;
            }
        }
        let _ = child;
    }
    for (child, _) in outs {
        wait_ok(child, "group-member");
    }
    all.sort_unstable();
    assert_eq!(
        all,
        (0..N).collect::<Vec<_>>(),
        "each message to exactly one member"
    );
}

#[test]
fn a_c_subscriber_learns_the_abort_code_of_a_rust_publisher() {
    for (i, peer) in all_peers().into_iter().enumerate() {
        let code = 4000 + i as u16;
        rust_publishes_then(peer, &format!("abort{i}"), "sub", false, Some(code));
        rust_publishes_then(
            peer,
            &format!("pinabort{i}"),
            "pin-sub",
            true,
            Some(code + 100),
        );
    }
}

#[test]
fn a_memfd_ring_served_by_c_reaches_rust() {
    use ring_os::raw::rendezvous::{Rendezvous, SocketPlace};
    for (i, peer) in all_peers().into_iter().enumerate() {
        let name = name(&format!("memfd{i}"));
        let (child, mut out) = spawn(peer, &["memfd", &name, "100"]);
        assert_eq!(line(&mut out), "serving");
        let place = Rendezvous::new(
            &ring_os::raw::SegmentName::new(&name).unwrap(),
            SocketPlace::Abstract,
        );
        let mapping = place.connect(Duration::from_secs(10)).expect("connect");
        let fd = mapping.segment().fd().try_clone_to_owned().unwrap();
        let ring = Ring::from_fd(fd).expect("from_fd");
        drop(mapping);
        let mut sub = ring.subscriber(DeliveryClass::Gating).expect("subscribe");
        for n in 0..100 {
            let m = sub.recv_pinned().expect("recv");
            assert_eq!(m.bytes(), expected(n));
            assert_eq!(m.meta(), [n, 7]);
        }
        assert!(matches!(sub.recv_pinned(), Err(RecvError::Disconnected)));
        wait_ok(child, "memfd");
    }
}

#[test]
fn a_c_subscriber_killed_while_pinning_does_not_stall_the_publisher() {
    for (i, peer) in [&peers().c, &peers().cpp].into_iter().enumerate() {
        let name = name(&format!("kill{i}"));
        let ring = ring64(&name, 4, false);
        let mut publisher = ring.publisher().expect("publisher");
        let (mut child, mut out) = spawn(peer, &["pin-hold", &name]);
        assert_eq!(line(&mut out), "ready");
        assert!(publisher.wait_for_subscribers(1, Duration::from_secs(10)));
        publisher.send(b"first").expect("send");
        assert_eq!(line(&mut out), "pinned 0");
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(child.0.id() as i32, libc::SIGKILL) }, 0);
        let _ = child.0.wait();
        // A gating subscriber that holds a pin would stop the ring after 4 messages; its
        // death is noticed and it is reclaimed.
        for n in 0..40u32 {
            publisher
                .send_timeout(&n.to_le_bytes(), Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("send {n} after the kill: {e}"));
        }
        assert_eq!(publisher.sent(), 41);
    }
}

/// A C publisher whose only gating subscriber (a C peer holding a pin) is SIGKILLed learns it
/// lost a reader, with what it had not read (`shmring_publisher_lost_subscribers`).
#[test]
fn a_c_publisher_learns_its_gating_subscriber_died() {
    let peer = &peers().c;
    let name = name("lost");
    let _ring = ring64(&name, 4, false);
    let (mut holder, mut held) = spawn(peer, &["pin-hold", &name]);
    assert_eq!(line(&mut held), "ready");
    let (publisher, mut out) = spawn(peer, &["lost-pub", &name]);
    assert_eq!(line(&mut out), "sent 0");
    assert_eq!(line(&mut held), "pinned 0");
    let pid = holder.0.id() as i32;
    // SAFETY: kill(2) on our own child's pid.
    let killed = unsafe { libc::kill(pid, libc::SIGKILL) };
    assert_eq!(killed, 0);
    let _ = holder.0.wait();
    // It held message 0 (its cursor stayed there) while 11 more were sent behind it; the
    // publisher reclaims it once the ring is full, when 4 of the 12 are published.
    let report = line(&mut out);
    assert!(
        report.starts_with("lost 1 gating 1 unread "),
        "the publisher did not learn its subscriber died: {report}"
    );
    let unread: u64 = report.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((1..=12).contains(&unread), "{report}");
    wait_ok(publisher, "lost-pub");
}

/// The frame server's checksum: the sum, mod 2^64, of the frame as little-endian 64-bit words.
fn word_sum(bytes: &[u8]) -> u64 {
    let words = bytes.chunks_exact(8);
    let mut last = [0u8; 8];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    words
        .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
        .fold(u64::from_le_bytes(last), u64::wrapping_add)
}

/// What pixel (x, y) of frame n holds (B, G, R, A).
fn pixel(x: usize, y: usize, n: u64) -> [u8; 4] {
    [(x as u64 + n) as u8, (y as u64 + n) as u8, n as u8, 255]
}

/// A frame server started for a test (`--tcp 0`): its ring name, socket and TCP port.
struct FrameServer {
    child: Option<Peer>,
    name: String,
    socket: PathBuf,
    port: u16,
}

impl FrameServer {
    fn start(tag: &str, w: u32, h: u32) -> Self {
        let name = name(tag);
        let socket = target_dir().join(format!("{name}.sock"));
        let (child, mut out) = spawn(
            &peers().frame_server,
            &[
                &name,
                socket.to_str().unwrap(),
                &w.to_string(),
                &h.to_string(),
                "--tcp",
                "0",
            ],
        );
        let first = line(&mut out);
        assert!(first.starts_with("serving"), "{first}");
        let port = first
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or_else(|| panic!("no TCP port in {first:?}"));
        Self {
            child: Some(child),
            name,
            socket,
            port,
        }
    }

    /// A connection with a bounded wait on every read.
    fn unix(&self) -> std::os::unix::net::UnixStream {
        let s = std::os::unix::net::UnixStream::connect(&self.socket).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    fn quit(mut self) {
        use std::io::Write as _;
        let mut s = self.unix();
        s.write_all(b"quit\n").unwrap();
        let mut reply = String::new();
        BufReader::new(s).read_line(&mut reply).unwrap();
        assert_eq!(reply.trim_end(), r#"{"bye":true}"#);
        wait_ok(self.child.take().unwrap(), "frame-server");
    }
}

#[test]
fn the_frame_server_renders_checkable_frames_in_place() {
    use std::io::Write as _;
    let (w, h) = (320u32, 240u32);
    let server = FrameServer::start("frames", w, h);
    let name = server.name.clone();
    let ring = Ring::builder(&name).open().expect("open");
    let mut sub = ring
        .subscriber(DeliveryClass::LatestOnly)
        .expect("subscribe");
    let stream = server.unix();
    let mut replies = BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    for n in 0..5u64 {
        stream.write_all(b"frame\n").unwrap();
        let mut reply = String::new();
        replies.read_line(&mut reply).unwrap();
        let frame = sub
            .recv_pinned_timeout(Duration::from_secs(5))
            .expect("pin");
        assert_eq!(frame.seq(), n);
        assert_eq!(frame.meta(), [n, u64::from(w) << 32 | u64::from(h)]);
        let px = frame.bytes();
        assert_eq!(px.len(), (w * h * 4) as usize);
        // The descriptor (UnrealCV's fields and the ring's own), field by field.
        for (key, want) in [
            ("ring", format!("\"{name}\"")),
            ("width", w.to_string()),
            ("height", h.to_string()),
            ("seq", n.to_string()),
            ("format", "\"BGRA8\"".to_owned()),
            ("num_bytes", (w * h * 4).to_string()),
            ("sum", word_sum(px).to_string()),
        ] {
            assert_eq!(
                json_field(&reply, key),
                Some(want.as_str()),
                "{key} in {reply}"
            );
        }
        assert_eq!(u64::from_le_bytes(px[..8].try_into().unwrap()), n);
        let (x, y) = (17usize, 101usize);
        let at = (y * w as usize + x) * 4;
        assert_eq!(&px[at..at + 4], &pixel(x, y, n));
        drop(frame);
        // "latest" describes the same frame again, rendering nothing.
        stream.write_all(b"latest\n").unwrap();
        let mut again = String::new();
        replies.read_line(&mut again).unwrap();
        assert_eq!(again, reply);
    }
    server.quit();
}

/// The raw text of `key`'s value in a flat one-line JSON object (numbers and plain strings).
fn json_field<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let at = json.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = &json[at..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// Reads one BMP answer: checks the header, returns the pixel bytes.
fn read_bmp(stream: &mut impl std::io::Read, w: u32, h: u32) -> Vec<u8> {
    let mut header = [0u8; 54];
    stream.read_exact(&mut header).expect("BMP header");
    let word = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().unwrap());
    let pixels = (w * h * 4) as usize;
    assert_eq!(&header[..2], b"BM");
    assert_eq!(word(2) as usize, 54 + pixels, "file size");
    assert_eq!(word(10), 54, "pixel offset");
    assert_eq!((word(14), word(18), word(22) as i32), (40, w, -(h as i32)));
    assert_eq!(
        u16::from_le_bytes([header[28], header[29]]),
        32,
        "bits per pixel"
    );
    let mut px = vec![0u8; pixels];
    stream.read_exact(&mut px).expect("BMP pixels");
    px
}

/// The control socket's `bmp` sends the frame in the ring as a BMP (TCP speaks UnrealCV's
/// framed protocol now, which renders a frame per request: python/tests/test_unrealcv.py
/// drives it with the real client).
#[test]
fn the_frame_server_sends_the_frame_in_the_ring_as_a_bmp() {
    use std::io::Write as _;
    let (w, h) = (64u32, 48u32);
    let server = FrameServer::start("bmp", w, h);
    let control = server.unix();
    let mut replies = BufReader::new(control.try_clone().unwrap());
    let mut control = control;
    // Before any frame: an error line, not a hang.
    control.write_all(b"bmp\n").unwrap();
    let mut reply = String::new();
    replies.read_line(&mut reply).unwrap();
    assert!(reply.contains("no frame rendered yet"), "{reply}");
    // TCP greets as UnrealCV does: magic, length, then the greeting text.
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", server.port)).expect("tcp");
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = [0u8; 8];
    std::io::Read::read_exact(&mut tcp, &mut head).expect("greeting header");
    assert_eq!(
        u32::from_le_bytes(head[..4].try_into().unwrap()),
        0x9E2B_83C1
    );
    let mut greeting = vec![0u8; u32::from_le_bytes(head[4..].try_into().unwrap()) as usize];
    std::io::Read::read_exact(&mut tcp, &mut greeting).expect("greeting");
    assert!(
        String::from_utf8_lossy(&greeting).contains("connected"),
        "{greeting:?}"
    );
    let mut unix = server.unix();
    for n in 0..3u64 {
        control.write_all(b"frame\n").unwrap();
        reply.clear();
        replies.read_line(&mut reply).unwrap();
        assert!(reply.contains(&format!("\"seq\":{n},")), "{reply}");
        let sum: u64 = json_field(&reply, "sum")
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no sum in {reply:?}"));
        unix.write_all(b"bmp\n").unwrap();
        let px = read_bmp(&mut unix, w, h);
        assert_eq!(u64::from_le_bytes(px[..8].try_into().unwrap()), n, "stamp");
        assert_eq!(word_sum(&px), sum, "sum");
        let (x, y) = (33usize, 47usize);
        let at = (y * w as usize + x) * 4;
        assert_eq!(&px[at..at + 4], &pixel(x, y, n), "pixel");
    }
    server.quit();
}
