//! Side by side with the closest peer, SWE-ReX's `swerex-remote` (an HTTP server inside each
//! sandbox, in Python), and with a bare spawn: the same operations, interleaved round by round
//! so that both servers see the same machine, with the ratios printed.
//!
//! `cargo bench -p sandbox-server --bench peers`. SWE-ReX is installed from the package index
//! into `target/bench-venvs/` by the bench itself (`SANDBOX_BENCH_PYTHON` names the Python,
//! 3.10 or newer; `python3` by default); when it cannot be installed its columns are skipped
//! with the reason. `SANDBOX_BENCH_SERVER=PATH` times another build of our server. Our server
//! runs with its default containment; SWE-ReX isolates nothing (commands run as its own user,
//! in its own environment and network).

// A benchmark binary prints its table and spawns the servers it measures.
#![allow(clippy::print_stdout, clippy::disallowed_methods, clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use support::{ms, percentile};

const SWEREX: &str = "swe-rex==1.4.0";
const ROUNDS: usize = 20;
const PER_ROUND: usize = 25;
const CLIENTS: usize = 16;
const WINDOW: Duration = Duration::from_secs(3);
const WINDOWS: usize = 3;
const TOKEN: &str = "bench-token";

/// A child process killed on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One side of the comparison: how to make each call over a keep-alive client.
trait Contestant: Sync {
    fn client(&self) -> reqwest::blocking::Client;
    fn call(&self, client: &reqwest::blocking::Client, op: Op);
}

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Bash,
    Read,
    Write,
    Health,
}

const OPS: [(Op, &str); 4] = [
    (Op::Bash, "bash `echo hi`"),
    (Op::Read, "read_file 10 KiB"),
    (Op::Write, "write_file 10 KiB"),
    (Op::Health, "health check"),
];

fn content() -> String {
    "x".repeat(10_239) + "\n"
}

fn ok(response: reqwest::Result<reqwest::blocking::Response>, what: &str) {
    let response = response.unwrap_or_else(|err| panic!("{what}: {err}"));
    assert!(
        response.status().is_success(),
        "{what}: {}",
        response.status()
    );
    let _ = response.bytes().unwrap();
}

struct Ours {
    base: String,
    _server: Running,
}

impl Ours {
    fn start(workspace: &Path) -> Ours {
        let (child, base) = support::start_server(workspace, &[], "error");
        Ours {
            base,
            _server: Running(child),
        }
    }
}

impl Contestant for Ours {
    fn client(&self) -> reqwest::blocking::Client {
        reqwest::blocking::Client::new()
    }

    fn call(&self, client: &reqwest::blocking::Client, op: Op) {
        let tool = |name: &str, args: Value| {
            client
                .post(format!("{}/v1/tools/{name}", self.base))
                .json(&args)
                .send()
        };
        match op {
            Op::Bash => ok(tool("bash", json!({"cmd": "echo hi"})), "bash"),
            Op::Read => ok(tool("read_file", json!({"path": "ten-kb.txt"})), "read"),
            Op::Write => ok(
                tool(
                    "write_file",
                    json!({"path": "out.txt", "content": content()}),
                ),
                "write",
            ),
            Op::Health => ok(
                client.get(format!("{}/healthz", self.base)).send(),
                "health",
            ),
        }
    }
}

struct SweRex {
    base: String,
    workspace: PathBuf,
    _server: Running,
}

impl SweRex {
    /// Installs (once) and starts `swerex-remote` on a free loopback port.
    fn start(workspace: &Path) -> Result<SweRex, String> {
        let venv = testkit::repo_root().join("target/bench-venvs/swe-rex-1.4.0");
        let remote = venv.join("bin/swerex-remote");
        if !remote.exists() {
            install(&venv)?;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(|err| format!("finding a free port: {err}"))?
            .port();
        let child = Command::new(&remote)
            .args([
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--auth-token",
                TOKEN,
            ])
            .current_dir(workspace)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|err| format!("starting {}: {err}", remote.display()))?;
        let rex = SweRex {
            base: format!("http://127.0.0.1:{port}"),
            workspace: workspace.to_owned(),
            _server: Running(child),
        };
        let client = rex.client();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let alive = client.get(format!("{}/is_alive", rex.base)).send();
            if alive.is_ok_and(|r| r.status().is_success()) {
                return Ok(rex);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err("swerex-remote did not answer /is_alive within 30 s".to_owned())
    }
}

fn install(venv: &Path) -> Result<(), String> {
    let python = std::env::var("SANDBOX_BENCH_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let run = |program: &Path, args: &[&str]| -> Result<(), String> {
        let output = Command::new(program)
            .args(args)
            .output()
            .map_err(|err| format!("{}: {err}", program.display()))?;
        if output.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        Err(format!("{} {}: {last}", program.display(), args.join(" ")))
    };
    println!("installing {SWEREX} into {} ...", venv.display());
    let _ = std::fs::remove_dir_all(venv);
    run(
        Path::new(&python),
        &["-m", "venv", &venv.display().to_string()],
    )?;
    run(&venv.join("bin/pip"), &["install", "--quiet", SWEREX])
}

impl Contestant for SweRex {
    fn client(&self) -> reqwest::blocking::Client {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("X-API-Key", TOKEN.parse().unwrap());
        // uvicorn drops a keep-alive connection idle for 5 s.
        reqwest::blocking::Client::builder()
            .default_headers(headers)
            .pool_idle_timeout(Duration::from_secs(4))
            .build()
            .unwrap()
    }

    fn call(&self, client: &reqwest::blocking::Client, op: Op) {
        let post = |route: &str, body: Value| {
            client
                .post(format!("{}{route}", self.base))
                .json(&body)
                .send()
        };
        let path = |name: &str| self.workspace.join(name).display().to_string();
        match op {
            // argv, not `shell: true` (which would be /bin/sh): the same bash as ours.
            Op::Bash => ok(
                post("/execute", json!({"command": ["bash", "-c", "echo hi"]})),
                "execute",
            ),
            Op::Read => ok(
                post("/read_file", json!({"path": path("ten-kb.txt")})),
                "read_file",
            ),
            Op::Write => ok(
                post(
                    "/write_file",
                    json!({"path": path("out.txt"), "content": content()}),
                ),
                "write_file",
            ),
            Op::Health => ok(
                client.get(format!("{}/is_alive", self.base)).send(),
                "is_alive",
            ),
        }
    }
}

/// A bare `bash -c 'echo hi'`, its output read, from this process.
fn bare_spawn() {
    let output = Command::new("bash")
        .args(["-c", "echo hi"])
        .output()
        .unwrap();
    assert_eq!(output.stdout, b"hi\n");
}

/// Latency samples of `op` for each contestant (and the bare spawn for `bash`), interleaved:
/// each round runs `PER_ROUND` calls of each in turn.
fn latencies(op: Op, sides: &[&dyn Contestant]) -> (Vec<Vec<Duration>>, Vec<Duration>) {
    let clients: Vec<_> = sides.iter().map(|side| side.client()).collect();
    for (side, client) in sides.iter().zip(&clients) {
        for _ in 0..PER_ROUND {
            side.call(client, op);
        }
    }
    let mut samples = vec![Vec::new(); sides.len()];
    let mut bare = Vec::new();
    let time = |f: &mut dyn FnMut(), into: &mut Vec<Duration>| {
        for _ in 0..PER_ROUND {
            let start = Instant::now();
            f();
            into.push(start.elapsed());
        }
    };
    for _ in 0..ROUNDS {
        for (i, (side, client)) in sides.iter().zip(&clients).enumerate() {
            time(&mut || side.call(client, op), &mut samples[i]);
        }
        if op == Op::Bash {
            time(&mut bare_spawn, &mut bare);
        }
    }
    (samples, bare)
}

/// Calls per second with `CLIENTS` concurrent clients over one window.
fn throughput(side: &dyn Contestant, op: Op) -> f64 {
    let deadline = Instant::now() + WINDOW;
    let total: u64 = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|_| {
                scope.spawn(|| {
                    let client = side.client();
                    let mut calls = 0u64;
                    while Instant::now() < deadline {
                        side.call(&client, op);
                        calls += 1;
                    }
                    calls
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    total as f64 / WINDOW.as_secs_f64()
}

/// The median over `WINDOWS` windows per contestant, the windows alternating between them.
fn throughputs(op: Op, sides: &[&dyn Contestant]) -> Vec<f64> {
    let mut rates = vec![Vec::new(); sides.len()];
    for _ in 0..WINDOWS {
        for (i, side) in sides.iter().enumerate() {
            rates[i].push(throughput(*side, op));
        }
    }
    rates
        .into_iter()
        .map(|mut r| {
            r.sort_by(f64::total_cmp);
            r[r.len() / 2]
        })
        .collect()
}

fn main() {
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("ten-kb.txt"), content()).unwrap();
    let ours = Ours::start(workspace.path());
    let rex = SweRex::start(workspace.path());
    let mut sides: Vec<&dyn Contestant> = vec![&ours];
    match &rex {
        Ok(rex) => sides.push(rex),
        Err(why) => println!("SWE-ReX skipped: {why}"),
    }
    let with_rex = sides.len() == 2;
    println!(
        "\n{} calls per operation and side, interleaved in {ROUNDS} rounds; ours with its default containment.\n",
        ROUNDS * PER_ROUND
    );
    println!(
        "| operation | bare spawn p50 / p99 ms | ours p50 / p99 ms | SWE-ReX p50 / p99 ms | ours ÷ bare (p50) | ours ÷ SWE-ReX (p50) |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (op, name) in OPS {
        let (mut samples, mut bare) = latencies(op, &sides);
        let pair = |s: &mut Vec<Duration>| {
            format!("{} / {}", ms(percentile(s, 0.5)), ms(percentile(s, 0.99)))
        };
        let ours_p50 = percentile(&mut samples[0], 0.5);
        let (bare_text, over_bare) = if bare.is_empty() {
            ("".to_owned(), "".to_owned())
        } else {
            let p50 = percentile(&mut bare, 0.5);
            (
                pair(&mut bare),
                format!("{:.2}×", ours_p50.as_secs_f64() / p50.as_secs_f64()),
            )
        };
        let (rex_text, over_rex) = if with_rex {
            let p50 = percentile(&mut samples[1], 0.5);
            (
                pair(&mut samples[1]),
                format!("{:.2}×", ours_p50.as_secs_f64() / p50.as_secs_f64()),
            )
        } else {
            ("skipped".to_owned(), "".to_owned())
        };
        println!(
            "| {name} | {bare_text} | {} | {rex_text} | {over_bare} | {over_rex} |",
            pair(&mut samples[0])
        );
    }
    println!(
        "\n| {CLIENTS} concurrent clients (median of {WINDOWS} windows of {} s, alternating) | ours calls/s | SWE-ReX calls/s | ours ÷ SWE-ReX |",
        WINDOW.as_secs()
    );
    println!("|---|---:|---:|---:|");
    for (op, name) in [(Op::Bash, "bash `echo hi`"), (Op::Read, "read_file 10 KiB")] {
        let rates = throughputs(op, &sides);
        let (rex, ratio) = match rates.get(1) {
            Some(rex) => (format!("{rex:.0}"), format!("{:.2}×", rates[0] / rex)),
            None => ("skipped".to_owned(), String::new()),
        };
        println!("| {name} | {:.0} | {rex} | {ratio} |", rates[0]);
    }
}
