//! Scoped, expiring tokens: each scope opens its routes and no others (over `/v1`, `/metrics`,
//! `/mcp` and the terminal's WebSocket route), expiry and revocation take effect on the next
//! request, a token mints nothing wider than itself, and only `--token-store` keeps them
//! across a restart (as hashes a command cannot read).

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{self, Answer, Server, TOKEN};

/// A request: method, path, JSON body.
type Call<'a> = (Method, &'a str, Option<Value>);

/// Mints a token with `scopes` for `ttl_secs`, by `by`; the whole answer.
async fn mint(server: &Server, by: &str, scopes: &[&str], ttl_secs: u64) -> (u16, Value) {
    server
        .client
        .post(format!("{}/v1/tokens", server.base))
        .bearer_auth(by)
        .json(&json!({"name": format!("test-{}", scopes.join("-")), "scopes": scopes, "ttl_secs": ttl_secs}))
        .answer()
        .await
}

async fn minted(server: &Server, scopes: &[&str], ttl_secs: u64) -> (String, String) {
    let (status, body) = mint(server, TOKEN, scopes, ttl_secs).await;
    assert_eq!(status, 201, "{body}");
    (
        body["token"].as_str().unwrap().to_owned(),
        body["id"].as_str().unwrap().to_owned(),
    )
}

/// One request as `token`: its status and its body's error type and message (if any).
async fn send(
    server: &Server,
    token: &str,
    (method, path, body): &Call<'_>,
) -> (u16, String, String) {
    let mut request = server
        .client
        .request(method.clone(), format!("{}{path}", server.base))
        .bearer_auth(token);
    if let Some(body) = body {
        request = request.json(body);
    }
    if path.ends_with("/pty") {
        request = request
            .header("connection", "upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==");
    }
    let answer = request.send().await.unwrap();
    let status = answer.status().as_u16();
    let text = answer.text().await.unwrap_or_default();
    let error: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    (
        status,
        error["error"]["type"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        error["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

#[tokio::test]
async fn each_scope_opens_its_routes_and_no_others() {
    let server = common::start_with_token().await;
    server
        .ok("write_file", json!({"path": "a.txt", "content": "a\n"}))
        .await;
    // (request, the scope it needs; "" for any token)
    let table: Vec<(Call<'_>, &str)> = vec![
        ((Method::GET, "/v1/info", None), ""),
        ((Method::GET, "/v1/tools", None), ""),
        (
            (
                Method::POST,
                "/v1/tools/read_file",
                Some(json!({"path": "a.txt"})),
            ),
            "read",
        ),
        ((Method::GET, "/v1/files/a.txt", None), "read"),
        ((Method::GET, "/v1/dirs", None), "read"),
        ((Method::POST, "/v1/workspace/snapshot", None), "read"),
        ((Method::GET, "/v1/workspace/archive", None), "read"),
        ((Method::GET, "/v1/state/fingerprint", None), "read"),
        (
            (
                Method::POST,
                "/v1/tools/write_file",
                Some(json!({"path": "b.txt", "content": "b"})),
            ),
            "write",
        ),
        (
            (
                Method::POST,
                "/v1/tools/search_replace",
                Some(json!({"path": "a.txt", "search": "a", "replace": "a"})),
            ),
            "write",
        ),
        (
            (Method::POST, "/v1/tools/bash", Some(json!({"cmd": "true"}))),
            "run",
        ),
        // A tool's name spelt with percent escapes is the same tool, needing the same scope.
        (
            (
                Method::POST,
                "/v1/tools/b%61sh",
                Some(json!({"cmd": "true"})),
            ),
            "run",
        ),
        (
            (
                Method::POST,
                "/v1/tools/%77rite_file",
                Some(json!({"path": "c.txt", "content": "c"})),
            ),
            "write",
        ),
        ((Method::GET, "/v1/processes", None), "run"),
        (
            (
                Method::POST,
                "/v1/processes",
                Some(json!({"id": "p1", "cmd": "sleep 30"})),
            ),
            "run",
        ),
        ((Method::GET, "/v1/processes/p1/pty", None), "run"),
        ((Method::GET, "/v1/tokens", None), "admin"),
        ((Method::GET, "/metrics", None), "observe"),
    ];
    let scopes = ["read", "write", "run", "admin", "observe"];
    for scope in scopes {
        let (token, id) = minted(&server, &[scope], 600).await;
        for (request, needs) in &table {
            let (status, kind, message) = send(&server, &token, request).await;
            let what = format!("{scope} token, {} {}", request.0, request.1);
            if needs.is_empty() || needs == &scope {
                assert!(
                    status != 401 && kind != "missing_scope",
                    "{what}: refused ({status} {kind}: {message})"
                );
            } else {
                assert_eq!(
                    (status, kind.as_str()),
                    (403, "missing_scope"),
                    "{what}: {message}"
                );
                assert!(
                    message.contains(&format!("`{needs}`")) && message.contains(&id),
                    "{what}: {message}"
                );
            }
        }
    }
    // The server's own token holds every scope.
    for (request, _) in &table {
        let (status, kind, message) = send(&server, TOKEN, request).await;
        assert!(
            status != 401 && status != 403,
            "root, {} {}: {status} {kind} {message}",
            request.0,
            request.1
        );
    }
    // Reset is the administrator's.
    let (run, _) = minted(&server, &["run", "read", "write"], 600).await;
    let reset = (Method::POST, "/v1/reset", None);
    assert_eq!(send(&server, &run, &reset).await.0, 403);
    let (admin, _) = minted(&server, &["admin"], 600).await;
    assert_eq!(send(&server, &admin, &reset).await.0, 200);
}

/// `tools/list` and `tools/call` over `/mcp` with `token`.
async fn mcp(server: &Server, token: &str, method: &str, params: Value) -> Value {
    let (status, body) = server
        .client
        .post(format!("{}/mcp", server.base))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .answer()
        .await;
    assert_eq!(status, 200);
    body
}

#[tokio::test]
async fn the_mcp_endpoint_lists_and_runs_only_what_a_token_may() {
    let server = common::start_with_token().await;
    let (read, read_id) = minted(&server, &["read"], 600).await;
    let listed = mcp(&server, &read, "tools/list", json!({})).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"read_file") && names.contains(&"workspace_snapshot"),
        "{names:?}"
    );
    assert!(
        !names.contains(&"bash") && !names.contains(&"write_file"),
        "{names:?}"
    );
    let refused = mcp(
        &server,
        &read,
        "tools/call",
        json!({"name": "bash", "arguments": {"cmd": "touch ran"}}),
    )
    .await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    let text = refused["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("`run`") && text.contains(&read_id), "{text}");
    assert!(!server.path("ran").exists(), "the command ran");
    let (run, _) = minted(&server, &["run"], 600).await;
    let ran = mcp(
        &server,
        &run,
        "tools/call",
        json!({"name": "bash", "arguments": {"cmd": "touch ran"}}),
    )
    .await;
    assert_eq!(ran["result"]["isError"], false, "{ran}");
    assert!(server.path("ran").exists());
}

#[tokio::test]
async fn expiry_and_revocation_take_effect_on_the_next_request() {
    let server = common::start_with_token().await;
    let info = (Method::GET, "/v1/info", None);
    let (short, short_id) = minted(&server, &["read"], 1).await;
    assert_eq!(send(&server, &short, &info).await.0, 200);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut answer = send(&server, &short, &info).await;
    while answer.0 == 200 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        answer = send(&server, &short, &info).await;
    }
    assert_eq!(
        (answer.0, answer.1.as_str()),
        (401, "unauthorized"),
        "{answer:?}"
    );
    assert!(
        answer.2.contains(&short_id) && answer.2.contains("expired"),
        "{answer:?}"
    );

    let (revoked, revoked_id) = minted(&server, &["run"], 600).await;
    assert_eq!(send(&server, &revoked, &info).await.0, 200);
    let (status, body) = server.get_json("/v1/tokens").await;
    assert_eq!(status, 200);
    assert!(
        body.to_string().contains(&revoked_id) && !body.to_string().contains("sbt_"),
        "{body}"
    );
    let gone = server
        .send(Method::DELETE, &format!("/v1/tokens/{revoked_id}"))
        .await;
    assert_eq!(gone.status(), 200);
    let answer = send(&server, &revoked, &info).await;
    assert_eq!(answer.0, 401, "{answer:?}");
    assert!(answer.2.contains("revoked"), "{answer:?}");
    let (_, body) = server.get_json("/v1/tokens").await;
    assert!(!body.to_string().contains(&revoked_id), "{body}");
    let again = server
        .send(Method::DELETE, &format!("/v1/tokens/{revoked_id}"))
        .await;
    assert_eq!(again.status(), 404);

    // A token mints nothing wider or longer-lived than itself.
    let (admin, _) = minted(&server, &["admin", "read"], 60).await;
    let (status, body) = mint(&server, &admin, &["run"], 30).await;
    assert_eq!(status, 422, "{body}");
    assert!(common::error_message(&body).contains("`run`"), "{body}");
    let (status, body) = mint(&server, &admin, &["read"], 3600).await;
    assert_eq!(status, 422, "{body}");
    let (status, body) = mint(&server, &admin, &["read"], 30).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        body["minted_by"],
        json!(body["minted_by"].as_str().unwrap())
    );
    assert!(
        body["minted_by"].as_str().unwrap().starts_with("tok_"),
        "{body}"
    );
    // Bad requests name their field.
    for (request, field) in [
        (json!({"name": "x", "scopes": [], "ttl_secs": 60}), "scopes"),
        (
            json!({"name": "x", "scopes": ["read"], "ttl_secs": 0}),
            "ttl_secs",
        ),
        (
            json!({"name": "has space", "scopes": ["read"], "ttl_secs": 60}),
            "name",
        ),
        (
            json!({"name": "x", "scopes": ["root"], "ttl_secs": 60}),
            "unknown variant",
        ),
    ] {
        let (status, body) = server
            .request(Method::POST, "/v1/tokens")
            .json(&request)
            .answer()
            .await;
        assert_eq!(status, 422, "{request}");
        assert!(common::error_message(&body).contains(field), "{body}");
    }
}

#[tokio::test]
async fn only_a_token_store_keeps_tokens_across_a_restart_and_no_command_reads_it() {
    let state = tempfile::tempdir().unwrap();
    let store = state.path().join("tokens.json");
    let args = vec!["--token-store".to_owned(), store.display().to_string()];
    let info = (Method::GET, "/v1/info", None);

    let mut server = common::start_with_token_and_args(args.clone()).await;
    let (kept, _) = minted(&server, &["read"], 600).await;
    let text = std::fs::read_to_string(&store).unwrap();
    assert!(!text.contains(&kept), "the secret reached the store");
    let cat = server
        .ok("bash", json!({"cmd": format!("cat {}", store.display())}))
        .await;
    assert_ne!(cat["exit_code"], 0, "{cat}");
    assert!(!cat["output"].as_str().unwrap().contains("sha256"), "{cat}");
    server.stop();

    let mut server = common::start_with_token_and_args(args.clone()).await;
    assert_eq!(send(&server, &kept, &info).await.0, 200);
    server.stop();

    let server = common::start_with_token().await;
    let (forgotten, _) = minted(&server, &["read"], 600).await;
    assert_eq!(send(&server, &forgotten, &info).await.0, 200);
    drop(server);
    let server = common::start_with_token().await;
    assert_eq!(send(&server, &forgotten, &info).await.0, 401);

    // A broken store stops the start, and is left as it was.
    std::fs::write(&store, "{\"version\": 1, \"tokens\": [").unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let out = testkit::serve(common::binary(), workspace.path())
        .arg("--token-file")
        .arg(server.token_file())
        .args(&args)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--token-store") && stderr.contains("not a token store"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&store).unwrap(),
        "{\"version\": 1, \"tokens\": ["
    );
}

#[tokio::test]
async fn a_server_without_a_token_mints_none() {
    let server = common::start().await;
    let (status, body) = server
        .request(Method::POST, "/v1/tokens")
        .json(&json!({"name": "x", "scopes": ["read"], "ttl_secs": 60}))
        .answer()
        .await;
    assert_eq!(status, 400);
    assert!(
        common::error_message(&body).contains("--token-file"),
        "{body}"
    );
}

#[tokio::test]
async fn an_idempotency_key_is_each_token_s_own() {
    let server = common::start_with_token().await;
    let (other, _) = minted(&server, &["run"], 600).await;
    let call = |token: String| {
        server
            .client
            .post(format!("{}/v1/tools/bash", server.base))
            .bearer_auth(token)
            .header("Idempotency-Key", "same-key")
            .json(&json!({"cmd": "echo run >> runs.txt"}))
            .send()
    };
    let replayed =
        |answer: &reqwest::Response| answer.headers().contains_key("idempotent-replayed");
    let first = call(TOKEN.to_owned()).await.unwrap();
    assert!(!replayed(&first));
    let again = call(TOKEN.to_owned()).await.unwrap();
    assert!(replayed(&again), "the same token's repeat ran again");
    let theirs = call(other).await.unwrap();
    assert_eq!(theirs.status(), 200);
    assert!(
        !replayed(&theirs),
        "another token got the first one's answer"
    );
    let runs = std::fs::read_to_string(server.path("runs.txt")).unwrap();
    assert_eq!(runs.lines().count(), 2, "{runs}");
}

#[tokio::test]
async fn a_revoked_token_s_open_streams_end_with_it() {
    use futures::StreamExt as _;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

    let server = common::start_with_token().await;
    let (run, id) = minted(&server, &["run"], 600).await;
    let started = server
        .request(Method::POST, "/v1/processes")
        .json(&json!({"id": "long", "cmd": "while true; do echo tick; sleep 0.2; done"}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 201);
    let events = server
        .client
        .get(format!("{}/v1/processes/long/events", server.base))
        .bearer_auth(&run)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    let mut request = format!(
        "{}/v1/processes/long/pty",
        server.base.replace("http://", "ws://")
    )
    .into_client_request()
    .unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {run}").parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), socket.next())
        .await
        .unwrap();
    assert!(first.is_some(), "no output on the socket");

    let gone = server
        .send(Method::DELETE, &format!("/v1/tokens/{id}"))
        .await;
    assert_eq!(gone.status(), 200);

    // The event stream says why and ends, the process running on.
    let text = tokio::time::timeout(Duration::from_secs(10), events.text())
        .await
        .expect("the event stream outlived its token")
        .unwrap();
    assert!(
        text.contains("event: error") && text.contains("was revoked"),
        "{text}"
    );
    // The socket too.
    let mut said = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Ok(Some(Ok(frame))) = tokio::time::timeout_at(deadline.into(), socket.next()).await {
        said.push_str(&frame.to_string());
    }
    assert!(said.contains("was revoked"), "{said}");
    let (_, process) = server.get_json("/v1/processes/long").await;
    assert_eq!(process["state"], "running", "{process}");
}
