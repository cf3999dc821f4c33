//! Byte-stream transports: `unix` (stream socket, 4 MiB buffers), `tcp` (loopback,
//! `TCP_NODELAY`) and `pipe` (a pair of FIFOs per child, default pipe size).
//!
//! Senders write each message with one `write_all`; receivers read through a 64 KiB `BufReader`
//! (large reads bypass it and land directly in the destination buffer), which is how a careful
//! user of a stream reads fixed-size frames.

use super::{
    check, first_setup, message_buf, pattern, peer_entry, stamp, AtPublish, Link, Pending, Rx, Tx,
};
use crate::case::Transport;
use crate::ctl::Setup;
use crate::BenchError;
use rustix::fs::{Mode, OFlags};
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Socket buffer size for `unix` (the default `net.core.wmem_max` is 4 MiB on most kernels; the
/// kernel clamps larger requests).
const UNIX_BUFFER: usize = 4 << 20;

/// Reader buffer: small reads (64 B frames) are served from it, large ones bypass it.
const READ_BUFFER: usize = 64 << 10;

trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

/// The two halves of a duplex stream.
type Halves = (Box<dyn Write>, Box<dyn Read>);

struct StreamTx {
    transport: Transport,
    writers: Vec<Box<dyn Write>>,
    buf: Vec<u8>,
    seq: u64,
}

impl Tx for StreamTx {
    fn send(&mut self, len: usize, at_publish: AtPublish<'_>) -> Result<(), BenchError> {
        let transport = self.transport;
        let msg = self.buf.get_mut(..len).ok_or_else(|| BenchError::Usage {
            what: format!("{transport}: message of {len} bytes exceeds the case size"),
        })?;
        stamp(msg, self.seq);
        at_publish()?;
        for w in &mut self.writers {
            w.write_all(msg)
                .map_err(|e| BenchError::io(format!("{transport} write"), e))?;
        }
        self.seq += 1;
        Ok(())
    }
}

struct StreamRx {
    transport: Transport,
    /// Per peer: its reader and the sequence number the next message must carry.
    peers: Vec<(BufReader<Box<dyn Read>>, u64)>,
    buf: Vec<u8>,
}

impl Rx for StreamRx {
    fn recv(&mut self, peer: usize, len: usize, _deadline: Instant) -> Result<(), BenchError> {
        let transport = self.transport;
        let (r, seq) = peer_entry(&mut self.peers, transport, peer)?;
        let msg = message_buf(&mut self.buf, transport, len)?;
        // Bounded by the watchdog: a hung peer is killed, which ends this read with EOF.
        r.read_exact(msg)
            .map_err(|e| BenchError::io(format!("{transport} read"), e))?;
        check(msg, len, *seq, transport)?;
        *seq += 1;
        Ok(())
    }
}

/// The link over each peer's ends.
fn link(transport: Transport, max: usize, ends: Vec<Halves>) -> Link {
    let (writers, readers): (Vec<_>, Vec<_>) = ends.into_iter().unzip();
    Link {
        tx: Box::new(StreamTx {
            transport,
            writers,
            buf: pattern(max),
            seq: 0,
        }),
        rx: Box::new(StreamRx {
            transport,
            peers: readers
                .into_iter()
                .map(|r| (BufReader::with_capacity(READ_BUFFER, r), 0))
                .collect(),
            buf: pattern(max),
        }),
    }
}

fn split<S: Stream + 'static>(
    s: S,
    clone: impl FnOnce(&S) -> std::io::Result<S>,
) -> Result<Halves, BenchError> {
    let r = clone(&s).map_err(|e| BenchError::io("clone stream", e))?;
    Ok((Box::new(s), Box::new(r)))
}

fn unix_path(dir: &Path, child: usize) -> PathBuf {
    dir.join(format!("unix-{child}.sock"))
}

fn fifo_path(dir: &Path, dir_name: &str, child: usize) -> PathBuf {
    dir.join(format!("pipe-{dir_name}-{child}"))
}

fn tune_unix(s: &UnixStream) -> Result<(), BenchError> {
    rustix::net::sockopt::set_socket_send_buffer_size(s.as_fd(), UNIX_BUFFER)
        .map_err(|e| BenchError::io("SO_SNDBUF", e.into()))?;
    rustix::net::sockopt::set_socket_recv_buffer_size(s.as_fd(), UNIX_BUFFER)
        .map_err(|e| BenchError::io("SO_RCVBUF", e.into()))
}

/// Opens a FIFO without blocking (a writer fails with ENXIO when no reader is there yet), then
/// switches it back to blocking I/O.
fn open_fifo(path: &Path, write: bool) -> Result<File, BenchError> {
    let access = if write {
        OFlags::WRONLY
    } else {
        OFlags::RDONLY
    };
    let fd = rustix::fs::open(
        path,
        access | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| BenchError::io(format!("open FIFO {}", path.display()), e.into()))?;
    rustix::fs::fcntl_setfl(&fd, OFlags::empty())
        .map_err(|e| BenchError::io("clear O_NONBLOCK", e.into()))?;
    Ok(File::from(fd))
}

/// Accepts one connection, polling until `deadline`.
fn accept_by<T>(
    deadline: Instant,
    what: &str,
    mut accept: impl FnMut() -> std::io::Result<T>,
) -> Result<T, BenchError> {
    loop {
        match accept() {
            Ok(s) => return Ok(s),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return Err(BenchError::timeout(what));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(BenchError::io(what, e)),
        }
    }
}

/// A socket transport's parent side once its listeners are bound: by the deadline, accepts one
/// connection on each listener (`accept`) and makes its two halves (`ends`: blocking again, its
/// socket options set).
fn accepting<L: 'static, S: 'static, A: 'static>(
    transport: Transport,
    max: usize,
    listeners: Vec<L>,
    accept: fn(&L) -> std::io::Result<(S, A)>,
    ends: fn(S) -> Result<Halves, BenchError>,
) -> Pending {
    Box::new(move |deadline| {
        let what = format!("{transport} accept");
        let mut all = Vec::new();
        for l in &listeners {
            let (s, _) = accept_by(deadline, &what, || accept(l))?;
            all.push(ends(s)?);
        }
        Ok(link(transport, max, all))
    })
}

/// An accepted unix connection's two halves, blocking, with the 4 MiB buffers.
fn unix_ends(s: UnixStream) -> Result<Halves, BenchError> {
    s.set_nonblocking(false)
        .map_err(|e| BenchError::io("unix blocking", e))?;
    tune_unix(&s)?;
    split(s, UnixStream::try_clone)
}

/// An accepted tcp connection's two halves, blocking, with `TCP_NODELAY`.
fn tcp_ends(s: TcpStream) -> Result<Halves, BenchError> {
    s.set_nonblocking(false)
        .map_err(|e| BenchError::io("tcp blocking", e))?;
    s.set_nodelay(true)
        .map_err(|e| BenchError::io("TCP_NODELAY", e))?;
    split(s, TcpStream::try_clone)
}

/// Parent side, first half (see [`super::parent_begin`]).
pub fn parent_begin(setups: &mut [Setup]) -> Result<Pending, BenchError> {
    let first = first_setup(setups)?;
    let transport = first.transport;
    let max = first.case.max_bytes();
    match transport {
        Transport::Unix => {
            let mut listeners = Vec::new();
            for s in setups.iter() {
                let l = UnixListener::bind(unix_path(&s.dir, s.child))
                    .map_err(|e| BenchError::io("bind unix socket", e))?;
                l.set_nonblocking(true)
                    .map_err(|e| BenchError::io("unix listener nonblocking", e))?;
                listeners.push(l);
            }
            Ok(accepting(
                transport,
                max,
                listeners,
                UnixListener::accept,
                unix_ends,
            ))
        }
        Transport::Tcp => {
            let mut listeners = Vec::new();
            for s in setups.iter_mut() {
                let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                    .map_err(|e| BenchError::io("bind tcp", e))?;
                l.set_nonblocking(true)
                    .map_err(|e| BenchError::io("tcp listener nonblocking", e))?;
                s.port = l
                    .local_addr()
                    .map_err(|e| BenchError::io("tcp local address", e))?
                    .port();
                listeners.push(l);
            }
            Ok(accepting(
                transport,
                max,
                listeners,
                TcpListener::accept,
                tcp_ends,
            ))
        }
        Transport::Pipe => {
            let mut ups = Vec::new();
            let mut downs = Vec::new();
            for s in setups.iter() {
                let dir = rustix::fs::CWD;
                for name in ["down", "up"] {
                    rustix::fs::mkfifoat(
                        dir,
                        fifo_path(&s.dir, name, s.child),
                        Mode::RUSR | Mode::WUSR,
                    )
                    .map_err(|e| BenchError::io("mkfifo", e.into()))?;
                }
                // Our read end first, so that the child can open its write end without blocking.
                ups.push(open_fifo(&fifo_path(&s.dir, "up", s.child), false)?);
                downs.push(fifo_path(&s.dir, "down", s.child));
            }
            Ok(Box::new(move |_deadline| {
                let mut ends: Vec<Halves> = Vec::new();
                for (p, up) in downs.iter().zip(ups) {
                    ends.push((Box::new(open_fifo(p, true)?), Box::new(up)));
                }
                Ok(link(transport, max, ends))
            }))
        }
        other => Err(BenchError::Usage {
            what: format!("{other} is not a stream transport"),
        }),
    }
}

/// Child side (see [`super::child_setup`]).
pub fn child_setup(s: &Setup) -> Result<Link, BenchError> {
    let max = s.case.max_bytes();
    let (w, r) = match s.transport {
        Transport::Unix => {
            let st = UnixStream::connect(unix_path(&s.dir, s.child))
                .map_err(|e| BenchError::io("unix connect", e))?;
            tune_unix(&st)?;
            split(st, UnixStream::try_clone)?
        }
        Transport::Tcp => {
            let st = TcpStream::connect((Ipv4Addr::LOCALHOST, s.port))
                .map_err(|e| BenchError::io("tcp connect", e))?;
            st.set_nodelay(true)
                .map_err(|e| BenchError::io("TCP_NODELAY", e))?;
            split(st, TcpStream::try_clone)?
        }
        Transport::Pipe => {
            let down = open_fifo(&fifo_path(&s.dir, "down", s.child), false)?;
            let up = open_fifo(&fifo_path(&s.dir, "up", s.child), true)?;
            (
                Box::new(up) as Box<dyn Write>,
                Box::new(down) as Box<dyn Read>,
            )
        }
        other => {
            return Err(BenchError::Usage {
                what: format!("{other} is not a stream transport"),
            })
        }
    };
    Ok(link(s.transport, max, vec![(w, r)]))
}
