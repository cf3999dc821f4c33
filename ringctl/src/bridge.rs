//! `ringctl bridge out RING --key KEY` and `ringctl bridge in KEY RING`: a ring onto Zenoh and
//! back (ring-zenoh; `docs/BRIDGE.md`).
//!
//! Each prints `ready ...` on stdout once it is in place (out: its ring subscriber is
//! registered; in: its Zenoh subscriber is declared) and one JSON object with its counts as
//! the last line when it ends (the stream ended, or SIGINT/SIGTERM).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use ring_os::prelude::Ring;
use ring_zenoh::{BridgeIn, BridgeOut, End, Mode, ZenohOptions};

use crate::cli::Class;
use crate::error::{CliError, Result};
use crate::frame::FrameSize;
use crate::pubsub::seconds;

/// The endpoint both sides use when none is given: loopback only.
const DEFAULT_ENDPOINT: &str = "tcp/127.0.0.1:7447";

/// `ringctl bridge` subcommands.
#[derive(Debug, Subcommand)]
pub enum BridgeCommand {
    /// Publish a local ring's messages to a Zenoh key (a subscriber of the ring).
    ///
    /// Reads only while a Zenoh subscriber matches the key: a gating bridge then holds the
    /// ring's producer back, a latest/skip bridge lets the ring count what it skips. Ends when
    /// the ring's producer closes it (forwarding the close). Without --listen/--connect it
    /// listens on tcp/127.0.0.1:7447.
    Out(OutArgs),
    /// Produce a Zenoh key's samples into a local ring (the ring's producer).
    ///
    /// Opens the ring, or creates it when --slot-size is given and it does not exist (a ring it
    /// creates is kept when it ends, so a restarted bridge finds it). Takes the ring over from
    /// a dead producer (a killed bridge). Ends when the far ring is closed, after its gating
    /// subscribers read everything. Without --listen/--connect it connects to
    /// tcp/127.0.0.1:7447.
    In(InArgs),
}

/// Zenoh session options shared by both directions.
#[derive(Clone, Debug, Args)]
pub struct ZenohArgs {
    /// Listen on this Zenoh endpoint (repeatable), e.g. tcp/0.0.0.0:7447 to accept other hosts.
    #[arg(long, value_name = "ENDPOINT")]
    pub listen: Vec<String>,
    /// Connect to this Zenoh endpoint (repeatable), e.g. tcp/192.0.2.10:7447; retried until
    /// it answers.
    #[arg(long, value_name = "ENDPOINT")]
    pub connect: Vec<String>,
    /// Zenoh session mode.
    #[arg(long, value_enum, default_value_t = ModeArg::Peer)]
    pub mode: ModeArg,
    /// A Zenoh JSON5 configuration file; --mode/--listen/--connect override its values.
    #[arg(long, value_name = "FILE")]
    pub zenoh_config: Option<PathBuf>,
    /// Find peers by UDP multicast scouting (off by default: it reaches the whole LAN).
    #[arg(long)]
    pub multicast_scouting: bool,
}

/// Zenoh's session modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// Talk to peers directly.
    Peer,
    /// Talk through a router.
    Client,
    /// Route for others.
    Router,
}

/// Options of `ringctl bridge out`.
#[derive(Clone, Debug, Args)]
pub struct OutArgs {
    /// The local ring to read.
    pub ring: String,
    /// The Zenoh key expression to publish to.
    #[arg(long)]
    pub key: String,
    /// Delivery class of the bridge's ring subscriber (gating: reliable, blocking congestion
    /// control; latest: dropping congestion control, latest value; skip: blocking, gaps
    /// counted on both sides).
    #[arg(long, value_enum, default_value_t = Class::Gating)]
    pub class: Class,
    /// Seconds to wait for the ring to appear.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Zenoh session.
    #[command(flatten)]
    pub zenoh: ZenohArgs,
}

/// Options of `ringctl bridge in`.
#[derive(Clone, Debug, Args)]
pub struct InArgs {
    /// The Zenoh key expression to subscribe to.
    pub key: String,
    /// The local ring to produce into.
    pub ring: String,
    /// Create the ring with slots of this size (WxH: a BGRA frame, or bytes) if it is missing.
    #[arg(long, value_parser = FrameSize::parse)]
    pub slot_size: Option<FrameSize>,
    /// Slots of a ring this command creates.
    #[arg(long, default_value_t = 8)]
    pub slots: u32,
    /// Subscriber entries of a ring this command creates.
    #[arg(long, default_value_t = 8)]
    pub max_consumers: u32,
    /// Ring subscribers to wait for before taking samples from Zenoh (so a gating subscriber
    /// misses nothing).
    #[arg(long, default_value_t = 0)]
    pub wait_consumers: u32,
    /// Seconds to wait for the ring to appear, for --wait-consumers, and at the end for gating
    /// subscribers to drain.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Zenoh session.
    #[command(flatten)]
    pub zenoh: ZenohArgs,
}

/// Runs `ringctl bridge ...`.
pub fn run(command: &BridgeCommand) -> Result<bool> {
    match command {
        BridgeCommand::Out(args) => out(args),
        BridgeCommand::In(args) => inbound(args),
    }
}

/// The session options, with the side's loopback default when no endpoint is given.
fn zenoh_options(args: &ZenohArgs, default_listen: bool) -> ZenohOptions {
    let mut opts = ZenohOptions {
        mode: match args.mode {
            ModeArg::Peer => Mode::Peer,
            ModeArg::Client => Mode::Client,
            ModeArg::Router => Mode::Router,
        },
        listen: args.listen.clone(),
        connect: args.connect.clone(),
        config_file: args.zenoh_config.clone(),
        multicast_scouting: args.multicast_scouting,
    };
    if opts.listen.is_empty() && opts.connect.is_empty() {
        if default_listen {
            opts.listen.push(DEFAULT_ENDPOINT.to_owned());
        } else {
            opts.connect.push(DEFAULT_ENDPOINT.to_owned());
        }
    }
    opts
}

fn bridge_err(e: ring_zenoh::BridgeError) -> CliError {
    match e {
        ring_zenoh::BridgeError::Ring(e) => CliError::Os(e),
        e => CliError::Usage(format!("bridge: {e}")),
    }
}

/// A flag set by SIGINT and SIGTERM.
fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| CliError::io("installing a signal handler", e))?;
    }
    Ok(stop)
}

fn end_name(end: End) -> String {
    match end {
        End::Closed => "closed".to_owned(),
        End::Aborted(code) => format!("aborted({code})"),
        End::Stopped => "stopped".to_owned(),
    }
}

fn out(args: &OutArgs) -> Result<bool> {
    let timeout = seconds(args.timeout, "--timeout")?;
    let stop = stop_flag()?;
    let ring = Ring::builder(&args.ring).open_timeout(timeout).open()?;
    let session = zenoh_options(&args.zenoh, true)
        .open()
        .map_err(bridge_err)?;
    let mut bridge =
        BridgeOut::new(&session, &ring, &args.key, args.class.delivery()).map_err(bridge_err)?;
    println!(
        "ready out {} -> {} class {} epoch {:016x}",
        args.ring,
        args.key,
        args.class.as_str(),
        bridge.epoch()
    );
    let end = bridge.run(&stop);
    let s = bridge.stats();
    let end = end.map_err(bridge_err)?;
    println!(
        "{}",
        serde_json::json!({
            "bridge": "out",
            "ring": args.ring,
            "key": args.key,
            "class": args.class.as_str(),
            "end": end_name(end),
            "forwarded": s.forwarded,
            "missed": s.missed,
            "bytes": s.bytes,
            "paused": s.paused,
            "batches": s.batches,
        })
    );
    Ok(true)
}

fn open_far_ring(args: &InArgs, timeout: Duration) -> Result<Ring> {
    match args.slot_size {
        None => Ok(Ring::builder(&args.ring).open_timeout(timeout).open()?),
        Some(size) => {
            let bytes = u32::try_from(size.bytes)
                .ok()
                .filter(|&b| b > 0)
                .ok_or_else(|| CliError::Usage("--slot-size is out of range".to_owned()))?;
            match Ring::builder(&args.ring).open_timeout(timeout).open() {
                Ok(ring) if ring.slot_size() < size.bytes => Err(CliError::Usage(format!(
                    "ring {:?} exists with {}-byte slots, less than --slot-size {}",
                    args.ring,
                    ring.slot_size(),
                    size.bytes
                ))),
                Ok(ring) => Ok(ring),
                Err(ring_os::Error::NotFound { .. }) => Ok(Ring::builder(&args.ring)
                    .slots(args.slots)
                    .slot_size(bytes)
                    .consumers(args.max_consumers)
                    .keep_name(true)
                    .open_or_create()?),
                Err(e) => Err(e.into()),
            }
        }
    }
}

fn inbound(args: &InArgs) -> Result<bool> {
    let timeout = seconds(args.timeout, "--timeout")?;
    let stop = stop_flag()?;
    let ring = open_far_ring(args, timeout)?;
    // Takes the ring over from a dead producer (a killed bridge).
    let mut publisher = ring.publisher()?;
    if !publisher.wait_for_subscribers(args.wait_consumers as usize, timeout) {
        return Err(CliError::Timeout(format!(
            "{} of {} subscribers of ring {:?} registered within {:.0} s",
            publisher.subscribers(),
            args.wait_consumers,
            args.ring,
            timeout.as_secs_f64()
        )));
    }
    let session = zenoh_options(&args.zenoh, false)
        .open()
        .map_err(bridge_err)?;
    let mut bridge = BridgeIn::with_publisher(&session, publisher, ring.slot_size(), &args.key)
        .map_err(bridge_err)?;
    println!("ready in {} -> {}", args.key, args.ring);
    let end = bridge.run(&stop).map_err(bridge_err)?;
    let drained = end != End::Closed || bridge.publisher().wait_drained(timeout);
    let s = bridge.stats();
    println!(
        "{}",
        serde_json::json!({
            "bridge": "in",
            "ring": args.ring,
            "key": args.key,
            "end": end_name(end),
            "received": s.received,
            "written": s.written,
            "missed": s.missed,
            "missed_upstream": s.missed_upstream,
            "rejected": s.rejected,
            "last_rejection": s.last_rejection.map(|e| e.to_string()),
            "out_of_order": s.out_of_order,
            "too_large": s.too_large,
            "resumes": s.resumes,
            "batches": s.batches,
            "drained": drained,
        })
    );
    if !drained {
        return Err(CliError::Timeout(format!(
            "gating subscribers of ring {:?} did not read everything within {:.0} s",
            args.ring,
            timeout.as_secs_f64()
        )));
    }
    Ok(true)
}
