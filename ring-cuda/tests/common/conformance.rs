//! Conformance checks every [`Device`] must pass, as plain functions over the trait, so the
//! emulated-device suite (`tests/emulated.rs`) and the GPU check (`tests/gpu.rs`, carried to
//! the GPU machine by `gpu-check.sh`) run the same bodies against `EmulatedDevice` and
//! `CudaDevice`. Test machinery: it lives with the tests, not in the library.
//!
//! Each check returns `Err(description)` on the first violation. Checks taking two devices
//! open one device's exports on the other: in one process only [`ExportKind::Fd`] may be
//! opened (CUDA, and the emulation, refuse an IPC handle in the process that exported it); the
//! IPC pair runs across two processes (`tests/emulated.rs`).

use core::time::Duration;

use ring_cuda::{At, Device, Error, ExportKind, Mem, Owner, ResourceKind};
// The verification tree's one `ensure!` (ring-oracles is a dev-dependency: the test binaries
// `gpu-check.sh` carries are self-contained).
use ring_oracles::ensure;

/// Outcome of a conformance check.
pub type Check = core::result::Result<(), String>;

const T: Duration = Duration::from_secs(10);

fn ok<T>(what: &str, r: ring_cuda::Result<T>) -> core::result::Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// Allocate, write, fill, copy and read back; bounds and id errors; counters back to zero.
pub fn roundtrip<D: Device>(d: &D, kind: ExportKind) -> Check {
    let o = Owner(0x11);
    let before = d.ledger().owner(o);
    let a = ok("alloc a", d.alloc(o, 4096, kind))?;
    let b = ok("alloc b", d.alloc(o, 4096, kind))?;
    let s = ok("stream", d.create_stream(o))?;
    ok("write", d.write(s, a.into(), 100, b"hello device"))?;
    ok("fill", d.fill(s, b.into(), 0, 4096, 0xAB))?;
    ok("copy", d.copy(s, At(b.into(), 8), At(a.into(), 100), 12))?;
    let mut out = [0u8; 24];
    ok("read", d.read(s, At(b.into(), 0), &mut out, T))?;
    ensure!(out[..8] == [0xAB; 8], "fill not visible: {out:?}");
    ensure!(&out[8..20] == b"hello device", "copy not visible: {out:?}");
    ensure!(
        out[20..] == [0xAB; 4],
        "copy wrote past its length: {out:?}"
    );
    ensure!(
        matches!(
            d.write(s, a.into(), 4090, b"too long"),
            Err(Error::OutOfBounds { .. })
        ),
        "out-of-bounds write accepted"
    );
    ensure!(
        matches!(
            d.read(s, At(a.into(), u64::MAX), &mut [0u8; 2], T),
            Err(Error::OutOfBounds { .. })
        ),
        "overflowing offset accepted"
    );
    ensure!(
        matches!(d.alloc(o, 0, kind), Err(Error::InvalidLength { len: 0 })),
        "zero-length allocation accepted"
    );
    ensure!(ok("size", d.size(a.into()))? == 4096, "size() wrong");
    let live = d.ledger().owner(o);
    ensure!(
        live.buffers.live == before.buffers.live + 2,
        "live count not 2 more: {live:?}"
    );
    // Charges are padded as the driver pads them: at least the bytes asked for.
    ensure!(
        live.buffers.live_bytes >= before.buffers.live_bytes + 8192,
        "live bytes below the bytes allocated"
    );
    ok("free a", d.free(a))?;
    ensure!(
        matches!(
            d.free(a),
            Err(Error::UnknownId {
                kind: ResourceKind::Buffer,
                ..
            })
        ),
        "double free accepted"
    );
    ensure!(
        matches!(
            d.write(s, Mem::Buffer(a), 0, b"x"),
            Err(Error::UnknownId { .. })
        ),
        "write to a freed buffer accepted"
    );
    ok("free b", d.free(b))?;
    ok("destroy stream", d.destroy_stream(s, T))?;
    let after = d.ledger().owner(o);
    ensure!(
        after.buffers.live == before.buffers.live && after.streams.live == before.streams.live,
        "live counts not back to baseline: {after:?}"
    );
    Ok(())
}

/// Byte and count ceilings refuse with clear errors and count the refusals.
pub fn ceilings<D: Device>(d: &D, kind: ExportKind) -> Check {
    let o = Owner(0x22);
    let saved = d.ledger().limits();
    let live = d.ledger().totals().buffers;
    let mut limits = saved;
    // Room for 2 MiB + one more small buffer however the device pads (2 MiB VMM granules).
    limits.max_bytes = live.live_bytes + (5 << 20);
    limits.max_buffers = live.live + 2;
    d.ledger().set_limits(limits);
    let result = (|| {
        let a = ok("alloc 1", d.alloc(o, 2 << 20, kind))?;
        let big = d.alloc(o, 4 << 20, kind);
        ensure!(
            matches!(big, Err(Error::BytesCeiling { .. })),
            "byte ceiling not enforced: {big:?}"
        );
        let b = ok("alloc 2", d.alloc(o, 4096, kind))?;
        let third = d.alloc(o, 4096, kind);
        ensure!(
            matches!(
                third,
                Err(Error::CountCeiling {
                    kind: ResourceKind::Buffer,
                    ..
                })
            ),
            "count ceiling not enforced: {third:?}"
        );
        ensure!(
            d.ledger().owner(o).buffers.ceiling_hits >= 2,
            "ceiling hits not counted"
        );
        ok("free", d.free(a))?;
        ok("free", d.free(b))?;
        Ok(())
    })();
    d.ledger().set_limits(saved);
    result
}

/// Events order work across streams without host syncs: a write on one stream, then a record,
/// then a wait on another stream, then a read there sees the write.
pub fn event_ordering<D: Device>(d: &D, kind: ExportKind) -> Check {
    let o = Owner(0x33);
    let buf = ok("alloc", d.alloc(o, 1 << 20, kind))?;
    let (s1, s2) = (
        ok("stream", d.create_stream(o))?,
        ok("stream", d.create_stream(o))?,
    );
    let ev = ok("event", d.create_event(o))?;
    ensure!(
        ok("query", d.query(ev))?,
        "a never-recorded event must query complete"
    );
    for round in 0u8..4 {
        ok("fill", d.fill(s1, buf.into(), 0, 1 << 20, round + 1))?;
        ok("record", d.record(ev, s1))?;
        ok("wait", d.wait_event(s2, ev))?;
        let mut out = [0u8; 4];
        ok(
            "read",
            d.read(s2, At(buf.into(), (1 << 20) - 4), &mut out, T),
        )?;
        ensure!(
            out == [round + 1; 4],
            "round {round}: stream 2 read {out:?} before the write"
        );
    }
    ok("synchronize", d.synchronize(ev, T))?;
    ensure!(
        ok("query", d.query(ev))?,
        "event not complete after synchronize"
    );
    ok("destroy event", d.destroy_event(ev))?;
    ok("destroy", d.destroy_stream(s1, T))?;
    ok("destroy", d.destroy_stream(s2, T))?;
    ok("free", d.free(buf))?;
    Ok(())
}

/// Export on `a`, open on `b`: data (and, with `share_events`, an interprocess event) cross;
/// counters on both sides; stale handles. Pass `share_events = false` for two CUDA devices in
/// one process (the driver opens IPC events only in another process); the check then orders
/// with a host sync instead.
pub fn ipc_pair<D: Device>(a: &D, b: &D, kind: ExportKind, share_events: bool) -> Check {
    let (oa, ob) = (Owner(0x44), Owner(0x55));
    let buf = ok("alloc", a.alloc(oa, 8192, kind))?;
    let sa = ok("stream a", a.create_stream(oa))?;
    let sb = ok("stream b", b.create_stream(ob))?;
    let ev = ok("event", a.create_event(oa))?;
    let handle = ok("export", a.export(buf, kind))?;
    let other = match kind {
        ExportKind::Ipc => ExportKind::Fd,
        ExportKind::Fd => ExportKind::Ipc,
    };
    ensure!(
        a.export(buf, other).is_err(),
        "export with the other kind accepted"
    );
    let eh = ok("export event", a.export_event(ev))?;
    let m = ok("open", b.open(ob, &handle))?;
    let bev = if share_events {
        Some(ok("open event", b.open_event(ob, &eh))?)
    } else {
        None
    };
    ensure!(
        b.ledger().owner(ob).mappings.live == 1,
        "mapping not counted on the opener"
    );
    ensure!(
        b.ledger().owner(ob).events.live == u32::from(share_events),
        "opened event not counted"
    );
    ok("write", a.write(sa, buf.into(), 4096, b"across"))?;
    ok("record", a.record(ev, sa))?;
    match bev {
        Some(bev) => ok("wait", b.wait_event(sb, bev))?,
        None => ok("host sync", a.synchronize(ev, T))?,
    }
    let mut out = [0u8; 6];
    ok("read", b.read(sb, At(m.into(), 4096), &mut out, T))?;
    ensure!(&out == b"across", "opener read {out:?}");
    ok("write back", b.write(sb, m.into(), 0, b"reply"))?;
    ok("sync", b.sync_stream(sb, T))?;
    let mut back = [0u8; 5];
    ok("read back", a.read(sa, At(buf.into(), 0), &mut back, T))?;
    ensure!(&back == b"reply", "exporter read {back:?}");
    ok("close", b.close(m))?;
    ensure!(b.close(m).is_err(), "double close accepted");
    if let Some(bev) = bev {
        ok("destroy opened event", b.destroy_event(bev))?;
    }
    ok("destroy event", a.destroy_event(ev))?;
    ok("free", a.free(buf))?;
    if let ring_cuda::MemHandle::Ipc(_) = handle {
        let stale = b.open(ob, &handle);
        ensure!(stale.is_err(), "a freed buffer's handle opened again");
    }
    ok("destroy", a.destroy_stream(sa, T))?;
    ok("destroy", b.destroy_stream(sb, T))?;
    ensure!(
        b.ledger().owner(ob).live_total() == 0,
        "opener still holds resources"
    );
    ensure!(
        a.ledger().owner(oa).live_total() == 0,
        "exporter still holds resources"
    );
    Ok(())
}

/// Bytes of each churn buffer.
const CHURN_BYTES: u64 = 64 << 10;

fn churn_cycle<D: Device>(a: &D, b: Option<&D>, kind: ExportKind, o: Owner) -> Check {
    let buf = ok("alloc", a.alloc(o, CHURN_BYTES, kind))?;
    if let Some(b) = b {
        let h = ok("export", a.export(buf, kind))?;
        let m = ok("open", b.open(o, &h))?;
        ok("close", b.close(m))?;
    }
    let ev = ok("event", a.create_event(o))?;
    ok("destroy event", a.destroy_event(ev))?;
    ok("free", a.free(buf))
}

/// Many alloc/export/open/close/free cycles (`cycles` after one warm-up cycle): live counts
/// and device memory return to the baseline taken after the warm-up (the driver's one-time
/// allocations are not leaks), within less than one buffer.
pub fn churn<D: Device>(a: &D, b: Option<&D>, cycles: u32, kind: ExportKind) -> Check {
    let o = Owner(0x66);
    churn_cycle(a, b, kind, o)?;
    let base_a = a.ledger().totals();
    let base_mem = ok("mem_info", a.mem_info())?;
    for i in 0..cycles {
        churn_cycle(a, b, kind, o)?;
        ensure!(
            a.ledger().totals().buffers.live == base_a.buffers.live,
            "cycle {i}: buffer leaked"
        );
    }
    let t = a.ledger().totals();
    ensure!(
        t.buffers.live == base_a.buffers.live,
        "buffers live {}",
        t.buffers.live
    );
    ensure!(
        t.buffers.peak <= base_a.buffers.live + 1,
        "peak grew: {}",
        t.buffers.peak
    );
    ensure!(
        t.events.live == base_a.events.live,
        "events live {}",
        t.events.live
    );
    if let Some(b) = b {
        ensure!(
            b.ledger().totals().mappings.live == 0,
            "mappings live on the opener"
        );
    }
    let mem = ok("mem_info", a.mem_info())?;
    // Slack below one buffer: one leaked buffer fails.
    ensure!(
        mem.free + (CHURN_BYTES - 1) >= base_mem.free,
        "device memory not back: {base_mem:?} -> {mem:?}"
    );
    Ok(())
}
