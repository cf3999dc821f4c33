//! Cross-process frame pipeline over the device ring: one producer process, N consumer
//! processes (this binary re-executed with `--role consumer`), NV12 1920x1080 frames by default.
//!
//! ```text
//! gpu-pipeline [--emulated] [--frames 500] [--consumers 3] [--fps 30 | --full-speed]
//! gpu-pipeline [--emulated] --leak-cycles 10000
//! ```
//!
//! Prints one line per consumer (received, torn, skipped, p50/p99 latency) and exits non-zero if
//! any frame was torn or skipped, any consumer failed, or (leak run) device memory or the live
//! counters did not return to their baseline.
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std binary"
)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ring_core::inspect::EntryState;
use ring_core::{Config, DeliveryClass};
use ring_cuda::ring::{DeviceConsumer, DeviceProducer, SharedRing};
use ring_cuda::{
    padded_len, CudaDevice, Device, EmulatedDevice, EmulatedOptions, ExportKind, Limits, MemInfo,
    Owner, LARGE_PAGE,
};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};

mod args;
mod pipeline;

use args::{Args, Export};
use clap::Parser;
use pipeline::{consume, produce_with};

fn main() -> ExitCode {
    let args = Args::parse();
    let result = if args.emulated {
        let delay_us = if args.role == "consumer" {
            args.consumer_delay_us
        } else {
            args.producer_delay_us
        };
        let options = EmulatedOptions {
            op_delay: Duration::from_micros(delay_us),
            ..EmulatedOptions::default()
        };
        run(Arc::new(EmulatedDevice::with_options(options)), &args)
    } else {
        match CudaDevice::new(0, Limits::default()) {
            Ok(d) => run(Arc::new(d), &args),
            Err(e) => Err(format!(
                "no GPU: {e} (use --emulated to run on host memory)"
            )),
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpu-pipeline ({}): {e}", args.role);
            ExitCode::FAILURE
        }
    }
}

fn run<D: Device + 'static>(dev: Arc<D>, args: &Args) -> Result<(), String> {
    match args.role.as_str() {
        "consumer" => consumer(dev, args),
        "producer" => producer(dev, args),
        other => Err(format!("unknown role {other}")),
    }
}

fn frame_len(args: &Args) -> u64 {
    args.width * args.height * 3 / 2
}

/// Device-memory drift a leak run tolerates: less than one slot buffer as the driver pads it,
/// so a single leaked buffer fails. The baselines are taken after one warm-up cycle
/// ([`warm_up`]), so the driver's one-time allocations are not counted as leaks.
fn leak_slack(len: u64, kind: ExportKind) -> i128 {
    i128::from(padded_len(len, kind, LARGE_PAGE).unwrap_or(len)) - 1
}

/// One cycle of everything a process of the pipeline uses (a buffer of `len` bytes, a stream,
/// an interprocess event), created and released, so that the driver's one-time allocations
/// (context, pools) happen before a memory baseline is taken.
fn warm_up<D: Device>(dev: &D, len: u64, kind: ExportKind) -> Result<MemInfo, String> {
    let o = Owner(0xA11);
    let t = Duration::from_secs(10);
    let run = || -> Result<(), ring_cuda::Error> {
        let b = dev.alloc(o, len, kind)?;
        let s = dev.create_stream(o)?;
        let e = dev.create_event(o)?;
        dev.fill(s, b.into(), 0, len, 0)?;
        dev.record(e, s)?;
        dev.synchronize(e, t)?;
        dev.destroy_event(e)?;
        dev.destroy_stream(s, t)?;
        dev.free(b)
    };
    run().map_err(|e| format!("warm-up: {e}"))?;
    dev.mem_info().map_err(|e| e.to_string())
}

fn export_kind(args: &Args) -> ExportKind {
    match args.export {
        Export::Fd => ExportKind::Fd,
        Export::Ipc => ExportKind::Ipc,
    }
}

fn consumer<D: Device + 'static>(dev: Arc<D>, args: &Args) -> Result<(), String> {
    let t = Duration::from_secs(args.timeout);
    let name = args
        .name
        .as_deref()
        .ok_or("--name is required for a consumer")?;
    let owner = ring_os::raw::owner::current().map_err(|e| format!("owner id: {e}"))?;
    let ring = Arc::new(SharedRing::open(name).map_err(|e| e.to_string())?);
    let frames = args.leak_cycles.unwrap_or(args.frames);
    let mem_before = warm_up(&*dev, frame_len(args), export_kind(args))?;
    let base = dev.ledger().totals();
    let mut c = DeviceConsumer::new(
        Arc::clone(&dev),
        Arc::clone(&ring),
        Arc::clone(&ring),
        DeliveryClass::Gating,
        owner,
        t,
    )
    .map_err(|e| format!("register: {e}"))?;
    if c.export_kind() == ExportKind::Fd {
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).map_err(|e| e.to_string())?;
        let sock = UnixStream::connect_addr(&addr).map_err(|e| format!("connect: {e}"))?;
        c.receive_buffers(&sock, t)
            .map_err(|e| format!("receive_buffers: {e}"))?;
    }
    let st = consume(&mut c, frames, t).map_err(|e| format!("consume: {e}"))?;
    let opens = c.mapping_stats().opens;
    drop(c);
    let live = dev.ledger().totals().live_total() - base.live_total();
    let mem_after = dev.mem_info().map_err(|e| e.to_string())?;
    let drift = i128::from(mem_before.free) - i128::from(mem_after.free);
    println!(
        "RESULT received={} torn={} skipped={} p50_us={:.1} p99_us={:.1} max_us={:.1} first{}_max_us={:.1} opens={} live_after={} mem_drift={drift}",
        st.received,
        st.torn,
        st.skipped,
        st.quantile_ns(0.5) as f64 / 1e3,
        st.quantile_ns(0.99) as f64 / 1e3,
        st.quantile_ns(1.0) as f64 / 1e3,
        st.first.len(),
        st.first_max_ns() as f64 / 1e3,
        opens,
        live
    );
    Ok(())
}

fn spawn_consumers(args: &Args, name: &str, n: usize) -> Result<Vec<Child>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut children = Vec::new();
    for _ in 0..n {
        let mut cmd = Command::new(&exe);
        cmd.args(["--role", "consumer", "--name", name])
            .args([
                "--frames",
                &args.frames.to_string(),
                "--timeout",
                &args.timeout.to_string(),
            ])
            .args([
                "--width",
                &args.width.to_string(),
                "--height",
                &args.height.to_string(),
            ])
            .stdout(Stdio::piped());
        if let Some(c) = args.leak_cycles {
            cmd.args(["--leak-cycles", &c.to_string()]);
        }
        if args.emulated {
            cmd.arg("--emulated")
                .args(["--consumer-delay-us", &args.consumer_delay_us.to_string()]);
        }
        cmd.args(["--export", args.export.as_str()]);
        children.push(cmd.spawn().map_err(|e| format!("spawn consumer: {e}"))?);
    }
    Ok(children)
}

/// Waits for a child at most `t`; kills it (by its own pid) past that.
fn finish(mut child: Child, t: Duration) -> Result<String, String> {
    let start = Instant::now();
    let mut out = String::new();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("RESULT") {
                out = line;
            }
        }
    }
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(out),
            Ok(Some(status)) => return Err(format!("consumer exited with {status}")),
            Ok(None) if start.elapsed() < t => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("consumer did not finish in time (killed)".into());
            }
        }
    }
}

/// Ends the consumer processes this producer started (by their own pids).
fn kill_all(children: &mut [Child]) {
    for c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Accepts `n` consumer connections (at most `t` in all) and sends each the slot buffers' fds.
fn send_buffers<D: Device, M: ring_os::raw::RoleFile, T: ring_cuda::ring::TableMemory>(
    p: &DeviceProducer<D, M, T>,
    listener: &UnixListener,
    n: usize,
    t: Duration,
) -> Result<(), String> {
    let start = Instant::now();
    let mut sent = 0;
    while sent < n {
        match listener.accept() {
            Ok((sock, _)) => {
                sock.set_nonblocking(false).map_err(|e| e.to_string())?;
                p.send_buffers(&sock)
                    .map_err(|e| format!("send_buffers: {e}"))?;
                sent += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && start.elapsed() < t => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(format!("accept: {e}")),
        }
    }
    Ok(())
}

fn field(line: &str, key: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .and_then(|v| v.parse().ok())
}

fn producer<D: Device + 'static>(dev: Arc<D>, args: &Args) -> Result<(), String> {
    let with_events = pipeline_once(&dev, args, false)?;
    let worst = |v: &[f64]| v.iter().copied().fold(0.0f64, f64::max);
    if let Some(bound) = args.max_p99_us {
        if worst(&with_events) > bound {
            return Err(format!(
                "p99 latency {:.1} us exceeds the bound of {bound} us",
                worst(&with_events)
            ));
        }
    }
    if args.compare_host_sync {
        let host = pipeline_once(&dev, args, true)?;
        let ratio = worst(&with_events) / worst(&host).max(1e-3);
        println!(
            "latency: p99 with events {:.1} us, host-synced {:.1} us, ratio {ratio:.2} (bound {})",
            worst(&with_events),
            worst(&host),
            args.max_p99_ratio
        );
        if ratio > args.max_p99_ratio {
            return Err(format!(
                "p99 with events is {ratio:.2}x the host-synced p99 (bound {})",
                args.max_p99_ratio
            ));
        }
    }
    println!("OK");
    Ok(())
}

/// One run of the scenario; returns each consumer's p99 latency in microseconds, or an error
/// after printing what failed.
fn pipeline_once<D: Device + 'static>(
    dev: &Arc<D>,
    args: &Args,
    host_sync: bool,
) -> Result<Vec<f64>, String> {
    let dev = Arc::clone(dev);
    let t = Duration::from_secs(args.timeout);
    let len = frame_len(args);
    let frames = args.leak_cycles.unwrap_or(args.frames);
    let n = args.consumers;
    let kind = export_kind(args);
    let mem_before = warm_up(&*dev, len, kind)?;
    let slack = leak_slack(len, kind);
    let base = dev.ledger().totals();
    let owner = ring_os::raw::owner::current().map_err(|e| format!("owner id: {e}"))?;
    let name = format!(
        "ring-cuda-pipe-{}-{}",
        std::process::id(),
        u8::from(host_sync)
    );
    let cfg = Config::new(args.slots, 16).with_consumers(u32::try_from(n.max(1)).unwrap_or(32));
    let ring = Arc::new(SharedRing::create(&name, &cfg).map_err(|e| e.to_string())?);
    // Bound before the consumers start, so their connects find it.
    let listener = if kind == ExportKind::Fd {
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).map_err(|e| e.to_string())?;
        let l = UnixListener::bind_addr(&addr).map_err(|e| format!("bind: {e}"))?;
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        Some(l)
    } else {
        None
    };
    let mut p = DeviceProducer::with_export(
        Arc::clone(&dev),
        Arc::clone(&ring),
        Arc::clone(&ring),
        owner,
        len,
        kind,
    )
    .map_err(|e| format!("producer: {e}"))?;
    let mut children = spawn_consumers(args, &name, n)?;
    if let Some(l) = &listener {
        if let Err(e) = send_buffers(&p, l, n, t) {
            kill_all(&mut children);
            return Err(e);
        }
    }
    // Gating consumers must be registered before the first frame.
    let start = Instant::now();
    while (0..n)
        .filter(|&i| {
            p.ring()
                .consumer_info(i)
                .is_some_and(|c| c.state == EntryState::Active)
        })
        .count()
        < n
    {
        let exited = children
            .iter_mut()
            .any(|c| matches!(c.try_wait(), Ok(Some(_))));
        if exited || start.elapsed() > t {
            for c in &mut children {
                let _ = c.kill();
                let _ = c.wait();
            }
            return Err("consumers did not register (one exited or the timeout ran out)".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let interval = (!args.full_speed && args.leak_cycles.is_none() && args.fps > 0.0)
        .then(|| Duration::from_secs_f64(1.0 / args.fps));
    let stats = produce_with(&mut p, frames, len, interval, t, host_sync)
        .map_err(|e| format!("produce: {e}"));
    // The teardown protocol: the producer syncs and says it stopped waiting on the consumers'
    // events; its drop returns once they closed their mappings (or died).
    drop(p);
    let results: Vec<_> = children.into_iter().map(|c| finish(c, t * 4)).collect();
    drop(ring);
    let stats = stats?;
    let export = if kind == ExportKind::Fd {
        "VMM fd export"
    } else {
        "IPC handles"
    };
    let mut mode = if args.leak_cycles.is_some() {
        "leak run".to_string()
    } else if let Some(iv) = interval {
        format!("{:.0} fps", 1.0 / iv.as_secs_f64())
    } else {
        "full speed".to_string()
    };
    if host_sync {
        mode.push_str(", host-synced");
    }
    println!(
        "{} | {export} | {} bytes/frame | {} frames | {} consumers | {mode} | {:.2} s ({:.0} frames/s) | {}",
        dev.describe(),
        len,
        stats.published,
        n,
        stats.elapsed.as_secs_f64(),
        stats.published as f64 / stats.elapsed.as_secs_f64().max(1e-9),
        name
    );
    let mut failed = false;
    let mut p99s = Vec::new();
    for (i, r) in results.iter().enumerate() {
        match r {
            Ok(line) => {
                println!("consumer {i}: {}", line.trim_start_matches("RESULT "));
                p99s.extend(field(line, "p99_us"));
                let leaked = args.leak_cycles.is_some()
                    && field(line, "mem_drift").is_none_or(|d| d > slack as f64);
                let bad = field(line, "torn") != Some(0.0)
                    || field(line, "skipped") != Some(0.0)
                    || field(line, "received") != Some(frames as f64)
                    || field(line, "live_after") != Some(0.0)
                    || leaked;
                failed |= bad;
            }
            Err(e) => {
                println!("consumer {i}: FAILED: {e}");
                failed = true;
            }
        }
    }
    let live = dev.ledger().totals().live_total() - base.live_total();
    let mem_after = dev.mem_info().map_err(|e| e.to_string())?;
    let drift = mem_before.free as i128 - mem_after.free as i128;
    println!(
        "producer: live resources after {live}; device free memory before {} after {} (drift {drift} bytes, slack {slack})",
        mem_before.free, mem_after.free
    );
    if args.leak_cycles.is_some() && (live != 0 || drift > slack) {
        failed = true;
        println!("LEAK: device memory or live counts did not return to baseline");
    }
    if failed {
        Err("the pipeline check failed (see above)".into())
    } else {
        Ok(p99s)
    }
}
