//! The parent side of the truncation scenarios (issue 14): a peer truncates a live segment to a
//! third of its size under a streaming producer and a gating and a latest-only consumer.

use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ring_core::Config;
use ring_os::{
    raw::{CreateOptions, ShmRing},
    Error,
};

use crate::support::{unique_name, Child, Unlink};

const SECS: fn(u64) -> Duration = Duration::from_secs;
const TRIALS: u32 = 10;

/// Where a trial's ring lives.
enum Place {
    /// `/dev/shm/shmring.<name>`.
    Named,
    /// A file in a temporary directory.
    File(PathBuf),
}

/// Named segments: 10 trials.
pub fn named() {
    let worst = (0..TRIALS)
        .map(|trial| run_trial(&Place::Named, trial))
        .max()
        .unwrap_or_default();
    println!(
        "  named: {TRIALS}/{TRIALS} trials, every process ended within {worst:.1?} of the cut"
    );
}

/// File-backed segments: 10 trials.
pub fn file() {
    let dir = std::env::temp_dir().join(format!("ring-os-trunc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let worst = (0..TRIALS)
        .map(|trial| run_trial(&Place::File(dir.join(format!("ring{trial}"))), trial))
        .max()
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    println!("  file: {TRIALS}/{TRIALS} trials, every process ended within {worst:.1?} of the cut");
}

/// One trial: every process ends with a clear truncation error within its timeout, and none
/// dies of a signal. Returns how long after the cut the last one ended.
fn run_trial(place: &Place, trial: u32) -> Duration {
    let config = Config::new(16, 256).with_consumers(4);
    let name = unique_name(&format!("trunc{trial}"));
    let _u = Unlink(name.clone());
    let (ring, mut env) = match place {
        Place::Named => (
            ShmRing::create_named(&name, &config, CreateOptions::new()).expect("create"),
            vec![("RING_NAME", name.as_str().to_owned())],
        ),
        Place::File(path) => (
            ShmRing::create_file(path, &config, CreateOptions::new()).expect("create"),
            vec![
                ("RING_NAME", name.as_str().to_owned()),
                ("RING_PATH", path.display().to_string()),
            ],
        ),
    };
    let spawn = |role: &str, class: Option<&str>, env: &mut Vec<(&str, String)>| {
        let mut env = env.clone();
        if let Some(class) = class {
            env.push(("RING_CLASS", class.to_owned()));
        }
        Child::spawn(role, &env)
    };
    let mut kids = vec![
        spawn("stream-consumer", Some("gating"), &mut env),
        spawn("stream-consumer", Some("latest"), &mut env),
    ];
    for k in &kids {
        k.expect_line("READY", SECS(20));
    }
    kids.push(spawn("stream-producer", None, &mut env));
    kids[2].expect_line("PRODUCING", SECS(20));
    for k in &kids[..2] {
        k.expect_line("GOT", SECS(20));
    }
    // Cut at a different point of the stream in each trial.
    std::thread::sleep(Duration::from_millis(u64::from(trial) * 3));
    let mut peer = spawn("truncate-third", None, &mut env);
    peer.expect_line("DONE", SECS(10));
    let cut = Instant::now();
    assert!(peer.wait(SECS(10)), "truncating peer failed");
    let mut ends = Vec::new();
    let mut last = Duration::ZERO;
    for (who, k) in ["gating", "latest", "producer"].iter().zip(kids.iter_mut()) {
        let status = k.wait_status(SECS(10));
        assert_eq!(status.signal(), None, "{who} died of a signal: {status:?}");
        let line = k.expect_line("END", SECS(10));
        assert!(
            status.success(),
            "{who} did not report the truncation clearly: {line}"
        );
        last = cut.elapsed();
        ends.push(format!("{who} {last:.1?}: {line}"));
    }
    // This process maps the ring too: it learns of the truncation on its next check.
    assert!(matches!(ring.check_len(), Err(Error::Truncated { .. })));
    assert!(ring.is_truncated());
    if trial == 0 {
        println!("  trial 0: {ends:#?}");
    }
    if let Place::File(path) = place {
        let _ = std::fs::remove_file(path);
    }
    last
}
