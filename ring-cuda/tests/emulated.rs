//! The emulated device against the conformance checks, plus what only the emulation can show
//! (delays that expose a missing event wait, stale handles, leak reports on drop, injected
//! release failures). The device is as strict as CUDA: in one process only VMM (fd) exports
//! are opened; IPC handles are opened by a child process (this binary re-run, see `common`).
#![allow(clippy::std_instead_of_core, reason = "std test")]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{conformance, env, hex, role, unhex, Child, T};
use ring_cuda::{
    padded_len, At, BufferId, Device, EmulatedDevice, EmulatedOptions, Error, EventId, ExportKind,
    IpcMemHandle, MappingCache, MemHandle, Owner, ResourceKind, StreamId, LARGE_PAGE,
};

fn slow(delay_ms: u64) -> EmulatedDevice {
    EmulatedDevice::with_options(EmulatedOptions {
        op_delay: Duration::from_millis(delay_ms),
        ..EmulatedOptions::default()
    })
}

#[test]
fn conformance_single_device() {
    for kind in [ExportKind::Ipc, ExportKind::Fd] {
        let d = EmulatedDevice::new();
        conformance::roundtrip(&d, kind).unwrap();
        conformance::ceilings(&d, kind).unwrap();
        conformance::event_ordering(&d, kind).unwrap();
        assert!(
            d.ledger().leak_report().is_empty(),
            "{}",
            d.ledger().leak_report()
        );
    }
}

#[test]
fn conformance_event_ordering_on_a_slow_device() {
    // With a 5 ms delay per fill, a read that did not wait for the record would see old bytes.
    conformance::event_ordering(&slow(5), ExportKind::Ipc).unwrap();
}

/// The pair in one process: VMM fds may be imported by the exporting process (the driver
/// allows it), the events then order the work host-free. The IPC pair is
/// `ipc_pair_across_two_processes`.
#[test]
fn conformance_pair_fd_in_one_process() {
    let (a, b) = (slow(2), EmulatedDevice::new());
    conformance::ipc_pair(&a, &b, ExportKind::Fd, false).unwrap();
}

/// Churn of VMM buffers in one process (the IPC churn is `ipc_churn_across_two_processes`).
#[test]
fn churn_returns_to_baseline() {
    let (a, b) = (EmulatedDevice::new(), EmulatedDevice::new());
    conformance::churn(&a, Some(&b), 500, ExportKind::Fd).unwrap();
    conformance::churn(&a, None, 500, ExportKind::Ipc).unwrap();
    // Each run adds one warm-up cycle.
    let t = a.ledger().totals().buffers;
    assert_eq!((t.acquired, t.released), (1002, 1002));
    assert_eq!(b.ledger().totals().mappings.acquired, 501);
    assert_eq!(a.reserved_address_space(), (0, 0));
}

/// The negative control: without the event wait, a slow producer's write is not visible yet.
/// This is what makes `conformance_event_ordering_on_a_slow_device` able to fail.
#[test]
fn missing_event_wait_reads_stale_bytes() {
    let d = slow(50);
    let o = Owner(1);
    let buf = d.alloc(o, 4096, ExportKind::Ipc).unwrap();
    let (s1, s2) = (d.create_stream(o).unwrap(), d.create_stream(o).unwrap());
    d.fill(s1, buf.into(), 0, 4096, 7).unwrap();
    let mut out = [0u8; 1];
    d.read(s2, At(buf.into(), 0), &mut out, T).unwrap();
    assert_eq!(
        out,
        [0],
        "the read overtook nothing: the emulation is not asynchronous"
    );
    d.sync_stream(s1, T).unwrap();
    d.read(s2, At(buf.into(), 0), &mut out, T).unwrap();
    assert_eq!(out, [7]);
    d.destroy_stream(s1, T).unwrap();
    d.destroy_stream(s2, T).unwrap();
    d.free(buf).unwrap();
}

/// An IPC-exportable buffer of `len` bytes, a stream and an event on `d`, all charged to `o`.
fn buffer_stream_event(d: &EmulatedDevice, o: Owner, len: u64) -> (BufferId, StreamId, EventId) {
    let buf = d.alloc(o, len, ExportKind::Ipc).unwrap();
    (buf, d.create_stream(o).unwrap(), d.create_event(o).unwrap())
}

#[test]
fn query_and_bounded_synchronize() {
    let d = slow(200);
    let (buf, s, ev) = buffer_stream_event(&d, Owner(2), 64);
    d.fill(s, buf.into(), 0, 64, 1).unwrap();
    d.record(ev, s).unwrap();
    assert!(!d.query(ev).unwrap(), "event complete before its work ran");
    let start = Instant::now();
    assert!(matches!(
        d.synchronize(ev, Duration::from_millis(20)),
        Err(Error::Timeout { .. })
    ));
    assert!(start.elapsed() < Duration::from_secs(2));
    d.synchronize(ev, T).unwrap();
    assert!(d.query(ev).unwrap());
    d.destroy_event(ev).unwrap();
    d.destroy_stream(s, T).unwrap();
    d.free(buf).unwrap();
}

/// A sticky fault poisons the whole device, as a CUDA context is poisoned: every stream and
/// every later call fails, and nothing is released (the leak report shows what was live).
/// Checked failing before the change: only the faulted stream failed.
#[test]
fn a_fault_poisons_the_whole_device() {
    let seen = Arc::new(Mutex::new(0usize));
    let d = EmulatedDevice::with_options(EmulatedOptions {
        op_delay: Duration::from_millis(400),
        watchdog: Some(Duration::from_millis(30)),
        ..EmulatedOptions::default()
    });
    let sink = Arc::clone(&seen);
    d.ledger()
        .set_leak_hook(Box::new(move |r| *sink.lock().unwrap() = r.leaks.len()));
    let o = Owner(3);
    let (buf, slow_stream, waiter, _ev) = waiter_behind_a_fill(&d, o, 1);
    let start = Instant::now();
    assert!(matches!(
        d.sync_stream(waiter, T),
        Err(Error::StreamFault(_))
    ));
    assert!(
        start.elapsed() < Duration::from_millis(390),
        "the watchdog did not fire"
    );
    let mut out = [0u8; 1];
    let other = d.read(slow_stream, At(buf.into(), 0), &mut out, T);
    assert!(
        matches!(other, Err(Error::StreamFault(_))),
        "the other stream survived: {other:?}"
    );
    assert!(matches!(
        d.alloc(o, 64, ExportKind::Ipc),
        Err(Error::StreamFault(_))
    ));
    assert!(matches!(d.free(buf), Err(Error::StreamFault(_))));
    assert_eq!(
        d.ledger().totals().buffers.live,
        1,
        "a failed free releases nothing"
    );
    drop(d);
    assert_eq!(
        *seen.lock().unwrap(),
        4,
        "buffer, two streams, event reported"
    );
}

/// An injected fault (an illegal address) is sticky in the same way.
#[test]
fn an_injected_fault_is_sticky() {
    let d = EmulatedDevice::new();
    d.ledger().set_leak_hook(Box::new(|_| {}));
    let o = Owner(9);
    let (s1, s2) = (d.create_stream(o).unwrap(), d.create_stream(o).unwrap());
    d.inject_fault(s1).unwrap();
    assert!(matches!(d.sync_stream(s1, T), Err(Error::StreamFault(_))));
    assert!(matches!(d.sync_stream(s2, T), Err(Error::StreamFault(_))));
    assert!(matches!(d.create_event(o), Err(Error::StreamFault(_))));
}

/// No watchdog by default: a stream waits for an event as long as it takes (CUDA never times
/// out a stream wait). Checked failing before the change (default bound 10 s: the emulation
/// had a bound, now `watchdog` is `None`), and here with a wait longer than a tight bound.
#[test]
fn stream_waits_have_no_bound_by_default() {
    assert!(EmulatedOptions::default().watchdog.is_none());
    let d = EmulatedDevice::with_options(EmulatedOptions {
        op_delay: Duration::from_millis(300),
        ..EmulatedOptions::default()
    });
    let o = Owner(8);
    let (buf, slow_stream, waiter, ev) = waiter_behind_a_fill(&d, o, 5);
    let mut out = [0u8; 1];
    d.read(waiter, At(buf.into(), 0), &mut out, T).unwrap();
    assert_eq!(out, [5]);
    // A wait that can never end does not hang the stream's destruction.
    let never = d.create_event(o).unwrap();
    d.record(never, slow_stream).unwrap();
    d.fill(slow_stream, buf.into(), 0, 64, 6).unwrap();
    d.destroy_stream(slow_stream, Duration::from_millis(10))
        .unwrap_err();
    d.destroy_event(ev).unwrap();
    d.destroy_event(never).unwrap();
    d.destroy_stream(waiter, T).unwrap();
    d.free(buf).unwrap();
}

/// A free that cannot finish (work still queued on the buffer past `host_wait`) releases
/// nothing: the buffer stays live, charged and freeable. Checked failing before the change:
/// the ledger entry left before the wait, so the timed-out buffer was not in any report.
#[test]
fn a_failed_free_keeps_the_ledger_entry() {
    let d = EmulatedDevice::with_options(EmulatedOptions {
        op_delay: Duration::from_millis(300),
        host_wait: Duration::from_millis(20),
        ..EmulatedOptions::default()
    });
    let o = Owner(12);
    let buf = d.alloc(o, 4096, ExportKind::Ipc).unwrap();
    let s = d.create_stream(o).unwrap();
    d.fill(s, buf.into(), 0, 4096, 1).unwrap();
    assert!(matches!(d.free(buf), Err(Error::Timeout { .. })));
    assert_eq!(d.ledger().totals().buffers.live, 1);
    assert_eq!(d.ledger().leak_report().leaks.len(), 2, "buffer and stream");
    d.sync_stream(s, T).unwrap();
    d.free(buf).unwrap();
    d.destroy_stream(s, T).unwrap();
    assert!(d.ledger().leak_report().is_empty());
}

/// Charges are the padded sizes: an NV12 1080p frame takes 4 MiB, a 4 KiB VMM buffer 2 MiB
/// (checked failing before the change: the requested length was charged).
#[test]
fn buffers_and_mappings_are_charged_padded() {
    let (a, b) = (EmulatedDevice::new(), EmulatedDevice::new());
    let nv12 = a.alloc(Owner(1), 3_110_400, ExportKind::Ipc).unwrap();
    let small = a.alloc(Owner(1), 4096, ExportKind::Fd).unwrap();
    assert_eq!(a.ledger().totals().buffers.live_bytes, 6 << 20);
    assert_eq!(
        a.size(nv12.into()).unwrap(),
        3_110_400,
        "size() is the asked length"
    );
    // A 4 KiB VMM mapping maps (and is charged) a whole 2 MiB granule; the padded charge of an
    // opened IPC mapping is checked by the child of `ipc_pair_across_two_processes`.
    let m = b
        .open(Owner(2), &a.export(small, ExportKind::Fd).unwrap())
        .unwrap();
    assert_eq!(b.ledger().totals().mappings.live_bytes, 2 << 20);
    b.close(m).unwrap();
    a.free(nv12).unwrap();
    a.free(small).unwrap();
}

/// The emulation refuses to open IPC handles (buffers and events) exported by this same
/// process, as CUDA does (`CUDA_ERROR_INVALID_CONTEXT`). Checked failing before the change.
#[test]
fn same_process_ipc_opens_are_refused() {
    let (a, b) = (EmulatedDevice::new(), EmulatedDevice::new());
    let buf = a.alloc(Owner(1), 4096, ExportKind::Ipc).unwrap();
    let ev = a.create_event(Owner(1)).unwrap();
    let r = b.open(Owner(2), &a.export(buf, ExportKind::Ipc).unwrap());
    assert!(matches!(r, Err(Error::Driver { code: 201, .. })), "{r:?}");
    let r = b.open_event(Owner(2), &a.export_event(ev).unwrap());
    assert!(matches!(r, Err(Error::Driver { code: 201, .. })), "{r:?}");
    assert_eq!(b.ledger().totals().live_total(), 0);
    // VMM fds may be imported in the exporting process (the driver allows it).
    let fd_buf = a.alloc(Owner(1), 4096, ExportKind::Fd).unwrap();
    let m = b
        .open(Owner(2), &a.export(fd_buf, ExportKind::Fd).unwrap())
        .unwrap();
    b.close(m).unwrap();
    a.destroy_event(ev).unwrap();
    a.free(buf).unwrap();
    a.free(fd_buf).unwrap();
}

#[test]
fn out_of_memory_and_mapping_ceiling() {
    let d = EmulatedDevice::with_options(EmulatedOptions {
        total_bytes: 8 << 20,
        ..EmulatedOptions::default()
    });
    let o = Owner(4);
    // 5 MiB + 1 is charged 6 MiB (2 MiB granules); 2 MiB + 1 would be 4 MiB: 8 MiB fit, not
    // more.
    let a = d.alloc(o, (5 << 20) + 1, ExportKind::Fd).unwrap();
    assert!(matches!(
        d.alloc(o, (2 << 20) + 1, ExportKind::Fd),
        Err(Error::OutOfMemory { .. })
    ));
    assert_eq!(
        d.ledger().totals().buffers.live,
        1,
        "a refused allocation stays uncounted"
    );
    assert_eq!(d.mem_info().unwrap().free, 2 << 20);

    let b = EmulatedDevice::new();
    let mut limits = b.ledger().limits();
    limits.max_mappings = 1;
    b.ledger().set_limits(limits);
    let h = d.export(a, ExportKind::Fd).unwrap();
    let m = b.open(Owner(5), &h).unwrap();
    assert!(matches!(
        b.open(Owner(5), &h),
        Err(Error::CountCeiling {
            kind: ResourceKind::Mapping,
            live: 1,
            limit: 1
        })
    ));
    assert_eq!(b.ledger().owner(Owner(5)).mappings.ceiling_hits, 1);
    b.close(m).unwrap();
    d.free(a).unwrap();
}

/// Handle bytes a child process reads from `RING_CUDA_TEST_HANDLES`: memory handles of
/// `(raw, len)` pairs, back to back.
fn mem_handles(hexed: &str) -> Vec<IpcMemHandle> {
    unhex(hexed)
        .chunks(72)
        .map(|c| {
            let mut h = IpcMemHandle {
                raw: [0; 64],
                len: u64::from_le_bytes(c[64..72].try_into().unwrap()),
            };
            h.raw.copy_from_slice(&c[..64]);
            h
        })
        .collect()
}

fn encode(handles: &[IpcMemHandle]) -> String {
    let mut raw = Vec::new();
    for h in handles {
        raw.extend_from_slice(&h.raw);
        raw.extend_from_slice(&h.len.to_le_bytes());
    }
    hex(&raw)
}

fn ipc(d: &EmulatedDevice, b: ring_cuda::BufferId) -> IpcMemHandle {
    match d.export(b, ExportKind::Ipc).unwrap() {
        MemHandle::Ipc(h) => h,
        MemHandle::Fd { .. } => panic!("an Ipc export produced an fd"),
    }
}

/// Hostile handle bytes are refused by the opener in another process (in the exporter's own
/// process every IPC handle is refused first, as by CUDA): wrong magic, a length past the
/// buffer, a wrong nonce, non-zero reserved bytes, a dead exporter pid, a freed buffer.
#[test]
fn hostile_handles_are_refused() {
    const NAME: &str = "hostile_handles_are_refused";
    if role().as_deref() == Some("hostile-opener") {
        let [h, freed] = mem_handles(&env("RING_CUDA_TEST_HANDLES"))[..] else {
            panic!("two handles expected");
        };
        let b = EmulatedDevice::new();
        let open = |h: IpcMemHandle| b.open(Owner(7), &MemHandle::Ipc(h));
        let mut bad_magic = h;
        bad_magic.raw[0] ^= 0xFF;
        assert!(matches!(open(bad_magic), Err(Error::InvalidHandle(_))));
        let long = IpcMemHandle { len: 1 << 30, ..h };
        assert!(matches!(open(long), Err(Error::InvalidHandle(_))));
        let mut wrong_nonce = h;
        wrong_nonce.raw[16] ^= 1;
        assert!(matches!(open(wrong_nonce), Err(Error::StaleHandle)));
        let mut reserved = h;
        reserved.raw[40] = 1;
        assert!(open(reserved).is_err());
        let mut dead_pid = h;
        dead_pid.raw[8..12].copy_from_slice(&(u32::MAX / 2).to_le_bytes());
        assert!(matches!(open(dead_pid), Err(Error::StaleHandle)));
        assert!(matches!(open(freed), Err(Error::StaleHandle)));
        let t = b.ledger().totals().mappings;
        assert_eq!((t.live, t.acquired), (0, 0), "failed opens stay uncounted");
        // The good handle opens: the refusals above were about the bytes.
        let m = open(h).unwrap();
        b.close(m).unwrap();
        println!("CHILD OK");
        return;
    }
    let a = EmulatedDevice::new();
    let buf = a.alloc(Owner(6), 4096, ExportKind::Ipc).unwrap();
    let gone = a.alloc(Owner(6), 4096, ExportKind::Ipc).unwrap();
    let handles = [ipc(&a, buf), ipc(&a, gone)];
    a.free(gone).unwrap();
    let mut child = Child::spawn(
        NAME,
        "hostile-opener",
        &[("RING_CUDA_TEST_HANDLES", encode(&handles))],
    );
    child.expect("CHILD OK");
    child.finish();
    a.free(buf).unwrap();
}

/// A failed `cuMemUnmap` still frees the address range and releases the allocation handle
/// (the release runs every step, in the CUDA device's order, through the same function), is
/// returned to the caller, and stays visible in the ledger: the entry is kept, marked with the
/// failed call, and counted in `failed_releases`. Checked failing before the change: the
/// emulated device had no VMM release sequence and could not fail one.
#[test]
fn a_failed_unmap_still_releases_what_it_can_and_is_reported() {
    let (a, b) = (EmulatedDevice::new(), EmulatedDevice::new());
    a.ledger().set_leak_hook(Box::new(|_| {}));
    b.ledger().set_leak_hook(Box::new(|_| {}));
    let len = 4096;
    let padded = padded_len(len, ExportKind::Fd, LARGE_PAGE).unwrap();
    let buf = a.alloc(Owner(1), len, ExportKind::Fd).unwrap();
    let warm = a.create_stream(Owner(1)).unwrap();
    a.destroy_stream(warm, T).unwrap();
    let resident = a.mem_info().unwrap().free;
    let m = b
        .open(Owner(2), &a.export(buf, ExportKind::Fd).unwrap())
        .unwrap();
    assert_eq!(b.reserved_address_space(), (1, padded));

    // A mapping whose unmap fails.
    b.fail_release_step("cuMemUnmap");
    assert_driver_failed(b.close(m), "cuMemUnmap");
    assert_eq!(b.reserved_address_space(), (0, 0), "the range was freed");
    let t = b.ledger().totals().mappings;
    assert_eq!((t.live, t.failed_releases), (1, 1), "the entry is kept");
    let report = b.ledger().leak_report();
    assert_eq!(report.leaks[0].release_failed, Some("cuMemUnmap"));
    assert!(report.to_string().contains("release failed in cuMemUnmap"));
    assert!(
        matches!(b.close(m), Err(Error::UnknownId { .. })),
        "the mapping is gone from the tables"
    );

    // A buffer whose unmap fails: the handle is released too, so its memory goes.
    a.fail_release_step("cuMemUnmap");
    assert_driver_failed(a.free(buf), "cuMemUnmap");
    assert_eq!(a.reserved_address_space(), (0, 0), "the range was freed");
    assert_eq!(
        a.mem_info().unwrap().free,
        resident + padded,
        "the handle was released: its memory went"
    );
    let t = a.ledger().totals().buffers;
    assert_eq!((t.live, t.failed_releases), (1, 1));
    assert_eq!(
        a.ledger().leak_report().leaks[0].release_failed,
        Some("cuMemUnmap")
    );

    // A failed release of the handle keeps the memory (as the driver would): it shows.
    let kept = a.alloc(Owner(1), len, ExportKind::Fd).unwrap();
    a.fail_release_step("cuMemRelease");
    assert_driver_failed(a.free(kept), "cuMemRelease");
    assert_eq!(a.reserved_address_space(), (0, 0));
    assert_eq!(a.mem_info().unwrap().free, resident);
}

#[test]
fn leak_report_on_drop_names_owner_size_and_age() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    {
        let d = EmulatedDevice::new();
        let sink = Arc::clone(&seen);
        d.ledger()
            .set_leak_hook(Box::new(move |r| sink.lock().unwrap().push(r.clone())));
        let _kept = d.alloc(Owner(0xBEEF), 12345, ExportKind::Ipc).unwrap();
        let freed = d.alloc(Owner(0xBEEF), 1, ExportKind::Ipc).unwrap();
        d.free(freed).unwrap();
        let _ev = d.create_event(Owner(0xCAFE)).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    let reports = seen.lock().unwrap();
    assert_eq!(reports.len(), 1, "one report per dropped device");
    let leaks = &reports[0].leaks;
    assert_eq!(leaks.len(), 2);
    assert_eq!(
        (leaks[0].kind, leaks[0].owner, leaks[0].bytes),
        (ResourceKind::Buffer, Owner(0xBEEF), 12800),
        "charged padded to 512 bytes"
    );
    assert!(leaks[0].age >= Duration::from_millis(5));
    assert_eq!(
        (leaks[1].kind, leaks[1].owner),
        (ResourceKind::Event, Owner(0xCAFE))
    );
    assert!(reports[0].to_string().contains("owner#0xbeef"));
}

#[test]
fn a_clean_drop_reports_nothing() {
    let seen = Arc::new(Mutex::new(0));
    {
        let d = EmulatedDevice::new();
        let sink = Arc::clone(&seen);
        d.ledger()
            .set_leak_hook(Box::new(move |_| *sink.lock().unwrap() += 1));
        let b = d.alloc(Owner(1), 10, ExportKind::Fd).unwrap();
        d.free(b).unwrap();
    }
    assert_eq!(*seen.lock().unwrap(), 0);
}

#[test]
fn per_owner_peaks_and_the_mapping_cache_opens_once() {
    let (a, b) = (EmulatedDevice::new(), EmulatedDevice::new());
    let bufs: Vec<_> = (0..4)
        .map(|_| a.alloc(Owner(10), 1024, ExportKind::Fd).unwrap())
        .collect();
    let handles: Vec<_> = bufs
        .iter()
        .map(|&x| a.export(x, ExportKind::Fd).unwrap())
        .collect();
    let mut cache: MappingCache<usize> = MappingCache::new();
    for _round in 0..50 {
        for (i, h) in handles.iter().enumerate() {
            cache.get_or_open(i, || b.open(Owner(20), h)).unwrap();
        }
    }
    let st = cache.stats();
    assert_eq!((st.opens, st.hits, st.live), (4, 196, 4));
    let o = b.ledger().owner(Owner(20)).mappings;
    // Each 1 KiB VMM mapping takes a 2 MiB granule.
    assert_eq!(
        (o.live, o.peak, o.acquired, o.live_bytes),
        (4, 4, 4, 8 << 20)
    );
    cache.close_all(&b).unwrap();
    let o = b.ledger().owner(Owner(20)).mappings;
    assert_eq!((o.live, o.peak, o.released), (0, 4, 4));
    for x in bufs {
        a.free(x).unwrap();
    }
    let p = a.ledger().owner(Owner(10)).buffers;
    assert_eq!((p.live, p.peak, p.peak_bytes), (0, 4, 8 << 20));
}

/// The IPC pair with the strict default device, across two processes (same-process opens are
/// refused, as by CUDA): the parent exports a buffer and an event and queues a slow write;
/// the child opens both, makes its stream wait for the event, reads, writes a reply. The
/// replacement of the in-process pair for `ExportKind::Ipc` with events.
#[test]
fn ipc_pair_across_two_processes() {
    const NAME: &str = "ipc_pair_across_two_processes";
    if role().as_deref() == Some("opener") {
        let raw = unhex(&env("RING_CUDA_TEST_HANDLES"));
        let b = EmulatedDevice::new();
        let mut mh = IpcMemHandle {
            raw: [0; 64],
            len: u64::from_le_bytes(raw[64..72].try_into().unwrap()),
        };
        mh.raw.copy_from_slice(&raw[..64]);
        let mut eh = ring_cuda::IpcEventHandle { raw: [0; 64] };
        eh.raw.copy_from_slice(&raw[72..136]);
        let o = Owner(2);
        let m = b.open(o, &MemHandle::Ipc(mh)).unwrap();
        // An opened IPC mapping is charged as the driver pads it (whole 2 MiB pages here).
        assert_eq!(b.ledger().totals().mappings.live_bytes, 4 << 20);
        let ev = b.open_event(o, &eh).unwrap();
        let s = b.create_stream(o).unwrap();
        b.wait_event(s, ev).unwrap();
        let mut out = [0u8; 6];
        b.read(s, At(m.into(), 4096), &mut out, T).unwrap();
        assert_eq!(&out, b"across", "the child read before the parent's write");
        b.write(s, m.into(), 0, b"reply").unwrap();
        b.sync_stream(s, T).unwrap();
        b.destroy_stream(s, T).unwrap();
        b.destroy_event(ev).unwrap();
        b.close(m).unwrap();
        assert_eq!(b.ledger().totals().live_total(), 0);
        println!("CHILD OK");
        return;
    }
    let a = slow(100);
    let (buf, s, ev) = buffer_stream_event(&a, Owner(1), 3_110_400);
    a.fill(s, buf.into(), 0, 8192, 0).unwrap();
    a.write(s, buf.into(), 4096, b"across").unwrap();
    a.record(ev, s).unwrap();
    let MemHandle::Ipc(mh) = a.export(buf, ExportKind::Ipc).unwrap() else {
        panic!("an Ipc export produced an fd");
    };
    let eh = a.export_event(ev).unwrap();
    let mut raw = mh.raw.to_vec();
    raw.extend_from_slice(&mh.len.to_le_bytes());
    raw.extend_from_slice(&eh.raw);
    let mut child = Child::spawn(NAME, "opener", &[("RING_CUDA_TEST_HANDLES", hex(&raw))]);
    child.expect("CHILD OK");
    child.finish();
    let mut back = [0u8; 5];
    a.read(s, At(buf.into(), 0), &mut back, T).unwrap();
    assert_eq!(&back, b"reply");
    a.destroy_stream(s, T).unwrap();
    a.destroy_event(ev).unwrap();
    a.free(buf).unwrap();
}

/// The emulated device's free memory is the device's, not the ledger's: the context's
/// one-time memory shows on first use and stays, so a baseline taken on a fresh context would
/// call it a leak (checked failing before the change: `mem_info` was computed from the ledger
/// and never moved).
#[test]
fn baselines_need_a_warm_up_cycle() {
    let d = EmulatedDevice::new();
    let fresh = d.mem_info().unwrap().free;
    let ev = d.create_event(Owner(1)).unwrap();
    d.destroy_event(ev).unwrap();
    let warm = d.mem_info().unwrap().free;
    assert_eq!(fresh - warm, EmulatedOptions::default().context_bytes);
    let buf = d.alloc(Owner(1), 3_110_400, ExportKind::Ipc).unwrap();
    assert_eq!(
        warm - d.mem_info().unwrap().free,
        4 << 20,
        "a padded buffer"
    );
    d.free(buf).unwrap();
    assert_eq!(d.mem_info().unwrap().free, warm);
}

/// Churn across two processes on the strict device: the parent allocates, exports and frees
/// 300 buffers one by one; for each, a child process (this binary, role `churn-opener`) opens
/// and closes the handle it reads on stdin and answers on stdout. Both sides' live counts and
/// the parent's free memory (baseline after a warm-up cycle) come back; every handle of a
/// freed buffer is stale in the child.
#[test]
fn ipc_churn_across_two_processes() {
    use std::io::{BufRead, BufReader, Write};

    const NAME: &str = "ipc_churn_across_two_processes";
    if role().as_deref() == Some("churn-opener") {
        let b = EmulatedDevice::new();
        let mut stale = None;
        for line in std::io::stdin().lock().lines() {
            let raw = unhex(&line.unwrap());
            let mut h = IpcMemHandle {
                raw: [0; 64],
                len: u64::from_le_bytes(raw[64..72].try_into().unwrap()),
            };
            h.raw.copy_from_slice(&raw[..64]);
            if let Some(old) = stale.replace(h) {
                let r = b.open(Owner(2), &MemHandle::Ipc(old));
                assert!(matches!(r, Err(Error::StaleHandle)), "{r:?}");
            }
            let m = b.open(Owner(2), &MemHandle::Ipc(h)).unwrap();
            b.close(m).unwrap();
            println!("CHURN-OK");
        }
        let t = b.ledger().totals();
        assert_eq!((t.live_total(), t.mappings.acquired), (0, 300 + 1));
        println!("CHILD OK");
        return;
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(common::ROLE, "churn-opener")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_child = child.stdin.take().unwrap();
    let mut from_child = BufReader::new(child.stdout.take().unwrap()).lines();
    let a = EmulatedDevice::new();
    let mut cycle = |i: u32| {
        let buf = a.alloc(Owner(1), 64 << 10, ExportKind::Ipc).unwrap();
        let MemHandle::Ipc(h) = a.export(buf, ExportKind::Ipc).unwrap() else {
            panic!("an Ipc export produced an fd");
        };
        let mut raw = h.raw.to_vec();
        raw.extend_from_slice(&h.len.to_le_bytes());
        writeln!(to_child, "{}", hex(&raw)).unwrap();
        // The child's test harness prints its own text too (the first answer shares a line
        // with "test ... "): look for the marker at the end of a line.
        let answer = from_child.find(|l| l.as_deref().is_ok_and(|l| l.ends_with("CHURN-OK")));
        assert!(answer.is_some(), "cycle {i}: the child stopped answering");
        a.free(buf).unwrap();
    };
    cycle(0);
    let base = a.mem_info().unwrap().free;
    for i in 1..=300 {
        cycle(i);
    }
    drop(to_child);
    assert!(
        from_child.any(|l| l.as_deref().is_ok_and(|l| l.contains("CHILD OK"))),
        "the child's checks failed"
    );
    assert!(child.wait().unwrap().success());
    assert_eq!(a.mem_info().unwrap().free, base);
    assert_eq!(a.ledger().totals().live_total(), 0);
}

/// `r` is the driver error of the release step `step` (set to fail with `fail_release_step`).
fn assert_driver_failed(r: ring_cuda::Result<()>, step: &str) {
    assert!(
        matches!(r, Err(Error::Driver { call, .. }) if call == step),
        "{r:?}"
    );
}

/// A 64-byte buffer of `o`'s, a stream filling it with `value` (slowly, on a device with an
/// operation delay), and a second stream waiting on the event recorded after the fill.
fn waiter_behind_a_fill(
    d: &EmulatedDevice,
    o: Owner,
    value: u8,
) -> (BufferId, StreamId, StreamId, EventId) {
    let buf = d.alloc(o, 64, ExportKind::Ipc).unwrap();
    let (slow_stream, waiter) = (d.create_stream(o).unwrap(), d.create_stream(o).unwrap());
    let ev = d.create_event(o).unwrap();
    d.fill(slow_stream, buf.into(), 0, 64, value).unwrap();
    d.record(ev, slow_stream).unwrap();
    d.wait_event(waiter, ev).unwrap();
    (buf, slow_stream, waiter, ev)
}
