//! `attach`: arbitrary bytes as a segment.
//!
//! [`run`] hands the bytes to [`HeapSegment::from_bytes`] (the same [`ring_core::RawMemory::attach`]
//! path an OS mapping takes). Refused bytes must come back as an [`AttachError`] that displays;
//! accepted bytes must describe a segment that fits in them, and then every consumer class,
//! pinned and copied reads, a producer (new or taking over), reclaim, inspection and the
//! allocator region are driven over it. Nothing may panic or touch memory outside the bytes
//! (the fuzzer runs under AddressSanitizer), and every error must be one its function documents.

use super::{displays, Outcome};
use ring_core::arena::{AllocError, Allocator};
use ring_core::inspect::{consumer_info, producer_info, total_pins, EntryState};
use ring_core::{
    AttachError, ClaimError, Consumer, DeliveryClass, Error, HeapSegment, Memory, OwnerId,
    Producer, ReadError, Spin,
};

/// The three delivery classes, in a fixed order.
pub const CLASSES: [DeliveryClass; 3] = [
    DeliveryClass::Gating,
    DeliveryClass::LatestOnly,
    DeliveryClass::SkipOnLag,
];

/// Owner id this oracle's producer uses.
const PRODUCER: u64 = 0xf0f0_0001;
/// First owner id of this oracle's consumers.
const CONSUMER: u64 = 0xf0f0_1000;

fn id(n: u64) -> OwnerId {
    OwnerId::new(n).expect("the oracle's owner ids are non-zero constants")
}

/// The oracle: see the module doc.
pub fn run(bytes: &[u8]) -> Outcome {
    let seg = match HeapSegment::from_bytes(bytes) {
        Ok(seg) => seg,
        Err(e) => return check_refusal(&e, bytes.len()),
    };
    let total = seg.geometry().total_len();
    ensure!(
        total <= bytes.len(),
        "accepted a segment of {total} bytes from only {} bytes",
        bytes.len()
    );
    exercise(&seg, 3)?;
    // The header is untouched by the protocol, so the segment's own bytes attach again.
    match HeapSegment::from_bytes(&seg.to_bytes()) {
        Ok(again) => ensure!(
            again.geometry() == seg.geometry(),
            "re-attach changed the geometry"
        ),
        Err(e) => {
            return Err(format!(
                "a segment's own bytes were refused on re-attach: {e}"
            ))
        }
    }
    Ok(())
}

/// A refusal must display and be consistent with the input length.
fn check_refusal(e: &AttachError, len: usize) -> Outcome {
    displays(e)?;
    if let AttachError::Truncated { needed, len: got } = *e {
        ensure!(
            got == len as u64,
            "Truncated reports {got} bytes, {len} given"
        );
        ensure!(needed > got, "Truncated although {needed} <= {got}");
    }
    Ok(())
}

/// Checks a read error is one `try_pin`/`try_copy`/`wait_ready` document.
pub fn read_error_documented(e: &ReadError, copy: bool) -> Outcome {
    displays(e)?;
    let ok = match e {
        ReadError::Empty
        | ReadError::Closed
        | ReadError::Aborted { .. }
        | ReadError::Lagging
        | ReadError::Evicted
        | ReadError::Corrupt(_) => true,
        ReadError::BufferTooSmall { .. } => copy,
        // A group member whose 8 claim words all hold messages it keeps.
        ReadError::TooManyHolds { max } => *max == ring_core::layout::GROUP_CLAIMS,
        _ => false,
    };
    ensure!(ok, "undocumented read error {e:?}");
    Ok(())
}

/// Checks a claim error is one `try_publish` documents.
pub fn claim_error_documented(e: &ClaimError, slots: usize, cap: usize) -> Outcome {
    displays(e)?;
    match *e {
        ClaimError::Full { consumer, .. } => ensure!(
            consumer < ring_core::MAX_CONSUMERS as usize,
            "Full names consumer {consumer}"
        ),
        ClaimError::Pinned { slot, .. } => ensure!(slot < slots, "Pinned names slot {slot}"),
        ClaimError::Closed | ClaimError::Corrupt(_) | ClaimError::Displaced { .. } => {}
        ClaimError::TooLarge { len, capacity } => {
            ensure!(capacity == cap && len > cap, "bad TooLarge {e:?}")
        }
    }
    Ok(())
}

/// Inspection over any segment: snapshots stay inside the table and agree with each other.
pub fn inspect<M: Memory>(mem: &M) -> Outcome {
    let g = *mem.geometry();
    let mut pins = 0u32;
    for i in 0..g.consumers() {
        let Some(info) = consumer_info(mem, i) else {
            return Err(format!("consumer_info({i}) is None inside the table"));
        };
        ensure!(
            info.index == i,
            "consumer_info({i}) names index {}",
            info.index
        );
        ensure!(
            info.pins as usize <= g.slots(),
            "entry {i} pins {} of {} slots",
            info.pins,
            g.slots()
        );
        if let EntryState::Corrupt(v) = info.state {
            ensure!(v > 3, "state {v} reported corrupt");
        }
        pins += info.pins;
    }
    ensure!(
        consumer_info(mem, g.consumers()).is_none(),
        "consumer_info past the table is Some"
    );
    let total = total_pins(mem);
    // Bits above the table's entries are counted by total_pins but belong to no entry.
    ensure!(total >= pins, "total_pins {total} < per-entry pins {pins}");
    let p = producer_info(mem);
    ensure!(
        p.writing as usize <= g.slots(),
        "{} slots being written of {}",
        p.writing,
        g.slots()
    );
    Ok(())
}

/// Drives every API over `seg`, whatever its shared words say: registration, reclaim of
/// registered entries, a producer, `rounds` rounds of publishing and reading in every class,
/// and the allocator region. Only documented errors; no panic.
pub fn exercise(seg: &HeapSegment, rounds: usize) -> Outcome {
    let g = *seg.geometry();
    let (slots, cap) = (g.slots(), g.slot_capacity());
    inspect(seg)?;

    // A producer: new, or take over from whoever the segment names.
    let mut producer = match Producer::new(seg, id(PRODUCER)) {
        Ok(p) => Some(p),
        Err(Error::ProducerExists { owner }) => match OwnerId::new(owner) {
            // SAFETY: no producer handle of this process exists (`new` just failed), so the
            // producer the segment names holds no `WriteSlot` and is inside no call.
            Some(dead) => match unsafe { Producer::take_over(seg, id(PRODUCER), dead) } {
                Ok(p) => Some(p),
                Err(e @ Error::OwnerMismatch { .. }) => {
                    displays(&e)?;
                    None
                }
                Err(e) => return Err(format!("take_over: undocumented {e:?}")),
            },
            None => return Err("ProducerExists names owner 0".into()),
        },
        Err(e) => return Err(format!("Producer::new: undocumented {e:?}")),
    };

    // Reclaim whatever the table says is registered (as if its owners had died).
    if let Some(p) = producer.as_mut() {
        for i in 0..g.consumers() {
            let Some(info) = consumer_info(seg, i) else {
                continue;
            };
            let Some(owner) = OwnerId::new(info.owner) else {
                continue;
            };
            // SAFETY: this function holds no consumer of the segment, so the entry's owner (if
            // any) is inside no call here and holds no `Pinned` of ours.
            match unsafe { p.reclaim(i, owner) } {
                Ok(r) => {
                    ensure!(r.index == i, "reclaim({i}) reports index {}", r.index);
                    ensure!(
                        r.pins_cleared as usize <= slots,
                        "reclaim cleared {} pins in {slots} slots",
                        r.pins_cleared
                    );
                }
                // A dead member's claims that its group's queue cannot take yet (a scribbled
                // queue or claims): documented, nothing changes.
                Err(e @ (Error::OwnerMismatch { .. } | Error::RedeliveryFull { .. })) => {
                    displays(&e)?;
                }
                Err(e) => return Err(format!("reclaim({i}): undocumented {e:?}")),
            }
        }
        // SAFETY: an index past the table: nothing is reclaimed.
        match unsafe { p.reclaim(g.consumers(), id(1)) } {
            Err(Error::NoSuchConsumer { index }) if index == g.consumers() => {}
            other => return Err(format!("reclaim past the table: {other:?}")),
        }
    }

    // One consumer of each class (the table may be full or corrupt: then fewer).
    let mut consumers = Vec::new();
    for (k, class) in CLASSES.into_iter().enumerate() {
        match Consumer::new(seg, class, id(CONSUMER + k as u64)) {
            Ok(c) => {
                ensure!(
                    c.index() < g.consumers(),
                    "consumer index {} out of table",
                    c.index()
                );
                consumers.push(c);
            }
            Err(e @ Error::ConsumerTableFull { .. }) => displays(&e)?,
            Err(e) => return Err(format!("Consumer::new: undocumented {e:?}")),
        }
    }

    let mut buf = vec![0u8; cap];
    let mut small = [0u8; 3];
    for round in 0..rounds {
        if let Some(p) = producer.as_mut() {
            for m in 0..slots.min(4) {
                let len = (round * 7 + m * 13) % (cap + 2);
                let data = vec![(round * 16 + m) as u8; len];
                match p.try_publish(&data) {
                    Ok(_) => {}
                    Err(e) => claim_error_documented(&e, slots, cap)?,
                }
            }
        }
        for c in consumers.iter_mut() {
            for _ in 0..2 {
                match c.try_pin() {
                    Ok(m) => {
                        pinned_fits(&m, cap, slots)?;
                        let n = m.copy_to(&mut buf);
                        ensure!(n == m.len(), "copy_to copied {n} of {}", m.len());
                        ensure!(buf[..n] == *m.bytes(), "copy_to differs from bytes()");
                        let _ = m.meta();
                    }
                    Err(e) => read_error_documented(&e, false)?,
                }
                match c.try_copy(&mut buf) {
                    Ok(got) => ensure!(got.len <= cap, "copied {} bytes into {cap}", got.len),
                    Err(e) => read_error_documented(&e, true)?,
                }
                match c.try_copy(&mut small) {
                    Ok(got) => ensure!(got.len <= small.len(), "copied {} into 3", got.len),
                    Err(e) => read_error_documented(&e, true)?,
                }
            }
            match c.wait_ready(&mut Spin::new(4)) {
                Ok(()) | Err(ReadError::Timeout) => {}
                Err(e) => read_error_documented(&e, false)?,
            }
        }
        inspect(seg)?;
    }
    if let Some(p) = producer.as_mut() {
        let _ = p.wait_drained(&mut Spin::new(4));
        p.close();
        for c in consumers.iter_mut() {
            match c.try_copy(&mut buf) {
                Ok(_) => {}
                Err(e) => read_error_documented(&e, true)?,
            }
        }
    }
    drop(consumers);
    drop(producer);
    exercise_allocator(seg)
}

/// Attaches to the segment's allocator region (if any) and uses it as reader and mutator.
fn exercise_allocator(seg: &HeapSegment) -> Outcome {
    let words = seg.alloc_words();
    if words.is_empty() {
        return Ok(());
    }
    let mut al = match Allocator::attach(words) {
        Ok(a) => a,
        Err(e) => {
            displays(&e)?;
            ensure!(
                matches!(
                    e,
                    AllocError::BadHeader { .. } | AllocError::RegionTooSmall { .. }
                ),
                "Allocator::attach: undocumented {e:?}"
            );
            return Ok(());
        }
    };
    let stats = al.stats();
    let mut handles = Vec::new();
    let totals = al.leak_report(u64::MAX, |leak| handles.push(leak));
    ensure!(
        totals.count as usize == handles.len(),
        "leak report counted {} but listed {}",
        totals.count,
        handles.len()
    );
    let _ = stats;
    let mut out = vec![0u8; 256];
    for leak in handles.iter().take(16) {
        match al.lookup(leak.handle) {
            Ok(a) => {
                ensure!(
                    a.len == leak.len,
                    "lookup length differs from the leak report"
                );
                match al.read(&a, &mut out) {
                    Ok(n) => ensure!(n <= out.len(), "read {n} bytes into {}", out.len()),
                    Err(e) => displays(&e)?,
                }
            }
            Err(e) => displays(&e)?,
        }
    }
    for (k, len) in [1u64, 64, 100, 4096].into_iter().enumerate() {
        match al.alloc(len, k as u16, 0) {
            Ok(a) => {
                match al.writer(&a) {
                    Ok(mut w) => {
                        let data = vec![0xa5u8; len as usize];
                        ensure!(w.write(&data).is_ok(), "writer refused its own reservation");
                        ensure!(
                            w.write(&[1]).is_err(),
                            "writer accepted a byte past its end"
                        );
                    }
                    Err(e) => displays(&e)?,
                }
                match al.free(a.handle, k as u16) {
                    Ok(n) => ensure!(n == len, "free returned {n} for a {len}-byte allocation"),
                    Err(e) => displays(&e)?,
                }
            }
            Err(e) => displays(&e)?,
        }
    }
    for leak in handles.iter().take(16) {
        if let Err(e) = al.free(leak.handle, leak.owner) {
            displays(&e)?;
        }
    }
    Ok(())
}

/// A pinned message fits its slot: at most `cap` bytes, `bytes()` and `words()` (rounded up to
/// words) of its length, in one of the ring's `slots`.
pub(crate) fn pinned_fits<M: ring_core::Memory>(
    m: &ring_core::Pinned<'_, M>,
    cap: usize,
    slots: usize,
) -> Outcome {
    ensure!(
        m.len() <= cap,
        "pinned {} bytes of a {cap}-byte slot",
        m.len()
    );
    ensure!(
        m.bytes().len() == m.len(),
        "bytes() length differs from len()"
    );
    ensure!(m.words().len() == m.len().div_ceil(8), "words() length");
    ensure!(m.slot() < slots, "pinned slot {} of {slots}", m.slot());
    Ok(())
}
