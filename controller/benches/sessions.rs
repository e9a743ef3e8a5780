//! Whole sessions, local and in containers.
//!
//! `cargo bench -p controller --bench sessions` runs the quick-start task (scripted model, so
//! the figures are the harness's and the sandbox's, not a model's) and prints a table:
//! - the time from starting `harness run` to the first tool call's event (median of 10);
//! - sessions per minute with 4 `harness run` processes at once (20 sessions).
//!
//! - `harness batch` of 24 such tasks at 1, 2, 4 and 8 at once: tasks per minute, the
//!   harness's own time per task (everything but tool and model time: starting and stopping the
//!   sandbox, seeding, snapshots, the log), median over the tasks, from their logs, and the time
//!   from a task's start (the batch log) to its first tool call; for Docker also with a warm
//!   pool (`--pool-size` as large as the tasks at once).
//!
//! `--sandbox docker` rows need a Docker engine and the image `agent-harness/sandbox`
//! (docker/README.md); without them the table says so. Loops are bounded by count.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::disallowed_methods
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::log_events::events;
use support::stats::median;
use support::{clock, log_line};

const FIRST_CALL_RUNS: usize = 10;
const PARALLEL: usize = 4;
const SESSIONS: usize = 20;

fn task() -> PathBuf {
    testkit::repo_root().join("examples/hello/task.yaml")
}

/// Runs one session; returns the wall time and the session folder.
fn session(sandbox: &str, logs: &Path) -> (Duration, PathBuf, u128) {
    let started_ms = clock::now_ms();
    let start = Instant::now();
    let output = support::harness::command()
        .args(["run", "--sandbox", sandbox, "--task"])
        .arg(task())
        .arg("--log-dir")
        .arg(logs)
        .output()
        .unwrap();
    let elapsed = start.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "session failed: {stderr}");
    let dir = log_line::log_dir(&stderr);
    (elapsed, dir, started_ms)
}

/// Milliseconds from `started_ms` to the first `tool_call` event of the log.
fn to_first_call(dir: &Path, started_ms: u128) -> u128 {
    let event = events(dir)
        .into_iter()
        .find(|event| event["type"] == "tool_call")
        .unwrap();
    clock::ms_of(&event).saturating_sub(started_ms)
}

/// Per task of a batch in `out`: milliseconds from its `task_started` in the batch log to its
/// session's first tool call.
fn batch_first_calls(out: &Path) -> Vec<u128> {
    events(out)
        .into_iter()
        .filter(|event| event["type"] == "task_started")
        .map(|event| {
            let dir = out.join(event["data"]["log_dir"].as_str().unwrap());
            to_first_call(&dir, clock::ms_of(&event))
        })
        .collect()
}

fn docker_ready() -> bool {
    Command::new("docker")
        .args(["image", "inspect", "agent-harness/sandbox"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

const BATCH_TASKS: usize = 24;

/// A folder of `BATCH_TASKS` copies of the quick-start task (its workspace and script beside).
fn batch_tasks(root: &Path) -> PathBuf {
    let example = task().parent().unwrap().to_owned();
    let dir = root.join("tasks");
    std::fs::create_dir_all(&dir).unwrap();
    let copied = Command::new("cp")
        .arg("-r")
        .arg(example.join("workspace"))
        .arg(dir.join("workspace"))
        .status()
        .unwrap();
    assert!(copied.success());
    std::fs::copy(example.join("script.yaml"), dir.join("script.turns")).unwrap();
    let text = std::fs::read_to_string(task())
        .unwrap()
        .replace("script:script.yaml", "script:script.turns");
    for i in 0..BATCH_TASKS {
        std::fs::write(dir.join(format!("t{i:02}.yaml")), &text).unwrap();
    }
    dir
}

/// Runs a batch; returns its wall time and each task's harness time (ms).
fn run_batch(sandbox: &str, parallel: usize, tasks: &Path, out: &Path) -> (Duration, Vec<u64>) {
    let start = Instant::now();
    let mut command = support::harness::command();
    command.args(["batch", "--progress", "lines", "--parallel"]);
    command.arg(parallel.to_string());
    match sandbox.strip_suffix("+pool") {
        Some(sandbox) => command
            .args(["--sandbox", sandbox, "--pool-size"])
            .arg(parallel.to_string()),
        None => command.args(["--sandbox", sandbox]),
    };
    let output = command.arg("--out").arg(out).arg(tasks).output().unwrap();
    let elapsed = start.elapsed();
    assert!(
        output.status.success(),
        "batch failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let harness: Vec<u64> = (0..BATCH_TASKS)
        .map(|i| {
            harness_replay::metrics::measure(&out.join(format!("t{i:02}")))
                .unwrap()
                .harness_ms
        })
        .collect();
    (elapsed, harness)
}

fn main() {
    let logs = tempfile::tempdir().unwrap();
    println!(
        "| sandbox | start to first tool call, median of {FIRST_CALL_RUNS} | session wall time, median | sessions/min with {PARALLEL} at once ({SESSIONS} sessions) |"
    );
    println!("|---|---|---|---|");
    for sandbox in ["local", "docker"] {
        if sandbox == "docker" && !docker_ready() {
            println!("| docker | (no engine or no agent-harness/sandbox image) | | |");
            continue;
        }
        // The workspace folder of a local run; a task with a workspace gets a fresh one each.
        let (mut first, mut wall) = (Vec::new(), Vec::new());
        for _ in 0..FIRST_CALL_RUNS {
            let (elapsed, dir, started) = session(sandbox, logs.path());
            first.push(to_first_call(&dir, started));
            wall.push(elapsed.as_millis());
        }
        let start = Instant::now();
        let per_worker = SESSIONS / PARALLEL;
        std::thread::scope(|scope| {
            for _ in 0..PARALLEL {
                scope.spawn(|| {
                    for _ in 0..per_worker {
                        session(sandbox, logs.path());
                    }
                });
            }
        });
        let per_minute = (per_worker * PARALLEL) as f64 / start.elapsed().as_secs_f64() * 60.0;
        println!(
            "| {sandbox} | {} ms | {} ms | {per_minute:.0} |",
            median(first),
            median(wall)
        );
    }

    let root = tempfile::tempdir().unwrap();
    let tasks = batch_tasks(root.path());
    println!(
        "\n| sandbox | at once | tasks/min ({BATCH_TASKS} tasks) | harness time per task, median | task start to first tool call, median |"
    );
    println!("|---|---:|---:|---:|---:|");
    // `docker+pool`: --pool-size as large as the tasks at once.
    for sandbox in ["local", "docker", "docker+pool"] {
        if sandbox != "local" && !docker_ready() {
            println!("| {sandbox} | (no engine or no agent-harness/sandbox image) | | | |");
            continue;
        }
        for parallel in [1, 2, 4, 8] {
            let out = root.path().join(format!("{sandbox}-{parallel}"));
            let (elapsed, harness) = run_batch(sandbox, parallel, &tasks, &out);
            let per_minute = BATCH_TASKS as f64 / elapsed.as_secs_f64() * 60.0;
            println!(
                "| {sandbox} | {parallel} | {per_minute:.0} | {} ms | {} ms |",
                median(harness.into_iter().map(u128::from).collect()),
                median(batch_first_calls(&out))
            );
        }
    }
}
