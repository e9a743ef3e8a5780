//! `DELETE /v1/processes?include_running=true`: what a benchmark's isolation step asks of the
//! server between the agent and the verifier.

use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::get;
use crate::common;

/// Between a benchmark's agent and its verifier: `DELETE /v1/processes?include_running=true`
/// ends everything a client started, a call still running included (it returns killed), and
/// names each command; the image's entrypoint (`--entrypoint-process`) and its children are the
/// task's and stay. A plain `DELETE /v1/processes` leaves them too.
#[tokio::test]
async fn ending_the_agents_processes_keeps_the_images_entrypoint() {
    let server = std::sync::Arc::new(
        common::start_with_args([
            "--entrypoint-process",
            r#"["bash", "-c", "sleep 301 & sleep 302"]"#,
        ])
        .await,
    );
    let background = server
        .ok("bash", json!({"cmd": "nohup sleep 303 >/dev/null 2>&1 &"}))
        .await;
    assert_eq!(background["exit_code"], 0, "{background}");
    let running = {
        let server = server.clone();
        tokio::spawn(async move {
            server
                .ok("bash", json!({"cmd": "sleep 304", "timeout": 60}))
                .await
        })
    };
    // Every sleep runs (the entrypoint's two, the background one, the running call's).
    let deadline = Instant::now() + Duration::from_secs(20);
    let commands = |listed: &Value| -> Vec<String> {
        listed["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["command"].as_str().unwrap().to_owned())
            .collect()
    };
    loop {
        let listed = get(&server, "/v1/processes").await;
        let seen = commands(&listed);
        if ["sleep 301", "sleep 302", "sleep 303", "sleep 304"]
            .iter()
            .all(|c| seen.iter().any(|s| s == c))
        {
            break;
        }
        assert!(Instant::now() < deadline, "not all started: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The plain kill: only the background sleep.
    let (_, plain) = server.delete("/v1/processes").await;
    assert_eq!(plain["commands"], json!(["sleep 303"]), "{plain}");
    let (status, ended) = server.delete("/v1/processes?include_running=true").await;
    assert_eq!(status, 200);
    let named: Vec<&str> = ended["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(named.contains(&"sleep 304"), "{ended}");
    assert!(
        !named
            .iter()
            .any(|c| c.contains("sleep 301") || c.contains("sleep 302")),
        "the entrypoint's tree stays: {ended}"
    );
    assert_eq!(
        ended["killed"].as_array().unwrap().len(),
        named.len(),
        "{ended}"
    );
    let call = running.await.unwrap();
    assert_ne!(call["exit_code"], 0, "the running call was ended: {call}");
    let left = commands(&get(&server, "/v1/processes").await);
    assert!(
        left.iter().any(|c| c == "sleep 301") && left.iter().any(|c| c == "sleep 302"),
        "{left:?}"
    );
    assert!(
        !left.iter().any(|c| c == "sleep 303" || c == "sleep 304"),
        "{left:?}"
    );
    // A bad parameter is named.
    let response = server
        .send(
            reqwest::Method::DELETE,
            "/v1/processes?include_running=maybe",
        )
        .await;
    assert_eq!(response.status(), 422);
    assert!(response.text().await.unwrap().contains("include_running"));
}
