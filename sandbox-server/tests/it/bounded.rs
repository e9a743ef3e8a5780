//! Issue 24 §7: every store, stream and label of the server is bounded, whatever a client
//! sends: invented methods add no metrics series, the idempotency store forgets on reset,
//! followers of process output are capped with a 429, and ids that clients normalise away are
//! refused.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{self, Answer};

/// The series of `/metrics` whose name starts with `prefix`.
fn series<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|line| !line.starts_with('#') && line.starts_with(prefix))
        .collect()
}

#[tokio::test]
async fn issue_24_invented_methods_add_no_metrics_series() {
    let server = common::start().await;
    for n in 0..200 {
        let method = reqwest::Method::from_bytes(format!("BREW{n}").as_bytes()).unwrap();
        let _ = server.send(method, &format!("/v1/nothing-{n}")).await;
    }
    let text = server.get_text("/metrics").await;
    let requests = series(&text, "sandbox_http_requests_total");
    assert!(
        requests.iter().all(|line| !line.contains("BREW")),
        "{requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|line| line.contains(r#"method="other""#)),
        "{requests:?}"
    );
    assert!(
        requests.len() < 20,
        "{} series: {requests:?}",
        requests.len()
    );
}

/// A reset empties the idempotency store: a key of the last lease runs again on the next.
#[tokio::test]
async fn issue_24_a_reset_forgets_the_idempotency_keys() {
    let server = common::start().await;
    let keyed = |cmd: &'static str| {
        server
            .request(reqwest::Method::POST, "/v1/tools/bash")
            .header("Idempotency-Key", "lease-key")
            .json(&json!({"cmd": cmd}))
            .send()
    };
    let first = keyed("echo first").await.unwrap();
    assert_eq!(first.status(), 200);
    let replayed = keyed("echo first").await.unwrap();
    assert_eq!(replayed.headers()["idempotent-replayed"], "true");
    let reset = server.send(reqwest::Method::POST, "/v1/reset").await;
    assert_eq!(reset.status(), 200);
    let again = keyed("echo second").await.unwrap();
    assert_eq!(
        again.status(),
        200,
        "the key belongs to nothing after the reset"
    );
    assert!(again.headers().get("idempotent-replayed").is_none());
    let body: Value = again.json().await.unwrap();
    assert_eq!(body["stdout"], "second\n");
}

/// Followers of a process (event streams, WebSockets, waiting long-polls) are capped: one more
/// gets 429 with Retry-After, and a follower that leaves gives its place back.
#[tokio::test]
async fn issue_24_followers_are_capped_and_give_their_place_back() {
    let server = common::start_with_args(["--max-followers", "3"]).await;
    let started = server
        .request(reqwest::Method::POST, "/v1/processes")
        .json(&json!({"id": "quiet", "cmd": "sleep 60"}))
        .send()
        .await
        .unwrap();
    assert!(
        started.status().is_success(),
        "{}",
        started.text().await.unwrap()
    );
    let (_, info) = server.get_json("/v1/info").await;
    assert_eq!(info["limits"]["max_followers"], 3);
    let follow = || {
        server
            .request(reqwest::Method::GET, "/v1/processes/quiet/events")
            .send()
    };
    let mut held = Vec::new();
    for _ in 0..3 {
        let response = follow().await.unwrap();
        assert_eq!(response.status(), 200);
        held.push(response);
    }
    let refused = follow().await.unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "1");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["type"], "overloaded", "{body}");
    assert!(common::error_message(&body).contains("--max-followers"));
    // A long-poll that would wait is a follower too; one that does not wait is not.
    let (status, _) = server
        .get_json("/v1/processes/quiet/output?wait_ms=100")
        .await;
    assert_eq!(status, 429);
    let (status, _) = server.get_json("/v1/processes/quiet/output").await;
    assert_eq!(status, 200);
    drop(held.pop());
    let start = std::time::Instant::now();
    let back = loop {
        let response = follow().await.unwrap();
        if response.status() == 200 || start.elapsed() > Duration::from_secs(10) {
            break response;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        back.status(),
        200,
        "a follower that left gave its place back"
    );
}

#[tokio::test]
async fn issue_24_process_ids_that_paths_normalise_away_are_refused() {
    let server = common::start().await;
    for id in [".", ".."] {
        let (status, body) = server
            .request(reqwest::Method::POST, "/v1/processes")
            .json(&json!({"id": id, "cmd": "true"}))
            .answer()
            .await;
        assert_eq!(status, 422, "{id}");
        assert!(common::error_message(&body).contains("path step"), "{body}");
    }
    let fine = server
        .request(reqwest::Method::POST, "/v1/processes")
        .json(&json!({"id": "...", "cmd": "true"}))
        .send()
        .await
        .unwrap();
    assert!(fine.status().is_success());
}
