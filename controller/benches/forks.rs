//! `harness replay fork`: how long K children take to start from a recorded step.
//!
//! `cargo bench -p controller --bench forks` records one session over a workspace of 10,000
//! files and 100 MB (random bytes, 100 folders), then forks it after its first turn into 1 and
//! 8 local children, `ROUNDS` times each, and prints per row the median time from starting
//! `harness replay fork` to the first tool call (its `tool_call` event) of the last child, and
//! to the command's end: with the workspace at the step rebuilt from the log's blobs (the
//! default), and kept from an earlier fork (`--keep-state`); with `HARNESS_BENCH_DOCKER=1`, also
//! into Docker children (the sandbox image). Scripted model and `allow-all`: the figures are
//! the fork's and the sandboxes', not a model's. Loops are bounded by count.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::disallowed_methods
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

mod support;

use support::harness::run as harness;
use support::log_events::events;
use support::stats::median;
use support::{clock, log_line, run_args};

const FILES: usize = 10_000;
const FILE_BYTES: usize = 10_000;
const ROUNDS: usize = 3;

/// The task: a big workspace, and a script of three turns.
fn write_task(dir: &Path) -> PathBuf {
    let workspace = dir.join("workspace");
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut bytes = vec![0u8; FILE_BYTES];
    for n in 0..FILES {
        let folder = workspace.join(format!("d{:03}", n % 100));
        std::fs::create_dir_all(&folder).unwrap();
        for byte in bytes.iter_mut() {
            // xorshift: incompressible bytes, no file alike.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *byte = state as u8;
        }
        std::fs::write(folder.join(format!("f{n:05}.bin")), &bytes).unwrap();
    }
    let script = serde_json::json!({"turns": [
        {"text": "mark", "tool_calls": [{"name": "bash", "arguments": {"cmd": "echo one > marker.txt"}}]},
        {"text": "count", "tool_calls": [{"name": "bash", "arguments": {"cmd": "ls d000 | wc -l"}}]},
        {"text": "done"},
    ]});
    let task = serde_json::json!({
        "prompt": "Mark, count, stop.",
        "workspace": {"dir": "workspace"},
    });
    support::scripted_task::scripted_task(dir, &script, task)
}

fn main() {
    let scratch = tempfile::tempdir().unwrap();
    let parent = Parent::record(scratch.path());
    println!(
        "fork of a {FILES}-file, {} MB workspace after turn 1 (step {}), local children, median of {ROUNDS}",
        FILES * FILE_BYTES / 1_000_000,
        parent.step
    );
    println!(
        "{:<34}  {:>8}  {:>28}  {:>18}",
        "workspace at the step", "children", "to the last child's 1st call", "to the fork's end"
    );
    // The kept workspace made once, before the rounds that reuse it.
    parent.fork(1, &["--keep-state"], &scratch.path().join("prime"));
    // Containers too, where the engine and the sandbox image are (`HARNESS_BENCH_DOCKER=1`).
    let docker = std::env::var_os("HARNESS_BENCH_DOCKER").is_some();
    for (label, more) in rows(docker) {
        if label == KEPT_DOCKER {
            parent.fork(1, more, &scratch.path().join("prime-docker"));
        }
        for count in [1u32, 8] {
            let (first_call, end) = parent.rounds(count, more, scratch.path());
            println!("{label:<34}  {count:>8}  {first_call:>25} ms  {end:>15} ms");
        }
    }
    if docker {
        parent.remove_kept_images();
    }
}

/// The row of Docker children forked from the kept workspace's image.
const KEPT_DOCKER: &str = "kept, reused; Docker children";

/// The rows: the workspace rebuilt from the log's blobs, kept and reused; with `docker`, the
/// same into containers: from an image of the workspace made for the fork (and removed after
/// it), and from the one a kept fork left, made once before its row. (The image is named after
/// what it holds: the kept one is made only after the rows that make and remove their own, or
/// they would find it.)
fn rows(docker: bool) -> Vec<(&'static str, &'static [&'static str])> {
    let mut rows: Vec<(&str, &[&str])> = vec![
        ("rebuilt from the log's blobs", &[]),
        ("kept (--keep-state), reused", &["--keep-state"]),
    ];
    if docker {
        rows.push((
            "rebuilt, image made; Docker children",
            &["--sandbox", "docker"],
        ));
        rows.push((KEPT_DOCKER, &["--keep-state", "--sandbox", "docker"]));
    }
    rows
}

/// The recorded session the forks start from, and the step they fork at.
struct Parent {
    log: PathBuf,
    step: u64,
}

impl Parent {
    /// Records the session over the big workspace; the step is after its first turn (the
    /// event before the second turn's model request).
    fn record(scratch: &Path) -> Parent {
        let task = write_task(scratch);
        let logs = scratch.join("logs");
        let started = Instant::now();
        let (_, stderr) = harness(&run_args::run_into(&logs, &task, &scratch.join("parent")));
        let log = log_line::log_dir(&stderr);
        eprintln!(
            "recorded the parent session in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let second = events(&log)
            .into_iter()
            .find(|e| e["type"] == "model_request" && e["data"]["turn"] == 2)
            .unwrap();
        let step = second["seq"].as_u64().unwrap() - 1;
        Parent { log, step }
    }

    /// `harness replay fork` of the parent at the step into `count` children at once, in `out`.
    fn fork(&self, count: u32, more: &[&str], out: &Path) {
        let (step, count) = (self.step.to_string(), count.to_string());
        let mut args = vec![
            "replay",
            "fork",
            self.log.to_str().unwrap(),
            "--step",
            &step,
            "--count",
            &count,
            "--parallel",
            &count,
            "--out",
            out.to_str().unwrap(),
            "--trust-log",
        ];
        args.extend_from_slice(more);
        harness(&args);
    }

    /// `ROUNDS` forks into `count` children: the medians, in ms, to the last child's first
    /// tool call and to the fork's end.
    fn rounds(&self, count: u32, more: &[&str], scratch: &Path) -> (u128, u128) {
        let mut first_calls = Vec::new();
        let mut ends = Vec::new();
        for round in 0..ROUNDS {
            let out = scratch.join(format!("fork-{count}-{round}"));
            let start = clock::now_ms();
            self.fork(count, more, &out);
            ends.push(clock::now_ms() - start);
            let last_first_call = (1..=count)
                .map(|child| {
                    let call = events(&out.join(format!("child-{child}")))
                        .into_iter()
                        .find(|e| e["type"] == "tool_call")
                        .unwrap();
                    clock::ms_of(&call)
                })
                .max()
                .unwrap();
            first_calls.push(last_first_call - start);
            std::fs::remove_dir_all(&out).unwrap();
        }
        (median(first_calls), median(ends))
    }

    /// Removes the kept fork's image, labelled with the session and the step.
    fn remove_kept_images(&self) {
        let label = format!(
            "label=agent-harness.fork-state={}@{}",
            self.log.file_name().unwrap().to_str().unwrap(),
            self.step
        );
        let listed = Command::new("docker")
            .args(["images", "-q", "--filter", &label])
            .output()
            .unwrap();
        for id in String::from_utf8_lossy(&listed.stdout).split_whitespace() {
            let _ = Command::new("docker")
                .args(["rmi", "-f", id])
                .stdout(Stdio::null())
                .status();
        }
    }
}
