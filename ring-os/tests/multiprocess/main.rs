//! Multi-process tests: real processes (this binary re-executed in a child role), real mappings,
//! real SIGKILLs. Every scenario runs under a watchdog and every child under a deadline.
//!
//! `cargo test -p ring-os --test multiprocess [filter]`; `RING_OS_STRESS_N` sets the message count
//! of the stress scenario (default 1,000,000).
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std test"
)]
#![allow(
    missing_docs,
    clippy::undocumented_unsafe_blocks,
    reason = "test binary"
)]

// Unix-only: SIGBUS guard, pid namespaces / zombies / fork, truncation (a Windows section cannot
// shrink and a mapped file cannot be truncated).
#[cfg(unix)]
mod guard;
#[cfg(unix)]
mod liveness;
mod never_stall;
mod roles;
mod scenarios;
mod segments;
mod support;
#[cfg(unix)]
mod truncation;
#[cfg(windows)]
mod windows;

use std::time::{Duration, Instant};

/// A scenario: name, body, time budget.
type Scenario = (&'static str, fn(), Duration);

const SCENARIOS: &[Scenario] = &[
    #[cfg(windows)]
    (
        "terminated_role_holder_is_reported_abandoned_then_taken_over",
        windows::abandoned,
        Duration::from_secs(120),
    ),
    #[cfg(windows)]
    (
        "a_peer_parked_in_another_process_is_woken_by_the_semaphore",
        windows::cross_process_wake,
        Duration::from_secs(120),
    ),
    (
        "stress_three_classes_through_the_allocator",
        scenarios::stress,
        Duration::from_secs(240),
    ),
    (
        "sigkill_consumer_holding_pins_20_times",
        scenarios::kill_consumer,
        Duration::from_secs(120),
    ),
    (
        "a_reader_in_another_process_holds_8_while_it_reads_the_9th",
        scenarios::holds_across_processes,
        Duration::from_secs(120),
    ),
    (
        "asymmetric_fences_a_blocking_ping_pong_across_processes_loses_no_wake_up",
        scenarios::asymmetric_ping_pong,
        Duration::from_secs(120),
    ),
    (
        "late_readers_in_other_processes_start_with_the_rings_history",
        scenarios::history_across_processes,
        Duration::from_secs(60),
    ),
    (
        "never_stall_a_latest_only_reader_in_another_process_pinning_1080p_frames_10ms_never_stalls_the_producer",
        never_stall::latest_only_pins_never_stall,
        Duration::from_secs(60),
    ),
    (
        "never_stall_a_reader_in_another_process_holding_4_frames_for_a_second_never_stalls_the_producer",
        never_stall::four_pins_for_a_second_never_stall,
        Duration::from_secs(60),
    ),
    (
        "never_stall_a_gating_reader_in_another_process_still_holds_the_producer_back",
        never_stall::gating_reader_still_holds_the_producer_back,
        Duration::from_secs(60),
    ),
    (
        "three_member_processes_share_3000_messages_exactly_once",
        scenarios::group_exactly_once,
        Duration::from_secs(120),
    ),
    (
        "a_member_sigkilled_holding_a_message_gives_it_to_another",
        scenarios::group_member_killed,
        Duration::from_secs(120),
    ),
    (
        "sigkill_producer_is_producer_gone_then_take_over",
        scenarios::kill_producer,
        Duration::from_secs(60),
    ),
    (
        "corrupt_or_truncated_segment_is_a_clear_error",
        segments::corrupt,
        Duration::from_secs(60),
    ),
    #[cfg(unix)]
    (
        "creation_without_space_is_no_space",
        segments::no_space,
        Duration::from_secs(30),
    ),
    #[cfg(unix)]
    // macOS has no memfd rings.
    #[cfg(not(target_os = "macos"))]
    (
        "memfd_passed_over_a_socket_and_bad_ones_refused",
        segments::memfd,
        Duration::from_secs(60),
    ),
    #[cfg(unix)]
    (
        "other_pid_namespace_is_alive_and_cannot_be_taken_over",
        liveness::other_pid_namespace,
        Duration::from_secs(60),
    ),
    #[cfg(unix)]
    (
        "gating_reader_in_other_pid_namespace_gets_every_message",
        liveness::gating_reader_in_other_pid_namespace,
        Duration::from_secs(90),
    ),
    // A main thread that exits alone (`SYS_exit`), seen as a zombie in `/proc`: Linux.
    #[cfg(target_os = "linux")]
    (
        "zombie_leader_keeps_its_consumer",
        liveness::zombie_leader,
        Duration::from_secs(60),
    ),
    #[cfg(unix)]
    (
        "forked_heir_keeps_its_consumer",
        liveness::fork_heir,
        Duration::from_secs(60),
    ),
    #[cfg(unix)]
    (
        "half_created_segment_of_a_killed_creator_is_cleaned",
        liveness::half_created,
        Duration::from_secs(60),
    ),
    #[cfg(unix)]
    (
        "truncated_named_segment_under_streaming_endpoints_10_trials",
        truncation::named,
        Duration::from_secs(120),
    ),
    #[cfg(unix)]
    (
        "truncated_file_segment_under_streaming_endpoints_10_trials",
        truncation::file,
        Duration::from_secs(120),
    ),
    #[cfg(unix)]
    (
        "sigbus_outside_rings_reaches_the_previous_handler",
        guard::chain,
        Duration::from_secs(60),
    ),
    #[cfg(all(unix, not(target_os = "macos")))]
    (
        "memfd_ring_over_rendezvous_refuses_truncation",
        guard::rendezvous,
        Duration::from_secs(60),
    ),
    #[cfg(unix)]
    (
        "unbacked_pages_of_a_hostile_file_are_a_clear_error",
        guard::unbacked,
        Duration::from_secs(60),
    ),
    #[cfg(unix)]
    (
        "stale_segments_of_dead_owners_are_cleaned",
        segments::stale,
        Duration::from_secs(60),
    ),
];

fn main() {
    if let Ok(role) = std::env::var(support::ROLE) {
        std::process::exit(roles::run(&role));
    }
    let mut args = libtest_mimic::Arguments::from_args();
    // The scenarios spawn process trees and time their recoveries: one at a time, unless the
    // caller asks otherwise.
    args.test_threads.get_or_insert(1);
    let trials = SCENARIOS
        .iter()
        .map(|&(name, body, budget)| {
            libtest_mimic::Trial::test(name, move || watchdog(name, body, budget))
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}

/// Runs `body` with a time budget; a scenario past it ends the whole binary (its thread cannot
/// be stopped, and its children have their own deadlines).
fn watchdog(name: &str, body: fn(), budget: Duration) -> Result<(), libtest_mimic::Failed> {
    let start = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let ok = std::panic::catch_unwind(body).is_ok();
        let _ = tx.send(ok);
    });
    match rx.recv_timeout(budget) {
        Ok(true) => {
            let _ = handle.join();
            println!("  {name}: {:.2?}", start.elapsed());
            Ok(())
        }
        Ok(false) => {
            let _ = handle.join();
            Err("the scenario panicked (see above)".into())
        }
        Err(_) => {
            println!("test {name} ... FAILED (watchdog: over {budget:?})");
            std::process::exit(101);
        }
    }
}
