//! The cargo-fuzz oracles, on stable, inside `cargo test`.
//!
//! The oracles come from the `ring-oracles` crate (`verification/oracles`), which the fuzz
//! targets call too, and every target's oracle runs over
//! - the seed corpora (`fuzz/corpus/<target>/seed-*`) and the same seeds rebuilt from real
//!   segments now (so a layout change that breaks them is noticed here);
//! - every crash reproducer saved in `ring-core/tests/fuzz_seeds/<target>/` (a bug fuzzing
//!   found stays caught);
//! - a short, deterministic budget of pseudo-random inputs (and, for `attach`, mutated real
//!   segments), decoded exactly as libFuzzer's `fuzz_target!` decodes them.
//!
//! Each batch runs on a watchdog thread, so a loop that does not end fails the test instead of
//! hanging it. `RING_FUZZ_WRITE_SEEDS=1 cargo test -p ring-core --test fuzz_oracles` rewrites the
//! seed files; `RING_FUZZ_CASES=<n>` changes the pseudo-random budget (default 300 per target).
#![cfg(not(any(ring_loom, ring_shuttle)))]
#![allow(
    clippy::std_instead_of_core,
    missing_docs,
    reason = "a std test binary"
)]

use ring_oracles as oracles;

use oracles::arbitrary::{Arbitrary, Unstructured};
use oracles::seeds::{attach_seeds, random_seeds, XorShift};
use oracles::Outcome;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// The four targets, as named in `fuzz/Cargo.toml`.
const TARGETS: [&str; 4] = ["attach", "ops", "hostile_peer", "allocator"];

/// How long one batch may run before the watchdog calls it a hang.
const WATCHDOG: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Decodes `bytes` as `fuzz_target!(|input: T| ...)` does; `None` where libFuzzer would skip.
fn decode<'a, T: Arbitrary<'a>>(bytes: &'a [u8]) -> Option<T> {
    if bytes.len() < T::size_hint(0).0 {
        return None;
    }
    T::arbitrary_take_rest(Unstructured::new(bytes)).ok()
}

/// Runs target `target`'s oracle on one raw input.
fn run_one(target: &str, bytes: &[u8]) -> Outcome {
    match target {
        "attach" => oracles::attach::run(bytes),
        "ops" => decode::<oracles::ops::OpsInput>(bytes).map_or(Ok(()), |i| oracles::ops::run(&i)),
        "hostile_peer" => decode::<oracles::hostile::HostileInput>(bytes)
            .map_or(Ok(()), |i| oracles::hostile::run(&i)),
        "allocator" => decode::<oracles::allocator::AllocInput>(bytes)
            .map_or(Ok(()), |i| oracles::allocator::run(&i)),
        other => Err(format!("unknown target {other}")),
    }
}

/// Runs every `(name, bytes)` of `target` on a watchdog thread; panics naming the first failure.
fn run_batch(target: &'static str, inputs: Vec<(String, Vec<u8>)>) {
    let count = inputs.len();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut failures = Vec::new();
        for (name, bytes) in &inputs {
            // A panic inside the code under test is a failure too: report it, keep going.
            let result = std::panic::catch_unwind(|| run_one(target, bytes)).unwrap_or_else(|p| {
                let msg = p
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| p.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)");
                Err(format!("panicked: {msg}"))
            });
            if let Err(e) = result {
                // Keep the input for `debug_input` and for promotion to a reproducer.
                let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
                    .join("fuzz-failures")
                    .join(target);
                let saved = std::fs::create_dir_all(&dir)
                    .and_then(|()| std::fs::write(dir.join(name), bytes))
                    .map_or_else(
                        |e| format!("(not saved: {e})"),
                        |()| format!("(saved in {})", dir.join(name).display()),
                    );
                failures.push(format!("{target}/{name}: {e} {saved}"));
            }
        }
        let _ = tx.send(failures);
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(failures) => assert!(
            failures.is_empty(),
            "{} of {count} inputs failed:\n{}",
            failures.len(),
            failures.join("\n")
        ),
        Err(_) => panic!("{target}: {count} inputs did not finish within {WATCHDOG:?} (a hang)"),
    }
}

/// Files in `dir` whose names start with `prefix` (none if the folder is missing).
fn files(dir: &Path, prefix: &str) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, Vec<u8>)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            std::fs::read(e.path()).ok().map(|b| (name, b))
        })
        .collect();
    out.sort();
    out
}

fn cases() -> usize {
    std::env::var("RING_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

/// The seed corpus of every target, as it should be on disk.
fn generated_seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out: Vec<(&'static str, String, Vec<u8>)> = attach_seeds()
        .into_iter()
        .map(|(name, bytes)| ("attach", format!("seed-{name}"), bytes))
        .collect();
    // `model_ops` (the verification crate's model, run by its own proptest on stable) gets
    // seeds too; its oracle is not compiled here.
    for target in TARGETS[1..].iter().chain(&["model_ops"]) {
        for (i, bytes) in random_seeds(target, 4, 512).into_iter().enumerate() {
            out.push((target, format!("seed-{i}"), bytes));
        }
    }
    out
}

#[test]
fn seeds_from_real_segments_pass_every_oracle() {
    let seeds = generated_seeds();
    let write = std::env::var_os("RING_FUZZ_WRITE_SEEDS").is_some();
    for target in TARGETS {
        let batch: Vec<(String, Vec<u8>)> = seeds
            .iter()
            .filter(|(t, _, _)| *t == target)
            .map(|(_, n, b)| (n.clone(), b.clone()))
            .collect();
        assert!(!batch.is_empty(), "no seeds for {target}");
        run_batch(target, batch);
    }
    if write {
        for (target, name, bytes) in &seeds {
            let dir = repo().join("fuzz/corpus").join(target);
            std::fs::create_dir_all(&dir).expect("create the corpus folder");
            std::fs::write(dir.join(name), bytes).expect("write a seed");
        }
    }
    // The real segments are accepted: the attach oracle does its work on them, not on a refusal.
    for (name, bytes) in attach_seeds() {
        assert!(
            ring_core::HeapSegment::from_bytes(&bytes).is_ok(),
            "seed {name} is refused"
        );
    }
}

#[test]
fn corpus_seeds_and_crash_reproducers_stay_fixed() {
    for target in TARGETS {
        let mut batch = files(&repo().join("fuzz/corpus").join(target), "seed-");
        let saved = files(&repo().join("ring-core/tests/fuzz_seeds").join(target), "");
        batch.extend(saved);
        run_batch(target, batch);
    }
}

#[test]
fn attach_survives_mutated_real_segments() {
    let seeds = attach_seeds();
    let mut rng = XorShift::new(0x00a7_7ac4);
    let mut batch = Vec::new();
    for case in 0..cases() {
        let (name, base) = &seeds[case % seeds.len()];
        let mut bytes = base.clone();
        // A few word-sized or byte-sized changes, sometimes a truncation.
        for _ in 0..1 + rng.next_u64() % 4 {
            let at = (rng.next_u64() as usize) % bytes.len();
            let v = rng.next_u64();
            match v % 4 {
                0 => bytes[at] ^= 1 << ((v >> 8) % 8),
                1 => bytes[at] = (v >> 8) as u8,
                2 => {
                    let at = at & !7;
                    let end = (at + 8).min(bytes.len());
                    let word = if v & 256 != 0 { u64::MAX } else { v >> 9 };
                    bytes[at..end].copy_from_slice(&word.to_le_bytes()[..end - at]);
                }
                _ => {
                    if rng.next_u64() % 8 == 0 {
                        bytes.truncate(at);
                    }
                }
            }
        }
        batch.push((format!("{name}-mutant-{case}"), bytes));
    }
    run_batch("attach", batch);
}

fn random_batch(target: &'static str, len: usize) {
    let mut rng = XorShift::new(target.len() as u64 * 7919);
    let batch = (0..cases())
        .map(|i| {
            let n = 16 + (rng.next_u64() as usize) % len;
            (format!("random-{i}"), rng.bytes(n))
        })
        .collect();
    run_batch(target, batch);
}

#[test]
fn ops_random_sequences_match_the_model() {
    random_batch("ops", 1024);
}

#[test]
fn hostile_peer_random_sequences_fail_cleanly() {
    random_batch("hostile_peer", 1024);
}

#[test]
fn allocator_random_sequences_match_the_model() {
    random_batch("allocator", 1024);
}

#[test]
fn attach_random_bytes_are_refused_cleanly() {
    random_batch("attach", 4096);
}

/// `RING_FUZZ_DEBUG=<target>:<file> cargo test -p ring-core --test fuzz_oracles debug_input --
/// --ignored --nocapture` prints how one input decodes and what its oracle says.
#[test]
#[ignore = "a debugging aid, run by hand"]
fn debug_input() {
    let Some(spec) = std::env::var_os("RING_FUZZ_DEBUG") else {
        return;
    };
    let spec = spec.to_string_lossy().into_owned();
    let (target, path) = spec
        .split_once(':')
        .expect("RING_FUZZ_DEBUG=<target>:<file>");
    let bytes = std::fs::read(path).expect("read the input");
    match target {
        "ops" => println!("{:#?}", decode::<oracles::ops::OpsInput>(&bytes)),
        "hostile_peer" => println!("{:#?}", decode::<oracles::hostile::HostileInput>(&bytes)),
        "allocator" => println!("{:#?}", decode::<oracles::allocator::AllocInput>(&bytes)),
        _ => println!("{} bytes", bytes.len()),
    }
    println!("{:?}", run_one(target, &bytes));
}

/// Runs the `ops` oracle on `ops` in the smallest ring (one slot, `cap_words` + 1 words, one
/// consumer entry): the hand-written reproducers below.
fn run_ops(cap_words: u8, ops: Vec<oracles::ops::Op>) -> Outcome {
    let shape = oracles::ops::Shape {
        slots: 0,
        cap_words,
        consumers: 0,
    };
    oracles::ops::run(&oracles::ops::OpsInput { shape, ops })
}

/// A skip-on-lag consumer that jumps ahead, is refused for a small buffer, then reads: the
/// messages it skipped are counted once (`next - start == received + missed`).
#[test]
fn ops_skip_then_small_buffer_counts_missed_once() {
    use oracles::ops::{Class, Op};
    let ops = vec![
        Op::Register(Class::SkipOnLag),
        Op::Publish { len: 5, fill: 1 },
        Op::Publish { len: 5, fill: 2 },
        Op::Copy { who: 0, buf: 2 },
        Op::Copy { who: 0, buf: 8 },
    ];
    assert_eq!(run_ops(0, ops), Ok(()));
}

/// A short message over a longer one in the same slot: `Pinned::words` must still be
/// zero-padded past the length (found by the `ops` oracle; `WriteSlot::publish` pads now).
#[test]
fn ops_shorter_message_over_longer_is_padded() {
    use oracles::ops::{Class, Op};
    let ops = vec![
        Op::ProducerNew,
        Op::Register(Class::SkipOnLag),
        Op::Publish {
            len: 11,
            fill: 0xaa,
        },
        Op::Pin {
            who: 0,
            claim_while_pinned: false,
        },
        Op::Publish { len: 3, fill: 0xbb },
        Op::Pin {
            who: 0,
            claim_while_pinned: false,
        },
    ];
    assert_eq!(run_ops(1, ops), Ok(()));
}

/// A skip-on-lag consumer whose next message is destroyed by an aborted claim (one slot), and
/// that then finds the ring empty: the lost message is still counted as missed.
#[test]
fn ops_overrun_then_empty_counts_missed() {
    use oracles::ops::{Class, Finish, Op};
    let ops = vec![
        Op::Register(Class::SkipOnLag),
        Op::Publish { len: 5, fill: 1 },
        Op::Claim {
            writes: vec![],
            finish: Finish::Abort,
            blocking: false,
        },
        Op::Pin {
            who: 0,
            claim_while_pinned: false,
        },
        Op::Publish { len: 5, fill: 2 },
        Op::Copy { who: 0, buf: 8 },
    ];
    assert_eq!(run_ops(0, ops), Ok(()));
}

/// Every ABI 3 word a hostile peer can scribble, on a ring wider than the message line (two
/// slots of `INLINE_CAPACITY + 32` bytes, an inline and a payload-area message in them): the
/// inline words of a small message, its length moved across `INLINE_CAPACITY` and past the
/// slot, a stamp rolled back (by one message, to 0, to an odd value). Then pins, copies, bounded
/// waits and (in the oracle's batch probe) `try_read_batch` and `try_publish_batch` must fail
/// cleanly or return a whole message of a length the slot holds.
#[test]
fn hostile_abi3_words_fail_cleanly() {
    use oracles::hostile::{HostileInput, Step, Target, Value};
    use oracles::ops::{Class, Op, Shape};
    let inline = ring_core::INLINE_CAPACITY as u64;
    let cap = inline + 32;
    let pokes: Vec<(Target, Value)> = [0u8, 1]
        .into_iter()
        .flat_map(|index| {
            let inline_words = [0xF0u8, 0xF1, 0xFB]
                .map(move |word| (Target::Payload { index, word }, Value::Raw(u64::MAX)));
            let lens = [0, inline - 1, inline, inline + 1, cap, cap + 1, u64::MAX]
                .map(move |v| (Target::Slot { index, field: 2 }, Value::Raw(v)));
            let stamps = [
                Value::Delta(-2),
                Value::Delta(-1),
                Value::Small(0),
                Value::Delta(-4),
            ]
            .map(move |v| (Target::Slot { index, field: 1 }, v));
            inline_words.into_iter().chain(lens).chain(stamps)
        })
        .collect();
    let reads = |who: u8| {
        [
            Op::Pin {
                who,
                claim_while_pinned: false,
            },
            Op::Copy { who, buf: 255 },
            Op::WaitReady(who),
            Op::Pin {
                who,
                claim_while_pinned: true,
            },
        ]
    };
    let mut runs = 0;
    for (target, value) in pokes {
        for classes in [
            [Class::Gating, Class::SkipOnLag],
            [Class::LatestOnly, Class::Gating],
        ] {
            let mut steps = vec![
                Step::Op(Op::Register(classes[0])),
                Step::Op(Op::Register(classes[1])),
                // Slot 0 gets a small (inline) message, slot 1 one for the payload area.
                Step::Op(Op::Publish { len: 20, fill: 7 }),
                Step::Op(Op::Publish {
                    len: (inline + 17) as u8,
                    fill: 9,
                }),
                Step::Poke { target, value },
            ];
            for who in 0..2 {
                steps.extend(reads(who).map(Step::Op));
            }
            let input = HostileInput {
                // `cap_words` 0xFD: INLINE_CAPACITY + 32 bytes.
                shape: Shape {
                    slots: 1,
                    cap_words: 0xFD,
                    consumers: 1,
                },
                with_allocator: false,
                steps,
            };
            assert_eq!(input.shape.capacity() as u64, cap);
            assert_eq!(
                oracles::hostile::run(&input),
                Ok(()),
                "{target:?} <- {value:?}"
            );
            runs += 1;
        }
    }
    assert!(runs > 40);
}

/// A skip-on-lag consumer holds a message, then pins one more (its progress deferred: fewer
/// than `PROGRESS_EVERY` reads), then releases the hold: the release publishes everything,
/// the deferred read included (found by the never-stall proptest of the oracle model, whose
/// release stored only the cursor).
#[test]
fn ops_release_publishes_deferred_progress() {
    use oracles::ops::{Class, Op};
    let ops = vec![
        Op::Register(Class::SkipOnLag),
        Op::Publish { len: 5, fill: 1 },
        Op::Publish { len: 5, fill: 2 },
        Op::Hold(0),
        Op::Pin {
            who: 0,
            claim_while_pinned: false,
        },
        Op::Release { who: 0, which: 0 },
    ];
    // Four slots: both messages stay.
    let shape = oracles::ops::Shape {
        slots: 3,
        cap_words: 0,
        consumers: 0,
    };
    assert_eq!(
        oracles::ops::run(&oracles::ops::OpsInput { shape, ops }),
        Ok(())
    );
}
