//! `gpu-check.sh run` against fake binaries (no GPU, no cargo): one verdict line per scenario
//! to stdout and `$OUT/verdicts.txt`, the report in `$OUT/report.txt`, a failing step fails
//! the run, and a step that could end past the budget (its limit plus the kill grace) is
//! skipped and fails instead of running.
#![allow(clippy::std_instead_of_core, reason = "std test")]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The scenarios `run` reports, in order.
const SCENARIOS: [&str; 7] = [
    "device-tests-gpu",
    "emulated-control",
    "ring-control",
    "pipeline-nv12-30fps-1x3-vs-host-sync",
    "pipeline-nv12-full-speed-1x3",
    "pipeline-nv12-full-speed-1x3-vmm",
    "leak-10000-cycles-1x3",
];

/// A fresh folder of fake binaries: each prints its arguments; `gpu-pipeline` exits with
/// `pipeline_rc`.
fn fakes(test: &str, pipeline_rc: i32) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ring-cuda-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for (name, rc) in [
        ("gpu-pipeline", pipeline_rc),
        ("test-gpu", 0),
        ("test-emulated", 0),
        ("test-ring", 0),
    ] {
        let path = bin.join(name);
        std::fs::write(&path, format!("#!/bin/sh\necho {name} \"$@\"\nexit {rc}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

/// Runs `gpu-check.sh run` on the fakes in `dir`; returns (success, stdout, verdicts.txt,
/// report.txt).
fn run(dir: &Path, budget: Option<u32>) -> (bool, String, String, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("gpu-check.sh");
    let out = dir.join("out");
    let mut cmd = Command::new("bash");
    cmd.arg(script)
        .arg("run")
        .env("GPU_CHECK_BIN", dir.join("bin"))
        .env("OUT", &out);
    if let Some(b) = budget {
        cmd.env("GPU_CHECK_BUDGET", b.to_string());
    }
    let o = cmd.output().expect("run gpu-check.sh");
    let verdicts = std::fs::read_to_string(out.join("verdicts.txt")).unwrap_or_default();
    let report = std::fs::read_to_string(out.join("report.txt")).unwrap_or_default();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        verdicts,
        report,
    )
}

#[test]
fn every_scenario_gets_a_verdict_in_out() {
    let dir = fakes("verdicts", 0);
    let (ok, stdout, verdicts, report) = run(&dir, None);
    assert!(ok, "{stdout}");
    assert!(
        report.contains("gpu-pipeline --frames 500 --consumers 3"),
        "the report holds the steps' output: {report}"
    );
    let lines: Vec<_> = verdicts.lines().collect();
    assert_eq!(lines.len(), SCENARIOS.len(), "{verdicts}");
    for (line, name) in lines.iter().zip(SCENARIOS) {
        assert!(line.starts_with(&format!("VERDICT {name}: PASS")), "{line}");
        assert!(stdout.contains(line), "stdout has {line}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_failing_step_fails_the_run() {
    let dir = fakes("failing", 3);
    let (ok, _, verdicts, _) = run(&dir, None);
    assert!(!ok, "{verdicts}");
    let failed = verdicts
        .lines()
        .filter(|l| l.contains(": FAIL (exit 3"))
        .count();
    assert_eq!(failed, 4, "the four pipeline steps fail: {verdicts}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn steps_that_could_pass_the_budget_are_skipped() {
    let dir = fakes("budget", 0);
    // 60 s: the 90 s and 80 s steps cannot fit (limit + 5 s grace), the 40 s steps can.
    let (ok, _, verdicts, _) = run(&dir, Some(60));
    assert!(!ok, "{verdicts}");
    let skipped: Vec<_> = verdicts
        .lines()
        .filter(|l| l.contains("FAIL (skipped"))
        .collect();
    assert_eq!(skipped.len(), 3, "{verdicts}");
    for name in [SCENARIOS[0], SCENARIOS[3], SCENARIOS[6]] {
        assert!(
            skipped.iter().any(|l| l.contains(name)),
            "{name} skipped: {verdicts}"
        );
    }
    // 45 s exactly fits a 40 s step with its grace; 44 s does not.
    let (_, _, verdicts, _) = run(&dir, Some(44));
    assert_eq!(verdicts.matches("FAIL (skipped").count(), 7, "{verdicts}");
    let _ = std::fs::remove_dir_all(dir);
}
