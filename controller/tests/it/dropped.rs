//! A tool call whose answer is lost on the way back (the connection drops after the sandbox ran
//! it) is repeated under its `Idempotency-Key` and answered from the sandbox's store: the
//! command runs once and the session goes on. Also: a step costs one round trip.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::batch_pools::start_server;
use crate::common::{self, events};

/// A TCP proxy in front of a sandbox-server that counts the requests by method and path, and
/// drops the connection instead of forwarding the answer to the first `drop_first` requests
/// whose line starts with `drop_prefix`.
struct Proxy {
    url: String,
    requests: Arc<Mutex<BTreeMap<String, usize>>>,
    dropped: Arc<Mutex<usize>>,
}

impl Proxy {
    async fn start(upstream: &str, drop_prefix: &'static str, drop_first: usize) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let requests = Arc::new(Mutex::new(BTreeMap::new()));
        let dropped = Arc::new(Mutex::new(0));
        let (counts, drops) = (requests.clone(), dropped.clone());
        tokio::spawn(async move {
            // Bounded by the test: the task ends with the runtime.
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(&upstream).await.unwrap();
                let (counts, drops) = (counts.clone(), drops.clone());
                tokio::spawn(relay(
                    client,
                    server,
                    counts,
                    drops,
                    drop_prefix,
                    drop_first,
                ));
            }
        });
        Proxy {
            url,
            requests,
            dropped,
        }
    }

    fn count(&self, prefix: &str) -> usize {
        let requests = self.requests.lock().unwrap();
        requests
            .iter()
            .filter(|(line, _)| line.starts_with(prefix))
            .map(|(_, n)| n)
            .sum()
    }
}

/// Relays one connection. Requests are read whole (head and `Content-Length` body) before they
/// are forwarded, so each is counted once; an answer to drop ends both connections instead.
async fn relay(
    mut client: TcpStream,
    mut server: TcpStream,
    counts: Arc<Mutex<BTreeMap<String, usize>>>,
    drops: Arc<Mutex<usize>>,
    drop_prefix: &'static str,
    drop_first: usize,
) {
    let mut buffer = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let Some(request) = read_request(&mut client, &mut buffer, &mut chunk).await else {
            return;
        };
        let line = String::from_utf8_lossy(&request)
            .lines()
            .next()
            .unwrap_or_default()
            .rsplit_once(' ')
            .map(|(line, _)| line.split('?').next().unwrap_or(line).to_owned())
            .unwrap_or_default();
        *counts.lock().unwrap().entry(line.clone()).or_default() += 1;
        server.write_all(&request).await.unwrap();
        let drop_this = {
            let mut dropped = drops.lock().unwrap();
            let drop_this = line.starts_with(drop_prefix) && *dropped < drop_first;
            *dropped += usize::from(drop_this);
            drop_this
        };
        let n = server.read(&mut chunk).await.unwrap_or(0);
        if drop_this || n == 0 {
            // The sandbox answered; the caller never hears it.
            return;
        }
        client.write_all(&chunk[..n]).await.unwrap();
        // The rest of this answer (its length known from the head, or read until quiet).
        forward_rest(&mut server, &mut client, &chunk[..n]).await;
    }
}

async fn read_request(
    client: &mut TcpStream,
    buffer: &mut Vec<u8>,
    chunk: &mut [u8],
) -> Option<Vec<u8>> {
    loop {
        if let Some(end) = find(buffer, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if buffer.len() >= end + 4 + length {
                return Some(buffer.drain(..end + 4 + length).collect());
            }
        }
        let n = client.read(chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

async fn forward_rest(server: &mut TcpStream, client: &mut TcpStream, first: &[u8]) {
    let Some(end) = find(first, b"\r\n\r\n") else {
        return;
    };
    let head = String::from_utf8_lossy(&first[..end]).to_ascii_lowercase();
    let Some(length) = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse::<usize>().unwrap())
    else {
        // Chunked: relay until the last chunk's marker, bounded by time.
        let mut seen = first.to_vec();
        let mut chunk = vec![0u8; 64 * 1024];
        while !seen.ends_with(b"0\r\n\r\n") {
            let read = tokio::time::timeout(Duration::from_secs(10), server.read(&mut chunk));
            let Ok(Ok(n)) = read.await else { return };
            if n == 0 {
                return;
            }
            client.write_all(&chunk[..n]).await.unwrap();
            seen.extend_from_slice(&chunk[..n]);
        }
        return;
    };
    let mut remaining = (end + 4 + length).saturating_sub(first.len());
    let mut chunk = vec![0u8; 64 * 1024];
    while remaining > 0 {
        let n = server.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        client.write_all(&chunk[..n]).await.unwrap();
        remaining = remaining.saturating_sub(n);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_call_whose_answer_was_lost_is_repeated_safely_and_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "dropped-token-0123456789").unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let (mut server, url) = start_server(workspace.path(), &token_file);
    let proxy = Proxy::start(&url, "POST /v1/tools/bash", 1).await;
    let script = dir.path().join("script.yaml");
    std::fs::write(
        &script,
        format!(
            "turns:\n{}{}  - text: done\n",
            common::bash_turn("echo ran >> runs.txt; echo hello"),
            common::bash_turn("cat runs.txt"),
        ),
    )
    .unwrap();
    let model = format!("script:{}", script.display());
    let command = common::command(&[
        "run",
        "--policy",
        "allow-all",
        "--model",
        &model,
        "--sandbox",
        &proxy.url,
        "--sandbox-token-file",
        token_file.to_str().unwrap(),
        "append a line",
    ]);
    let run = common::run(command, Duration::from_secs(60)).await;
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(*proxy.dropped.lock().unwrap(), 1, "one answer was lost");
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("runs.txt")).unwrap(),
        "ran\n",
        "the repeat was answered from the store: the command ran once"
    );
    let events = events(&run.log_dir());
    let results: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 2);
    for result in &results {
        assert_eq!(result["data"]["status"], "ok", "{result}");
    }
    assert!(
        !events.iter().any(|e| e["type"] == "error"),
        "no error was recorded: the drop was absorbed"
    );
    // Three tool requests for two calls (one repeat); the steps' records came with them.
    assert_eq!(proxy.count("POST /v1/tools/"), 3);
    for separate in [
        "GET /v1/workspace/changes",
        "GET /v1/artifacts/",
        "GET /v1/blobs/",
    ] {
        assert_eq!(proxy.count(separate), 0, "{separate}: {:?}", proxy.requests);
    }
    let changed = events
        .iter()
        .find(|e| e["type"] == "workspace_changed")
        .expect("the first call's change is recorded");
    assert_eq!(changed["data"]["changes"][0]["path"], "runs.txt");
}
