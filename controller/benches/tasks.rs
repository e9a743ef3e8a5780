//! Benchmark tasks in their own images: what the harness adds per trial.
//!
//! `cargo bench -p controller --bench tasks` needs a Docker engine, the registry-free base
//! image and a static sandbox-server (as the tests do). It runs `examples/benchmarks` once with
//! the oracle to build the images (untimed, and its pass rate printed), then with the nop
//! agent (so no agent time: what is left is the harness's) at 1 and 4 trials at once, twice
//! each, and prints per trial, medians over the trials, read from their logs: the session,
//! the image lookups (the build cache's hits), the verifier, and the rest (network, container
//! create, injection, start, health, snapshots, the log). Then the injection alone: copying
//! the static server into a created container against copying only a token, median of 20.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::disallowed_methods
)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;

use support::stats::median;

const REPEATS: usize = 2;
const INJECTIONS: usize = 20;

fn batch(agent: &str, parallel: usize, out: &Path) -> Duration {
    let dataset = testkit::repo_root().join("examples/benchmarks");
    let mut command = support::harness::command();
    command
        .arg("batch")
        .arg(&dataset)
        .args([
            "--agent",
            agent,
            "--parallel",
            &parallel.to_string(),
            "--progress",
            "lines",
            "--out",
        ])
        .arg(out)
        .arg("--image-map-file")
        .arg(dataset.join("image-map.txt"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let bundle = Path::new("/etc/ssl/certs/ca-certificates.crt");
    if bundle.is_file() {
        command.arg("--build-ca").arg(bundle);
    }
    let start = Instant::now();
    let status = command.status().unwrap();
    assert!(
        matches!(status.code(), Some(0 | 9)),
        "the batch failed: {status}"
    );
    start.elapsed()
}

/// Per trial of a batch folder: (session ms, image lookups ms, verifier ms, the rest ms).
fn trials(out: &Path) -> Vec<[u64; 4]> {
    let mut rows = Vec::new();
    for entry in std::fs::read_dir(out).unwrap().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("events.jsonl")) else {
            continue;
        };
        let events: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if events.first().is_some_and(|e| e["type"] == "batch_started") {
            continue;
        }
        let sum = |kind: &str| -> u64 {
            events
                .iter()
                .filter(|e| e["type"] == kind)
                .map(|e| e["data"]["duration_ms"].as_u64().unwrap_or(0))
                .sum()
        };
        let (total, build, verifier) = (
            sum("session_finished"),
            sum("image_built"),
            sum("verifier_finished"),
        );
        let tools = sum("tool_result");
        rows.push([
            total,
            build,
            verifier,
            total.saturating_sub(build + verifier + tools),
        ]);
    }
    rows
}

fn docker(args: &[&str]) -> String {
    testkit::stdout_of(Command::new("docker").args(args))
        .trim()
        .to_owned()
}

/// Median ms of `docker cp FILE` into a fresh created container, over `INJECTIONS`.
fn copy_time(file: &Path) -> u64 {
    let mut times = Vec::new();
    for _ in 0..INJECTIONS {
        let id = docker(&["create", "agent-harness/base:bookworm", "true"]);
        let start = Instant::now();
        docker(&[
            "cp",
            &file.display().to_string(),
            &format!("{id}:/injected"),
        ]);
        times.push(start.elapsed().as_millis() as u64);
        docker(&["rm", "-f", &id]);
    }
    median(times)
}

fn main() {
    if Command::new("docker")
        .arg("info")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_or(true, |s| !s.success())
    {
        println!("no Docker engine: nothing to measure");
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let warm = scratch.path().join("oracle");
    let took = batch("oracle", 4, &warm);
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(warm.join("report.json")).unwrap()).unwrap();
    let tasks = report["benchmark"]["tasks"].as_array().unwrap();
    let passed = tasks.iter().filter(|t| t["passed"] == 1).count();
    println!(
        "oracle (images built or found, 4 at once): {passed} of {} tasks pass, {:.1} s",
        tasks.len(),
        took.as_secs_f64()
    );
    println!();
    println!(
        "| nop agent, at once | trials/min | session, median | image lookups | verifier | the rest (start, inject, health, snapshots, log) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for parallel in [1, 4] {
        let mut rows = Vec::new();
        let mut wall = Duration::ZERO;
        for repeat in 0..REPEATS {
            let out = scratch.path().join(format!("nop-{parallel}-{repeat}"));
            wall += batch("nop", parallel, &out);
            rows.extend(trials(&out));
        }
        let column = |i: usize| median(rows.iter().map(|r| r[i]).collect());
        println!(
            "| {parallel} | {:.0} | {} ms | {} ms | {} ms | {} ms |",
            rows.len() as f64 / wall.as_secs_f64() * 60.0,
            column(0),
            column(1),
            column(2),
            column(3)
        );
    }
    let server = testkit::repo_root().join("target/x86_64-unknown-linux-gnu/server/sandbox-server");
    let token = scratch.path().join("token");
    std::fs::write(&token, "0123456789abcdef0123456789abcdef").unwrap();
    if server.is_file() {
        let (with, without) = (copy_time(&server), copy_time(&token));
        let size = std::fs::metadata(&server).unwrap().len();
        println!();
        println!(
            "injection (docker cp into a created container, median of {INJECTIONS}): the static server ({:.1} MiB) {with} ms, a token alone {without} ms",
            size as f64 / (1 << 20) as f64
        );
    }
}
