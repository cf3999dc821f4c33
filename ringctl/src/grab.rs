//! `ringctl grab`: capture frames from a capture endpoint (the protocol of
//! `examples/frame-server`) by reading its ring directly, and time each capture.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use ring_core::{DeliveryClass, ReadError};
use ring_os::raw::{ConsumerExt as _, ShmReadError, ShmRing};

use crate::cli::{GrabArgs, GrabRequest};
use crate::error::{CliError, Result};
use crate::ring;

/// The sum, modulo 2^64, of `bytes` read as little-endian 64-bit words (the last one
/// zero-padded): the frame server's checksum, which reads every byte.
pub fn word_sum(bytes: &[u8]) -> u64 {
    let words = bytes.chunks_exact(8);
    let rest = words.remainder();
    let mut last = [0u8; 8];
    last.get_mut(..rest.len())
        .unwrap_or(&mut [])
        .copy_from_slice(rest);
    words
        .map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
        .fold(u64::from_le_bytes(last), u64::wrapping_add)
}

/// The sequence number and, when there is one, the checksum in a descriptor line
/// (`{"ring":..., "seq":S, ..., "sum":C}`).
fn descriptor(line: &str) -> Result<(u64, Option<u64>)> {
    let value: serde_json::Value = serde_json::from_str(line).map_err(|e| {
        CliError::Child(format!(
            "the capture endpoint answered {line:?}: not JSON ({e})"
        ))
    })?;
    if let Some(err) = value.get("error") {
        return Err(CliError::Child(format!(
            "the capture endpoint refused: {err}"
        )));
    }
    let seq = value
        .get("seq")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| {
            CliError::Child(format!(
                "the capture endpoint's descriptor has no seq: {line:?}"
            ))
        })?;
    Ok((seq, value.get("sum").and_then(serde_json::Value::as_u64)))
}

/// Connects to the capture endpoint's Unix socket at `path`.
#[cfg(unix)]
fn connect(path: &Path) -> Result<std::os::unix::net::UnixStream> {
    std::os::unix::net::UnixStream::connect(path)
        .map_err(|e| CliError::io(format!("connecting to {}", path.display()), e))
}

/// The capture endpoint is a Unix socket, which this Windows build does not use (the stream
/// type only keeps `run` the same on both platforms).
#[cfg(windows)]
fn connect(path: &Path) -> Result<std::net::TcpStream> {
    Err(CliError::Usage(format!(
        "ringctl grab reaches its capture endpoint ({}) over a Unix socket, which this \
         Windows build does not use",
        path.display()
    )))
}

/// Runs `ringctl grab`.
pub fn run(args: &GrabArgs) -> Result<()> {
    if !(args.timeout.is_finite() && args.timeout > 0.0 && args.timeout < 1e9) {
        return Err(CliError::Usage(
            "--timeout must be a positive number of seconds".into(),
        ));
    }
    // Windows: no Unix socket to reach the endpoint; say so before waiting for the ring.
    #[cfg(windows)]
    connect(&args.socket)?;
    let timeout = Duration::from_secs_f64(args.timeout);
    let name = ring::segment_name(&args.name)?;
    let ring = ring::open_wait(&name, timeout)?;
    let mut consumer = ShmRing::consumer(&ring, DeliveryClass::LatestOnly)?;
    let stream = connect(&args.socket)?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| CliError::io("setting a socket timeout", e))?;
    let mut replies = BufReader::new(
        stream
            .try_clone()
            .map_err(|e| CliError::io("cloning the socket", e))?,
    );
    let mut requests = stream;
    let mut out = std::io::stdout().lock();
    // Registered: frames published from now on are ours to pin.
    writeln!(out, "{{\"ready\":true}}")
        .and_then(|()| out.flush())
        .map_err(|e| CliError::io("writing stdout", e))?;
    let stdin = std::io::stdin();
    let mut trigger = String::new();
    let mut reply = String::new();
    let request: &[u8] = match args.request {
        GrabRequest::Latest => b"latest\n",
        GrabRequest::Frame => b"frame\n",
    };
    let mut done = 0u64;
    loop {
        if args.count.is_some_and(|n| done >= n) {
            break;
        }
        if args.count.is_none() {
            trigger.clear();
            let n = stdin
                .lock()
                .read_line(&mut trigger)
                .map_err(|e| CliError::io("reading stdin", e))?;
            if n == 0 {
                break;
            }
        }
        // The capture: request -> descriptor -> pin -> stamp checked (usable) -> every byte
        // read (summed).
        let start = Instant::now();
        requests
            .write_all(request)
            .map_err(|e| CliError::io("sending the request", e))?;
        reply.clear();
        replies
            .read_line(&mut reply)
            .map_err(|e| CliError::io("reading the descriptor", e))?;
        let (seq, want_sum) = descriptor(reply.trim_end())?;
        let described = start.elapsed();
        let frame = match consumer.recv_pinned(timeout) {
            Ok(frame) => frame,
            Err(ShmReadError::Read(ReadError::Timeout | ReadError::Empty)) => {
                return Err(CliError::Timeout(format!(
                    "frame {seq} was announced but not readable within {:.1} s",
                    timeout.as_secs_f64()
                )))
            }
            Err(e) => return Err(ring::or_truncated(&ring, e)),
        };
        let bytes = frame.bytes();
        let stamp = bytes
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes);
        if frame.seq() != seq || stamp != Some(seq) {
            let stamp = stamp.map_or_else(
                || "nothing (shorter than 8 bytes)".into(),
                |s| s.to_string(),
            );
            return Err(CliError::Child(format!(
                "asked for frame {seq}, pinned message {} stamped {stamp}",
                frame.seq()
            )));
        }
        let usable = start.elapsed();
        let sum = word_sum(bytes);
        let summed = start.elapsed();
        drop(frame);
        if want_sum.is_some_and(|w| w != sum) {
            return Err(CliError::Child(format!(
                "frame {seq} sums to {sum}, the capture endpoint announced {want_sum:?}"
            )));
        }
        writeln!(
            out,
            "{{\"seq\":{seq},\"sum\":{sum},\"descriptor_ns\":{},\"usable_ns\":{},\"summed_ns\":{}}}",
            described.as_nanos(),
            usable.as_nanos(),
            summed.as_nanos()
        )
        .and_then(|()| out.flush())
        .map_err(|e| CliError::io("writing stdout", e))?;
        done += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_sum_pads_the_last_word_and_wraps() {
        let mut b = u64::MAX.to_le_bytes().to_vec();
        b.extend_from_slice(&2u64.to_le_bytes());
        b.extend_from_slice(&[3, 1]);
        assert_eq!(word_sum(&b), 1u64.wrapping_add(0x0103));
        assert_eq!(word_sum(&[]), 0);
    }

    #[test]
    fn descriptors_are_parsed_or_refused() {
        assert_eq!(
            descriptor(r#"{"ring":"r","seq":7,"sum":1}"#).unwrap(),
            (7, Some(1))
        );
        assert_eq!(descriptor(r#"{"seq":8}"#).unwrap(), (8, None));
        assert!(descriptor(r#"{"error":"no frame"}"#).is_err());
        assert!(descriptor(r#"{"sum":1}"#).is_err());
        assert!(descriptor("nonsense").is_err());
    }
}
