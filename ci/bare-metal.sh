#!/usr/bin/env bash
# ring-core on bare metal under QEMU. Each example under examples/bare-metal/ runs a producer
# and a gating consumer of one ring on a bare-metal machine and exits through semihosting: 0
# when all of its 100000 checksummed messages arrived once, in order and intact. Each is also
# built with its `break-checksum` feature (one message corrupted on the producer side), and that
# run must fail, counting the corrupt message. The examples are outside the workspace (their own
# Cargo.lock); a separate target dir keeps these builds from evicting the host's.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

rustup target add riscv32imac-unknown-none-elf thumbv7em-none-eabihf thumbv6m-none-eabi
if ! command -v qemu-system-riscv32 >/dev/null 2>&1 || ! command -v qemu-system-arm >/dev/null 2>&1; then
    apt-get update -qq
    # Without recommends: they pull in firmware and GUI packages the examples do not use.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        qemu-system-misc qemu-system-arm
fi

export CARGO_TARGET_DIR="$root/target/bare-metal" RUSTFLAGS="-D warnings"
log="$CARGO_TARGET_DIR/run.log"
mkdir -p "$CARGO_TARGET_DIR"

# run EXAMPLE [FEATURES]: builds, then runs it under QEMU (the runner in its .cargo/config.toml)
# with a time limit; leaves QEMU's exit status in $rc and its output in $log.
run() {
    local started=$SECONDS
    (cd "examples/bare-metal/$1" && cargo build --release ${2:+--features "$2"})
    set +e
    (cd "examples/bare-metal/$1" && timeout 120 cargo run -q --release ${2:+--features "$2"}) 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    set -e
    echo "   (exit status $rc, $((SECONDS - started)) s with the build)"
}

for example in riscv-harts cortex-m4-irq cortex-m0-cs; do
    echo "== $example"
    run "$example"
    if [ "$rc" -ne 0 ] || ! grep -q "received 100000 .*corrupt 0, out of order 0: ok" "$log"; then
        echo "FAIL: $example should exit 0 with every message intact" >&2
        exit 1
    fi
    echo "== $example --features break-checksum (must fail)"
    run "$example" break-checksum
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || ! grep -q "corrupt 1," "$log"; then
        echo "FAIL: $example with a corrupted message should exit non-zero, counting it" >&2
        exit 1
    fi
done
echo "== footprint (docs/OS.md, Bare metal): .text and .bss of a producer plus a consumer, Cortex-M4"
(cd examples/bare-metal/footprint && cargo build --release --bins)
if command -v llvm-size >/dev/null 2>&1; then
    (cd "$CARGO_TARGET_DIR/thumbv7em-none-eabihf/release" &&
        llvm-size -A baseline ring_core bbqueue heapless | grep -E "^(baseline|ring_core|bbqueue|heapless|\.text|\.bss) ")
fi
echo "bare metal: every example passed, and every broken variant failed as it should"
