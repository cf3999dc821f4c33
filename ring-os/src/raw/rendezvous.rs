//! memfd rendezvous: a named ring that no peer can truncate and no crash can leave behind.
//!
//! The producer keeps the ring in a sealed memfd ([`ShmRing::create_memfd`]) and serves its
//! descriptor over a Unix socket named after the ring: `shmring.<name>` in the abstract
//! namespace by default (Linux; it vanishes with the process), or a socket file
//! `<dir>/shmring.<name>.sock` in a directory the user chooses, for containers that share a
//! directory but not a network namespace. A subscriber connects, checks that the server runs as
//! the same user (`SO_PEERCRED`), receives the descriptor ([`fdpass`]), checks
//! its seals ([`Segment::from_fd`](crate::raw::Segment::from_fd)) and maps it. The server likewise
//! serves only peers of its own user. Nothing is ever written to `/dev/shm`: the kernel frees
//! the memfd with its last descriptor or mapping.
//!
//! # Examples
//!
//! ```
//! use core::time::Duration;
//! use ring_core::{Config, DeliveryClass};
//! use ring_os::raw::rendezvous::{Rendezvous, SocketPlace};
//! use ring_os::raw::{ConsumerExt as _, CreateOptions, SegmentName, ShmRing};
//! let name = SegmentName::new(&format!("doc-rendezvous-{}", std::process::id()))?;
//! let place = Rendezvous::new(&name, SocketPlace::Abstract);
//! let (ring, _server) = place.create(&Config::new(8, 64), CreateOptions::new())?;
//! let mut producer = ShmRing::producer(&ring)?;
//! let theirs = place.connect(Duration::from_secs(5))?;
//! let mut consumer = ShmRing::consumer(&theirs, DeliveryClass::Gating)?;
//! producer.try_publish(b"hi").unwrap();
//! let mut buf = [0u8; 64];
//! assert_eq!(consumer.recv(&mut buf, Duration::from_secs(1)).unwrap().len, 2);
//! # Ok::<(), ring_os::Error>(())
//! ```

use core::time::Duration;
use std::os::fd::{AsFd as _, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ring_core::Config;
use rustix::event::{poll, PollFd, PollFlags};

use crate::segment::fdpass;
use crate::Error;

use crate::segment::CreateOptions;

use crate::raw::Mapping;

use crate::segment::SegmentKind;

use crate::segment::SegmentName;

use crate::raw::ShmRing;

/// The longest socket address: `sun_path` holds 108 bytes, a path needs a NUL and an abstract
/// name a leading NUL.
const MAX_ADDR: usize = 107;

/// The payload that comes with the descriptor: a tag, then the segment length (little-endian).
const TAG: &[u8; 8] = b"shmring1";

/// Where the rendezvous socket lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SocketPlace {
    /// The abstract namespace (`\0shmring.<name>`, Linux): no file, gone with the producer;
    /// reachable within one network namespace.
    Abstract,
    /// A socket file `shmring.<name>.sock` in this directory (mode 0600).
    Dir(PathBuf),
}

/// A ring's rendezvous address: its name and where its socket lives.
#[derive(Clone, Debug)]
pub struct Rendezvous {
    /// The ring's name.
    name: SegmentName,
    /// Where the socket lives.
    place: SocketPlace,
}

/// Serves a memfd ring's descriptor to subscribers from a background thread until dropped
/// (which also removes a socket file).
#[derive(Debug)]
pub struct Server {
    /// Asks the thread to stop.
    stop: Arc<AtomicBool>,
    /// Descriptors handed out.
    served: Arc<AtomicU64>,
    /// The accept loop.
    thread: Option<std::thread::JoinHandle<()>>,
    /// The socket file to remove, for [`SocketPlace::Dir`].
    path: Option<PathBuf>,
}

impl Rendezvous {
    /// The rendezvous for ring `name` at `place`.
    #[must_use]
    pub fn new(name: &SegmentName, place: SocketPlace) -> Self {
        Self {
            name: name.clone(),
            place,
        }
    }

    /// The socket file, for [`SocketPlace::Dir`].
    #[must_use]
    pub fn socket_path(&self) -> Option<PathBuf> {
        match &self.place {
            SocketPlace::Abstract => None,
            SocketPlace::Dir(dir) => Some(dir.join(format!("{}.sock", self.name.file_name()))),
        }
    }

    /// Refuses a name whose socket address would not fit in `sun_path`.
    fn check_fits(&self) -> Result<(), Error> {
        let len = self
            .socket_path()
            .map_or(self.name.file_name().len(), |p| p.as_os_str().len());
        if len <= MAX_ADDR {
            return Ok(());
        }
        Err(Error::InvalidName {
            name: self.name.as_str().to_owned(),
            reason: "too long for a rendezvous socket address (108 bytes with the shmring. prefix \
                     and the socket directory); use a shorter name or directory",
        })
    }

    /// What to call the socket in messages.
    fn what(&self) -> String {
        match self.socket_path() {
            Some(p) => format!("rendezvous socket {}", p.display()),
            None => format!("abstract rendezvous socket @{}", self.name.file_name()),
        }
    }

    /// Creates a memfd ring for `config` and serves it here.
    ///
    /// # Errors
    ///
    /// As [`ShmRing::create_memfd`] and [`serve`](Self::serve).
    pub fn create(
        &self,
        config: &Config,
        opts: CreateOptions,
    ) -> Result<(Arc<Mapping>, Server), Error> {
        let ring = ShmRing::create_memfd(config, opts)?;
        let server = self.serve(&ring)?;
        Ok((ring, server))
    }

    /// Serves `ring` (a memfd ring) to every subscriber of this user that connects.
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyExists`] when a live server has the name; [`Error::NotRegularFile`] for a
    /// ring that is not a memfd (its peers could truncate it); [`Error::Io`].
    pub fn serve(&self, ring: &Arc<Mapping>) -> Result<Server, Error> {
        if *ring.segment().kind() != SegmentKind::Memfd {
            return Err(Error::NotRegularFile {
                what: "a named or file ring (only a sealed memfd ring can be served)".into(),
            });
        }
        let fd = ring
            .segment()
            .fd()
            .try_clone_to_owned()
            .map_err(|e| Error::io("dup", e))?;
        let mut note = [0u8; 16];
        note[..8].copy_from_slice(TAG);
        note[8..].copy_from_slice(&(ring.segment().len() as u64).to_le_bytes());
        self.check_fits()?;
        let listener = self.bind()?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("fcntl(O_NONBLOCK)", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicU64::new(0));
        let (stop2, served2) = (Arc::clone(&stop), Arc::clone(&served));
        let thread = std::thread::Builder::new()
            .name("ring-rendezvous".into())
            .spawn(move || accept_loop(&listener, &fd, &note, &stop2, &served2))
            .map_err(|e| Error::io("spawning the rendezvous thread", e))?;
        Ok(Server {
            stop,
            served,
            thread: Some(thread),
            path: self.socket_path(),
        })
    }

    /// Binds the socket; a socket file left by a crashed server is replaced.
    fn bind(&self) -> Result<UnixListener, Error> {
        let in_use = || Error::AlreadyExists { what: self.what() };
        let Some(path) = self.socket_path() else {
            return bind_abstract(&self.name).map_err(|e| match e.kind() {
                std::io::ErrorKind::AddrInUse => in_use(),
                _ => Error::io("bind", e),
            });
        };
        match UnixListener::bind(&path) {
            Ok(l) => return finish_file_bind(l, &path),
            Err(e) if e.kind() != std::io::ErrorKind::AddrInUse => {
                return Err(Error::io("bind", e));
            }
            Err(_) => {}
        }
        // Someone's socket file: a live server answers; a dead one's is refused and replaced.
        match UnixStream::connect(&path) {
            Ok(_) => Err(in_use()),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                use std::os::unix::fs::FileTypeExt as _;
                let is_socket =
                    std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket());
                if !is_socket {
                    return Err(in_use());
                }
                let _ = std::fs::remove_file(&path);
                let l = UnixListener::bind(&path).map_err(|e| Error::io("bind", e))?;
                finish_file_bind(l, &path)
            }
            Err(e) => Err(Error::io("connect", e)),
        }
    }

    /// Connects to the ring's server and maps the ring, retrying for at most `timeout` while
    /// nobody serves the name yet.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] when nobody served it within `timeout`; [`Error::ForeignPeer`] when
    /// the server runs as another user; [`Error::MissingSeals`], [`Error::SizeMismatch`],
    /// [`Error::Attach`] for a bad descriptor; [`Error::Disconnected`], [`Error::TimedOut`].
    pub fn connect(&self, timeout: Duration) -> Result<Arc<Mapping>, Error> {
        self.check_fits()?;
        let deadline = crate::wait::deadline_after(timeout);
        let stream = loop {
            match self.connect_once() {
                Ok(s) => break s,
                Err(e) if is_absent(&e) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) if is_absent(&e) => return Err(Error::NotFound { what: self.what() }),
                Err(e) => return Err(Error::io("connect", e)),
            }
        };
        check_peer(&stream, &self.what())?;
        let mut note = [0u8; 16];
        let left = deadline.saturating_duration_since(Instant::now());
        let (fd, n) = fdpass::recv_fd(&stream, &mut note, left.max(Duration::from_millis(100)))?;
        if n != note.len() || note[..8] != TAG[..] {
            return Err(Error::NoFdReceived);
        }
        ShmRing::from_fd(fd)
    }

    /// One connection attempt.
    fn connect_once(&self) -> std::io::Result<UnixStream> {
        match self.socket_path() {
            Some(path) => UnixStream::connect(path),
            None => connect_abstract(&self.name),
        }
    }
}

/// Whether a connect error means "nobody serves this name (yet)".
fn is_absent(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
    )
}

/// Makes a socket file private (the peer check still guards the window before this).
fn finish_file_bind(l: UnixListener, path: &std::path::Path) -> Result<UnixListener, Error> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io("chmod", e))?;
    Ok(l)
}

#[cfg(target_os = "linux")]
fn bind_abstract(name: &SegmentName) -> std::io::Result<UnixListener> {
    use std::os::linux::net::SocketAddrExt as _;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.file_name())?;
    UnixListener::bind_addr(&addr)
}

#[cfg(target_os = "linux")]
fn connect_abstract(name: &SegmentName) -> std::io::Result<UnixStream> {
    use std::os::linux::net::SocketAddrExt as _;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.file_name())?;
    UnixStream::connect_addr(&addr)
}

/// Only Linux has the abstract namespace: use [`SocketPlace::Dir`] elsewhere.
#[cfg(not(target_os = "linux"))]
fn no_abstract() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "abstract Unix sockets need Linux; use a socket directory",
    )
}

#[cfg(not(target_os = "linux"))]
fn bind_abstract(_name: &SegmentName) -> std::io::Result<UnixListener> {
    Err(no_abstract())
}

#[cfg(not(target_os = "linux"))]
fn connect_abstract(_name: &SegmentName) -> std::io::Result<UnixStream> {
    Err(no_abstract())
}

/// The effective user id of the peer of a connected Unix socket (`SO_PEERCRED`).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn peer_uid(stream: &UnixStream) -> Result<u32, Error> {
    let cred =
        rustix::net::sockopt::socket_peercred(stream).map_err(|e| Error::io("SO_PEERCRED", e))?;
    Ok(cred.uid.as_raw())
}

/// The effective user id of the peer of a connected Unix socket (`getpeereid`, which macOS and
/// the BSDs answer from the credentials the peer had when it connected: `LOCAL_PEERCRED`).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn peer_uid(stream: &UnixStream) -> Result<u32, Error> {
    use std::os::fd::AsRawFd as _;
    let (mut uid, mut gid) = (0, 0);
    // SAFETY: the descriptor is open for the call (borrowed from `stream`), and both pointers are
    // to live locals the call writes.
    let rc = unsafe { libc::getpeereid(stream.as_raw_fd(), &raw mut uid, &raw mut gid) };
    if rc == 0 {
        Ok(uid)
    } else {
        Err(Error::io("getpeereid", std::io::Error::last_os_error()))
    }
}

/// Refuses a peer that runs as another user.
fn check_peer(stream: &UnixStream, what: &str) -> Result<(), Error> {
    let uid = peer_uid(stream)?;
    if uid == rustix::process::geteuid().as_raw() {
        Ok(())
    } else {
        Err(Error::ForeignPeer {
            what: what.to_owned(),
            uid,
        })
    }
}

/// Accepts subscribers until `stop`, sending each of this user the descriptor.
fn accept_loop(
    listener: &UnixListener,
    fd: &OwnedFd,
    note: &[u8],
    stop: &AtomicBool,
    served: &AtomicU64,
) {
    let tick = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 20_000_000,
    };
    // Relaxed: a stop request needs no other data.
    while !stop.load(Ordering::Relaxed) {
        let mut fds = [PollFd::new(listener, PollFlags::IN)];
        if poll(&mut fds, Some(&tick)).unwrap_or(0) == 0 {
            continue;
        }
        let Ok((stream, _)) = listener.accept() else {
            // Out of descriptors, say: do not spin on a listener that stays readable.
            std::thread::sleep(core::time::Duration::from_millis(5));
            continue;
        };
        // A peer of another user gets nothing; a subscriber that went away costs nothing.
        if check_peer(&stream, "").is_ok() && fdpass::send_fd(&stream, fd.as_fd(), note).is_ok() {
            // Relaxed: a statistic.
            served.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Server {
    /// How many subscribers received the descriptor.
    #[must_use]
    pub fn served(&self) -> u64 {
        // Relaxed: a statistic.
        self.served.load(Ordering::Relaxed)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Relaxed: the join below is the synchronisation.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(path) = &self.path {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(tag: &str) -> SegmentName {
        SegmentName::new(&format!("rdv-{tag}-{}", std::process::id())).unwrap()
    }

    #[test]
    fn a_live_name_is_taken_and_a_dead_socket_file_is_replaced() {
        let n = name("dup");
        let r = Rendezvous::new(&n, SocketPlace::Abstract);
        let (_ring, server) = r.create(&Config::new(4, 64), CreateOptions::new()).unwrap();
        assert!(matches!(
            r.create(&Config::new(4, 64), CreateOptions::new()),
            Err(Error::AlreadyExists { .. })
        ));
        drop(server);
        // The listening socket closed with the server; but a child another test forks meanwhile
        // holds a copy of it until it execs (as of a lock, see `crate::settle`), and a connect
        // then reaches that copy: asked again until nobody serves the name.
        crate::settle::settles("the dropped server's name is still served", || {
            matches!(
                r.connect(Duration::from_millis(30)),
                Err(Error::NotFound { .. })
            )
            .then_some(())
        });
        let dir = std::env::temp_dir().join(format!("rdv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let r = Rendezvous::new(&n, SocketPlace::Dir(dir.clone()));
        let path = r.socket_path().unwrap();
        // A crashed server's socket file: bound, never listened on again.
        drop(UnixListener::bind(&path).unwrap());
        let (ring, server) = r.create(&Config::new(4, 64), CreateOptions::new()).unwrap();
        let theirs = r.connect(Duration::from_secs(5)).unwrap();
        assert_eq!(theirs.segment().len(), ring.segment().len());
        // The server counts a descriptor once `sendmsg` returned, which may be after we got it.
        let t = Instant::now();
        while server.served() == 0 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(server.served(), 1);
        drop(server);
        assert!(!path.exists(), "the server removes its socket file");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_name_too_long_for_a_socket_is_refused() {
        let n = SegmentName::new(&"x".repeat(150)).unwrap();
        let r = Rendezvous::new(&n, SocketPlace::Abstract);
        assert!(matches!(
            r.create(&Config::new(4, 64), CreateOptions::new()),
            Err(Error::InvalidName { .. })
        ));
        assert!(matches!(
            r.connect(Duration::from_millis(10)),
            Err(Error::InvalidName { .. })
        ));
    }

    #[test]
    fn only_memfd_rings_are_served() {
        let n = name("named");
        let ring = ShmRing::create_named(&n, &Config::new(4, 64), CreateOptions::new()).unwrap();
        let _ = ring.segment().unlink();
        assert!(matches!(
            Rendezvous::new(&n, SocketPlace::Abstract).serve(&ring),
            Err(Error::NotRegularFile { .. })
        ));
    }
}
