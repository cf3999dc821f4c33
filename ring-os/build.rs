//! Picks the Unix backend: `cfg(ring_portable)` selects the portable POSIX code paths
//! (`src/posix/`: role locks by `flock` on lock files, platform address waits or polling) on
//! every Unix without OFD locks (macOS, FreeBSD, the other BSDs), and on Linux when the `portable`
//! feature asks for it (so those paths are tested there; see `ci/portable.sh`).
//!
//! `cfg(ring_cross)` marks the Unix targets with both backends (Linux, Android): there the role
//! locks of the backend not chosen are probed too (`src/liveness/cross.rs`), so a program built
//! with either one sees the other's participants.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(ring_portable)");
    println!("cargo::rustc-check-cfg=cfg(ring_cross)");
    println!("cargo::rerun-if-changed=build.rs");
    let unix =
        std::env::var("CARGO_CFG_TARGET_FAMILY").is_ok_and(|f| f.split(',').any(|f| f == "unix"));
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let has_ofd_locks = os == "linux" || os == "android";
    let asked = std::env::var_os("CARGO_FEATURE_PORTABLE").is_some();
    if unix && (!has_ofd_locks || asked) {
        println!("cargo::rustc-cfg=ring_portable");
    }
    if unix && has_ofd_locks {
        println!("cargo::rustc-cfg=ring_cross");
    }
}
