//! Arrow IPC over the ring, zero-copy on the reading side: the counterpart in Rust of
//! `shmring.vgi` (docs/python.md).
//!
//! The producer process loans a slot of a pin-only ring ([`Publisher::loan`]) and lets
//! arrow-ipc's `StreamWriter` write a `RecordBatch` (an IPC stream: schema, batch, end marker)
//! straight into the loaned bytes through a fixed-size cursor, so a write can never pass the
//! slot; the message's first metadata word carries the stream's length. A reader in another
//! process (this binary run with the ring's name) pins the message and decodes the stream with
//! arrow-ipc's `StreamDecoder` over an Arrow `Buffer` that points at the pinned bytes: the
//! columns' values are the slot's bytes, not a copy (checked: the value buffers' addresses lie
//! inside the pinned message), and every value is checked against what was written.
//!
//! ```sh
//! cargo run --release --manifest-path examples/arrow-ipc/Cargo.toml   # exits 1 on any mismatch
//! ```
//!
//! One copy remains on the writing side, inside arrow-rs: its encoder gathers a batch's body
//! into a `Vec` before writing it out (`IpcDataGenerator::encoded_batch`), so the stream is
//! written into the slot from that staging buffer. The reading side copies nothing.

use core::ptr::NonNull;
use core::time::Duration;
use std::io::Cursor;
use std::sync::Arc;

use arrow_array::{Array, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_buffer::Buffer;
use arrow_ipc::reader::StreamDecoder;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{DataType, Field, Schema};
use ring_os::prelude::*;

type Result<T = ()> = core::result::Result<T, Box<dyn core::error::Error>>;

/// Batches sent, and rows in each.
const BATCHES: u64 = 8;
const ROWS: i64 = 10_000;

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("x", DataType::Float64, false),
        Field::new("name", DataType::Utf8, true),
    ]))
}

/// Batch `k`: ids `k * ROWS ..`, `x = id / 2`, a name for ids not divisible by 7 (else null).
fn batch(k: u64) -> Result<RecordBatch> {
    let base = i64::try_from(k)? * ROWS;
    let ids: Vec<i64> = (base..base + ROWS).collect();
    let x: Vec<f64> = ids.iter().map(|&i| i as f64 / 2.0).collect();
    let names: Vec<Option<String>> = ids
        .iter()
        .map(|&i| (i % 7 != 0).then(|| format!("row-{i}")))
        .collect();
    Ok(RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(Float64Array::from(x)),
            Arc::new(StringArray::from(names)),
        ],
    )?)
}

fn produce(name: &str) -> Result {
    let ring = Ring::builder(name)
        .slots(4)
        .slot_size(1 << 20)
        .pin_only(true)
        .create()?;
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .arg(name)
        .spawn()?;
    let mut publisher = ring.publisher()?;
    if !publisher.wait_for_subscribers(1, Duration::from_secs(10)) {
        return Err("no reader came".into());
    }
    for k in 0..BATCHES {
        let batch = batch(k)?;
        let capacity = ring.slot_size();
        let mut loan = publisher.loan(capacity, Duration::from_secs(10))?;
        // The stream goes straight into the slot; the cursor refuses to write past it.
        let written = {
            let mut sink = Cursor::new(loan.bytes());
            let mut writer = StreamWriter::try_new(&mut sink, &batch.schema())?;
            writer.write(&batch)?;
            writer.finish()?;
            drop(writer);
            sink.position()
        };
        loan.set_meta([written, k]);
        loan.send()?;
    }
    publisher.close(); // the reader drains, then is disconnected
    let ok = child.wait()?.success();
    println!("published {BATCHES} Arrow batches of {ROWS} rows; reader ok: {ok}");
    ok.then_some(()).ok_or_else(|| "the reader failed".into())
}

/// Decodes the IPC stream in `bytes` without copying it and checks batch `k`'s values.
fn check(bytes: &[u8], k: u64) -> Result {
    let (start, end) = (
        bytes.as_ptr() as usize,
        bytes.as_ptr() as usize + bytes.len(),
    );
    let inside = |p: *const u8| (start..end).contains(&(p as usize));
    let ptr = NonNull::new(bytes.as_ptr().cast_mut()).ok_or("empty message")?;
    // SAFETY: `bytes` is a pinned message: the producer cannot write it while the pin lives,
    // and the pin outlives this call. The buffer, and every array decoded from it, is dropped
    // before this function returns; nothing writes through it (Arrow buffers are immutable).
    let mut buffer = unsafe { Buffer::from_custom_allocation(ptr, bytes.len(), Arc::new(())) };
    let mut decoder = StreamDecoder::new();
    let mut got = None;
    while !buffer.is_empty() {
        if let Some(b) = decoder.decode(&mut buffer)? {
            got = Some(b);
        }
    }
    decoder.finish()?;
    let got = got.ok_or("the stream held no batch")?;
    let want = batch(k)?;
    if got != want {
        return Err(format!("batch {k} does not read back as written").into());
    }
    let col = |i: usize| got.column(i).to_data();
    let (ids, x, names) = (col(0), col(1), col(2));
    // Zero-copy: the values live in the pinned slot, not in a buffer of the decoder's.
    let zero_copy = inside(ids.buffers()[0].as_ptr())
        && inside(x.buffers()[0].as_ptr())
        && names.buffers().iter().all(|b| inside(b.as_ptr()))
        && names.nulls().is_some_and(|n| inside(n.buffer().as_ptr()));
    if !zero_copy {
        return Err(format!("batch {k}: a column was copied out of the slot").into());
    }
    let nulls = got.column(2).null_count();
    let base = i64::try_from(k)? * ROWS;
    let expect = (0..ROWS).filter(|i| (base + i) % 7 == 0).count();
    if nulls != expect {
        return Err(format!("batch {k}: {nulls} nulls, not {expect}").into());
    }
    Ok(())
}

fn read(name: &str) -> Result {
    let ring = Ring::builder(name).open()?;
    let mut subscriber = ring.subscriber(DeliveryClass::Gating)?;
    let mut k = 0;
    loop {
        let msg = match subscriber.recv_pinned() {
            Ok(msg) => msg,
            Err(RecvError::Disconnected) => break,
            Err(e) => return Err(e.into()),
        };
        let [len, seq] = msg.meta();
        let bytes = usize::try_from(len)
            .ok()
            .and_then(|n| msg.bytes().get(..n))
            .ok_or("the stream length passes the message")?;
        if seq != k {
            return Err(format!("batch {seq} came where {k} was due").into());
        }
        check(bytes, k)?;
        k += 1;
    }
    if k != BATCHES {
        return Err(format!("{k} of {BATCHES} batches").into());
    }
    Ok(())
}

/// With no argument: creates a ring and publishes into it (spawning the reader); with a ring
/// name: reads that ring.
fn main() {
    let result = match std::env::args().nth(1) {
        Some(ring) => read(&ring),
        None => produce(&format!("example-arrow-{}", std::process::id())),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
