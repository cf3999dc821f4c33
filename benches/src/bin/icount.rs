//! The loop `benches/icount.sh` counts instructions of under `valgrind --tool=callgrind`: one
//! thread, a heap segment, `N` messages of one case. The script runs each case at two `N` and
//! divides the difference by the difference in messages, so setup and teardown cancel out and
//! what is left is the per-message cost (deterministic: the same binary and arguments give the
//! same count on a busy or an idle machine).
//!
//! `icount CASE LEN N`; CASE is one of:
//! - `copy`: `try_publish` + a gating consumer's `try_copy`;
//! - `pin`: `try_publish` + a gating consumer's `try_pin` (dropped at once);
//! - `skip-pin`: the same with a skip-on-lag consumer (a reader bit);
//! - `skip-copy`: `try_publish` + a skip-on-lag consumer's `try_copy` (its progress published
//!   every `PROGRESS_EVERY` reads);
//! - `loan`: a claimed slot written in place (`loan`) + `try_pin`, on a pin-only ring;
//! - `batch`: `try_publish_batch` of 16 + `try_read_batch` of 16;
//! - `fanout2`, `fanout3`: `try_publish` + `try_copy` by 2 or 3 gating consumers;
//! - `hold`: `try_publish` + a gating consumer's `try_hold` + `release`;
//! - `poll`, `poll-pin`: a gating consumer's `try_copy` or `try_pin` on an empty ring (one
//!   empty poll per "message": what a polling reader spends between messages).
use core::hint::black_box;
use std::process::ExitCode;

use ring_core::{Config, Consumer, DeliveryClass, HeapSegment, OwnerId, Producer};

/// Owner ids 1..=4 (never 0).
fn id(n: u64) -> OwnerId {
    OwnerId::new(n.max(1)).expect("not 0")
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(case), Some(len), Some(n)) = (
        args.get(1),
        args.get(2).and_then(|s| s.parse::<usize>().ok()),
        args.get(3).and_then(|s| s.parse::<u64>().ok()),
    ) else {
        eprintln!("usage: icount CASE LEN N (see the source for the cases)");
        return ExitCode::from(2);
    };
    match run(case, len, n) {
        Ok(sum) => {
            // The checksum keeps every read observable (and tells a broken run).
            println!("{case} {len} {n}: checksum {sum}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("icount: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(case: &str, len: usize, n: u64) -> Result<u64, String> {
    let pin_only = case == "loan";
    let config = Config::new(64, 1024)
        .with_consumers(4)
        .with_pin_only(pin_only);
    let seg = HeapSegment::new(&config, id(1)).map_err(|e| e.to_string())?;
    let mut p = Producer::new(&seg, id(1)).map_err(|e| e.to_string())?;
    let readers = match case {
        "fanout2" => 2,
        "fanout3" => 3,
        _ => 1,
    };
    let class = if case.starts_with("skip-") {
        DeliveryClass::SkipOnLag
    } else {
        DeliveryClass::Gating
    };
    let mut cs = (0..readers)
        .map(|k| Consumer::new(&seg, class, id(2 + k)).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let msg = vec![0x5a_u8; len];
    let mut buf = vec![0u8; 1024];
    let mut sum = 0u64;
    let fail = |e: &dyn core::fmt::Display| e.to_string();
    match case {
        "batch" => {
            let msgs: Vec<&[u8]> = (0..16).map(|_| msg.as_slice()).collect();
            for _ in 0..n / 16 {
                p.try_publish_batch(&msgs).map_err(|e| fail(&e))?;
                cs[0]
                    .try_read_batch(16, |m| sum += m.seq())
                    .map_err(|e| fail(&e))?;
            }
        }
        "poll" => sum = polls::<COPY>(&mut cs[0], &mut buf, n)?,
        "poll-pin" => sum = polls::<PIN>(&mut cs[0], &mut buf, n)?,
        // One loop per read kind, chosen once: the count is the ring's, not a string match's.
        "pin" | "skip-pin" => sum = messages::<PIN>(&mut p, &mut cs, &msg, &mut buf, n)?,
        "loan" => sum = messages::<LOAN>(&mut p, &mut cs, &msg, &mut buf, n)?,
        "hold" => sum = messages::<HOLD>(&mut p, &mut cs, &msg, &mut buf, n)?,
        // `copy`, `skip-copy`, `fanout2`, `fanout3`.
        _ => sum = messages::<COPY>(&mut p, &mut cs, &msg, &mut buf, n)?,
    }
    Ok(sum)
}

/// Read kinds of [`messages`]: a copy, a pin, a claimed loan then a pin, a hold.
const COPY: u8 = 0;
const PIN: u8 = 1;
const LOAN: u8 = 2;
const HOLD: u8 = 3;

/// `n` messages of `msg`'s length published one at a time (`LOAN`: written in place in a
/// claimed slot), each read by every consumer of `cs` the way `HOW` says; the checksum.
fn messages<const HOW: u8>(
    p: &mut Producer<&HeapSegment>,
    cs: &mut [Consumer<&HeapSegment>],
    msg: &[u8],
    buf: &mut [u8],
    n: u64,
) -> Result<u64, String> {
    let fail = |e: &dyn core::fmt::Display| e.to_string();
    let mut sum = 0u64;
    for _ in 0..n {
        if HOW == LOAN {
            let mut slot = p.try_claim().map_err(|e| fail(&e))?;
            slot.loan(msg.len()).map_err(|e| fail(&e))?.fill(0x5a);
            slot.publish().map_err(|e| fail(&e))?;
        } else {
            p.try_publish(black_box(msg)).map_err(|e| fail(&e))?;
        }
        for c in cs.iter_mut() {
            sum += read_one::<HOW>(c, buf)?;
        }
    }
    Ok(sum)
}

/// `n` reads (`HOW`: `COPY` or `PIN`) of an empty ring, each of which must say `Empty`; the count.
fn polls<const HOW: u8>(
    c: &mut Consumer<&HeapSegment>,
    buf: &mut [u8],
    n: u64,
) -> Result<u64, String> {
    let mut sum = 0u64;
    for _ in 0..n {
        let empty = if HOW == PIN {
            matches!(c.try_pin(), Err(ring_core::ReadError::Empty))
        } else {
            matches!(
                c.try_copy(black_box(&mut *buf)),
                Err(ring_core::ReadError::Empty)
            )
        };
        if !empty {
            return Err("a poll of an empty ring did not say Empty".to_owned());
        }
        sum += 1;
    }
    Ok(sum)
}

fn read_one<const HOW: u8>(c: &mut Consumer<&HeapSegment>, buf: &mut [u8]) -> Result<u64, String> {
    Ok(match HOW {
        PIN | LOAN => {
            let m = c.try_pin().map_err(|e| e.to_string())?;
            m.seq() + u64::from(black_box(m.bytes())[0])
        }
        HOLD => {
            let h = c.try_hold().map_err(|e| e.to_string())?;
            let first = c.held_bytes(&h).map_or(0, |b| b[0]);
            let seq = h.seq();
            c.release(h).map_err(|e| e.to_string())?;
            seq + u64::from(black_box(first))
        }
        _ => {
            let got = c.try_copy(buf).map_err(|e| e.to_string())?;
            got.seq + u64::from(black_box(buf[0]))
        }
    })
}
