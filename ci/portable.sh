#!/usr/bin/env bash
# The portable POSIX backend of ring-os (src/liveness/flock.rs: role locks by flock on lock
# files; src/wait/address.rs: shared address waits or polling), which macOS and FreeBSD use:
#   1. on Linux, ring-os's whole suite (unit, multi-process, doc tests) on those code paths, with
#      the `portable` feature (flock role locks in /dev/shm/shmring-locks.<uid>, polling waits);
#   2. on Linux, both backends at once: ringctl built with and without `portable`, each seeing
#      the rings the other holds (no removal, no take-over);
#   3. for macOS (arm64, x86_64) and FreeBSD (x86_64), `cargo clippy -D warnings` of ring-os,
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

echo "--- both Linux backends at once: a ring held through one is live to the other's ringctl"
# Real processes of two builds (docs/OS.md, "Both Linux backends"): ringctl without `portable`
# (OFD locks in the segment file) and with it (lock files). While one build's `pub` holds a ring,
# the other's `list` says live, its `clean` keeps the ring and its `pub` cannot take the producer
# over; once the holder is killed, the other's `clean` removes it.
cross=$(mktemp -d)
cargo build -q -p ringctl && cp target/debug/ringctl "$cross/ringctl-ofd"
cargo build -q -p ringctl --features ring-os/portable && cp target/debug/ringctl "$cross/ringctl-portable"
cross_check() { # $1: the build that holds the ring; $2: the build that must see it held
    local holder="$cross/ringctl-$1" other="$cross/ringctl-$2" name="ci-cross-$1-$$"
    local file="/dev/shm/shmring.$name"
    mkfifo "$cross/in-$1"
    exec {keep}<>"$cross/in-$1" # stdin stays open: `pub` holds the ring until it is killed
    "$holder" pub "$name" --frame-size 64 --wait-consumers 0 --keep <"$cross/in-$1" >/dev/null {keep}>&- &
    local pid=$!
    trap 'kill -9 '"$pid"' 2>/dev/null || true' EXIT # a failed check leaves no holder behind
    for _ in $(seq 200); do
        "$holder" inspect "$name" 2>/dev/null | grep -q '^producer: pid .*(alive)' && break
        sleep 0.05
    done
    "$other" list | grep -E "^$name +.* live " || { echo "$2 does not see $1's ring live"; exit 1; }
    "$other" clean "$name"
    [ -e "$file" ] || { echo "$2's clean removed $1's live ring"; exit 1; }
    if "$other" pub "$name" --frame-size 64 --wait-consumers 0 --keep </dev/null; then
        echo "$2's pub took over $1's live producer"
        exit 1
    fi
    kill -9 "$pid"
    wait "$pid" || true
    trap - EXIT
    exec {keep}>&-
    "$other" clean "$name"
    [ ! -e "$file" ] || { echo "$2's clean kept $1's dead ring"; exit 1; }
}
cross_check ofd portable
cross_check portable ofd
rm -rf "$cross"

for target in "${targets[@]}"; do
    echo "--- clippy -D warnings for $target (ring-os, ringctl, ring-ffi; the Python extension)"
    cargo clippy --target "$target" -p ring-os -p ringctl -p ring-ffi --all-targets -- -D warnings
    # The Python package is a workspace of its own (abi3: no target interpreter needed).
    (cd python && cargo clippy --target "$target" -- -D warnings)
done
echo "portable: ok"
