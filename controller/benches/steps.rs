//! The harness's cost per tool call: sandbox round trips and wall time per step.
//!
//! `cargo bench -p controller --bench steps` runs scripted sessions (no model is called) whose
//! every turn is one `bash` call that writes a small file and prints a line, on a local
//! sandbox, at 10 and at 40 steps. The sandbox-server logs each request it serves
//! (`RUST_LOG=tower_http=debug`), so the figures are differences between the two lengths, which
//! cancel the session's fixed costs (start, seeding, the first snapshot, the check):
//! - round trips per step: (requests at 40 − requests at 10) / 30;
//! - harness time per step: (wall at 40 − wall at 10) / 30, minus the commands' own median
//!   duration, median over `RUNS` pairs.
//!
//! Loops are bounded by count.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::disallowed_methods
)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod support;

use support::log_events::events;
use support::log_line;
use support::stats::median;

const RUNS: usize = 5;
const SHORT: usize = 10;
const LONG: usize = 40;

/// A task whose scripted model makes `steps` bash calls, one per turn.
fn task(root: &Path, steps: usize) -> PathBuf {
    let dir = root.join(format!("steps-{steps}"));
    std::fs::create_dir_all(dir.join("workspace/out")).unwrap();
    std::fs::write(dir.join("workspace/out/.keep"), "").unwrap();
    let mut script = String::from("turns:\n");
    let mut verdicts = String::from("verdicts:\n");
    for step in 0..steps {
        script.push_str(&format!(
            "  - text: \"step {step}\"\n    tool_calls:\n      - name: bash\n        arguments: {{cmd: \"printf 'line {step}\\\\n' > out/{step}.txt && echo wrote {step}\"}}\n"
        ));
        verdicts.push_str(
            "  - {risk: 0.1, authorized: 0.9, rationale: \"writes a file in the workspace\"}\n",
        );
    }
    script.push_str("  - text: \"done\"\nsummary: \"files written\"\n");
    std::fs::write(dir.join("script.yaml"), format!("{script}{verdicts}")).unwrap();
    std::fs::write(
        dir.join("task.yaml"),
        format!(
            "prompt: \"write the files\"\nworkspace:\n  dir: workspace\nmodel:\n  name: \"script:script.yaml\"\nlimits:\n  max_turns: {}\n",
            steps + 2
        ),
    )
    .unwrap();
    dir.join("task.yaml")
}

struct Run {
    wall: Duration,
    requests: usize,
    command_ms: Vec<u64>,
}

fn session(task: &Path, logs: &Path) -> Run {
    let start = Instant::now();
    let output = support::harness::command()
        .args(["run", "--sandbox", "local", "--task"])
        .arg(task)
        .arg("--log-dir")
        .arg(logs)
        .env("RUST_LOG", "error,tower_http=debug")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let wall = start.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "session failed: {stderr}");
    let requests = stderr
        .lines()
        .filter(|line| line.contains("started processing request"))
        .count();
    let dir = log_line::log_dir(&stderr);
    let command_ms = events(&dir)
        .into_iter()
        .filter(|event| event["type"] == "tool_result")
        .filter_map(|event| event["data"]["duration_ms"].as_u64())
        .collect();
    Run {
        wall,
        requests,
        command_ms,
    }
}

fn main() {
    let root = tempfile::tempdir().unwrap();
    let (short, long) = (task(root.path(), SHORT), task(root.path(), LONG));
    let logs = root.path().join("logs");
    let mut per_step_ms = Vec::new();
    let mut per_step_requests = Vec::new();
    let mut command_ms = Vec::new();
    for _ in 0..RUNS {
        let a = session(&short, &logs);
        let b = session(&long, &logs);
        let steps = (LONG - SHORT) as f64;
        per_step_ms.push(((b.wall.as_secs_f64() - a.wall.as_secs_f64()) * 1000.0 / steps) as u64);
        per_step_requests.push(((b.requests - a.requests) as f64 / steps * 10.0).round() as u64);
        command_ms.extend(b.command_ms);
    }
    let command = if command_ms.is_empty() {
        0
    } else {
        median(command_ms)
    };
    let step = median(per_step_ms.clone());
    println!("| figure, median of {RUNS} pairs ({SHORT} and {LONG} steps) | value |");
    println!("|---|---:|");
    println!(
        "| sandbox round trips per step | {:.1} |",
        median(per_step_requests) as f64 / 10.0
    );
    println!("| wall time per step | {step} ms (runs: {per_step_ms:?}) |");
    println!("| tool call (the log's tool_result duration_ms) | {command} ms |");
    println!(
        "| harness time per step | {} ms |",
        step.saturating_sub(command)
    );
}
