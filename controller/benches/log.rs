//! Session-log throughput and replay cost.
//!
//! `cargo bench -p controller --bench log` prints a table: events per second for the durable
//! and relaxed writers, and the time and peak memory of reading, measuring and rendering a
//! 100,000-event log (each in a fresh process, so its peak is its own). Loops are bounded.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::disallowed_methods)]

use std::path::Path;
use std::time::Instant;

use harness_log::{
    Durability, Event, EventLog, LoggedCall, LoggedUsage, ModelResponse, Purpose, Text,
    ToolCallEvent, ToolResult, ToolStatus,
};

const WRITES: u64 = 2_000;
const BIG_LOG: u64 = 100_000;

fn tool_call(idx: u64) -> Event {
    Event::ToolCall(ToolCallEvent {
        call_id: format!("call_{idx}"),
        name: "bash".to_owned(),
        arguments: format!("{{\"cmd\": \"echo {idx}\"}}"),
    })
}

fn events_for(log: &EventLog, idx: u64) -> Event {
    match idx % 3 {
        0 => tool_call(idx),
        1 => Event::ToolResult(ToolResult {
            call_id: format!("call_{idx}"),
            name: "bash".to_owned(),
            status: ToolStatus::Ok,
            output: log.text(&format!("exit=0\nstdout:\n  {idx}")).unwrap(),
            exit_code: Some(0),
            timed_out: Some(false),
            duration_ms: 2,
            outputs: Vec::new(),
        }),
        _ => Event::ModelResponse(ModelResponse {
            turn: idx as u32,
            purpose: Purpose::Turn,
            text: Text {
                text: Some(format!("step {idx}")),
                blob: None,
                preview: None,
                size: 8,
            },
            tool_calls: vec![LoggedCall {
                id: format!("call_{}", idx + 1),
                name: "bash".to_owned(),
                arguments: "{}".to_owned(),
            }],
            usage: LoggedUsage {
                input_tokens: 1000,
                cached_input_tokens: 0,
                cache_write_tokens: 0,
                output_tokens: 50,
            },
            cost: Some(0.001),
            latency_ms: 900,
            raw: log
                .json_blob(&serde_json::json!({"idx": idx % 100}))
                .unwrap(),
        }),
    }
}

async fn write_rate(dir: &Path, durability: Durability, producers: u64, n: u64) -> f64 {
    let log = EventLog::create(dir, durability, &[]).unwrap();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for producer in 0..producers {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            for idx in 0..n / producers {
                log.record(tool_call(producer * 1_000_000 + idx))
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    log.close().await.unwrap();
    n as f64 / start.elapsed().as_secs_f64()
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap()
}

/// The child process: one replay job on a log, then its time and peak memory.
fn child(job: &str, dir: &Path) {
    let start = Instant::now();
    let mut sink = std::io::sink();
    match job {
        "read" => {
            let n = harness_replay::events(dir, |_| {}).unwrap().count();
            assert_eq!(n as u64, BIG_LOG + 1);
        }
        "metrics" => {
            let metrics = harness_replay::metrics::measure(dir).unwrap();
            assert_eq!(metrics.events, BIG_LOG + 1);
        }
        "md" => {
            harness_replay::render::render(dir, harness_replay::render::Format::Md, &mut sink)
                .unwrap();
        }
        "html" => {
            harness_replay::render::render(dir, harness_replay::render::Format::Html, &mut sink)
                .unwrap();
        }
        other => panic!("unknown job {other}"),
    }
    println!("{} {}", start.elapsed().as_secs_f64(), peak_rss_kib());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--child") {
        child(&args[at + 1], Path::new(&args[at + 2]));
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let scratch = tempfile::tempdir_in(std::env::current_dir().unwrap().join("../target")).unwrap();
    let rates = runtime.block_on(async {
        vec![
            (
                "durable, 1 producer",
                write_rate(&scratch.path().join("d1"), Durability::Durable, 1, WRITES).await,
            ),
            (
                "durable, 16 producers (group commit)",
                write_rate(
                    &scratch.path().join("d16"),
                    Durability::Durable,
                    16,
                    WRITES * 4,
                )
                .await,
            ),
            (
                "relaxed, 1 producer",
                write_rate(
                    &scratch.path().join("r1"),
                    Durability::Relaxed,
                    1,
                    WRITES * 20,
                )
                .await,
            ),
        ]
    });

    let big = scratch.path().join("big");
    let log = EventLog::create(&big, Durability::Relaxed, &[]).unwrap();
    runtime.block_on(async {
        for idx in 0..=BIG_LOG {
            log.record(events_for(&log, idx)).await.unwrap();
        }
        log.close().await.unwrap();
    });
    let size = std::fs::metadata(big.join("events.jsonl")).unwrap().len();

    println!("\n| writer | events/s |");
    println!("|---|---:|");
    for (what, rate) in rates {
        println!("| {what} | {rate:.0} |");
    }
    println!(
        "\n| on a {}-event log ({:.1} MB) | seconds | peak RSS MiB |",
        BIG_LOG + 1,
        size as f64 / 1e6
    );
    println!("|---|---:|---:|");
    let exe = std::env::current_exe().unwrap();
    for job in ["read", "metrics", "md", "html"] {
        let text = testkit::stdout_of(
            std::process::Command::new(&exe)
                .args(["--child", job])
                .arg(&big),
        );
        let mut fields = text.split_whitespace();
        let seconds: f64 = fields.next().unwrap().parse().unwrap();
        let peak_kib: f64 = fields.next().unwrap().parse().unwrap();
        println!("| {job} | {seconds:.2} | {:.1} |", peak_kib / 1024.0);
    }
}
