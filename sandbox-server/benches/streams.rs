//! Processes by id, measured: how long a line a command prints takes to reach a client that
//! follows it (Server-Sent Events, and long-poll), and the server's memory while 64 processes
//! stream at once. Prints a table; run with `cargo bench -p sandbox-server --bench streams`.
//!
//! Latency: a Python command prints its wall clock (`time.time_ns()`) every 20 ms; the client
//! subtracts it from its own clock when the line arrives (same machine, same clock).

#![allow(clippy::unwrap_used, clippy::disallowed_methods, clippy::print_stdout)]

#[path = "support/listing.rs"]
mod listing;
mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use serde_json::{Value, json};

use support::percentile;
use testkit::rss_kib;

const LINES: usize = 500;

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Latencies (µs) of each stamped line in `text`, seen now.
fn stamps(text: &str, seen: u128, into: &mut Vec<f64>) {
    for line in text.lines() {
        if let Ok(stamp) = line.trim().parse::<u128>() {
            into.push(seen.saturating_sub(stamp) as f64 / 1000.0);
        }
    }
}

/// The JSON body of a `GET` of `url`.
async fn get_json(client: &reqwest::Client, url: &str) -> Value {
    client.get(url).send().await.unwrap().json().await.unwrap()
}

async fn start(client: &reqwest::Client, base: &str, id: &str, cmd: &str) {
    let response = client
        .post(format!("{base}/v1/processes"))
        .json(&json!({"id": id, "cmd": cmd}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
}

fn stamping(lines: usize) -> String {
    format!(
        "python3 -u -c 'import time\nfor _ in range({lines}):\n    print(time.time_ns(), flush=True); time.sleep(0.02)'"
    )
}

async fn sse_latencies(client: &reqwest::Client, base: &str) -> Vec<f64> {
    start(client, base, "sse", &stamping(LINES)).await;
    let response = client
        .get(format!("{base}/v1/processes/sse/events"))
        .send()
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    let (mut buffer, mut latencies) = (String::new(), Vec::new());
    while let Some(Ok(bytes)) = body.next().await {
        let seen = now_ns();
        buffer.push_str(std::str::from_utf8(&bytes).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            if let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: "))
                && block.starts_with("event: output")
            {
                let chunk: Value = serde_json::from_str(data).unwrap();
                stamps(chunk["data"].as_str().unwrap(), seen, &mut latencies);
            }
        }
    }
    latencies
}

async fn poll_latencies(client: &reqwest::Client, base: &str) -> Vec<f64> {
    start(client, base, "poll", &stamping(LINES)).await;
    let (mut after, mut latencies) = (0, Vec::new());
    loop {
        let page = get_json(
            client,
            &format!("{base}/v1/processes/poll/output?after_seq={after}&wait_ms=5000"),
        )
        .await;
        let seen = now_ns();
        for chunk in page["chunks"].as_array().unwrap() {
            stamps(chunk["data"].as_str().unwrap(), seen, &mut latencies);
        }
        after = page["next_after_seq"].as_u64().unwrap();
        if page["done"] == true {
            return latencies;
        }
    }
}

/// The server's RSS before, and at its peak while 64 processes print 2 MiB each.
async fn memory(client: &reqwest::Client, base: &str, pid: u32) -> (u64, u64, f64) {
    let before = rss_kib(pid);
    let cmd = "for i in $(seq 1 64); do head -c 32768 /dev/zero | tr '\\0' x; echo; done";
    let started = Instant::now();
    for i in 0..64 {
        start(client, base, &format!("p{i}"), cmd).await;
    }
    let mut peak = before;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        peak = peak.max(rss_kib(pid));
        let listed = get_json(client, &format!("{base}/v1/processes")).await;
        if listing::running(&listed) == 0 || Instant::now() > deadline {
            return (before, peak, started.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::main]
async fn main() {
    let workspace = tempfile::tempdir().unwrap();
    let (mut server, base) = support::start_server(workspace.path(), &[], "warn");
    let client = reqwest::Client::new();
    let (mut sse, mut poll) = tokio::join!(
        sse_latencies(&client, &base),
        poll_latencies(&client, &base)
    );
    println!("| view | lines | p50 | p99 |");
    println!("|---|---:|---:|---:|");
    for (name, values) in [("SSE", &mut sse), ("long-poll", &mut poll)] {
        println!(
            "| {name} | {} | {:.0} µs | {:.0} µs |",
            values.len(),
            percentile(values, 0.5),
            percentile(values, 0.99)
        );
    }
    let (before, peak, seconds) = memory(&client, &base, server.id()).await;
    println!();
    println!("| 64 processes × 2 MiB at once | server RSS |");
    println!("|---|---:|");
    println!("| before | {:.1} MiB |", before as f64 / 1024.0);
    println!(
        "| peak while streaming ({seconds:.1} s) | {:.1} MiB |",
        peak as f64 / 1024.0
    );
    let _ = server.kill();
    let _ = server.wait();
}
