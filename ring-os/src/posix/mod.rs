//! The portable POSIX backend's own pieces (`cfg(ring_portable)`: macOS, FreeBSD and the other
//! BSDs, and Linux with the `portable` feature): address waits across processes (`wait`, behind
//! [`crate::futex`]). `lock.rs` beside this file (role locks by `flock` on lock files) is the
//! crate's `lock` module there, in place of the OFD one, and `no_memfd.rs` its macOS segment
//! module for anonymous segments; segments, descriptor passing and the SIGBUS guard are
//! otherwise the Unix ones, with the platform differences kept where they arise (see
//! `docs/OS.md`, the portable backend).

pub(crate) mod wait;
