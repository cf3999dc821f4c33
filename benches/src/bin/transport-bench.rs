//! `transport-bench`: the cross-process transport comparison, every transport but the peer
//! crates' (iceoryx2 is measured by benches/compare's build, outside the workspace). See
//! [`ring_benches::cli`].
//!
//! ```text
//! cargo run --release -p ring-benches --bin transport-bench -- [--quick] [--json FILE]
//! ```

fn main() -> std::process::ExitCode {
    ring_benches::cli::main(None)
}
