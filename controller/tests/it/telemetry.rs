//! Telemetry checked by the real tools: one OpenTelemetry trace holds both programs' spans with
//! the right parents (an OTLP receiver built on the official `opentelemetry-proto` package), and
//! a real Prometheus scrapes a sandbox-server and a batch and answers queries over them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::batches::{DONE, bash, write_task};
use crate::common;
use testkit::wait_for;

/// A child process killed (and reaped) on drop.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn receiver_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/otlp_receiver.py")
}

/// The spans a receiver wrote, by span id.
fn spans(file: &Path) -> HashMap<String, Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|span| {
            (
                span["span_id"].as_str().unwrap_or_default().to_owned(),
                span,
            )
        })
        .collect()
}

/// The names of `span`'s ancestors, nearest first, as `service: name`.
fn ancestry(spans: &HashMap<String, Value>, span: &Value) -> Vec<String> {
    let mut names = Vec::new();
    let mut parent = span["parent_span_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    while let Some(up) = spans.get(&parent) {
        names.push(format!(
            "{}: {}",
            up["service"].as_str().unwrap_or("?"),
            up["name"].as_str().unwrap_or("?")
        ));
        parent = up["parent_span_id"].as_str().unwrap_or_default().to_owned();
    }
    names
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(harness_otlp_python),
    ignore = "needs HARNESS_TEST_OTLP_PYTHON=PATH (bash .ci/run sets it up)"
)]
async fn a_session_is_one_trace_across_both_programs() {
    let python = testkit::gates::value("HARNESS_TEST_OTLP_PYTHON");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let port_file = dir.path().join("port");
    let receiver = Command::new(&python)
        .arg(receiver_script())
        .args(["serve", "--port", "0", "--out"])
        .arg(&out)
        .arg("--port-file")
        .arg(&port_file)
        .stdout(Stdio::null())
        .spawn()
        .expect("start the OTLP receiver");
    let _receiver = Guard(receiver);
    let port = wait_for("the receiver's port", Duration::from_secs(30), || {
        std::fs::read_to_string(&port_file)
            .ok()
            .filter(|p| !p.trim().is_empty())
    });
    let tasks = dir.path().join("tasks");
    std::fs::create_dir(&tasks).unwrap();
    write_task(
        &tasks,
        "traced",
        &format!("{}{DONE}", bash("echo traced")),
        "",
    );
    let mut command = common::command(&["run", "--policy", "allow-all", "--task"]);
    command
        .arg(tasks.join("traced.yaml"))
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}", port.trim()),
        )
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let run = common::run(command, Duration::from_secs(120)).await;
    assert_eq!(run.code, 0, "{}", run.stderr);

    // Both programs flush their spans before they exit.
    let spans = wait_for("the sandbox's spans", Duration::from_secs(30), || {
        let spans = spans(&out);
        let server = spans
            .values()
            .any(|s| s["service"] == "sandbox-server" && s["name"] == "command");
        server.then_some(spans)
    });
    let roots: Vec<&Value> = spans
        .values()
        .filter(|s| s["parent_span_id"].as_str().unwrap_or_default().is_empty())
        .collect();
    let session = roots
        .iter()
        .find(|s| s["name"] == "session")
        .expect("a session root span");
    let trace = session["trace_id"].as_str().unwrap();
    let in_trace: Vec<&Value> = spans.values().filter(|s| s["trace_id"] == trace).collect();
    for span in &in_trace {
        let parent = span["parent_span_id"].as_str().unwrap_or_default();
        assert!(
            parent.is_empty() || spans.contains_key(parent),
            "orphan: {span}"
        );
    }
    let find = |service: &str, name: &str| {
        in_trace
            .iter()
            .find(|s| s["service"] == service && s["name"] == name)
            .unwrap_or_else(|| panic!("no {service}: {name} in the session's trace"))
    };
    // The command the model ran, seen from the sandbox, hangs under the model's turn.
    let command_span = find("sandbox-server", "command");
    assert_eq!(
        ancestry(&spans, command_span),
        [
            "sandbox-server: tool bash",
            "sandbox-server: POST /v1/tools/{name}",
            "harness: tool bash",
            "harness: turn",
            "harness: session"
        ]
    );
    assert_eq!(command_span["attributes"]["exit_code"], 0);
    let model = in_trace
        .iter()
        .find(|s| s["name"].as_str().is_some_and(|n| n.starts_with("model ")))
        .expect("a model call's span");
    assert_eq!(
        ancestry(&spans, model),
        ["harness: turn", "harness: session"]
    );
    let name = model["attributes"]["gen_ai.request.model"]
        .as_str()
        .unwrap();
    assert!(name.ends_with("traced.turns"), "{name}");
    assert_eq!(model["attributes"]["gen_ai.system"], "script");
    assert_eq!(model["kind"], "client");
    let policy = find("harness", "policy");
    assert_eq!(policy["attributes"]["verdict"], "allow");
    assert_eq!(ancestry(&spans, policy)[0], "harness: tool bash");
    let server = find("sandbox-server", "POST /v1/tools/{name}");
    assert_eq!(server["kind"], "server");
    assert_eq!(server["attributes"]["http.response.status_code"], 200);
    assert_eq!(session["attributes"]["outcome"], "completed");
}

/// A free loopback port (bound, read, released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One instant query's single value, when Prometheus has one.
async fn query(prometheus: &str, promql: &str) -> Option<f64> {
    let url = format!("{prometheus}/api/v1/query");
    let response = reqwest::Client::new()
        .get(url)
        .query(&[("query", promql)])
        .send()
        .await
        .ok()?;
    let body: Value = response.json().await.ok()?;
    let result = body["data"]["result"].as_array()?;
    let [one] = result.as_slice() else {
        return None;
    };
    one["value"][1].as_str()?.parse().ok()
}

async fn expect_value(prometheus: &str, promql: &str, expected: f64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = None;
    while Instant::now() < deadline {
        last = query(prometheus, promql).await;
        if last == Some(expected) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("Prometheus: {promql} = {last:?}, expected {expected}");
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(harness_prometheus),
    ignore = "needs HARNESS_TEST_PROMETHEUS=1 (bash .ci/run sets it up)"
)]
async fn prometheus_scrapes_a_server_and_a_batch() {
    let dir = tempfile::tempdir().unwrap();
    // A sandbox behind a token, which Prometheus presents from the same file.
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "metrics-test-token-0123456789\n").unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let sandbox = common::start_sandbox(workspace.path(), Some(&token_file));
    let called = reqwest::Client::new()
        .post(format!("{}/v1/tools/bash", sandbox.url))
        .bearer_auth("metrics-test-token-0123456789")
        .json(&serde_json::json!({"cmd": "echo scraped"}))
        .send()
        .await
        .unwrap();
    assert_eq!(called.status(), 200);

    // A batch of two tasks that stays up (--metrics-linger) until the queries are answered.
    let tasks = dir.path().join("tasks");
    std::fs::create_dir(&tasks).unwrap();
    for name in ["one", "two"] {
        write_task(&tasks, name, &format!("{}{DONE}", bash("echo hi")), "");
    }
    let out = dir.path().join("out");
    let mut batch = common::command(&[
        "batch",
        "--policy",
        "allow-all",
        "--progress",
        "lines",
        "--metrics-listen",
        "127.0.0.1:0",
        "--metrics-linger",
        "120",
        "--out",
    ]);
    batch.arg(&out).arg(&tasks).stderr(Stdio::piped());
    let mut child = batch.spawn().expect("start harness batch");
    let stderr = child.stderr.take().unwrap();
    let harness = Guard(child);
    let (address_tx, address_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if let Some(url) = line.strip_prefix("metrics: http://") {
                let _ = address_tx.send(url.trim_end_matches("/metrics").to_owned());
            }
        }
    });
    let batch_address = address_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("harness prints its metrics address");

    let port = free_port();
    let config = dir.path().join("prometheus.yml");
    let sandbox_target = sandbox.url.trim_start_matches("http://");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, scrape_timeout: 1s}}\nscrape_configs:\n  - job_name: sandbox\n    authorization: {{credentials_file: {}}}\n    static_configs: [{{targets: ['{sandbox_target}']}}]\n  - job_name: harness\n    static_configs: [{{targets: ['{batch_address}']}}]\n",
            token_file.display()
        ),
    )
    .unwrap();
    let prometheus = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("prometheus.log")).unwrap())
        .spawn()
        .expect("start prometheus");
    let _prometheus = Guard(prometheus);
    let api = format!("http://127.0.0.1:{port}");
    expect_value(&api, r#"up{job="sandbox"}"#, 1.0).await;
    expect_value(
        &api,
        r#"sandbox_tool_calls_total{tool="bash",outcome="ok"}"#,
        1.0,
    )
    .await;
    let protections = query(&api, "count(sandbox_protection)").await;
    assert!(protections.is_some_and(|n| n >= 1.0), "{protections:?}");
    expect_value(&api, r#"up{job="harness"}"#, 1.0).await;
    expect_value(&api, r#"harness_tasks{state="done"}"#, 2.0).await;
    expect_value(
        &api,
        r#"sum(harness_task_outcomes_total{outcome="completed"})"#,
        2.0,
    )
    .await;
    expect_value(
        &api,
        r#"sum(harness_sandbox_starts_total{provider="local",outcome="ok"})"#,
        2.0,
    )
    .await;
    expect_value(
        &api,
        r#"sum(harness_tool_calls_total{tool="bash",status="ok"})"#,
        2.0,
    )
    .await;
    expect_value(
        &api,
        r#"sum(harness_model_calls_total{provider="script",outcome="ok"})"#,
        4.0,
    )
    .await;
    expect_value(
        &api,
        r#"sum(harness_policy_decisions_total{verdict="allow"})"#,
        2.0,
    )
    .await;
    drop(harness);
    drop(sandbox);
}
