use std::time::Duration;

use serde_json::{Value, json};

use crate::common;

/// Posts a tool call with an `Idempotency-Key`; the status, whether it was replayed, the body.
async fn keyed(server: &common::Server, tool: &str, key: &str, args: Value) -> (u16, bool, Value) {
    let response = server
        .request(reqwest::Method::POST, &format!("/v1/tools/{tool}"))
        .header("Idempotency-Key", key)
        .json(&args)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    (status, replayed, response.json().await.unwrap())
}

fn lines(server: &common::Server, name: &str) -> usize {
    std::fs::read_to_string(server.path(name))
        .unwrap_or_default()
        .lines()
        .count()
}

#[tokio::test]
async fn a_repeated_call_is_answered_from_the_store_and_runs_once() {
    let server = common::start().await;
    let args = json!({"cmd": "echo ran >> runs.txt; echo $RANDOM"});
    let (status, replayed, first) = keyed(&server, "bash", "session-1:call-1", args.clone()).await;
    assert_eq!((status, replayed), (200, false), "{first}");
    let (status, replayed, again) = keyed(&server, "bash", "session-1:call-1", args.clone()).await;
    assert_eq!((status, replayed), (200, true), "{again}");
    assert_eq!(again, first, "the stored answer, byte for byte");
    assert_eq!(lines(&server, "runs.txt"), 1, "the command ran once");
    // Another key runs again; no key at all always runs.
    let (_, replayed, _) = keyed(&server, "bash", "session-1:call-2", args.clone()).await;
    assert!(!replayed);
    server.ok("bash", args).await;
    assert_eq!(lines(&server, "runs.txt"), 3);
}

#[tokio::test]
async fn a_repeat_while_the_first_runs_is_409_naming_its_call() {
    let server = std::sync::Arc::new(common::start().await);
    let args = json!({"cmd": "sleep 1.5; echo ran >> runs.txt"});
    let first = {
        let (server, args) = (server.clone(), args.clone());
        tokio::spawn(async move { keyed(&server, "bash", "k-running", args).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, _, body) = keyed(&server, "bash", "k-running", args.clone()).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["type"], "idempotency_in_progress");
    let message = common::error_message(&body);
    let call_id = message
        .split_whitespace()
        .find(|word| word.starts_with("call_"))
        .unwrap()
        .trim_end_matches([',', ';', '.']);
    let (_, processes) = server.get_json("/v1/processes").await;
    assert!(
        processes["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["call_id"] == call_id),
        "the 409 names the running call: {message} / {processes}"
    );
    let (status, _, first) = first.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(first["call_id"], call_id);
    let (status, replayed, again) = keyed(&server, "bash", "k-running", args).await;
    assert_eq!((status, replayed), (200, true));
    assert_eq!(again, first);
    assert_eq!(lines(&server, "runs.txt"), 1);
}

#[tokio::test]
async fn a_key_names_one_request() {
    let server = common::start().await;
    let (status, _, _) = keyed(
        &server,
        "write_file",
        "k1",
        json!({"path": "a", "content": "1"}),
    )
    .await;
    assert_eq!(status, 200);
    for (tool, args) in [
        ("write_file", json!({"path": "a", "content": "2"})),
        ("bash", json!({"cmd": "echo 2 > a"})),
    ] {
        let (status, _, body) = keyed(&server, tool, "k1", args).await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(body["error"]["type"], "idempotency_key_reused", "{body}");
    }
    assert_eq!(std::fs::read_to_string(server.path("a")).unwrap(), "1");
    // An upload's body is hashed as it streams: other bytes under the same key are refused.
    let put = |bytes: &'static str| {
        server
            .request(reqwest::Method::PUT, "/v1/files/up.bin")
            .header("Idempotency-Key", "k-up")
            .body(bytes)
            .send()
    };
    assert_eq!(put("one").await.unwrap().status(), 201);
    std::fs::write(server.path("up.bin"), "changed since").unwrap();
    let replay = put("one").await.unwrap();
    assert_eq!(replay.status(), 201, "the stored answer, status included");
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(
        std::fs::read_to_string(server.path("up.bin")).unwrap(),
        "changed since",
        "a replay writes nothing"
    );
    assert_eq!(put("two").await.unwrap().status(), 422);
}

#[tokio::test]
async fn bad_keys_are_refused_and_refusals_before_the_body_are_not_kept() {
    let server = common::start().await;
    for key in ["", "has space", &"k".repeat(256)] {
        let (status, _, body) = keyed(&server, "bash", key, json!({"cmd": "true"})).await;
        assert_eq!(status, 422, "{key:?}: {body}");
        assert!(
            common::error_message(&body).starts_with("Idempotency-Key:"),
            "{body}"
        );
    }
    // Refused before its body was read: nothing ran, so the key is free for a corrected request.
    let put = |query: &'static str| {
        server
            .request(reqwest::Method::PUT, &format!("/v1/files/m.txt{query}"))
            .header("Idempotency-Key", "k-mode")
            .body("x")
            .send()
    };
    assert_eq!(put("?mode=9").await.unwrap().status(), 422);
    assert_eq!(put("?mode=0600").await.unwrap().status(), 201);
}

#[tokio::test]
async fn keys_expire_after_their_time() {
    let server = common::start_with_args(["--idempotency-ttl-secs", "1"]).await;
    let args = json!({"cmd": "echo ran >> runs.txt"});
    keyed(&server, "bash", "k-ttl", args.clone()).await;
    let (_, replayed, _) = keyed(&server, "bash", "k-ttl", args.clone()).await;
    assert!(replayed);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (status, replayed, _) = keyed(&server, "bash", "k-ttl", args).await;
    assert_eq!(
        (status, replayed),
        (200, false),
        "an expired key runs again"
    );
    assert_eq!(lines(&server, "runs.txt"), 2);
}

#[tokio::test]
async fn every_mutating_route_takes_a_key() {
    let server = common::start().await;
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(testkit::repo_root().join("proto-docs/openapi.json")).unwrap(),
    )
    .unwrap();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let mutating = matches!(method.as_str(), "post" | "put" | "delete");
            let documented = operation["parameters"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["name"] == "Idempotency-Key"));
            // A minted token's answer is its secret, which no key store keeps.
            let keyed = path.starts_with("/v1/") && !path.starts_with("/v1/tokens");
            assert_eq!(documented, mutating && keyed, "{method} {path}");
        }
    }
    let snapshot = |key: &'static str| {
        server
            .request(reqwest::Method::POST, "/v1/workspace/snapshot")
            .header("Idempotency-Key", key)
            .send()
    };
    let first: Value = snapshot("k-snap").await.unwrap().json().await.unwrap();
    let again = snapshot("k-snap").await.unwrap();
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(
        again["snapshot_id"], first["snapshot_id"],
        "no second snapshot"
    );
}
