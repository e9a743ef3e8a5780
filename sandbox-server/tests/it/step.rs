use base64::Engine;
use serde_json::{Value, json};

use crate::common;

/// A tool call with a query string.
async fn post(server: &common::Server, tool: &str, query: &str, args: Value) -> (u16, Value) {
    server.call(&format!("{tool}{query}"), args).await
}

fn inline(step: &Value, sha256: &Value) -> Option<Vec<u8>> {
    let text = step["inline"][sha256.as_str()?].as_str()?;
    Some(
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap(),
    )
}

/// One request gives the result, the changes since a snapshot with small new versions inline,
/// the output streams and the fingerprint: what a recorder would fetch in 3 to 5 more.
#[tokio::test]
async fn a_tool_call_returns_its_step_on_request() {
    let server = common::start().await;
    let (_, snapshot) = {
        let response = server
            .send(reqwest::Method::POST, "/v1/workspace/snapshot")
            .await;
        (200, response.json::<Value>().await.unwrap())
    };
    let since = snapshot["snapshot_id"].as_str().unwrap();
    let cmd = "printf small > small.txt; head -c 200000 /dev/zero > big.bin; echo out; echo err >&2; sleep 60 &";
    let (status, result) = post(
        &server,
        "bash",
        &format!("?since={since}&fingerprint=true&inline_max_bytes=1000"),
        json!({"cmd": cmd}),
    )
    .await;
    assert_eq!(status, 200, "{result}");
    let step = &result["step"];
    let changes = step["changes"]["changes"].as_array().unwrap();
    let version = |path: &str| {
        changes
            .iter()
            .find(|c| c["path"] == path)
            .map(|c| c["after"].clone())
            .unwrap()
    };
    assert_eq!(
        inline(step, &version("small.txt")["sha256"]).unwrap(),
        b"small"
    );
    assert!(
        inline(step, &version("big.bin")["sha256"]).is_none(),
        "over inline_max_bytes: fetched separately"
    );
    let blob = server
        .request(
            reqwest::Method::GET,
            &format!(
                "/v1/blobs/{}",
                version("big.bin")["sha256"].as_str().unwrap()
            ),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(blob.bytes().await.unwrap().len(), 200_000);
    assert_eq!(
        inline(step, &result["stdout_artifact"]["sha256"]).unwrap(),
        b"out\n"
    );
    assert_eq!(
        inline(step, &result["stderr_artifact"]["sha256"]).unwrap(),
        b"err\n"
    );
    let background = result["background_pids"][0].clone();
    assert!(
        step["fingerprint"]["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["pid"] == background),
        "{step}"
    );
    // The new snapshot is the next `since`: a second step sees only its own change.
    let next = step["changes"]["snapshot_id"].as_str().unwrap();
    let (_, second) = post(
        &server,
        "write_file",
        &format!("?since={next}"),
        json!({"path": "small.txt", "content": "changed"}),
    )
    .await;
    let changes = &second["step"]["changes"]["changes"];
    assert_eq!(changes.as_array().unwrap().len(), 1, "{changes}");
    assert_eq!(changes[0]["change"], "modified");
    assert!(second["step"].get("fingerprint").is_none());
}

#[tokio::test]
async fn a_bad_step_query_is_refused_before_the_tool_runs() {
    let server = common::start().await;
    for (query, expected) in [
        ("?since=snap_404", 404),
        ("?fingerprint=yes", 422),
        ("?inline_max_bytes=99999999", 422),
        ("?unknown=1", 422),
    ] {
        let (status, body) = post(&server, "bash", query, json!({"cmd": "touch ran"})).await;
        assert_eq!(status, expected, "{query}: {body}");
        assert!(
            !server.path("ran").exists(),
            "{query}: the tool did not run"
        );
    }
    let (_, plain) = post(&server, "bash", "", json!({"cmd": "true"})).await;
    assert!(plain.get("step").is_none(), "no step unless asked: {plain}");
}
