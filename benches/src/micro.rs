//! What the in-process criterion benches share with their baselines: `benches/ring.rs` (the
//! slot ring) and benches/compare's `baselines.rs` (rtrb, crossbeam-queue) measure the same
//! sizes and batches, so each ring figure has a baseline of the same shape.

/// Payload sizes of `claim_publish`, `publish_read` and `read`: 8 B .. 1 MiB.
pub const SIZES: [usize; 6] = [8, 64, 1024, 16 * 1024, 256 * 1024, 1024 * 1024];

/// Messages per `batch` sample.
pub const BATCH: usize = 32;

/// Message size of the `batch` group.
pub const BATCH_BYTES: usize = 64;
