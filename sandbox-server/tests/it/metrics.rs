//! `GET /metrics`: what the server counts, behind its token or on `--metrics-listen`, in a
//! format Prometheus's own linter accepts.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common;

/// The value of one series (`name{labels}` exactly as exposed), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok())?
        })
}

fn value(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
}

/// Asserts that the sample of `series` in `text` is `expected`.
#[track_caller]
fn assert_value(text: &str, series: &str, expected: f64) {
    assert_eq!(value(text, series), expected, "{series}");
}

async fn scrape(server: &common::Server) -> String {
    let response = server.send(reqwest::Method::GET, "/metrics").await;
    assert_eq!(response.status(), 200);
    let kind = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(kind, "text/plain; version=0.0.4; charset=utf-8");
    response.text().await.unwrap()
}

#[tokio::test]
async fn calls_are_counted_by_tool_and_outcome() {
    let server = common::start_with_token_and_args(["--metrics-listen", "127.0.0.1:0"]).await;
    let before = scrape(&server).await;
    assert_value(
        &before,
        r#"sandbox_tool_calls_total{tool="bash",outcome="ok"}"#,
        0.0,
    );
    server.ok("bash", json!({"cmd": "echo one"})).await;
    server.ok("bash", json!({"cmd": "printf 0123456789"})).await;
    server.ok("bash", json!({"cmd": "exit 3"})).await;
    let timed = server
        .ok("bash", json!({"cmd": "sleep 30", "timeout": 1}))
        .await;
    assert_eq!(timed["timed_out"], true);
    let (status, _) = server
        .call("read_file", json!({"path": "missing.txt"}))
        .await;
    assert_eq!(status, 404);
    server
        .ok("write_file", json!({"path": "a.txt", "content": "x"}))
        .await;
    let (status, _) = server
        .request(reqwest::Method::POST, "/v1/workspace/snapshot")
        .send()
        .await
        .map(|r| (r.status().as_u16(), ()))
        .unwrap();
    assert_eq!(status, 200);

    let text = scrape(&server).await;
    let calls = |tool: &str, outcome: &str| {
        value(
            &text,
            &format!(r#"sandbox_tool_calls_total{{tool="{tool}",outcome="{outcome}"}}"#),
        )
    };
    assert_eq!(calls("bash", "ok"), 2.0);
    assert_eq!(calls("bash", "exit_nonzero"), 1.0);
    assert_eq!(calls("bash", "timeout"), 1.0);
    assert_eq!(calls("read_file", "file_not_found"), 1.0);
    assert_eq!(calls("write_file", "ok"), 1.0);
    let timeout_count =
        r#"sandbox_tool_call_duration_seconds_count{tool="bash",outcome="timeout"}"#;
    assert_value(&text, timeout_count, 1.0);
    let timeout_sum = r#"sandbox_tool_call_duration_seconds_sum{tool="bash",outcome="timeout"}"#;
    assert!(
        value(&text, timeout_sum) >= 1.0,
        "a 1 s timeout took at least 1 s"
    );
    assert_value(&text, r#"sandbox_tool_calls_in_flight{tool="bash"}"#, 0.0);
    assert_value(
        &text,
        r#"sandbox_errors_total{error="file_not_found"}"#,
        1.0,
    );
    let tool_route =
        r#"sandbox_http_requests_total{method="POST",route="/v1/tools/{name}",status="200"}"#;
    assert_value(&text, tool_route, 5.0);
    let snapshots = r#"sandbox_snapshot_duration_seconds_count{operation="snapshot"}"#;
    assert_value(&text, snapshots, 1.0);
    // "one\n" and "0123456789" at least; stderr of the others is empty.
    assert!(value(&text, "sandbox_captured_bytes_total") >= 14.0);
    assert!(value(&text, "sandbox_artifacts_kept") >= 2.0);

    // Each protection /v1/info reports is a gauge with the same state.
    let (_, info) = server.get_json("/v1/info").await;
    for protection in info["protections"].as_array().unwrap() {
        let series = format!(
            r#"sandbox_protection{{protection="{}"}}"#,
            protection["name"].as_str().unwrap()
        );
        let active = if protection["active"] == true {
            1.0
        } else {
            0.0
        };
        assert_eq!(value(&text, &series), active, "{series}");
    }
}

/// `promtool check metrics` (Prometheus's own linter) accepts the exposition, with series of
/// calls that succeeded, failed and timed out, and of a snapshot.
#[tokio::test]
#[cfg_attr(
    not(harness_prometheus),
    ignore = "needs HARNESS_TEST_PROMETHEUS=1 (bash .ci/run sets it up)"
)]
async fn promtool_accepts_the_exposition() {
    let server = common::start_with_token_and_args(["--metrics-listen", "127.0.0.1:0"]).await;
    server.ok("bash", json!({"cmd": "echo one"})).await;
    server.ok("bash", json!({"cmd": "exit 3"})).await;
    server
        .ok("bash", json!({"cmd": "sleep 30", "timeout": 1}))
        .await;
    let (status, _) = server
        .call("read_file", json!({"path": "missing.txt"}))
        .await;
    assert_eq!(status, 404);
    let snapshot = server
        .send(reqwest::Method::POST, "/v1/workspace/snapshot")
        .await;
    assert_eq!(snapshot.status(), 200);
    check_with_promtool(&scrape(&server).await);
}

#[tokio::test]
async fn the_metrics_need_the_token_except_on_their_own_address() {
    let server = common::start_with_token_and_args(["--metrics-listen", "127.0.0.1:0"]).await;
    let plain = reqwest::Client::new();
    let refused = plain
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let metrics = server
        .metrics
        .as_deref()
        .expect("the address line names the metrics address");
    let open = plain
        .get(format!("http://{metrics}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(open.status(), 200);
    assert!(
        open.text()
            .await
            .unwrap()
            .contains("sandbox_tool_calls_total")
    );
    // Nothing else is served there.
    let other = plain
        .get(format!("http://{metrics}/v1/info"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
    // A 401 is itself counted, on the route it asked for.
    let text = scrape(&server).await;
    let unauthorized = r#"sandbox_http_requests_total{method="GET",route="/metrics",status="401"}"#;
    assert_value(&text, unauthorized, 1.0);
}

#[tokio::test]
async fn busy_slots_processes_and_cancelled_calls_show() {
    let server = common::start_with_args(["--max-concurrent-calls", "1"]).await;
    let (status, _) = server
        .request(reqwest::Method::POST, "/v1/processes")
        .json(&json!({"id": "sleeper", "cmd": "sleep 30"}))
        .send()
        .await
        .map(|r| (r.status().as_u16(), ()))
        .unwrap();
    assert_eq!(status, 201);
    // One call holds the only slot; the next is refused with 429.
    let slow = server
        .request(reqwest::Method::POST, "/v1/tools/bash")
        .json(&json!({"cmd": "sleep 3"}))
        .timeout(Duration::from_millis(1500))
        .send();
    let second = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let text = scrape(&server).await;
        let (status, body): (u16, Value) = server.call("bash", json!({"cmd": "true"})).await;
        (text, status, body)
    };
    let (slow, (during, status, body)) = tokio::join!(slow, second);
    assert_eq!(status, 429, "{body}");
    assert!(slow.is_err(), "the client gave up on the slow call");
    assert_value(&during, r#"sandbox_tool_calls_in_flight{tool="bash"}"#, 1.0);
    assert_value(&during, r#"sandbox_processes_alive{kind="command"}"#, 1.0);
    // The call whose client left is counted once, as cancelled, and frees its slot.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let text = loop {
        let text = scrape(&server).await;
        let done = sample(&text, r#"sandbox_tool_calls_in_flight{tool="bash"}"#) == Some(0.0);
        if done || std::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_value(
        &text,
        r#"sandbox_tool_calls_total{tool="bash",outcome="overloaded"}"#,
        1.0,
    );
    assert_value(&text, "sandbox_throttled_total", 1.0);
    let cancelled = r#"sandbox_tool_calls_total{tool="bash",outcome="cancelled"}"#;
    assert_value(&text, cancelled, 1.0);
    assert_value(
        &text,
        r#"sandbox_tool_calls_total{tool="bash",outcome="ok"}"#,
        0.0,
    );
}

/// `promtool check metrics` (Prometheus's own linter) accepts the exposition.
fn check_with_promtool(text: &str) {
    use std::io::Write;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
