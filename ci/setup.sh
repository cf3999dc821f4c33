#!/usr/bin/env bash
# Installs every toolchain piece the checks need. Idempotent; safe to run on a fresh machine.
set -euo pipefail
rustup component add rustfmt clippy
rustup target add thumbv6m-none-eabi thumbv7em-none-eabihf riscv32imc-unknown-none-elf
rustup toolchain install nightly --profile minimal
rustup component add --toolchain nightly miri rust-src llvm-tools-preview
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
