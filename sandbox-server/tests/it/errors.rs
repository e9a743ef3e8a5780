use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::common::{self, Answer};

async fn error_of(response: reqwest::Response) -> (u16, String, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    let error = &body["error"];
    (
        status,
        error["type"].as_str().unwrap().to_owned(),
        error["message"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn missing_or_wrong_token_is_401_on_every_v1_route() {
    let server = common::start_with_token().await;
    let client = reqwest::Client::new();
    for (method, path) in [
        (reqwest::Method::GET, "/v1/info"),
        (reqwest::Method::GET, "/v1/tools"),
        (reqwest::Method::POST, "/v1/tools/bash"),
        (reqwest::Method::POST, "/v1/tools/nope"),
        (reqwest::Method::GET, "/v1/processes"),
        (reqwest::Method::GET, "/v1/artifacts/art_0"),
    ] {
        let url = format!("{}{path}", server.base);
        let missing = client
            .request(method.clone(), &url)
            .json(&json!({"cmd": "true"}))
            .send()
            .await
            .unwrap();
        assert_eq!(missing.headers()["www-authenticate"], "Bearer");
        let (status, error_type, _) = error_of(missing).await;
        assert_eq!(
            (status, error_type.as_str()),
            (401, "unauthorized"),
            "{path}"
        );
        let wrong = client
            .request(method, &url)
            .bearer_auth("wrong-token-0123456789")
            .send()
            .await
            .unwrap();
        let (status, _, message) = error_of(wrong).await;
        assert_eq!((status, message.as_str()), (401, "wrong token"), "{path}");
    }
    let ok = server.ok("bash", json!({"cmd": "true"})).await;
    assert_eq!(ok["exit_code"], 0);
}

#[tokio::test]
async fn unknown_tool_and_route_are_404_and_wrong_method_is_405() {
    let server = common::start().await;
    let (status, body) = server.call("rm_rf", json!({})).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["type"], "unknown_tool");
    assert!(common::error_message(&body).contains("enabled tools: bash, read_file"));
    // The missing tool is what is said, whatever else is wrong with the request.
    let (status, body) = server
        .request(
            reqwest::Method::POST,
            "/v1/tools/rm_rf?since=no-such-snapshot&x=1",
        )
        .header("content-type", "text/plain")
        .body("not json")
        .answer()
        .await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["type"], "unknown_tool", "{body}");

    let (status, body) = server.get_json("/v2/nothing").await;
    assert_eq!(
        (status, body["error"]["type"].as_str().unwrap()),
        (404, "not_found")
    );

    let response = server.send(reqwest::Method::GET, "/v1/tools/bash").await;
    let (status, error_type, _) = error_of(response).await;
    assert_eq!((status, error_type.as_str()), (405, "method_not_allowed"));
}

#[tokio::test]
async fn body_over_the_limit_is_413() {
    let server = common::start_with_args(["--max-body-bytes", "1000"]).await;
    let content = "x".repeat(2000);
    let (status, body) = server
        .call("write_file", json!({"path": "big.txt", "content": content}))
        .await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["type"], "payload_too_large");
    assert!(!server.path("big.txt").exists());
}

/// (tool, arguments as JSON text, the message naming what is wrong).
const INVALID_ARGUMENTS: &[(&str, &str, &str)] = &[
    ("bash", r#"{}"#, "missing field `cmd`"),
    (
        "bash",
        r#"{"cmd": 5}"#,
        "cmd: invalid type: integer `5`, expected a string",
    ),
    (
        "bash",
        r#"{"cmd": "ls", "cwd": "/"}"#,
        "cwd: unknown field `cwd`, expected `cmd` or `timeout`",
    ),
    (
        "bash",
        r#"{"cmd": "ls", "timeout": 0}"#,
        "timeout: must be between 1 and 3600 seconds, got 0",
    ),
    (
        "bash",
        r#"{"cmd": "ls", "timeout": 3601}"#,
        "timeout: must be between 1 and 3600 seconds, got 3601",
    ),
    (
        "bash",
        r#"{"cmd": "ls", "timeout": -1}"#,
        "timeout: expected a whole number, not negative, got -1",
    ),
    (
        "bash",
        r#"{"cmd": "ls", "timeout": "5"}"#,
        "timeout: invalid type: string \"5\", expected a JSON number",
    ),
    (
        "bash",
        r#"["ls"]"#,
        "the arguments must be a JSON object, got an array",
    ),
    (
        "bash",
        "null",
        "the arguments must be a JSON object, got null",
    ),
    (
        "read_file",
        r#"{"path": "a", "limit": 0}"#,
        "limit: must be between 1 and 100000, got 0",
    ),
    ("read_file", r#"{"path": ""}"#, "path: must not be empty"),
    (
        "search_replace",
        r#"{"path": "a", "search": "", "replace": "b"}"#,
        "search: must not be empty",
    ),
    ("write_file", r#"{"path": "a"}"#, "missing field `content`"),
];

#[tokio::test]
async fn invalid_arguments_are_422_naming_the_field() {
    let server = common::start().await;
    for (tool, args, expected) in INVALID_ARGUMENTS {
        let args: Value = serde_json::from_str(args).unwrap();
        let (status, body) = server.call(tool, args.clone()).await;
        assert_eq!(status, 422, "{tool} {args}: {body}");
        assert_eq!(body["error"]["type"], "invalid_arguments");
        assert_eq!(body["error"]["message"], *expected, "{tool} {args}");
    }
}

#[tokio::test]
async fn a_body_that_is_not_json_or_empty_is_422() {
    let server = common::start().await;
    let response = server
        .request(reqwest::Method::POST, "/v1/tools/bash")
        .header("content-type", "application/json")
        .body("{\"cmd\": ")
        .send()
        .await
        .unwrap();
    let (status, error_type, message) = error_of(response).await;
    assert_eq!((status, error_type.as_str()), (422, "invalid_arguments"));
    assert!(message.starts_with("body is not valid JSON"), "{message}");
    let response = server.send(reqwest::Method::POST, "/v1/tools/bash").await;
    let (status, _, message) = error_of(response).await;
    assert_eq!(status, 422);
    assert!(message.contains("request body is empty"), "{message}");
}

#[tokio::test]
async fn calls_over_the_concurrency_limit_get_429_with_retry_after() {
    let server = common::start_with_args(["--max-concurrent-calls", "2"]).await;
    let server = std::sync::Arc::new(server);
    let mut slow = Vec::new();
    for _ in 0..2 {
        let server = server.clone();
        slow.push(tokio::spawn(async move {
            server.ok("bash", json!({"cmd": "sleep 1"})).await
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let response = server
        .request(reqwest::Method::POST, "/v1/tools/bash")
        .json(&json!({"cmd": "true"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["retry-after"], "1");
    let (status, error_type, _) = error_of(response).await;
    assert_eq!((status, error_type.as_str()), (429, "overloaded"));
    for call in slow {
        assert_eq!(call.await.unwrap()["exit_code"], 0);
    }
    // Slots free again once the calls return.
    assert_eq!(
        server.ok("bash", json!({"cmd": "true"})).await["exit_code"],
        0
    );
}

/// One raw HTTP/1.1 request on a fresh connection; the answer's head, lower-cased.
async fn raw_head(server: &common::Server, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = server.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = request.replace("{host}", address);
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        assert!(n > 0, "closed before an answer");
        answer.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&answer).to_lowercase();
    text.split("\r\n\r\n").next().unwrap().to_owned()
}

/// A request refused before its body is read closes its connection, and says so, so that no
/// client reuses it; other answers, refusals whose body was read among them, keep it open.
#[tokio::test]
async fn a_refused_request_with_a_body_closes_its_connection() {
    let server = common::start().await;
    let refused = raw_head(
        &server,
        "PUT /v1/files/x?mode=9 HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/octet-stream\r\nContent-Length: 1\r\n\r\nx",
    )
    .await;
    assert!(refused.starts_with("http/1.1 422"), "{refused}");
    assert!(refused.contains("\r\nconnection: close"), "{refused}");
    let fine = raw_head(&server, "GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n").await;
    assert!(fine.starts_with("http/1.1 200"), "{fine}");
    assert!(!fine.contains("connection: close"), "{fine}");
    let body = r#"{"path": "nope.txt"}"#;
    let read = raw_head(
        &server,
        &format!(
            "POST /v1/tools/read_file HTTP/1.1\r\nHost: {{host}}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    assert!(read.starts_with("http/1.1 404"), "{read}");
    assert!(!read.contains("connection: close"), "{read}");
    let written = raw_head(
        &server,
        "PUT /v1/files/x?mode=0644 HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/octet-stream\r\nContent-Length: 1\r\n\r\nx",
    )
    .await;
    assert!(written.starts_with("http/1.1 201"), "{written}");
    assert!(!written.contains("connection: close"), "{written}");
}

/// Issue 57 §9: a configuration mistake is a message naming it, with no backtrace even when
/// `RUST_BACKTRACE` asks for one (a backtrace is for a crash).
#[test]
fn a_configuration_error_is_a_message_not_a_backtrace() {
    let missing = tempfile::tempdir()
        .unwrap()
        .path()
        .join("no-such-workspace");
    let output = std::process::Command::new(common::binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--workspace"])
        .arg(&missing)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: --workspace") && stderr.contains("no-such-workspace"),
        "{stderr}"
    );
    assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");
}
