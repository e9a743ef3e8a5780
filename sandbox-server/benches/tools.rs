//! Latency, throughput, memory and start-up time of a real sandbox-server over loopback HTTP.
//!
//! `cargo bench -p sandbox-server --bench tools` prints a table; figures are recorded in
//! BENCHMARKS.md. Every loop is bounded by a count or a duration. `SANDBOX_BENCH_SERVER=PATH`
//! times another build of the server (an older release, to compare).

// A benchmark binary prints its table and spawns the server it measures.
#![allow(clippy::print_stdout, clippy::disallowed_methods, clippy::unwrap_used)]

mod support;

use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use support::{ms, percentile};
use testkit::rss_kib;

const SEQUENTIAL_CALLS: usize = 500;
const CONCURRENT_CLIENTS: usize = 16;
const THROUGHPUT_WINDOW: Duration = Duration::from_secs(4);
const STARTS: usize = 20;

struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

fn start(workspace: &std::path::Path, worker_threads: usize) -> (Server, Duration) {
    let started = Instant::now();
    let threads = worker_threads.to_string();
    let (child, base) =
        support::start_server(workspace, &["--worker-threads", threads.as_str()], "warn");
    // First healthy answer, over a fresh connection each try (bounded: 5 s).
    let client = reqwest::blocking::Client::new();
    while started.elapsed() < Duration::from_secs(5) {
        if client
            .get(format!("{base}/healthz"))
            .send()
            .is_ok_and(|r| r.status().is_success())
        {
            break;
        }
    }
    let elapsed = started.elapsed();
    (Server { child, base }, elapsed)
}

struct Row {
    what: String,
    p50: Duration,
    p99: Duration,
}

fn measure(what: &str, n: usize, mut f: impl FnMut()) -> Row {
    for _ in 0..n / 10 {
        f();
    }
    let mut samples: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    Row {
        what: what.to_owned(),
        p50: percentile(&mut samples, 0.5),
        p99: percentile(&mut samples, 0.99),
    }
}

fn call(client: &reqwest::blocking::Client, base: &str, tool: &str, args: &Value) {
    let response = client
        .post(format!("{base}/v1/tools/{tool}"))
        .json(args)
        .send()
        .unwrap();
    assert!(
        response.status().is_success(),
        "{tool}: {}",
        response.status()
    );
    let _ = response.bytes().unwrap();
}

fn throughput(base: &str, tool: &'static str, args: Value) -> f64 {
    let args = Arc::new(args);
    let deadline = Instant::now() + THROUGHPUT_WINDOW;
    let handles: Vec<_> = (0..CONCURRENT_CLIENTS)
        .map(|_| {
            let (base, args) = (base.to_owned(), args.clone());
            std::thread::spawn(move || {
                let client = reqwest::blocking::Client::new();
                let mut n_calls = 0u64;
                while Instant::now() < deadline {
                    call(&client, &base, tool, &args);
                    n_calls += 1;
                }
                n_calls
            })
        })
        .collect();
    let total: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    total as f64 / THROUGHPUT_WINDOW.as_secs_f64()
}

fn main() {
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(
        workspace.path().join("ten-kb.txt"),
        "abcdefghijklmnopqrstuvwxyz0123456789!\n".repeat(270),
    )
    .unwrap();
    let (mut starts, idle_rss) = starts(workspace.path());
    let mut rows = bare_spawns();
    let mut values = Vec::new();
    for worker_threads in [2, 1] {
        http_rows(workspace.path(), worker_threads, &mut rows, &mut values);
    }
    rows.extend(change_detection());
    rows.push(Row {
        what: format!("start to first healthy answer ({STARTS} starts)"),
        p50: percentile(&mut starts, 0.5),
        p99: percentile(&mut starts, 0.99),
    });
    values.push(format!(
        "| idle RSS after start (median of {STARTS}) | {} KiB |",
        idle_rss[idle_rss.len() / 2]
    ));
    println!("\n| measurement | p50 ms | p99 ms |");
    println!("|---|---:|---:|");
    for row in rows {
        println!("| {} | {} | {} |", row.what, ms(row.p50), ms(row.p99));
    }
    println!();
    println!("| measurement | value |");
    println!("|---|---:|");
    for line in &values {
        println!("{line}");
    }
}

/// Start-up times and idle memory over `STARTS` fresh servers, sorted.
fn starts(workspace: &std::path::Path) -> (Vec<Duration>, Vec<u64>) {
    let mut starts: Vec<Duration> = Vec::new();
    let mut idle_rss = Vec::new();
    for _ in 0..STARTS {
        let (server, elapsed) = start(workspace, 2);
        starts.push(elapsed);
        std::thread::sleep(Duration::from_millis(100));
        idle_rss.push(rss_kib(server.child.id()));
    }
    starts.sort();
    idle_rss.sort_unstable();
    (starts, idle_rss)
}

/// The floor: a bare fork and exec of each shell, no server in between.
fn bare_spawns() -> Vec<Row> {
    ["/bin/sh", "bash"]
        .into_iter()
        .map(|shell| {
            measure(
                &format!("bare fork+exec `{shell} -c true`"),
                SEQUENTIAL_CALLS,
                || {
                    let status = Command::new(shell).args(["-c", "true"]).status();
                    assert!(status.unwrap().success());
                },
            )
        })
        .collect()
}

/// Latency of each tool over one keep-alive client, then throughput with many clients.
fn http_rows(
    workspace: &std::path::Path,
    worker_threads: usize,
    rows: &mut Vec<Row>,
    values: &mut Vec<String>,
) {
    let content_10kb = "x".repeat(10_239) + "\n";
    let (server, _) = start(workspace, worker_threads);
    let client = reqwest::blocking::Client::new();
    let base = server.base.clone();
    let tag = format!(
        "({worker_threads} worker thread{})",
        if worker_threads == 1 { "" } else { "s" }
    );
    let calls: [(&str, &str, Value, usize); 3] = [
        (
            "bash `true`",
            "bash",
            json!({"cmd": "true"}),
            SEQUENTIAL_CALLS,
        ),
        (
            "read_file 10 KB",
            "read_file",
            json!({"path": "ten-kb.txt"}),
            SEQUENTIAL_CALLS * 2,
        ),
        (
            "write_file 10 KB",
            "write_file",
            json!({"path": "out.txt", "content": content_10kb}),
            SEQUENTIAL_CALLS * 2,
        ),
    ];
    for (what, tool, args, n) in calls {
        rows.push(measure(&format!("HTTP {what} {tag}"), n, || {
            call(&client, &base, tool, &args)
        }));
    }
    rows.push(measure(
        &format!("HTTP GET /healthz {tag}"),
        SEQUENTIAL_CALLS * 2,
        || {
            let _ = client
                .get(format!("{base}/healthz"))
                .send()
                .unwrap()
                .bytes()
                .unwrap();
        },
    ));
    let bash_rps = throughput(&base, "bash", json!({"cmd": "true"}));
    let read_rps = throughput(&base, "read_file", json!({"path": "ten-kb.txt"}));
    values.push(format!(
        "| bash `true`, {CONCURRENT_CLIENTS} concurrent clients {tag} | {bash_rps:.0} calls/s |"
    ));
    values.push(format!(
        "| read_file 10 KB, {CONCURRENT_CLIENTS} concurrent clients {tag} | {read_rps:.0} calls/s |"
    ));
    values.push(format!(
        "| RSS after the runs above {tag} | {} KiB |",
        rss_kib(server.child.id())
    ));
}

/// Change detection: one file changed among 10,000 (100 folders of 100), and the first
/// snapshot that hashes them all.
fn change_detection() -> Vec<Row> {
    let big = tempfile::tempdir().unwrap();
    for dir_idx in 0..100 {
        let dir = big.path().join(format!("pkg{dir_idx:03}"));
        std::fs::create_dir(&dir).unwrap();
        for file_idx in 0..100 {
            std::fs::write(
                dir.join(format!("mod{file_idx:03}.py")),
                format!("# {dir_idx} {file_idx}\n").repeat(20),
            )
            .unwrap();
        }
    }
    let (server, _) = start(big.path(), 2);
    let client = reqwest::blocking::Client::new();
    let get = |url: String| -> Value { client.get(url).send().unwrap().json().unwrap() };
    let first = Instant::now();
    let snapshot: Value = client
        .post(format!("{}/v1/workspace/snapshot", server.base))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let first_snapshot = first.elapsed();
    let mut since = snapshot["snapshot_id"].as_str().unwrap().to_owned();
    let mut round = 0;
    let changes = measure("changes?since: 1 changed file of 10,000", 40, || {
        round += 1;
        std::fs::write(
            big.path().join("pkg042/mod042.py"),
            format!("changed {round}\n"),
        )
        .unwrap();
        let changes = get(format!(
            "{}/v1/workspace/changes?since={since}",
            server.base
        ));
        assert_eq!(changes["changes"].as_array().unwrap().len(), 1, "{changes}");
        since = changes["snapshot_id"].as_str().unwrap().to_owned();
    });
    let first = Row {
        what: "first snapshot of 10,000 files (hashes all)".to_owned(),
        p50: first_snapshot,
        p99: first_snapshot,
    };
    vec![changes, first]
}
