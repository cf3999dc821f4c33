#!/usr/bin/env bash
# ring-os's `async` feature (off by default, so the workspace-wide steps do not build it):
# clippy with the feature, its tests (cancel safety, 100 waiting subscribers on at most two extra
# threads, an abort and a killed publisher reaching every future, also through an io_uring
# `Driver`; the driver's own wake-ups in async_uring and the reactor's unit tests, which skip with
# a printed reason where io_uring's futex wait is unavailable), the same tests on the polling
# backend, the 100-ring example and a smoke run of the benchmark (with the driver's ways where
# io_uring allows).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo clippy -p ring-os --features async --all-targets -- -D warnings
# ci/docs.sh builds the docs without features: the async module's links are checked here.
RUSTDOCFLAGS="-D warnings" cargo doc -p ring-os --features async --no-deps
tests=(--test async_cancel --test async_ends --test async_threads --test async_uring)
cargo test -p ring-os --features async --lib asyncio
cargo test -p ring-os --features async "${tests[@]}"
# Shows the io_uring driver's test outcome in the log: its wake-up count, or why it skipped.
cargo test -p ring-os --features async --test async_uring -- --nocapture
cargo test -p ring-os --features async --doc asyncio
# The fallback for kernels without futex_waitv (and other platforms): the same futures, polled.
SHMRING_ASYNC_POLL=1 cargo test -p ring-os --features async "${tests[@]}"
cargo run --release -p ring-os --features async --example async_many
cargo run --release -p ring-os --features async --example async_bench -- --quick
