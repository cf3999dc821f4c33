//! The command line of `gpu-pipeline` (clap).

use clap::{Parser, ValueEnum};

/// How the producer exports its slot buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Export {
    /// Legacy IPC handles in the device table.
    Ipc,
    /// VMM file descriptors over a Unix socket.
    Fd,
}

impl Export {
    /// The option's spelling, to pass it on to the consumer processes.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ipc => "ipc",
            Self::Fd => "fd",
        }
    }
}

/// gpu-pipeline: cross-process device-ring frame pipeline (CUDA GPU 0, or --emulated).
#[derive(Debug, Clone, Parser)]
#[command(name = "gpu-pipeline", version, about)]
pub struct Args {
    /// Use the emulated device (host memory) instead of GPU 0.
    #[arg(long)]
    pub emulated: bool,
    /// Frames to publish.
    #[arg(long, default_value_t = 500)]
    pub frames: u64,
    /// Consumer processes.
    #[arg(long, default_value_t = 3)]
    pub consumers: usize,
    /// NV12 frame width (a frame is width * height * 3 / 2 bytes).
    #[arg(long, default_value_t = 1920)]
    pub width: u64,
    /// NV12 frame height.
    #[arg(long, default_value_t = 1080)]
    pub height: u64,
    /// Frames per second (ignored with --full-speed).
    #[arg(long, default_value_t = 30.0)]
    pub fps: f64,
    /// Publish as fast as the ring allows.
    #[arg(long)]
    pub full_speed: bool,
    /// Ring slots.
    #[arg(long, default_value_t = 4)]
    pub slots: u32,
    /// Leak run: this many cycles, then every process's device memory (after a warm-up cycle)
    /// and live counts back to baseline.
    #[arg(long)]
    pub leak_cycles: Option<u64>,
    /// How the slot buffers are exported.
    #[arg(long, value_enum, default_value_t = Export::Ipc)]
    pub export: Export,
    /// Run again host-synced; report p99 (events) / p99 (host-synced).
    #[arg(long)]
    pub compare_host_sync: bool,
    /// With --compare-host-sync: fail above this ratio.
    #[arg(long, default_value_t = 1.0)]
    pub max_p99_ratio: f64,
    /// Fail if a consumer's p99 exceeds this many microseconds.
    #[arg(long)]
    pub max_p99_us: Option<f64>,
    /// Emulated: delay before each producer device operation, microseconds.
    #[arg(long, default_value_t = 0)]
    pub producer_delay_us: u64,
    /// Emulated: delay before each consumer device operation, microseconds.
    #[arg(long, default_value_t = 0)]
    pub consumer_delay_us: u64,
    /// Per-operation timeout in seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
    /// Internal: `producer` or `consumer`.
    #[arg(long, default_value = "producer", hide = true)]
    pub role: String,
    /// Internal: the segment name a consumer opens.
    #[arg(long, hide = true)]
    pub name: Option<String>,
}
