#!/usr/bin/env bash
# The portable POSIX backend of ring-os (src/liveness/flock.rs: role locks by flock on lock
# files; src/wait/address.rs: shared address waits or polling), which macOS and FreeBSD use:
#   1. on Linux, ring-os's whole suite (unit, multi-process, doc tests) on those code paths, with
#      the `portable` feature (flock role locks in /dev/shm/shmring-locks.<uid>, polling waits);
#   2. for macOS (arm64, x86_64) and FreeBSD (x86_64), `cargo clippy -D warnings` of ring-os,
#      ringctl and ring-ffi with their tests and examples, and of the Python extension (a compile
#      check: no linker or system to run them on here).
# See docs/OS.md, "Platforms", for what is tested, emulated or only compiled.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(aarch64-apple-darwin x86_64-apple-darwin x86_64-unknown-freebsd)
rustup target add "${targets[@]}"

echo "--- ring-os on the portable backend (Linux, --features portable)"
cargo clippy -p ring-os --features portable --all-targets -- -D warnings
cargo test -p ring-os --features portable

for target in "${targets[@]}"; do
    echo "--- clippy -D warnings for $target (ring-os, ringctl, ring-ffi; the Python extension)"
    cargo clippy --target "$target" -p ring-os -p ringctl -p ring-ffi --all-targets -- -D warnings
    # The Python package is a workspace of its own (abi3: no target interpreter needed).
    (cd python && cargo clippy --target "$target" -- -D warnings)
done
echo "portable: ok"
