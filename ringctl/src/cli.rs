//! The command line: subcommands, options and their help text (clap derive).

use clap::{Args, Parser, Subcommand, ValueEnum};
use ring_core::DeliveryClass;

use crate::frame::FrameSize;

/// Inspect, exercise and use shared-memory slot rings.
///
/// Start with `ringctl demo`: a producer and three consumer processes stream checksummed frames
/// through a ring in /dev/shm and report throughput, latency and integrity.
#[derive(Debug, Parser)]
#[command(
    name = "ringctl",
    version,
    propagate_version = true,
    after_help = "Examples:
  ringctl demo                                   3 s of 1080p BGRA frames, 1 producer, 3 consumers
  ringctl demo --kill-consumer-every 50 --json   crash recovery; one JSON object on the last line
  ringctl pub cam --frame-size 4096 < in & ringctl sub cam > out
  ringctl pub cam --memfd --frame-size 4096 < in & ringctl sub cam --memfd > out
                                                 the same through a sealed memfd (nothing in /dev/shm)
  ringctl inspect cam --watch                    live view of a ring
  ringctl grab frames --socket /tmp/frames.sock --request frame --count 10
                                                 timed captures from examples/frame-server
  ringctl list; ringctl clean --dry-run          rings in /dev/shm; which are stale
  ringctl bridge out cam --key robot/cam & ringctl bridge in robot/cam cam2 --slot-size 1920x1080
                                                 a ring onto Zenoh and back (tcp/127.0.0.1:7447)

Exit status: 0 success, 1 an integrity check failed (demo), 2 error, 130 interrupted."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Stream checksummed frames from a producer process to consumer processes and report.
    ///
    /// Creates a ring in /dev/shm (no root, no GPU, no setup), spawns one producer and one
    /// consumer process per delivery class, streams frames for a few seconds and prints, per
    /// consumer: frames, fps, latency p50/p99 (from the producer's publish until the consumer
    /// holds the frame, pinned or copied out; CLOCK_MONOTONIC, which is system-wide), torn,
    /// skipped and lost messages; then recovery (reclaimed pins) and allocator leaks. The exit
    /// status is 1 when any integrity check fails: a torn frame, a lost message, skips that do
    /// not add up (delivered + skipped must equal what was published in a consumer's span), a
    /// dead consumer not reclaimed, a leaked allocation.
    ///
    /// Integrity: every frame carries a 64-bit checksum in its slot metadata, which consumers
    /// recompute. Frames up to 1 MiB are checksummed whole; larger ones on a sample of 65536
    /// words plus the 4 header words and the last word, with a sample offset that rotates per
    /// frame (so a 1080p frame costs ~0.5 MB of reads, and every word is covered over a run).
    Demo(DemoArgs),
    /// Show a ring: geometry, producer, each consumer, allocator stats and leaks (read-only).
    Inspect(InspectArgs),
    /// List the rings in /dev/shm with their owners and whether those still run.
    ///
    /// Also the Python queue's spill segments (`<queue>.s<seq>-<16 hex>`, a message too large
    /// for its ring): each says which queue it belongs to and whether that queue's ring is still
    /// there and live. `--json`: an array of {"name", "bytes", "kind" ("ring" or "spill"),
    /// "status", "owners" (role, pid, pid_namespace, alive), "note", "queue" and
    /// "queue_status" ("missing", "dead", "live"; null for a ring)}.
    List(ListArgs),
    /// Remove rings in /dev/shm whose owners (creator, producer, consumers) are all dead.
    ///
    /// Also the Python queue's spill segments whose queue's ring is gone or has no live owner
    /// and that no process holds; never a spill of a live queue.
    Clean(CleanArgs),
    /// Publish stdin into a ring, one message per FRAME_SIZE bytes (creates the ring if missing).
    ///
    /// Waits for --wait-consumers consumers to be registered with a final start point before the
    /// first message (so a gating `ringctl sub` misses nothing),
    /// closes the ring at end of input, waits until gating consumers have read everything, and
    /// removes a ring it created (unless --keep).
    Pub(PubArgs),
    /// Write a ring's messages to stdout until its producer closes it.
    Sub(SubArgs),
    /// Capture frames from a capture endpoint by reading its ring directly, and time each one.
    ///
    /// Speaks the protocol of examples/frame-server: for each line on stdin (or --count times)
    /// sends --request ("latest": the frame last rendered, which whoever drives the server must
    /// have rendered after this command printed "ready"; "frame": the server renders a new one,
    /// inside the timed capture) on the endpoint's Unix socket, reads the JSON descriptor, pins that frame
    /// in ring NAME (latest-only, zero-copy), checks its sequence number and the number stamped
    /// in its first 8 bytes, then sums every byte (64-bit little-endian words, modulo 2^64).
    /// Prints {"ready":true} once registered, then one JSON line per capture: {"seq", "sum",
    /// "descriptor_ns" (request to descriptor parsed), "usable_ns" (to stamp checked),
    /// "summed_ns" (to every byte read)}. A descriptor with a "sum" (the frame server's
    /// checksum) is checked against it; a mismatch, like a wrong stamp, fails the command.
    Grab(GrabArgs),
    /// Bridge a ring onto Zenoh (`out`) or a Zenoh key into a ring (`in`); see docs/BRIDGE.md.
    #[cfg(feature = "bridge")]
    #[command(subcommand)]
    Bridge(crate::bridge::BridgeCommand),
    /// Internal: the demo's producer process.
    #[command(name = "__demo-producer", hide = true)]
    DemoProducer(ProducerArgs),
    /// Internal: a demo consumer process.
    #[command(name = "__demo-consumer", hide = true)]
    DemoConsumer(ConsumerArgs),
}

/// A consumer's delivery class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Class {
    /// Lossless: holds the producer back until it has read each message.
    Gating,
    /// Only the newest message (frame grabbers); reports how many it skipped.
    #[value(alias = "latest-only")]
    Latest,
    /// Follows the sequence without holding the producer back by its cursor (a pin still holds
    /// its slot); reports exactly what it missed.
    #[value(alias = "skip-on-lag")]
    Skip,
}

impl Class {
    /// The ring-core class.
    pub fn delivery(self) -> DeliveryClass {
        match self {
            Self::Gating => DeliveryClass::Gating,
            Self::Latest => DeliveryClass::LatestOnly,
            Self::Skip => DeliveryClass::SkipOnLag,
        }
    }

    /// The class's name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gating => "gating",
            Self::Latest => "latest",
            Self::Skip => "skip",
        }
    }
}

/// How a demo consumer reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReadMode {
    /// Pin the slot and read it in place (zero-copy).
    Pin,
    /// Copy the message out with the seqlock (holds nothing back in an ordinary ring).
    Copy,
    /// Latest-only consumers copy, the others pin.
    Mixed,
}

impl ReadMode {
    /// The mode a consumer of `class` uses.
    pub fn for_class(self, class: Class) -> Self {
        match (self, class) {
            (Self::Mixed, Class::Latest) => Self::Copy,
            (Self::Mixed, _) => Self::Pin,
            (m, _) => m,
        }
    }

    /// The mode's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pin => "pin",
            Self::Copy => "copy",
            Self::Mixed => "mixed",
        }
    }
}

/// Options of `ringctl demo`.
#[derive(Clone, Debug, Args)]
pub struct DemoArgs {
    /// Frame size: WxH (BGRA, 4 bytes a pixel) or a byte count (a multiple of 8, at least 32).
    #[arg(long, default_value = "1920x1080", value_parser = FrameSize::parse)]
    pub frame_size: FrameSize,
    /// Frames per second the producer aims at; 0 publishes as fast as the ring allows.
    #[arg(long, default_value_t = 60.0)]
    pub fps: f64,
    /// Seconds to stream.
    #[arg(long, default_value_t = 3.0, conflicts_with = "messages")]
    pub duration: f64,
    /// Stream exactly this many frames instead of for --duration.
    #[arg(long)]
    pub messages: Option<u64>,
    /// Delivery classes of the consumers, comma-separated (gating, latest, skip).
    #[arg(long, value_delimiter = ',', default_value = "gating,latest,skip")]
    pub classes: Vec<Class>,
    /// Number of consumer processes; the --classes list is repeated to this length.
    #[arg(long)]
    pub consumers: Option<usize>,
    /// Slots in the ring (each holds one frame).
    #[arg(long, default_value_t = 4)]
    pub slots: u32,
    /// How consumers read: pin (zero-copy), copy (seqlock copy-out), or mixed.
    #[arg(long, value_enum, default_value_t = ReadMode::Mixed)]
    pub read: ReadMode,
    /// SIGKILL a consumer every N published messages and start a new one of the same class;
    /// the producer must detect the death, reclaim its pins and cursor, and continue.
    #[arg(long, value_name = "N")]
    pub kill_consumer_every: Option<u64>,
    /// Pinning consumers hold each message this many microseconds before releasing it (as if
    /// processing it in place); with --kill-consumer-every, kills then land on held pins.
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub hold_us: u64,
    /// Make the ring never-stall: the producer writes each frame into a slot nobody pins, so
    /// the pins of latest and skip consumers never make it wait (gating ones still do).
    /// PINS: the most frames those consumers pin at once, all together (default: one per
    /// latest or skip consumer); the ring needs --slots >= PINS + 2.
    #[arg(long, value_name = "PINS", num_args = 0..=1)]
    pub never_stall: Option<Option<u32>>,
    /// Segment name in /dev/shm (default: demo-PID, this process's id); removed at the end.
    #[arg(long)]
    pub name: Option<String>,
    /// Print one JSON object (the last line) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Test hook: make the producer misbehave, to show that the checks catch it.
    #[arg(long, value_enum, hide = true)]
    pub inject_fault: Option<Fault>,
}

/// A deliberate producer fault (tests of the integrity checks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Fault {
    /// Store a wrong checksum in every 7th frame.
    Checksum,
    /// Never free every 5th frame's descriptor.
    Leak,
}

/// Options of `ringctl inspect`.
#[derive(Clone, Debug, Args)]
pub struct InspectArgs {
    /// The ring's name (the file /dev/shm/shmring.NAME).
    pub name: String,
    /// Print JSON (one object per line with --watch).
    #[arg(long)]
    pub json: bool,
    /// Refresh every --interval seconds until interrupted (or --count refreshes).
    #[arg(long)]
    pub watch: bool,
    /// Seconds between refreshes with --watch.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Stop after this many refreshes with --watch.
    #[arg(long)]
    pub count: Option<u64>,
}

/// Options of `ringctl list`.
#[derive(Clone, Debug, Args)]
pub struct ListArgs {
    /// Print JSON (one array).
    #[arg(long)]
    pub json: bool,
}

/// Options of `ringctl clean`.
#[derive(Clone, Debug, Args)]
pub struct CleanArgs {
    /// Only say what would be removed.
    #[arg(long)]
    pub dry_run: bool,
    /// Only consider these rings and spills (default: all of ours in /dev/shm).
    pub names: Vec<String>,
}

/// Options of `ringctl pub`.
#[derive(Clone, Debug, Args)]
pub struct PubArgs {
    /// The ring's name (created in /dev/shm if missing).
    pub name: String,
    /// Bytes per message (WxH means a BGRA frame); a new ring's slots get this capacity.
    #[arg(long, value_parser = FrameSize::parse)]
    pub frame_size: FrameSize,
    /// Slots of a newly created ring.
    #[arg(long, default_value_t = 8)]
    pub slots: u32,
    /// Consumer entries of a newly created ring.
    #[arg(long, default_value_t = 8)]
    pub max_consumers: u32,
    /// Consumers to wait for before publishing the first message.
    #[arg(long, default_value_t = 1)]
    pub wait_consumers: u32,
    /// Seconds to wait for consumers (before the first message and to drain at the end).
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Keep a ring this command created when it ends (default: remove it).
    #[arg(long, conflicts_with = "memfd")]
    pub keep: bool,
    /// Keep the ring in a sealed memfd (nothing in /dev/shm; no peer can truncate it) and serve
    /// it to `ringctl sub --memfd NAME` over a Unix socket named after the ring.
    #[arg(long)]
    pub memfd: bool,
    /// With --memfd: put the socket file in this directory (for containers that share a
    /// directory) instead of the abstract namespace.
    #[arg(long, value_name = "DIR", requires = "memfd")]
    pub socket_dir: Option<std::path::PathBuf>,
    /// Create the ring never-stall: the producer writes each message into a slot nobody pins,
    /// so the pins of latest and skip readers never make it wait (gating ones and groups still
    /// do). PINS: the most messages those readers pin at once, all together (default 1); the
    /// ring needs --slots >= PINS + 2. Refused for a ring that exists and is not never-stall.
    #[arg(long, value_name = "PINS", num_args = 0..=1)]
    pub never_stall: Option<Option<u32>>,
    /// Create the ring marked for asymmetric fences: no hardware fence per message on either
    /// side, a `membarrier(2)` system call per park instead (Linux 4.16+; elsewhere the mark
    /// changes nothing). For rings whose readers poll; `inspect` shows the mark. Ignored for a
    /// ring that exists (its creator chose).
    #[arg(long)]
    pub asymmetric_fences: bool,
    /// Create group G before the first message (`ringctl sub --group G` workers share the
    /// stream: each message to exactly one of them; the group gates like one gating reader).
    #[arg(long, value_name = "G")]
    pub group: Option<String>,
}

/// Options of `ringctl sub`.
#[derive(Clone, Debug, Args)]
pub struct SubArgs {
    /// The ring's name.
    pub name: String,
    /// Delivery class (gating is lossless: the publisher waits for this reader).
    #[arg(long, value_enum, default_value_t = Class::Gating)]
    pub class: Class,
    /// Seconds to wait for the ring to appear, and for a producer while it has none.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Receive the ring from `ringctl pub --memfd NAME` over its Unix socket.
    #[arg(long)]
    pub memfd: bool,
    /// With --memfd: the directory holding the publisher's socket file.
    #[arg(long, value_name = "DIR", requires = "memfd")]
    pub socket_dir: Option<std::path::PathBuf>,
    /// Start up to N messages back, as far as the ring still holds them (gating and skip; a
    /// latest reader always starts at the newest message present).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub history: u64,
    /// Read as a member of group G (created by `ringctl pub --group G`; waits up to --timeout
    /// for it): each message goes to exactly one member. --class does not apply.
    #[arg(long, value_name = "G", conflicts_with = "history")]
    pub group: Option<String>,
}

/// Options of `ringctl grab`.
#[derive(Clone, Debug, Args)]
pub struct GrabArgs {
    /// The ring's name.
    pub name: String,
    /// The capture endpoint's Unix socket.
    #[arg(long, value_name = "PATH")]
    pub socket: std::path::PathBuf,
    /// Capture this many frames back to back instead of one per line of stdin.
    #[arg(long)]
    pub count: Option<u64>,
    /// The request that asks for a frame.
    #[arg(long, value_enum, default_value_t = GrabRequest::Latest)]
    pub request: GrabRequest,
    /// Seconds to wait for the ring to appear and for each answer.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
}

/// What `ringctl grab` asks the capture endpoint for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GrabRequest {
    /// The frame last rendered (`latest`).
    Latest,
    /// A new frame, rendered on request (`frame`).
    Frame,
}

/// Arguments of the demo's producer process.
#[derive(Clone, Debug, Args)]
pub struct ProducerArgs {
    /// Segment name.
    pub name: String,
    /// Frame size.
    #[arg(long, value_parser = FrameSize::parse)]
    pub frame_size: FrameSize,
    /// Target fps (0: unpaced).
    #[arg(long)]
    pub fps: f64,
    /// Seconds to stream.
    #[arg(long)]
    pub duration: f64,
    /// Frames to stream (overrides duration).
    #[arg(long)]
    pub messages: Option<u64>,
    /// Deliberate fault.
    #[arg(long, value_enum)]
    pub inject_fault: Option<Fault>,
}

/// Arguments of a demo consumer process.
#[derive(Clone, Debug, Args)]
pub struct ConsumerArgs {
    /// Segment name.
    pub name: String,
    /// Delivery class.
    #[arg(long, value_enum)]
    pub class: Class,
    /// Read mode (pin or copy).
    #[arg(long, value_enum)]
    pub read: ReadMode,
    /// Seconds after which the consumer gives up.
    #[arg(long)]
    pub deadline: f64,
    /// Microseconds to hold each pinned message.
    #[arg(long, default_value_t = 0)]
    pub hold_us: u64,
}
