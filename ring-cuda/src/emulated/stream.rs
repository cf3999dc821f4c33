//! An emulated stream: a worker thread that executes queued device work in order, so that
//! copies really are asynchronous to the host and a missing event wait shows up as stale data.

use core::time::Duration;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Instant;

use super::shm::Region;
use crate::error::{Error, Result};

/// Event counter indices in an event region.
pub(crate) const RECORDED: usize = 0;
pub(crate) const COMPLETED: usize = 1;

/// One unit of queued work.
pub(crate) enum Op {
    Write {
        dst: Arc<Region>,
        offset: usize,
        data: Vec<u8>,
    },
    Fill {
        dst: Arc<Region>,
        offset: usize,
        len: usize,
        byte: u8,
    },
    Copy {
        dst: Arc<Region>,
        dst_offset: usize,
        src: Arc<Region>,
        src_offset: usize,
        len: usize,
    },
    Read {
        src: Arc<Region>,
        offset: usize,
        len: usize,
        reply: Sender<Result<Vec<u8>>>,
    },
    Record {
        event: Arc<Region>,
        target: u64,
    },
    Wait {
        event: Arc<Region>,
        target: u64,
    },
    Marker {
        reply: Sender<Result<()>>,
    },
    /// A sticky fault (see `EmulatedDevice::inject_fault`).
    Fault,
}

/// The device-wide sticky fault, shared by every stream of a device.
pub(crate) type Poison = Arc<OnceLock<&'static str>>;

/// Handle to a worker thread.
pub(crate) struct Stream {
    tx: Option<Sender<Op>>,
    worker: Option<JoinHandle<()>>,
    /// Set when the stream is destroyed: an event wait that would never end (CUDA waits for
    /// ever) gives up, so the worker can be joined.
    stop: Arc<AtomicBool>,
}

/// Timing knobs of the emulation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    /// Sleep before each data operation (emulates a slow device).
    pub op_delay: Duration,
    /// Watchdog on each device-side event wait (`None`: wait for ever, as CUDA does).
    pub watchdog: Option<Duration>,
}

/// Waits until `counter >= target`, spinning briefly and then sleeping; false when `bound`
/// (if any) ran out or `give_up` says so.
pub(crate) fn wait_counter(
    event: &Region,
    target: u64,
    bound: Option<Duration>,
    give_up: impl Fn() -> bool,
) -> bool {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        // Acquire: synchronises with the Release fetch_max in `Op::Record` (any process), so the
        // recorder's data writes before the record are visible after this returns true.
        if event
            .counter(COMPLETED)
            .load(core::sync::atomic::Ordering::Acquire)
            >= target
        {
            return true;
        }
        if bound.is_some_and(|b| start.elapsed() >= b) || give_up() {
            return false;
        }
        spins += 1;
        if spins < 200 {
            core::hint::spin_loop();
        } else if spins < 2000 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

fn run(rx: &Receiver<Op>, timing: Timing, poison: &Poison, stop: &AtomicBool) {
    while let Ok(op) = rx.recv() {
        // Relaxed: a request to stop, publishing nothing; the join in `Drop` orders the
        // worker's end with the destroyer. A destroyed stream's remaining work is dropped.
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let fault = poison.get().copied();
        if matches!(op, Op::Write { .. } | Op::Fill { .. } | Op::Copy { .. })
            && !timing.op_delay.is_zero()
        {
            std::thread::sleep(timing.op_delay);
        }
        match op {
            Op::Marker { reply } => {
                let _ = reply.send(fault.map_or(Ok(()), |f| Err(Error::StreamFault(f))));
            }
            Op::Read { reply, .. } if fault.is_some() => {
                let _ = reply.send(Err(Error::StreamFault(fault.unwrap_or("faulted"))));
            }
            _ if fault.is_some() => {}
            Op::Write { dst, offset, data } => {
                // SAFETY: the device checked offset + data.len() <= dst.len(); `dst` keeps the
                // mapping alive; the ring protocol (pins and events) guarantees no other
                // party reads or writes these bytes while this queued write runs.
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        data.as_ptr(),
                        dst.ptr().add(offset),
                        data.len(),
                    );
                }
            }
            Op::Fill {
                dst,
                offset,
                len,
                byte,
            } => {
                // SAFETY: bounds checked by the device; exclusivity as for `Write`.
                unsafe { core::ptr::write_bytes(dst.ptr().add(offset), byte, len) };
            }
            Op::Copy {
                dst,
                dst_offset,
                src,
                src_offset,
                len,
            } => {
                // SAFETY: bounds checked by the device; `copy` (memmove) tolerates overlap when
                // source and destination are the same buffer; exclusivity as for `Write`.
                unsafe {
                    core::ptr::copy(src.ptr().add(src_offset), dst.ptr().add(dst_offset), len);
                }
            }
            Op::Read {
                src,
                offset,
                len,
                reply,
            } => {
                let mut out = vec![0u8; len];
                // SAFETY: bounds checked by the device; exclusivity as for `Write`.
                unsafe {
                    core::ptr::copy_nonoverlapping(src.ptr().add(offset), out.as_mut_ptr(), len)
                };
                // Released before the reply, so a host that frees the buffer right after the
                // read finds no reference left (see `EmulatedDevice::free`).
                drop(src);
                let _ = reply.send(Ok(out));
            }
            Op::Record { event, target } => {
                // Release: publishes every write this stream executed before the record to
                // whoever observes the count with Acquire (`wait_counter`, `query`).
                event
                    .counter(COMPLETED)
                    .fetch_max(target, core::sync::atomic::Ordering::Release);
            }
            Op::Wait { event, target } => {
                // Relaxed: as above.
                let give_up = || stop.load(Ordering::Relaxed) || poison.get().is_some();
                if !wait_counter(&event, target, timing.watchdog, give_up) {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let _ = poison.set("a device-side event wait ran past the watchdog");
                }
            }
            Op::Fault => {
                let _ =
                    poison.set("a fault was injected on a stream (sticky, as an illegal address)");
            }
        }
    }
}

impl Stream {
    /// Starts a worker thread.
    pub(crate) fn spawn(timing: Timing, poison: Poison) -> Result<Self> {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let worker = std::thread::Builder::new()
            .name("ring-cuda-emu-stream".into())
            .spawn(move || run(&rx, timing, &poison, &flag))?;
        Ok(Self {
            tx: Some(tx),
            worker: Some(worker),
            stop,
        })
    }

    /// Enqueues work.
    pub(crate) fn push(&self, op: Op) -> Result<()> {
        self.tx
            .as_ref()
            .and_then(|tx| tx.send(op).ok())
            .ok_or(Error::StreamFault("the stream's worker thread has stopped"))
    }

    /// Waits until everything queued so far has run, at most `timeout`.
    pub(crate) fn sync(&self, timeout: Duration) -> Result<()> {
        let (reply, rx) = mpsc::channel();
        self.push(Op::Marker { reply })?;
        reply_within(&rx, timeout, "stream work")
    }

    /// Queues a read and waits for its bytes, at most `timeout`.
    pub(crate) fn read(
        &self,
        src: Arc<Region>,
        offset: usize,
        len: usize,
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        let (reply, rx) = mpsc::channel();
        self.push(Op::Read {
            src,
            offset,
            len,
            reply,
        })?;
        reply_within(&rx, timeout, "a device-to-host read")
    }
}

/// The worker's reply on `rx`, at most `timeout` away (`what` names the wait in the error).
fn reply_within<T>(
    rx: &mpsc::Receiver<Result<T>>,
    timeout: Duration,
    what: &'static str,
) -> Result<T> {
    match rx.recv_timeout(timeout) {
        Ok(r) => r,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(Error::Timeout {
            what,
            after: timeout,
        }),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            Err(Error::StreamFault("the stream's worker thread has stopped"))
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // The stop flag ends the worker at its next operation, or in a wait that would never
        // end (CUDA waits for ever), so the join is bounded; queued work is dropped (callers
        // that want it done sync first, as `destroy_stream` does).
        // Relaxed: see the load in `run`.
        self.stop.store(true, Ordering::Relaxed);
        drop(self.tx.take());
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}
