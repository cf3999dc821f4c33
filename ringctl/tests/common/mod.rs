//! Helpers shared by the `ringctl` integration tests.

use std::process::{Child, Command, Stdio};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_ringctl");

/// Spawns `ringctl args` with stdin, stdout and stderr piped.
pub fn spawn_piped(args: &[&str]) -> Child {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning ringctl")
}
