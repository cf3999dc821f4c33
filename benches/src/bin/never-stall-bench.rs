//! `never-stall-bench`: what a frame grabber that keeps its pins costs the renderer. The
//! producer (this process) publishes 1080p BGRA frames as fast as it can into a 6-slot
//! pin-only ring, writing each frame in place (loan, fill, send), and times every publish with
//! hdrhistogram, in three configurations:
//!
//! - `no-reader`: a never-stall ring, nobody reading (the baseline);
//! - `never-stall+pin`: a never-stall ring, a latest-only reader in another process (this
//!   executable, re-executed with `--child`) holding each frame it pins for `--hold-ms`;
//! - `default+pin`: the same reader on a default (not never-stall) ring.
//!
//! The configurations alternate, round after round, so machine noise spreads over all three;
//! each is reported as ratios to the no-reader run of the same round and over all rounds. The
//! issue's target: p99 of `never-stall+pin` within 1.5x of `no-reader`.
//!
//! ```text
//! cargo run --release -p ring-benches --bin never-stall-bench -- [--rounds 5] [--frames 300]
//! ```
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std binary"
)]

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use comfy_table::{presets, Table};
use hdrhistogram::Histogram;
use ring_benches::stats::human_ns;
use ring_os::prelude::*;

/// A 1080p BGRA frame.
const FRAME: usize = 1920 * 1080 * 4;

/// Producer publish time of 1080p frames with and without a reader that holds its pins.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Rounds; each runs every configuration once, in turn.
    #[arg(long, default_value_t = 5)]
    rounds: u32,
    /// Frames timed per configuration and round (after one unmeasured lap of warm-up).
    #[arg(long, default_value_t = 300)]
    frames: u32,
    /// Milliseconds the reader holds each frame it pins.
    #[arg(long, default_value_t = 10)]
    hold_ms: u64,
    /// Slots of the ring (at least 3; the reader pins one frame at a time).
    #[arg(long, default_value_t = 6)]
    slots: u32,
    /// Internal: run as the reader of ring NAME.
    #[arg(long, hide = true, value_name = "NAME")]
    child: Option<String>,
}

/// The configurations, in the order each round runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Setup {
    NoReader,
    NeverStallPin,
    DefaultPin,
}

impl Setup {
    const ALL: [Self; 3] = [Self::NoReader, Self::NeverStallPin, Self::DefaultPin];

    fn name(self) -> &'static str {
        match self {
            Self::NoReader => "no-reader (never-stall ring)",
            Self::NeverStallPin => "never-stall+pin",
            Self::DefaultPin => "default+pin",
        }
    }
}

type Fail = Box<dyn std::error::Error>;

fn main() -> ExitCode {
    let args = Args::parse();
    let run = match &args.child {
        Some(name) => reader(name, Duration::from_millis(args.hold_ms)),
        None => parent(&args),
    };
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("never-stall-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The reader: latest-only, pins the newest frame, reads its first byte, holds it `hold`,
/// releases it, until the producer closes the ring.
fn reader(name: &str, hold: Duration) -> Result<(), Fail> {
    let ring = Ring::builder(name).open()?;
    let mut sub = ring.subscriber(DeliveryClass::LatestOnly)?;
    println!("READY");
    std::io::stdout().flush()?;
    loop {
        match sub.recv_pinned_timeout(Duration::from_secs(30)) {
            Ok(pin) => {
                std::hint::black_box(pin.bytes().first().copied());
                std::thread::sleep(hold);
            }
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}

/// One configuration once: a fresh ring (and reader), a warm-up lap, then `frames` timed
/// publishes into `hist`.
fn run_once(args: &Args, setup: Setup, round: u32, hist: &mut Histogram<u64>) -> Result<(), Fail> {
    let name = format!("nsbench-{}-{round}-{}", std::process::id(), setup as u8);
    let mut builder = Ring::builder(&name)
        .slots(args.slots)
        .slot_size(FRAME as u32)
        .consumers(2)
        .pin_only(true);
    if setup != Setup::DefaultPin {
        builder = builder.never_stall(1);
    }
    let ring = builder.create()?;
    let mut publisher = ring.publisher()?;
    let mut child = None;
    if setup != Setup::NoReader {
        let mut c = Command::new(std::env::current_exe()?)
            .args(["--child", &name, "--hold-ms", &args.hold_ms.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(c.stdout.take().ok_or("no reader stdout")?).read_line(&mut line)?;
        if line.trim() != "READY" {
            let _ = c.kill();
            return Err(format!("the reader said {line:?}").into());
        }
        child = Some(c);
    }
    let wait = Duration::from_secs(10);
    let publish = |publisher: &mut Publisher, n: u64| -> Result<u64, Fail> {
        let start = Instant::now();
        let mut loan = publisher.loan(FRAME, wait)?;
        loan.bytes().fill(n as u8);
        loan.send()?;
        Ok(start.elapsed().as_nanos() as u64)
    };
    for n in 0..u64::from(args.slots) {
        publish(&mut publisher, n)?; // Warm-up: the first lap faults the pages in.
    }
    for n in 0..u64::from(args.frames) {
        let ns = publish(&mut publisher, n)?;
        hist.record(ns.max(1))?;
    }
    publisher.close();
    if let Some(mut c) = child {
        let status = c.wait()?;
        if !status.success() {
            return Err(format!("the reader failed: {status}").into());
        }
    }
    Ok(())
}

fn histogram() -> Result<Histogram<u64>, Fail> {
    Ok(Histogram::new_with_bounds(1, 60_000_000_000, 3)?)
}

/// An empty Markdown table with `header`.
fn markdown(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(presets::ASCII_MARKDOWN).set_header(header);
    t
}

/// p99 of `h` over p99 of `base`.
fn ratio(h: &Histogram<u64>, base: &Histogram<u64>) -> f64 {
    h.value_at_quantile(0.99) as f64 / base.value_at_quantile(0.99).max(1) as f64
}

fn parent(args: &Args) -> Result<(), Fail> {
    let mut total: Vec<Histogram<u64>> = Setup::ALL
        .iter()
        .map(|_| histogram())
        .collect::<Result<_, _>>()?;
    let mut rounds = markdown(&[
        "round",
        "no-reader p99",
        "never-stall+pin p99 (x)",
        "default+pin p99 (x)",
    ]);
    for round in 0..args.rounds {
        let mut this: Vec<Histogram<u64>> = Setup::ALL
            .iter()
            .map(|_| histogram())
            .collect::<Result<_, _>>()?;
        for (i, setup) in Setup::ALL.into_iter().enumerate() {
            run_once(args, setup, round, &mut this[i])?;
            total[i].add(&this[i])?;
        }
        let p99 = |i: usize| human_ns(this[i].value_at_quantile(0.99));
        rounds.add_row([
            (round + 1).to_string(),
            p99(0),
            format!("{} ({:.2}x)", p99(1), ratio(&this[1], &this[0])),
            format!("{} ({:.2}x)", p99(2), ratio(&this[2], &this[0])),
        ]);
    }
    let mut summary = markdown(&["setup", "frames", "p50", "p99", "max", "p99 x no-reader"]);
    for (i, setup) in Setup::ALL.into_iter().enumerate() {
        let h = &total[i];
        summary.add_row([
            setup.name().to_owned(),
            h.len().to_string(),
            human_ns(h.value_at_quantile(0.5)),
            human_ns(h.value_at_quantile(0.99)),
            human_ns(h.max()),
            format!("{:.2}", ratio(h, &total[0])),
        ]);
    }
    println!(
        "never-stall-bench: 1080p frames ({FRAME} bytes) into {} slots, the reader holds each \
         pin {} ms; publish = loan + fill + send",
        args.slots, args.hold_ms
    );
    println!("{rounds}\n\nAll rounds:\n{summary}");
    let r = ratio(&total[1], &total[0]);
    println!(
        "target (never-stall+pin p99 within 1.5x of no-reader): {:.2}x, {}",
        r,
        if r <= 1.5 { "met" } else { "NOT met" }
    );
    Ok(())
}
