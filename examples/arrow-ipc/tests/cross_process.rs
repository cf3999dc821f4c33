//! Runs the example: a producer process and a reader process; the reader checks every value
//! and that no column was copied out of the slot, and the producer exits 1 if it failed.

#[test]
fn a_batch_written_in_a_loan_reads_zero_copy_in_another_process() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ring-arrow-ipc-example"))
        .output()
        .expect("the example runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("reader ok: true"), "{stdout}");
}
