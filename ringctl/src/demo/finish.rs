//! The end of a demo run: reclaim what dead consumers left, free the descriptors of the
//! messages still in the ring, count leaks, and turn the reports into a checked [`Summary`].

use ring_core::arena::Allocator;
use ring_core::inspect::{consumer_info, total_pins, EntryState};
use ring_core::Memory;
use ring_os::raw::{ProducerExt as _, ShmRing};

use super::producer::DESCRIPTOR_OWNER;
use super::report::{histogram, lost, merge, percentile_us, ProducerReport, Row, Summary};
use super::ConsumerProc;
use crate::cli::DemoArgs;
use crate::error::Result;
use crate::ring::Ring;

/// What was left in the ring after every process ended.
struct Leftovers {
    /// Dead consumer entries reclaimed now.
    reclaimed_consumers: u64,
    /// Pins cleared in them.
    reclaimed_pins: u64,
    /// Allocations still live after the producer's descriptors were freed.
    leaked: u64,
    /// Pins still set after cleanup.
    pins_left: u32,
    /// Consumer entries still registered after cleanup.
    entries_left: usize,
    /// Descriptor handles the producer reported that could not be freed.
    bad_frees: u64,
}

/// Becomes the ring's producer (every process has ended) and cleans up.
fn clean_up(ring: &Ring, producer: &ProducerReport) -> Result<Leftovers> {
    // Every demo process has ended: become the producer (taking over if the producer died)
    // and reclaim what dead consumers left.
    let mut p = ShmRing::producer(ring)?;
    let swept = p.reclaim_dead();
    let mut alloc = Allocator::attach(ring.alloc_words())?;
    let mut bad_frees = 0;
    for &h in &producer.live_descriptors {
        if alloc.free(h, DESCRIPTOR_OWNER).is_err() {
            bad_frees += 1;
        }
    }
    let leaked = alloc.stats().live;
    let entries_left = (0..ring.geometry().consumers())
        .filter_map(|i| consumer_info(ring, i))
        .filter(|c| c.state != EntryState::Free)
        .count();
    Ok(Leftovers {
        reclaimed_consumers: swept.len() as u64,
        reclaimed_pins: swept.iter().map(|r| u64::from(r.pins_cleared)).sum(),
        leaked,
        pins_left: total_pins(ring),
        entries_left,
        bad_frees,
    })
}

/// Checks every report and builds the summary.
pub(super) fn summarise(
    ring: &Ring,
    args: &DemoArgs,
    producer: &ProducerReport,
    consumers: &[ConsumerProc],
    killed: u64,
) -> Result<Summary> {
    let left = clean_up(ring, producer)?;
    let published = producer.published;
    let mut all = histogram()?;
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let (mut torn, mut lost_total, mut skipped) = (0, 0, 0);
    for c in consumers {
        let Some(r) = c.report.as_ref().filter(|_| !c.killed) else {
            rows.push(Row {
                id: c.id,
                class: c.class.as_str().to_owned(),
                read: args.read.for_class(c.class).as_str().to_owned(),
                status: "killed".into(),
                frames: 0,
                fps: 0.0,
                p50_us: 0.0,
                p99_us: 0.0,
                torn: 0,
                skipped: 0,
                lost: 0,
            });
            continue;
        };
        let mut h = histogram()?;
        merge(&mut h, &r.latency_ns);
        merge(&mut all, &r.latency_ns);
        let l = lost(r, published);
        let who = format!("consumer #{} ({})", c.id, r.class);
        if r.torn > 0 {
            failures.push(format!("{who}: {} torn frames", r.torn));
        }
        if l > 0 {
            failures.push(format!(
                "{who}: {l} messages lost (span {}..{}, delivered {}, skipped {}, published {published})",
                r.start, r.end, r.delivered, r.skipped
            ));
        }
        if r.skipped != r.ring_missed {
            failures.push(format!(
                "{who}: saw {} skips in the sequence but the ring reported {}",
                r.skipped, r.ring_missed
            ));
        }
        if r.order_errors > 0 {
            failures.push(format!("{who}: {} messages out of order", r.order_errors));
        }
        if r.descriptor_errors > 0 {
            failures.push(format!("{who}: {} bad descriptors", r.descriptor_errors));
        }
        torn += r.torn;
        lost_total += l;
        skipped += r.skipped;
        rows.push(Row {
            id: c.id,
            class: r.class.clone(),
            read: r.read.clone(),
            status: "done".into(),
            frames: r.delivered,
            fps: r.delivered as f64 / r.elapsed_s.max(1e-9),
            p50_us: percentile_us(&h, 50.0),
            p99_us: percentile_us(&h, 99.0),
            torn: r.torn,
            skipped: r.skipped,
            lost: l,
        });
    }
    if let Some(m) = args.messages {
        if published != m {
            failures.push(format!("published {published} of {m} messages"));
        }
    }
    let reclaimed_consumers = producer.reclaimed_consumers + left.reclaimed_consumers;
    if reclaimed_consumers != killed {
        failures.push(format!(
            "{killed} consumers were killed but {reclaimed_consumers} dead entries were reclaimed"
        ));
    }
    if left.leaked > 0 {
        failures.push(format!("{} allocations leaked", left.leaked));
    }
    if left.bad_frees > 0 {
        failures.push(format!("{} descriptors could not be freed", left.bad_frees));
    }
    if left.pins_left > 0 || left.entries_left > 0 {
        failures.push(format!(
            "{} pins and {} consumer entries left behind",
            left.pins_left, left.entries_left
        ));
    }
    let finished = rows.iter().filter(|r| r.status == "done").count();
    Ok(Summary {
        messages: published,
        consumers: finished,
        killed,
        torn,
        lost: lost_total,
        skipped,
        reclaimed_pins: producer.reclaimed_pins + left.reclaimed_pins,
        reclaimed_consumers,
        leaked_allocations: left.leaked,
        allocations: producer.allocations,
        p50_us: percentile_us(&all, 50.0),
        p99_us: percentile_us(&all, 99.0),
        fps: published as f64 / producer.elapsed_s.max(1e-9),
        duration_s: producer.elapsed_s,
        frame_bytes: args.frame_size.bytes,
        slots: args.slots,
        never_stall: args.never_stall.is_some(),
        stalls: producer.stalls,
        ok: failures.is_empty(),
        failures,
        per_consumer: rows,
    })
}
