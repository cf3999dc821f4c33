//! The child processes: how the parent starts, watches and stops them, and what they run.
//!
//! A child is this same executable started again with `--child N --ctl PATH`. It connects to the
//! parent's control socket, then obeys `Setup`/`Run`/`Teardown`/`Quit`. It dies with its parent
//! (`PR_SET_PDEATHSIG`), and the parent's watchdog kills it if a run overstays its deadline, so a
//! hung transport never hangs the harness.

use crate::case::{Case, Metric, THROUGHPUT_BATCH};
use crate::ctl::{Ctl, Msg};
use crate::link::{self, Link};
use crate::BenchError;
use std::collections::BTreeMap;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a child waits for its next command before it gives up on the parent.
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

use crate::wait::RUN_TIMEOUT;

/// A running child and its control connection.
pub struct ChildProc {
    /// The process (killed and reaped on drop).
    pub proc: Child,
    /// Its control connection.
    pub ctl: Ctl,
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        let _ = self.ctl.send(&Msg::Quit);
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.proc.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.proc.kill();
        let _ = self.proc.wait();
    }
}

/// Kills the children when a run overstays its deadline.
#[derive(Clone, Default)]
pub struct Watchdog {
    state: Arc<Mutex<WatchState>>,
}

#[derive(Default)]
struct WatchState {
    deadline: Option<Instant>,
    pids: Vec<u32>,
    fired: bool,
    stop: bool,
}

impl Watchdog {
    /// Starts the watchdog thread.
    pub fn start() -> Self {
        let w = Self::default();
        let state = Arc::clone(&w.state);
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(50));
            let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
            if s.stop {
                return;
            }
            if s.deadline.is_some_and(|d| Instant::now() > d) {
                for &pid in &s.pids {
                    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                    }
                }
                s.deadline = None;
                s.fired = true;
            }
        });
        w
    }

    fn with<T>(&self, f: impl FnOnce(&mut WatchState) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Arms the watchdog: the children die if [`Watchdog::disarm`] is not called within `d`.
    pub fn arm(&self, d: Duration) {
        self.with(|s| s.deadline = Some(Instant::now() + d));
    }

    /// Disarms it; returns whether it fired since the last call.
    pub fn disarm(&self) -> bool {
        self.with(|s| {
            s.deadline = None;
            core::mem::take(&mut s.fired)
        })
    }

    /// Sets the processes it guards.
    pub fn guard(&self, pids: Vec<u32>) {
        self.with(|s| s.pids = pids);
    }

    /// Stops the thread.
    pub fn stop(&self) {
        self.with(|s| s.stop = true);
    }
}

/// Starts `n` children of this executable that connect to `ctl_path`, telling them the CPUs the
/// harness uses (see [`crate::wait::place`]).
pub fn spawn(n: usize, ctl_path: &Path, cpus: &[usize]) -> Result<Vec<ChildProc>, BenchError> {
    let _ = std::fs::remove_file(ctl_path);
    let listener =
        UnixListener::bind(ctl_path).map_err(|e| BenchError::io("bind control socket", e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| BenchError::io("control listener", e))?;
    let exe = std::env::current_exe().map_err(|e| BenchError::io("current_exe", e))?;
    let mut procs: Vec<Option<Child>> = Vec::new();
    for i in 0..n {
        let mut cmd = Command::new(&exe);
        cmd.arg("--child")
            .arg(i.to_string())
            .arg("--ctl")
            .arg(ctl_path);
        if !cpus.is_empty() {
            let list: Vec<String> = cpus.iter().map(usize::to_string).collect();
            cmd.arg("--cpus").arg(list.join(","));
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| BenchError::io("spawn child", e))?;
        procs.push(Some(child));
    }
    let mut slots: Vec<Option<Ctl>> = (0..n).map(|_| None).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut connected = 0;
    while connected < n {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)
                    .map_err(|e| BenchError::io("control blocking", e))?;
                let mut ctl = Ctl::new(s, Duration::from_secs(20))?;
                match ctl.recv()? {
                    Msg::Hello(i) if i < n && slots.get(i).is_some_and(Option::is_none) => {
                        if let Some(slot) = slots.get_mut(i) {
                            *slot = Some(ctl);
                        }
                        connected += 1;
                    }
                    other => {
                        return Err(BenchError::Peer {
                            what: format!("unexpected hello {other:?}"),
                        })
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return Err(BenchError::timeout("the children to connect"));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(BenchError::io("accept control", e)),
        }
    }
    let _ = std::fs::remove_file(ctl_path);
    let mut out = Vec::new();
    for (p, c) in procs.iter_mut().zip(slots) {
        if let (Some(proc), Some(ctl)) = (p.take(), c) {
            ctl.set_timeout(RUN_TIMEOUT + Duration::from_secs(5))?;
            out.push(ChildProc { proc, ctl });
        }
    }
    Ok(out)
}

/// A child's whole life: connect, obey, exit. `cpus` are the CPUs the harness uses (see
/// [`crate::wait::place`]); `peers` builds the peer crates' transports (see [`link::Peers`]).
pub fn main(
    index: usize,
    ctl_path: &Path,
    cpus: &[usize],
    peers: Option<&link::Peers>,
) -> Result<(), BenchError> {
    // Die with the parent, whatever it was doing.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    let s = UnixStream::connect(ctl_path).map_err(|e| BenchError::io("connect control", e))?;
    let mut ctl = Ctl::new(s, IDLE_TIMEOUT)?;
    ctl.send(&Msg::Hello(index))?;
    let mut links: BTreeMap<crate::case::Transport, (Case, Link)> = BTreeMap::new();
    loop {
        match ctl.recv()? {
            Msg::Setup(s) => match link::child_setup(&s, peers) {
                Ok(l) => {
                    links.insert(s.transport, (s.case.clone(), l));
                    ctl.send(&Msg::Ok)?;
                }
                Err(e) => ctl.send(&Msg::Err(format!(
                    "child {index} setup {}: {e}",
                    s.transport
                )))?,
            },
            Msg::Run { transport, iters } => {
                crate::wait::place(transport, cpus, index + 1);
                let result = match links.get_mut(&transport) {
                    Some((case, l)) => run(case, l, iters, &mut ctl),
                    None => Err(BenchError::Usage {
                        what: format!("{transport} is not set up"),
                    }),
                };
                match result {
                    Ok(()) => ctl.send(&Msg::Ok)?,
                    Err(e) => {
                        links.remove(&transport);
                        ctl.send(&Msg::Err(format!("child {index} {transport}: {e}")))?;
                    }
                }
            }
            Msg::Teardown => {
                links.clear();
                ctl.send(&Msg::Ok)?;
            }
            Msg::Quit => return Ok(()),
            other => {
                return Err(BenchError::Peer {
                    what: format!("unexpected command {other:?}"),
                })
            }
        }
    }
}

/// The child's half of `iters` iterations of `case`.
fn run(case: &Case, link: &mut Link, iters: usize, ctl: &mut Ctl) -> Result<(), BenchError> {
    let deadline = Instant::now() + RUN_TIMEOUT;
    crate::wait::set_yield_every(case.yield_every());
    let (down, up) = (case.down_bytes(), case.up_bytes());
    let Link { tx, rx } = link;
    let mut nothing = || Ok(());
    for _ in 0..iters {
        match case.metric {
            Metric::RoundTrip | Metric::Fanout => {
                rx.recv(0, down, deadline)?;
                tx.send(up, &mut nothing)?;
            }
            Metric::Acquire => {
                // Wait until the parent has finished timing the previous message: a woken parent
                // is often placed on this core, and would otherwise wait for this preparation.
                match ctl.recv()? {
                    Msg::Next => {}
                    other => {
                        return Err(BenchError::Peer {
                            what: format!("expected Next, got {other:?}"),
                        })
                    }
                }
                // Prepare the message (untimed: it stands for rendering the frame in place), say
                // so, and publish it the moment the request arrives.
                tx.send(up, &mut || {
                    ctl.send(&Msg::Ready)?;
                    rx.recv(0, down, deadline)
                })?;
            }
            Metric::Throughput => {
                rx.recv(0, down, deadline)?;
                for _ in 0..THROUGHPUT_BATCH {
                    tx.send(up, &mut nothing)?;
                }
                // A transport that groups messages publishes its last, partial group here.
                tx.flush()?;
            }
        }
    }
    Ok(())
}
