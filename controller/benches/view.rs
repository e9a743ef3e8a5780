//! `harness view`: how fast a big batch opens, how much memory the viewer holds, and how long an
//! event takes from the log to the page while a batch runs.
//!
//! `cargo bench -p controller --bench view` records two real trials with the scripted model
//! (one that passes, one that fails; a few `bash` calls each), then makes batches of 100, 1,000
//! and 10,000 trials from them (each trial its own copy of a recorded log, its blobs
//! hard-linked; four attempts per task; a batch log in the recorded one's shape). Per size,
//! `ROUNDS` times: the release `harness view` is started over the batch and timed to its address
//! line (its index built), then the requests the batch page makes on opening are timed (the
//! page, its script and style, the run, the batches list, the grid), and the viewer's resident
//! memory read from /proc. With `HARNESS_BENCH_PLAYWRIGHT_PYTHON` (a Python with Playwright),
//! also the time from navigating Chromium to the page to every cell of the grid drawn.
//!
//! Then the event-to-page latency: a real batch (20 tasks, 2 at a time, each a few short
//! commands) runs while a client follows its log through the viewer's `/api/follow` (what the
//! batch page does); each event's latency is its arrival minus its `ts` (the writer's clock when
//! it took the event). Loops are bounded by count and time.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::disallowed_methods
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;

use support::clock;
use support::harness::command as harness;
use support::log_events::events;
use support::stats::median;

const SIZES: &[usize] = &[100, 1_000, 10_000];
const ROUNDS: usize = 3;
const ATTEMPTS: usize = 4;

/// Two task files with scripts: `pass` and `fail`, or `n` short tasks for the live batch.
fn write_tasks(dir: &Path, names: &[&str], sleep: &str) {
    std::fs::create_dir_all(dir).unwrap();
    for name in names {
        let answer = if *name == "fail" { "no" } else { "yes" };
        let turns: Vec<Value> = (0..4)
            .map(|i| json!({"text": format!("step {i}"), "tool_calls": [{"name": "bash",
                "arguments": {"cmd": format!("{sleep}echo {i} >> log.txt && ls -la && echo {answer} > out.txt")}}]}))
            .chain([json!({"text": "done"})])
            .collect();
        std::fs::write(
            dir.join(format!("{name}.turns")),
            json!({"turns": turns}).to_string(),
        )
        .unwrap();
        let task = json!({"prompt": format!("task {name}"), "model": {"name": format!("script:{name}.turns")},
            "check": "test $(cat out.txt) = yes"});
        std::fs::write(dir.join(format!("{name}.yaml")), task.to_string()).unwrap();
    }
}

fn batch(tasks: &Path, out: &Path, parallel: &str) -> Command {
    let mut command = harness();
    command
        .args([
            "batch",
            "--trust-tasks",
            "--policy",
            "allow-all",
            "--parallel",
            parallel,
            "--out",
        ])
        .arg(out)
        .arg(tasks)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// A batch of `n` trials made of copies of the recorded ones.
fn make_batch(recorded: &Path, out: &Path, n: usize) {
    std::fs::create_dir_all(out).unwrap();
    let log = events(recorded);
    let of = |kind: &str, task: &str| {
        log.iter()
            .find(|e| e["type"] == kind && (task.is_empty() || e["data"]["task"] == task))
            .unwrap()
            .clone()
    };
    let mut header = of("batch_started", "");
    let ids: Vec<String> = (0..n)
        .map(|i| match i % ATTEMPTS {
            0 => format!("task-{:05}", i / ATTEMPTS),
            k => format!("task-{:05}__{}", i / ATTEMPTS, k + 1),
        })
        .collect();
    header["data"]["tasks"] = ids
        .iter()
        .enumerate()
        .map(|(i, id)| json!({"id": id, "file": "task.yaml", "task": format!("task-{:05}", i / ATTEMPTS), "trial": i % ATTEMPTS + 1}))
        .collect();
    let mut seq = 0;
    let mut text = line(&header, &mut seq);
    for (i, id) in ids.iter().enumerate() {
        let source = if i % 3 == 0 { "fail" } else { "pass" };
        for kind in ["task_started", "task_finished"] {
            let mut event = of(kind, source);
            event["data"]["task"] = json!(id);
            if kind == "task_started" {
                event["data"]["log_dir"] = json!(out.join(id));
            }
            text.push_str(&line(&event, &mut seq));
        }
        let trial = out.join(id);
        std::fs::create_dir_all(trial.join("blobs")).unwrap();
        std::fs::copy(
            recorded.join(source).join("events.jsonl"),
            trial.join("events.jsonl"),
        )
        .unwrap();
        for blob in std::fs::read_dir(recorded.join(source).join("blobs")).unwrap() {
            let blob = blob.unwrap();
            std::fs::hard_link(blob.path(), trial.join("blobs").join(blob.file_name())).unwrap();
        }
    }
    text.push_str(&line(&of("batch_finished", ""), &mut seq));
    std::fs::write(out.join("events.jsonl"), text).unwrap();
}

/// An event as the writer puts it: `seq`, `ts`, `type`, `data`, in that order.
fn line(event: &Value, seq: &mut u64) -> String {
    let text = format!(
        "{{\"seq\":{seq},\"ts\":{},\"type\":{},\"data\":{}}}\n",
        event["ts"], event["type"], event["data"]
    );
    *seq += 1;
    text
}

struct Viewer {
    child: Child,
    address: String,
    _stdout: BufReader<std::process::ChildStdout>,
}

impl Drop for Viewer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the viewer over `dir`; returns it once it printed its address, and how long that took.
fn start(dir: &Path) -> (Viewer, Duration) {
    let started = Instant::now();
    let mut child = harness()
        .args(["view", "--listen", "127.0.0.1:0"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let elapsed = started.elapsed();
    let address = line
        .trim()
        .strip_prefix("view: http://")
        .unwrap()
        .trim_end_matches('/')
        .to_owned();
    (
        Viewer {
            child,
            address,
            _stdout: stdout,
        },
        elapsed,
    )
}

/// One GET over a fresh connection; the body.
fn get(address: &str, path: &str) -> Vec<u8> {
    let mut stream = TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    assert!(
        response.starts_with(b"HTTP/1.1 200"),
        "{path}: {}",
        String::from_utf8_lossy(&response[..response.len().min(300)])
    );
    response
}

/// The batch page's requests on opening, in order.
fn open_batch(address: &str, id: &str) -> Duration {
    let started = Instant::now();
    for path in ["/", "/app.js", "/app.css"] {
        get(address, path);
    }
    for path in [
        format!("/api/run?id={id}"),
        "/api/runs?kind=batch".to_owned(),
        format!("/api/batch?id={id}"),
    ] {
        get(address, &path);
    }
    started.elapsed()
}

/// The viewer's resident and peak resident memory, in MiB.
fn memory(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .unwrap()
            / 1024.0
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Chromium, from navigation to every cell of the grid drawn.
fn browser(python: &str, address: &str, id: &str, cells: usize) -> Option<Duration> {
    let script = r#"
import sys, time
from playwright.sync_api import sync_playwright
base, run, cells = sys.argv[1], sys.argv[2], int(sys.argv[3])
with sync_playwright() as p:
    b = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"])
    page = b.new_page()
    page.goto(base + "/#/")
    page.wait_for_selector("[data-testid=run-row]")
    t = time.monotonic()
    page.goto(base + "/#/run?id=" + run)
    page.wait_for_function("n => document.querySelectorAll('[data-testid=cell]').length === n", arg=cells, timeout=60000)
    print(int((time.monotonic() - t) * 1000))
    b.close()
"#;
    let output = Command::new(python)
        .args([
            "-c",
            script,
            &format!("http://{address}"),
            id,
            &cells.to_string(),
        ])
        .output()
        .ok()?;
    let ms: u64 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_millis(ms))
}

/// Follows `id`'s log through the viewer until its last line; each event's latency in ms.
fn follow(address: &str, id: &str, limit: Duration) -> Vec<u128> {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "GET /api/follow?id={id}&line=0 HTTP/1.1\r\nHost: {address}\r\n\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let (started, mut latencies) = (Instant::now(), Vec::new());
    // Events written before the page was following are not its latency.
    let connected = clock::now_ms();
    let mut line = String::new();
    while started.elapsed() < limit {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if line.starts_with("event: end") {
            break;
        }
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        let arrived = clock::now_ms();
        if let Ok(Value::Array(events)) = serde_json::from_str::<Value>(data) {
            latencies.extend(
                events
                    .iter()
                    .map(clock::ms_of)
                    .filter(|ts| *ts >= connected)
                    .map(|ts| arrived.saturating_sub(ts)),
            );
        }
    }
    latencies
}

/// A session of 100,000 events (the recorded trial's middle, repeated): its first page, a page
/// from its middle, and the viewer's memory after them.
fn long_session(recorded: &Path, scratch: &Path) {
    let events = events(&recorded.join("pass"));
    let (head, body, last) = (
        &events[0],
        &events[1..events.len() - 1],
        &events[events.len() - 1],
    );
    let dir = scratch.join("long").join("session");
    std::fs::create_dir_all(dir.join("blobs")).unwrap();
    for blob in std::fs::read_dir(recorded.join("pass").join("blobs")).unwrap() {
        let blob = blob.unwrap();
        std::fs::hard_link(blob.path(), dir.join("blobs").join(blob.file_name())).unwrap();
    }
    let mut seq = 0;
    let mut text = line(head, &mut seq);
    while seq < 99_999 {
        for event in body.iter().take((99_999 - seq) as usize) {
            text.push_str(&line(event, &mut seq));
        }
    }
    text.push_str(&line(last, &mut seq));
    std::fs::write(dir.join("events.jsonl"), &text).unwrap();
    let (viewer, _) = start(&scratch.join("long"));
    let time = |from: u64| {
        let started = Instant::now();
        get(
            &viewer.address,
            &format!("/api/events?id=0%2Fsession&from={from}&limit=500"),
        );
        started.elapsed()
    };
    let first = time(0);
    let middle: Vec<Duration> = (0..ROUNDS).map(|_| time(50_000)).collect();
    let (rss, peak) = memory(viewer.child.id());
    println!(
        "\na session of {seq} events ({:.0} MB): first page {} ms (its marks made: the log read once), a page from the middle {} ms; RSS {rss:.1} MiB, peak {peak:.1} MiB",
        text.len() as f64 / 1e6,
        first.as_millis(),
        median(middle).as_millis()
    );
}

fn main() {
    let scratch = tempfile::tempdir().unwrap();
    let recorded = scratch.path().join("recorded");
    write_tasks(&scratch.path().join("tasks"), &["pass", "fail"], "");
    let status = batch(&scratch.path().join("tasks"), &recorded, "2")
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(9), "one recorded trial fails");
    let python = std::env::var("HARNESS_BENCH_PLAYWRIGHT_PYTHON").ok();
    println!(
        "trials | index built (ms) | batch page requests (ms) | browser: grid drawn (ms) | RSS MiB | peak RSS MiB"
    );
    println!("---|---|---|---|---|---");
    for &n in SIZES {
        let root = scratch.path().join(format!("size-{n}"));
        make_batch(&recorded, &root.join("batch"), n);
        let (mut indexed, mut opened, mut drawn, mut rss, mut peak) =
            (vec![], vec![], vec![], 0.0, 0.0_f64);
        for _ in 0..ROUNDS {
            let (viewer, elapsed) = start(&root);
            indexed.push(elapsed);
            opened.push(open_batch(&viewer.address, "0/batch"));
            if let Some(python) = &python
                && let Some(ms) = browser(python, &viewer.address, "0%2Fbatch", n)
            {
                drawn.push(ms);
            }
            let (now, high) = memory(viewer.child.id());
            rss = now;
            peak = peak.max(high);
        }
        let drawn = if drawn.is_empty() {
            "–".to_owned()
        } else {
            median(drawn).as_millis().to_string()
        };
        println!(
            "{n} | {} | {} | {drawn} | {rss:.1} | {peak:.1}",
            median(indexed).as_millis(),
            median(opened).as_millis(),
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    long_session(&recorded, scratch.path());

    // Event to page while a batch runs.
    let live = scratch.path().join("live");
    let names: Vec<String> = (0..20).map(|i| format!("t{i:02}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    write_tasks(&scratch.path().join("live-tasks"), &refs, "sleep 0.1; ");
    std::fs::create_dir_all(&live).unwrap();
    let (viewer, _) = start(&live);
    let mut running = batch(&scratch.path().join("live-tasks"), &live.join("batch"), "2")
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let runs = get(&viewer.address, "/api/runs?kind=batch");
        if String::from_utf8_lossy(&runs).contains("\"0/batch\"") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut latencies = follow(&viewer.address, "0%2Fbatch", Duration::from_secs(300));
    let _ = running.wait();
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    println!(
        "\nevent to page while a batch of 20 tasks runs (2 at a time): {} events of the batch log; latency median {} ms, p95 {} ms, max {} ms",
        latencies.len(),
        at(0.5),
        at(0.95),
        at(1.0)
    );
}
