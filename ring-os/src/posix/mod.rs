//! The portable POSIX backend's own pieces (`cfg(ring_portable)`: macOS, FreeBSD and the other
//! BSDs, and Linux with the `portable` feature): address waits across processes (`wait`, behind
//! [`crate::futex`]). The role locks by `flock` on lock files replace `lock.rs` from `lock.rs`
//! beside this file; segments, descriptor passing and the SIGBUS guard are the Unix ones, with
//! the platform differences kept where they arise (see `docs/OS.md`, the portable backend).

pub(crate) mod wait;
