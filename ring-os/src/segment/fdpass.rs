//! Passing a segment's file descriptor to another process over a Unix socket (`SCM_RIGHTS`).
//!
//! One message carries one descriptor plus a few bytes chosen by the caller (for example the
//! segment's length, which the receiver must still check against the file, or a ring name).
//!
//! # Examples
//!
//! ```
//! use core::time::Duration;
//! use std::os::unix::net::UnixStream;
//! use ring_os::raw::{fdpass, CreateOptions, Segment, SizeCheck};
//! let (a, b) = UnixStream::pair().unwrap();
//! let seg = Segment::create_memfd(4096, CreateOptions::new())?;
//! fdpass::send_fd(&a, seg.fd(), b"ring")?;
//! let mut note = [0u8; 8];
//! let (fd, n) = fdpass::recv_fd(&b, &mut note, Duration::from_secs(1))?;
//! assert_eq!(&note[..n], b"ring");
//! let received = Segment::from_fd(fd, SizeCheck::Exactly(4096))?;
//! assert_eq!(received.len(), 4096);
//! # Ok::<(), ring_os::Error>(())
//! ```

use core::mem::MaybeUninit;
use core::time::Duration;
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::io::Errno;
use rustix::net::{
    recvmsg, sendmsg, sockopt, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};

use crate::Error;

/// Sends `fd` and `payload` (at least one byte is sent: a stream socket cannot carry ancillary
/// data alone, so an empty payload becomes one zero byte).
///
/// # Errors
///
/// [`Error::Disconnected`] when the peer is gone, [`Error::Io`] otherwise.
pub fn send_fd(socket: impl AsFd, fd: BorrowedFd<'_>, payload: &[u8]) -> Result<(), Error> {
    let fds = [fd];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(Error::io(
            "sendmsg",
            std::io::Error::other("ancillary buffer too small"),
        ));
    }
    let data: &[u8] = if payload.is_empty() { &[0] } else { payload };
    let flags = no_sigpipe(socket.as_fd())?;
    match sendmsg(socket, &[IoSlice::new(data)], &mut control, flags) {
        Ok(n) if n == data.len() => Ok(()),
        Ok(_) => Err(Error::io("sendmsg", std::io::Error::other("short send"))),
        Err(Errno::PIPE | Errno::CONNRESET) => Err(Error::Disconnected),
        Err(e) => Err(Error::io("sendmsg", e)),
    }
}

/// Receives one descriptor and up to `buf.len()` payload bytes, waiting at most `timeout`.
/// Returns the descriptor (close-on-exec) and the payload length. Extra descriptors in the same
/// message are closed. Sets `SO_RCVTIMEO` on `socket` (it stays set).
///
/// # Errors
///
/// [`Error::TimedOut`], [`Error::Disconnected`], [`Error::NoFdReceived`], [`Error::Io`].
pub fn recv_fd(
    socket: impl AsFd,
    buf: &mut [u8],
    timeout: Duration,
) -> Result<(OwnedFd, usize), Error> {
    let socket = socket.as_fd();
    // A zero timeout would mean "forever" to SO_RCVTIMEO: use the smallest real one instead.
    let timeout = timeout.max(Duration::from_micros(1));
    sockopt::set_socket_timeout(socket, sockopt::Timeout::Recv, Some(timeout))
        .map_err(|e| Error::io("setsockopt(SO_RCVTIMEO)", e))?;
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut one = [0_u8; 1];
    let data: &mut [u8] = if buf.is_empty() { &mut one } else { buf };
    let msg = match recvmsg(socket, &mut [IoSliceMut::new(data)], &mut control, CLOEXEC) {
        Ok(msg) => msg,
        Err(Errno::AGAIN | Errno::INTR) => return Err(Error::TimedOut),
        Err(e) => return Err(Error::io("recvmsg", e)),
    };
    let mut received = None;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            for fd in fds {
                // Keep the first; dropping the others closes them.
                if received.is_none() {
                    received = Some(fd);
                }
            }
        }
    }
    match received {
        Some(fd) => {
            set_cloexec(&fd)?;
            Ok((fd, msg.bytes.min(buf.len())))
        }
        None if msg.bytes == 0 => Err(Error::Disconnected),
        None => Err(Error::NoFdReceived),
    }
}

/// The send flags that keep a vanished peer from raising `SIGPIPE`: `MSG_NOSIGNAL`.
#[cfg(not(target_vendor = "apple"))]
fn no_sigpipe(_socket: BorrowedFd<'_>) -> Result<SendFlags, Error> {
    Ok(SendFlags::NOSIGNAL)
}

/// Apple has no `MSG_NOSIGNAL`: the socket itself is set `SO_NOSIGPIPE` instead.
#[cfg(target_vendor = "apple")]
fn no_sigpipe(socket: BorrowedFd<'_>) -> Result<SendFlags, Error> {
    sockopt::set_socket_nosigpipe(socket, true)
        .map_err(|e| Error::io("setsockopt(SO_NOSIGPIPE)", e))?;
    Ok(SendFlags::empty())
}

/// Received descriptors are close-on-exec from the start where `MSG_CMSG_CLOEXEC` exists.
#[cfg(not(target_vendor = "apple"))]
const CLOEXEC: RecvFlags = RecvFlags::CMSG_CLOEXEC;

/// Apple has no `MSG_CMSG_CLOEXEC`: the flag is set right after `recvmsg` (a `fork` + `exec` by
/// another thread in between would leak the descriptor into that child).
#[cfg(target_vendor = "apple")]
const CLOEXEC: RecvFlags = RecvFlags::empty();

/// Sets close-on-exec where `recvmsg` could not (a no-op where it did).
fn set_cloexec(fd: &OwnedFd) -> Result<(), Error> {
    if cfg!(target_vendor = "apple") {
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)
            .map_err(|e| Error::io("fcntl(F_SETFD)", e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Seek as _, Write as _};
    use std::os::unix::net::UnixStream;

    #[test]
    fn round_trip_over_a_socketpair() {
        let (a, b) = UnixStream::pair().unwrap();
        // Any file will do (macOS has no memfd): a temporary one, unlinked at once.
        let path = std::env::temp_dir().join(format!("fdpass-test-{}", std::process::id()));
        let mut file = std::fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        file.write_all(b"hello").unwrap();
        send_fd(&a, file.as_fd(), b"len=5").unwrap();
        let mut buf = [0_u8; 16];
        let (fd, n) = recv_fd(&b, &mut buf, Duration::from_secs(5)).unwrap();
        assert_eq!(&buf[..n], b"len=5");
        let mut got = std::fs::File::from(fd);
        got.rewind().unwrap();
        let mut s = String::new();
        got.read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello");
    }

    #[test]
    fn plain_bytes_are_not_a_descriptor() {
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(b"x").unwrap();
        let mut buf = [0_u8; 4];
        assert!(matches!(
            recv_fd(&b, &mut buf, Duration::from_secs(5)),
            Err(Error::NoFdReceived)
        ));
        drop(a);
        assert!(matches!(
            recv_fd(&b, &mut buf, Duration::from_secs(5)),
            Err(Error::Disconnected)
        ));
    }

    #[test]
    fn silence_times_out() {
        let (_a, b) = UnixStream::pair().unwrap();
        let mut buf = [0_u8; 4];
        assert!(matches!(
            recv_fd(&b, &mut buf, Duration::from_millis(20)),
            Err(Error::TimedOut)
        ));
    }
}
