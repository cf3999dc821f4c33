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
# The C ABI checks (ci/ffi.sh) build a CMake example against pkg-config; the multi-process
# tests use unshare (util-linux).
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v c++ >/dev/null 2>&1 || need+=(g++)
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
if ! command -v cbindgen >/dev/null 2>&1; then
    cargo install cbindgen --locked
fi
