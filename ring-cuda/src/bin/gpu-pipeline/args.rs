//! The command line of `gpu-pipeline`, parsed by hand (a dozen `--name value` options do not
//! need an argument-parsing crate in ring-cuda's dependency graph).

/// Command-line options (see [`USAGE`]).
#[derive(Debug, Clone)]
pub struct Args {
    /// Use the emulated device (host memory) instead of GPU 0.
    pub emulated: bool,
    /// Frames to publish.
    pub frames: u64,
    /// Consumer processes.
    pub consumers: usize,
    /// Frame width (NV12: width * height * 3 / 2 bytes).
    pub width: u64,
    /// Frame height.
    pub height: u64,
    /// Frames per second (ignored with `full_speed`).
    pub fps: f64,
    /// Publish as fast as the ring allows.
    pub full_speed: bool,
    /// Ring slots.
    pub slots: u32,
    /// Leak run: this many cycles, then every process back to its baseline.
    pub leak_cycles: Option<u64>,
    /// `ipc` or `fd`.
    pub export: String,
    /// Also run host-synced and compare p99 latencies.
    pub compare_host_sync: bool,
    /// Bound on p99 (events) / p99 (host-synced).
    pub max_p99_ratio: f64,
    /// Bound on any consumer's p99, microseconds.
    pub max_p99_us: Option<f64>,
    /// Emulated: the producer's per-operation delay, microseconds.
    pub producer_delay_us: u64,
    /// Emulated: each consumer's per-operation delay, microseconds.
    pub consumer_delay_us: u64,
    /// Per-operation timeout in seconds.
    pub timeout: u64,
    /// Internal: `producer` or `consumer`.
    pub role: String,
    /// Internal: the segment name a consumer opens.
    pub name: Option<String>,
}

/// The help text.
pub const USAGE: &str = "\
gpu-pipeline: cross-process device-ring frame pipeline (CUDA GPU 0, or --emulated)

  --emulated                use the emulated device (host memory) instead of GPU 0
  --frames N                frames to publish (500)
  --consumers N             consumer processes (3)
  --width N --height N      NV12 frame size, width * height * 3 / 2 bytes (1920 x 1080)
  --fps F | --full-speed    publishing pace (30 fps)
  --slots N                 ring slots (4)
  --leak-cycles N           leak run: N cycles, then every process's device memory (after a
                            warm-up cycle) and live counts back to baseline
  --export ipc|fd           legacy IPC handles in the table, or VMM fds over a socket (ipc)
  --compare-host-sync       run again host-synced; report p99 (events) / p99 (host-synced)
  --max-p99-ratio F         with --compare-host-sync: fail above this ratio (1.0)
  --max-p99-us F            fail if a consumer's p99 exceeds F microseconds
  --producer-delay-us N     emulated: delay before each producer device operation (0)
  --consumer-delay-us N     emulated: delay before each consumer device operation (0)
  --timeout S               per-operation timeout in seconds (30)";

/// Why parsing stopped.
#[derive(Debug)]
pub enum Exit {
    /// `--help` was asked for.
    Help,
    /// A bad option or value, with what to say.
    Bad(String),
}

fn value<T: core::str::FromStr>(name: &str, v: Option<String>) -> Result<T, Exit> {
    let v = v.ok_or_else(|| Exit::Bad(format!("{name} needs a value")))?;
    v.parse()
        .map_err(|_| Exit::Bad(format!("{name}: invalid value {v:?}")))
}

impl Args {
    /// The defaults of every option.
    fn defaults() -> Self {
        Self {
            emulated: false,
            frames: 500,
            consumers: 3,
            width: 1920,
            height: 1080,
            fps: 30.0,
            full_speed: false,
            slots: 4,
            leak_cycles: None,
            export: "ipc".into(),
            compare_host_sync: false,
            max_p99_ratio: 1.0,
            max_p99_us: None,
            producer_delay_us: 0,
            consumer_delay_us: 0,
            timeout: 30,
            role: "producer".into(),
            name: None,
        }
    }

    /// Parses this process's arguments.
    ///
    /// # Errors
    /// [`Exit::Help`] for `--help`, [`Exit::Bad`] for anything not understood.
    pub fn from_env() -> Result<Self, Exit> {
        Self::parse(std::env::args().skip(1))
    }

    /// Parses `--name value`, `--name=value` and the flags.
    ///
    /// # Errors
    /// As [`Args::from_env`].
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, Exit> {
        let mut a = Self::defaults();
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (arg, None),
            };
            let mut next = || inline.clone().or_else(|| it.next());
            match name.as_str() {
                "--help" | "-h" => return Err(Exit::Help),
                "--emulated" => a.emulated = true,
                "--full-speed" => a.full_speed = true,
                "--compare-host-sync" => a.compare_host_sync = true,
                "--frames" => a.frames = value(&name, next())?,
                "--consumers" => a.consumers = value(&name, next())?,
                "--width" => a.width = value(&name, next())?,
                "--height" => a.height = value(&name, next())?,
                "--fps" => a.fps = value(&name, next())?,
                "--slots" => a.slots = value(&name, next())?,
                "--leak-cycles" => a.leak_cycles = Some(value(&name, next())?),
                "--export" => a.export = value(&name, next())?,
                "--max-p99-ratio" => a.max_p99_ratio = value(&name, next())?,
                "--max-p99-us" => a.max_p99_us = Some(value(&name, next())?),
                "--producer-delay-us" => a.producer_delay_us = value(&name, next())?,
                "--consumer-delay-us" => a.consumer_delay_us = value(&name, next())?,
                "--timeout" => a.timeout = value(&name, next())?,
                "--role" => a.role = value(&name, next())?,
                "--name" => a.name = Some(value(&name, next())?),
                other => return Err(Exit::Bad(format!("unknown option {other:?}"))),
            }
        }
        if a.export != "ipc" && a.export != "fd" {
            return Err(Exit::Bad(format!(
                "--export: {:?} is not ipc or fd",
                a.export
            )));
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::{Args, Exit};

    fn parse(s: &str) -> Result<Args, Exit> {
        Args::parse(s.split_whitespace().map(String::from))
    }

    #[test]
    fn options_flags_and_errors() {
        let a = parse("--emulated --frames 7 --fps=12.5 --export fd --max-p99-us 50").unwrap();
        assert!(a.emulated && !a.full_speed);
        assert_eq!((a.frames, a.fps, a.export.as_str()), (7, 12.5, "fd"));
        assert_eq!(a.max_p99_us, Some(50.0));
        assert_eq!(parse("").unwrap().frames, 500);
        assert!(matches!(parse("--frames"), Err(Exit::Bad(_))));
        assert!(matches!(parse("--frames x"), Err(Exit::Bad(_))));
        assert!(matches!(parse("--export tcp"), Err(Exit::Bad(_))));
        assert!(matches!(parse("--bogus"), Err(Exit::Bad(_))));
        assert!(matches!(parse("--help"), Err(Exit::Help)));
    }
}
