//! The audit log (`--audit-log`): every request's line over mutual TLS, with the certificate's
//! subject and the token's id and no secret; rotation by size; no line lost at the exit.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Ca, Files, client, mutual, start};
use crate::common::Answer;

/// The audit log's lines, once `count` of them are there (bounded: ten seconds).
fn audit_lines(path: &Path, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        if lines.len() >= count || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test]
async fn the_audit_log_holds_every_request_by_certificate_and_token_and_no_secret() {
    let ca = Ca::new("test CA");
    let clients = Ca::new("client CA");
    let files = Files::new();
    let mut args = mutual(&files, &ca, &clients);
    let token = "audit-root-token-0123456789";
    let token_file = files.write("token", token);
    let audit = files.dir.path().join("audit.jsonl");
    args.extend(
        [
            "--token-file",
            &token_file.display().to_string(),
            "--audit-log",
            &audit.display().to_string(),
        ]
        .map(str::to_owned),
    );
    let server = start(&args);
    let agent = clients.issue(&[], "agent-7", false);
    let client = client(&ca.pem(), Some(&agent));

    let mint = client
        .post(server.url("/v1/tokens"))
        .bearer_auth(token)
        .json(&json!({"name": "reader", "scopes": ["read"], "ttl_secs": 60}));
    let minted = mint.json_body().await;
    let (reader, reader_id) = (
        minted["token"].as_str().unwrap(),
        minted["id"].as_str().unwrap(),
    );
    let secret_command = "echo the-secret-argument";
    // The tool's name percent-encoded: the line names the tool that ran all the same.
    let ran = client
        .post(server.url("/v1/tools/b%61sh"))
        .bearer_auth(token)
        .header("sandbox-call-id", "call-audit-1")
        .json(&json!({ "cmd": secret_command }))
        .send()
        .await
        .unwrap();
    assert_eq!(ran.status(), 200);
    let ran_bytes = ran.bytes().await.unwrap().len() as u64;
    let refused = client
        .post(server.url("/v1/tools/bash"))
        .bearer_auth(reader)
        .json(&json!({"cmd": "true"}))
        .status_code()
        .await;
    assert_eq!(refused, 403);
    let wrong = client
        .get(server.url("/v1/info"))
        .bearer_auth("not-the-token-at-all")
        .status_code()
        .await;
    assert_eq!(wrong, 401);
    let revoke = client
        .delete(server.url(&format!("/v1/tokens/{reader_id}")))
        .bearer_auth(token)
        .status_code()
        .await;
    assert_eq!(revoke, 200);
    let revoked = client
        .get(server.url("/v1/info"))
        .bearer_auth(reader)
        .status_code()
        .await;
    assert_eq!(revoked, 401);
    let health = client.get(server.url("/healthz")).status_code().await;
    assert_eq!(health, 200);

    let lines = audit_lines(&audit, 7);
    assert_eq!(lines.len(), 7, "{lines:#?}");
    let text = std::fs::read_to_string(&audit).unwrap();
    for secret in [token, reader, "the-secret-argument"] {
        assert!(
            !text.contains(secret),
            "the audit log holds {secret:?}:\n{text}"
        );
    }
    for line in &lines {
        assert_eq!(line["subject"], "CN=agent-7", "{line}");
        assert!(
            line["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{line}"
        );
        assert!(line["time"].as_str().unwrap().ends_with('Z'), "{line}");
        assert!(line["duration_ms"].as_f64().unwrap() >= 0.0, "{line}");
    }
    let summary: Vec<(String, String, u64, String)> = lines
        .iter()
        .map(|l| {
            (
                l["method"].as_str().unwrap().to_owned(),
                l["route"].as_str().unwrap().to_owned(),
                l["status"].as_u64().unwrap(),
                l["token"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect();
    let row = |m: &str, r: &str, s: u64, t: &str| (m.to_owned(), r.to_owned(), s, t.to_owned());
    assert_eq!(
        summary,
        vec![
            row("POST", "/v1/tokens", 201, "root"),
            row("POST", "/v1/tools/{name}", 200, "root"),
            row("POST", "/v1/tools/{name}", 403, reader_id),
            row("GET", "/v1/info", 401, "-"),
            row("DELETE", "/v1/tokens/{id}", 200, "root"),
            row("GET", "/v1/info", 401, "-"),
            row("GET", "/healthz", 200, "-"),
        ]
    );
    // A refused token is named by the id it claims; a token that is not one, by nothing.
    assert_eq!(lines[5]["claimed"], reader_id, "{}", lines[5]);
    assert!(lines[3].get("claimed").is_none(), "{}", lines[3]);
    let bash = &lines[1];
    assert_eq!(
        (&bash["tool"], &bash["call_id"]),
        (&json!("bash"), &json!("call-audit-1")),
        "{bash}"
    );
    assert_eq!(bash["bytes_out"], ran_bytes, "{bash}");
    assert!(
        bash["bytes_in"].as_u64().unwrap() > secret_command.len() as u64,
        "{bash}"
    );
    assert_eq!(lines[2]["error"], "missing_scope", "{}", lines[2]);
    assert_eq!(lines[3]["error"], "unauthorized", "{}", lines[3]);
}

/// 100 requests to a server whose audit log rotates at 4 KiB keeping `keep` files, then its
/// exit (SIGTERM); the files' folder and the log's path.
fn hundred_requests_audited(keep: u32) -> (Files, PathBuf) {
    let files = Files::new();
    let audit = files.dir.path().join("audit.jsonl");
    let server = start(
        &[
            "--audit-log",
            &audit.display().to_string(),
            "--audit-log-max-bytes",
            "4KiB",
            "--audit-log-keep",
            &keep.to_string(),
        ]
        .map(str::to_owned),
    );
    let client = reqwest::blocking::Client::new();
    let url = format!("http://127.0.0.1:{}/healthz", server.port());
    for _ in 0..100 {
        assert_eq!(client.get(&url).send().unwrap().status(), 200);
    }
    // Stopped: every line reaches the disk before the server exits.
    drop(server);
    (files, audit)
}

#[test]
fn the_audit_log_rotates_by_size_and_keeps_what_it_was_told() {
    // A line is about 250 bytes: 100 of them fill six or seven files of 4 KiB.
    let (files, audit) = hundred_requests_audited(2);
    let rotated = |n: u32| files.dir.path().join(format!("audit.jsonl.{n}"));
    assert!(rotated(1).exists() && rotated(2).exists(), "not rotated");
    assert!(!rotated(3).exists(), "kept more than two");
    for path in [audit, rotated(1), rotated(2)] {
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(size <= 4096, "{} is {size} bytes", path.display());
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let line: Value = serde_json::from_str(line).unwrap();
            assert_eq!(line["route"], "/healthz");
        }
    }

    // Kept all: every one of the 100 requests is there, none lost at the exit.
    let (files, audit) = hundred_requests_audited(20);
    let mut lines = std::fs::read_to_string(&audit).unwrap().lines().count();
    for n in 1..=20 {
        let path = files.dir.path().join(format!("audit.jsonl.{n}"));
        lines += std::fs::read_to_string(&path).map_or(0, |text| text.lines().count());
    }
    assert_eq!(lines, 100);
}
