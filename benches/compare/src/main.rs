//! `transport-bench-compare`: `transport-bench` with the peer crates, the workspace's harness
//! ([`ring_benches::cli`]) plus iceoryx2's links, so the slot ring, the floor, Unix sockets,
//! pipes, TCP and iceoryx2 are measured in one run and every figure is a ratio within it.
//!
//! ```text
//! cargo run --release --manifest-path benches/compare/Cargo.toml -- [--quick] [--json FILE]
//! ```
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std binary"
)]

mod ice;

use ring_benches::case::Transport;
use ring_benches::link::Peers;

/// iceoryx2, busy-polling and event-driven.
const PEERS: Peers = Peers {
    transports: &[Transport::Iceoryx2, Transport::Iceoryx2Event],
    parent_begin: ice::parent_begin,
    child_setup: ice::child_setup,
};

fn main() -> std::process::ExitCode {
    ring_benches::cli::main(Some(PEERS))
}
