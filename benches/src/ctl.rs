//! The control channel between the parent and a child: JSON lines over a Unix stream socket.
//!
//! Control traffic never lies inside a timed interval, so its speed does not matter; what matters
//! is that every read is bounded (a child that hangs is noticed and killed).

use crate::case::{Case, Transport};
use crate::BenchError;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// Everything a child needs to build its end of one transport for one case.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Setup {
    /// The transport.
    pub transport: Transport,
    /// The case (sizes, depth).
    pub case: Case,
    /// This child's index (0 or 1).
    pub child: usize,
    /// How many children take part in the case.
    pub children: usize,
    /// Directory for this case's sockets, FIFOs and mappings.
    pub dir: PathBuf,
    /// A name unique to this run, case and transport (iceoryx2 service names).
    pub tag: String,
    /// Loopback port for `tcp`.
    pub port: u16,
}

/// A message on the control channel.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Child → parent, first message: the child's index.
    Hello(usize),
    /// Parent → child: build this transport's end for the case.
    Setup(Box<Setup>),
    /// Parent → child: run `iters` iterations of the current case on `transport`.
    Run {
        /// The transport.
        transport: Transport,
        /// Iterations.
        iters: usize,
    },
    /// Parent → child: drop every transport of the case.
    Teardown,
    /// Parent → child: exit.
    Quit,
    /// Child → parent: done (setup, run or teardown).
    Ok,
    /// Parent → child (acquire): prepare the next message (the parent has finished timing the
    /// previous one, so the preparation never overlaps a measurement).
    Next,
    /// Child → parent (acquire): the next message is prepared; send the request.
    Ready,
    /// Child → parent: something failed.
    Err(String),
}

/// One end of a control connection.
pub struct Ctl {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    line: String,
}

impl Ctl {
    /// Wraps a connected stream; every read waits at most `timeout`.
    pub fn new(stream: UnixStream, timeout: Duration) -> Result<Self, BenchError> {
        stream
            .set_read_timeout(Some(timeout))
            .map_err(|e| BenchError::io("control socket timeout", e))?;
        let writer = stream
            .try_clone()
            .map_err(|e| BenchError::io("control socket clone", e))?;
        Ok(Self {
            reader: BufReader::new(stream),
            writer,
            line: String::new(),
        })
    }

    /// Changes the read timeout.
    pub fn set_timeout(&self, timeout: Duration) -> Result<(), BenchError> {
        self.writer
            .set_read_timeout(Some(timeout))
            .map_err(|e| BenchError::io("control socket timeout", e))
    }

    /// Sends one message.
    pub fn send(&mut self, msg: &Msg) -> Result<(), BenchError> {
        let mut line = serde_json::to_string(msg).map_err(|e| BenchError::Peer {
            what: format!("cannot encode control message: {e}"),
        })?;
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .map_err(|e| BenchError::io("control send", e))
    }

    /// Receives one message (bounded by the timeout).
    pub fn recv(&mut self) -> Result<Msg, BenchError> {
        self.line.clear();
        match self.reader.read_line(&mut self.line) {
            Ok(0) => Err(BenchError::Peer {
                what: "control connection closed".to_owned(),
            }),
            Ok(_) => serde_json::from_str(&self.line).map_err(|e| BenchError::Peer {
                what: format!("bad control message {:?}: {e}", self.line.trim_end()),
            }),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(BenchError::timeout("the control channel"))
            }
            Err(e) => Err(BenchError::io("control recv", e)),
        }
    }

    /// Receives one message and fails unless it is `Ok` (an `Err` from the peer becomes an error).
    pub fn expect_ok(&mut self) -> Result<(), BenchError> {
        self.expect("Ok", |m| matches!(m, Msg::Ok))
    }

    /// Receives one message and fails unless it is `Ready`.
    pub fn expect_ready(&mut self) -> Result<(), BenchError> {
        self.expect("Ready", |m| matches!(m, Msg::Ready))
    }

    /// Receives one message and fails unless `is_it` holds for it (named `what` in the error);
    /// an `Err` from the peer becomes that error.
    fn expect(&mut self, what: &str, is_it: fn(&Msg) -> bool) -> Result<(), BenchError> {
        match self.recv()? {
            m if is_it(&m) => Ok(()),
            Msg::Err(what) => Err(BenchError::Peer { what }),
            other => Err(BenchError::Peer {
                what: format!("expected {what}, got {other:?}"),
            }),
        }
    }
}
