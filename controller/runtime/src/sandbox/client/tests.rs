use super::*;

/// A server that takes a `bash` call and never answers is called stuck once the call's
/// timeout, its kill grace and the margin have passed, and that is an infrastructure failure.
#[tokio::test]
async fn a_call_the_sandbox_never_answers_ends_as_stuck() {
    let limits = serde_json::json!({
        "output_limit_chars": 1000, "artifact_cap_bytes": 1000,
        "artifact_retention_bytes": 1000, "max_body_bytes": 1000,
        "max_concurrent_calls": 1, "default_timeout_secs": 1, "max_timeout_secs": 2,
        "kill_grace_ms": 100,
    });
    let info = serde_json::json!({
        "version": "0", "tools": ["bash"], "workspace_root": "/w", "limits": limits,
        "protections": [],
    })
    .to_string();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    // Answers `/v1/info`; takes every other request and holds it unanswered.
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut held = Vec::new();
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut head = [0u8; 1024];
            let n = socket.read(&mut head).await.unwrap_or(0);
            if head[..n].starts_with(b"GET /v1/info ") {
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{info}",
                    info.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
            } else {
                held.push(socket);
            }
        }
    });
    let mut client = SandboxClient::new(&url, None);
    client.stuck_margin = Duration::from_millis(200);
    let started = std::time::Instant::now();
    let call = ToolInput::Bash(sandbox_protocol::BashArgs {
        cmd: "true".to_owned(),
        timeout: Some(1),
    });
    let err = client.call_tool(&call).await.unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(err, SandboxError::Stuck { .. }), "{err}");
    assert!(err.is_infrastructure());
    assert!(
        err.to_string().contains("no answer to a `bash` call"),
        "{err}"
    );
    // 1 s timeout + 0.1 s grace + 0.2 s margin, and not much more.
    assert!(waited >= Duration::from_millis(1300), "{waited:?}");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
}

#[test]
fn paths_are_encoded_per_segment() {
    assert_eq!(
        encode_path(".agents/skills/my skill/SKILL.md"),
        ".agents/skills/my%20skill/SKILL.md"
    );
    assert_eq!(encode_segment("a/b?c#d"), "a%2Fb%3Fc%23d");
}

/// A server that reads a request's head and then holds it: reading nothing more, or reading the
/// whole body and never answering.
async fn holding_server(read_body: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut held = Vec::new();
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buffer = vec![0u8; 64 * 1024];
            let _ = socket.read(&mut buffer).await;
            if read_body {
                // Bounded: the test's body is 16 MiB.
                let mut total = 0;
                while total < 32 * 1024 * 1024 {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => total += n,
                    }
                }
            }
            held.push(socket);
        }
    });
    url
}

/// An archive upload to a sandbox that stops reading it, or that never answers once it has it
/// all, fails as stalled after the bound instead of waiting for ever.
#[tokio::test]
async fn an_upload_that_stops_moving_fails_as_stalled() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("big.tar");
    std::fs::write(&archive, vec![0u8; 16 * 1024 * 1024]).unwrap();
    for read_body in [false, true] {
        let client = SandboxClient::new(&holding_server(read_body).await, None);
        let file = tokio::fs::File::open(&archive).await.unwrap();
        let started = std::time::Instant::now();
        let stall = Duration::from_millis(500);
        let outcome = tokio::time::timeout(
            Duration::from_secs(30),
            client.put_archive_file_within(file, stall),
        )
        .await
        .expect("the watch ends the upload");
        let err = outcome.unwrap_err();
        let waited = started.elapsed();
        assert!(
            matches!(err, SandboxError::Stalled { .. }),
            "read_body={read_body}: {err}"
        );
        assert!(err.is_infrastructure());
        assert!(err.to_string().contains("stalled"), "{err}");
        assert!(waited >= stall, "{waited:?}");
        if read_body {
            // Sent whole: the answer was waited for the stall and a second per 20 MB (none).
            let SandboxError::Stalled { moved, .. } = err else {
                unreachable!()
            };
            assert_eq!(moved, 16 * 1024 * 1024);
        }
    }
}

/// What [`serve`] answers a request with, by its request line.
enum Answer {
    /// A status and a body of its declared length.
    Whole(&'static str, Vec<u8>),
    /// A status and a chunked body that goes on (up to 64 MiB, so a failing test ends).
    Endless(&'static str, &'static [u8]),
    /// 200 with a `content-length` of this, and not one byte of it.
    Declared(u64),
}

/// A server answering every request as `answer` says, one connection each.
async fn serve(answer: fn(&str) -> Answer) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut head = [0u8; 4096];
            let n = socket.read(&mut head).await.unwrap_or(0);
            let request = String::from_utf8_lossy(&head[..n]).into_owned();
            match answer(request.lines().next().unwrap_or_default()) {
                Answer::Whole(status, body) => {
                    let head = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = socket.write_all(head.as_bytes()).await;
                    let _ = socket.write_all(&body).await;
                }
                Answer::Endless(status, piece) => {
                    tokio::spawn(async move {
                        let head = format!(
                            "HTTP/1.1 {status}\r\ncontent-type: application/octet-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                        );
                        let mut frame = format!("{:x}\r\n", piece.len()).into_bytes();
                        frame.extend_from_slice(piece);
                        frame.extend_from_slice(b"\r\n");
                        if socket.write_all(head.as_bytes()).await.is_err() {
                            return;
                        }
                        for _ in 0..(64 * 1024 * 1024 / piece.len().max(1)) {
                            if socket.write_all(&frame).await.is_err() {
                                return;
                            }
                        }
                    });
                }
                Answer::Declared(length) => {
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n"
                    );
                    let _ = socket.write_all(head.as_bytes()).await;
                    held.push(socket);
                }
            }
        }
    });
    url
}

/// An answer longer than its cap fails, naming the route and the cap: an error body that never
/// ends, a JSON answer that declares a terabyte (refused before a byte of it), and a body one
/// byte over the cap it is read with.
#[tokio::test]
async fn an_answer_past_its_cap_fails_naming_the_route_and_the_cap() {
    const KIB: &[u8] = &[b'x'; 1024];
    let url = serve(|line: &str| {
        if line.starts_with("GET /healthz ") {
            Answer::Endless("500 Internal Server Error", KIB)
        } else if line.starts_with("GET /v1/tools ") {
            Answer::Declared(1 << 40)
        } else {
            Answer::Whole("200 OK", b"hello".to_vec())
        }
    })
    .await;
    let client = SandboxClient::new(&url, None);
    let err = client.health().await.unwrap_err();
    assert!(matches!(err, SandboxError::BadResponse { .. }), "{err}");
    assert!(err.is_infrastructure());
    let said = err.to_string();
    assert!(
        said.contains("its answer to /healthz passed 64 KiB"),
        "{said}"
    );
    assert!(said.contains("a sandbox answer is capped"), "{said}");
    let tools = tokio::time::timeout(Duration::from_secs(10), client.tools());
    let err = tools.await.expect("refused before any byte").unwrap_err();
    assert!(
        err.to_string()
            .contains("its answer to /v1/tools passed 512 MiB"),
        "{err}"
    );
    for (cap, whole) in [(5, true), (4, false)] {
        let request = client.request(reqwest::Method::GET, "/v1/blobs/a");
        let response = client.send(request).await.unwrap();
        let read = client.read_capped(response, cap).await;
        assert_eq!(read.is_ok(), whole, "cap {cap}: {read:?}");
    }
}

/// A server that does not say its limits (its `/v1/info` fails) still has every tool call
/// bounded: by the call's own timeout, or an hour, and the margin.
#[tokio::test]
async fn a_server_without_limits_still_bounds_each_call() {
    let url = serve(|_: &str| Answer::Whole("500 Internal Server Error", b"{}".to_vec())).await;
    let client = SandboxClient::new(&url, None);
    assert_eq!(
        client.call_bound(Timeout::Command(Some(5))).await,
        Duration::from_secs(5) + STUCK_MARGIN
    );
    assert_eq!(
        client.call_bound(Timeout::Longest).await,
        Duration::from_secs(UNKNOWN_LIMITS_SECS) + STUCK_MARGIN
    );
}

/// Limits of `u64::MAX` from a hostile `/v1/info` bound a call (without end) instead of
/// overflowing, and do not raise the artifact cap past a blob's.
#[tokio::test]
async fn limits_of_u64_max_bound_a_call_without_overflow() {
    let url = serve(|_: &str| {
        let limits = serde_json::json!({
            "output_limit_chars": 1000, "artifact_cap_bytes": u64::MAX,
            "artifact_retention_bytes": 1000, "max_body_bytes": 1000,
            "max_concurrent_calls": 1, "default_timeout_secs": u64::MAX,
            "max_timeout_secs": u64::MAX, "kill_grace_ms": u64::MAX,
        });
        let info = serde_json::json!({
            "version": "0", "tools": ["bash"], "workspace_root": "/w", "limits": limits,
            "protections": [],
        });
        Answer::Whole("200 OK", info.to_string().into_bytes())
    })
    .await;
    let client = SandboxClient::new(&url, None);
    assert_eq!(client.call_bound(Timeout::Longest).await, Duration::MAX);
    assert_eq!(
        client.call_bound(Timeout::Command(None)).await,
        Duration::MAX
    );
    assert_eq!(client.artifact_cap(), capped::BLOB_CAP);
}

/// Events are cut the same however the stream is split, each byte scanned once: one large
/// event sent a byte at a time is not rescanned from its start at every byte.
#[test]
fn an_event_stream_is_cut_into_events_however_it_is_split() {
    let stream = b"event: output\ndata: {}\n\n: heartbeat\n\nevent: exit\ndata: {}\n\n";
    for size in [1, 2, 3, 7, stream.len()] {
        let mut events = calls::EventBuffer::default();
        let mut seen = Vec::new();
        for chunk in stream.chunks(size) {
            events.push(chunk);
            while let Some(event) = events.next_event() {
                seen.push(String::from_utf8_lossy(event).into_owned());
            }
        }
        let expected = [
            "event: output\ndata: {}\n\n",
            ": heartbeat\n\n",
            "event: exit\ndata: {}\n\n",
        ];
        assert_eq!(seen, expected, "chunks of {size}");
        assert_eq!(events.pending(), 0);
    }
    let mut events = calls::EventBuffer::default();
    let mut large = b"data: ".to_vec();
    large.resize(large.len() + 512 * 1024, b'x');
    large.extend_from_slice(b"\n\n");
    for byte in large.chunks(1) {
        events.push(byte);
        if let Some(event) = events.next_event() {
            assert_eq!(event.len(), large.len());
        }
    }
    assert_eq!(events.pending(), 0);
}

/// A followed process whose stream never ends an event fails once it has held 1 MiB of it.
#[tokio::test]
async fn an_event_that_never_ends_fails_the_stream_past_its_cap() {
    let url = serve(|_: &str| Answer::Endless("200 OK", b"data: 0123456789abcdef\n")).await;
    let client = SandboxClient::new(&url, None);
    let mut seen = 0;
    let mut count = |_: LiveOutput| seen += 1;
    let follow = client.follow_process("p", &mut count);
    let outcome = tokio::time::timeout(Duration::from_secs(30), follow)
        .await
        .expect("the cap ends the stream");
    let err = outcome.unwrap_err();
    assert!(matches!(err, SandboxError::BadResponse { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("more than 1 MiB without ending an event"),
        "{err}"
    );
    assert_eq!(seen, 0);
}
