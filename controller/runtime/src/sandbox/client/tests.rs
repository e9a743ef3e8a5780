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
