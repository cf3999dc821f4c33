#!/usr/bin/env bash
# ring-core must build with no default features (no std, no alloc) for the embedded targets:
# thumbv6m has no compare-and-swap (portable-atomic + critical-section), thumbv7em and riscv32imc
# have no 64-bit atomics. A separate target dir keeps these builds from evicting the host's.
set -euo pipefail
for target in thumbv6m-none-eabi thumbv7em-none-eabihf riscv32imc-unknown-none-elf; do
    echo "== ring-core for $target (no_std)"
    CARGO_TARGET_DIR=target/nostd RUSTFLAGS="-D warnings" cargo build -p ring-core \
        --no-default-features --features critical-section --target "$target"
done
