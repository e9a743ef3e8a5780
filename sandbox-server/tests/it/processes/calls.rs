//! A `bash` call is a process of kind `call` under its call id: followed while it runs,
//! stopped by a delete, and named by the client with `Sandbox-Call-Id`.

use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::get;
use super::streams::sse;
use crate::common::{self, Answer, Server};

/// A `bash` call named `name`, answered as (status, body).
async fn named_call(server: &Server, name: &str, cmd: &str) -> (u16, Value) {
    server
        .request(reqwest::Method::POST, "/v1/tools/bash")
        .header("Sandbox-Call-Id", name)
        .json(&json!({"cmd": cmd, "timeout": 60}))
        .answer()
        .await
}

/// Waits (bounded) until `id` is a running process.
async fn until_running(server: &Server, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = server.get_json(&format!("/v1/processes/{id}")).await;
        if status == 200 && body["state"] == "running" {
            return;
        }
        assert!(Instant::now() < deadline, "{id} never ran: {status} {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_running_bash_call_is_followed_line_by_line() {
    let server = common::start().await;
    let cmd = "for i in 1 2 3 4; do echo line $i; sleep 0.4; done; echo oops >&2";
    let call = {
        let (base, client) = (server.base.clone(), server.client.clone());
        tokio::spawn(async move {
            let response = client
                .post(format!("{base}/v1/tools/bash"))
                .header("Sandbox-Call-Id", "build-1")
                .json(&json!({"cmd": cmd}))
                .send()
                .await
                .unwrap();
            let body: Value = response.json().await.unwrap();
            (Instant::now(), body)
        })
    };
    until_running(&server, "build-1").await;
    let mut first_line_at = None;
    let events = sse(
        &server,
        "/v1/processes/build-1/events",
        None,
        |event, _, _| {
            if event == "output" && first_line_at.is_none() {
                first_line_at = Some(Instant::now());
            }
            false
        },
    )
    .await;
    let (answered_at, result) = call.await.unwrap();
    assert!(
        first_line_at.unwrap() + Duration::from_millis(800) < answered_at,
        "the first line came while the call ran, not at its end"
    );
    let text = |stream: &str| -> String {
        events
            .iter()
            .filter(|(event, _, data)| event == "output" && data["stream"] == stream)
            .map(|(_, _, data)| data["data"].as_str().unwrap())
            .collect()
    };
    assert_eq!(text("stdout"), "line 1\nline 2\nline 3\nline 4\n");
    assert_eq!(text("stderr"), "oops\n");
    let (last, _, exit) = events.last().unwrap();
    assert_eq!((last.as_str(), &exit["exit_code"]), ("exit", &json!(0)));
    assert_eq!(result["call_id"], "build-1", "{result}");
    let process = get(&server, "/v1/processes/build-1").await;
    assert_eq!(
        (&process["kind"], &process["state"], &process["stdin_open"]),
        (&json!("call"), &json!("exited"), &json!(false))
    );
    assert_eq!(process["cmd"], cmd);
    let artifacts = process["artifacts"].as_array().unwrap();
    assert_eq!(
        artifacts[0]["artifact"]["id"],
        result["stdout_artifact"]["id"]
    );
    assert_eq!(
        artifacts[1]["artifact"]["id"],
        result["stderr_artifact"]["id"]
    );
}

#[tokio::test]
async fn a_call_name_is_one_process_and_a_bad_one_is_refused() {
    let server = common::start().await;
    let (status, body) = named_call(&server, "step-7", "echo hi").await;
    assert_eq!((status, &body["stdout"]), (200, &json!("hi\n")), "{body}");
    let (status, body) = named_call(&server, "step-7", "echo again").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["type"], "process_conflict", "{body}");
    assert!(common::error_message(&body).contains("step-7"), "{body}");
    for bad in ["12", "a b", "x/y"] {
        let (status, body) = named_call(&server, bad, "echo no").await;
        assert_eq!(status, 422, "{bad}: {body}");
        assert!(
            common::error_message(&body).starts_with("Sandbox-Call-Id: "),
            "{body}"
        );
    }
    // Unnamed calls are processes too, under the id the server chose.
    let (_, body) = server.call("bash", json!({"cmd": "echo anon"})).await;
    let id = body["call_id"].as_str().unwrap();
    assert_eq!(
        get(&server, &format!("/v1/processes/{id}")).await["kind"],
        "call"
    );
}

#[tokio::test]
async fn deleting_a_running_call_ends_it_at_once() {
    let server = common::start().await;
    let call = {
        let (base, client) = (server.base.clone(), server.client.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let response = client
                .post(format!("{base}/v1/tools/bash"))
                .header("Sandbox-Call-Id", "stuck")
                .json(&json!({"cmd": "sleep 60 & sleep 60", "timeout": 120}))
                .send()
                .await
                .unwrap();
            (started.elapsed(), response.json::<Value>().await.unwrap())
        })
    };
    until_running(&server, "stuck").await;
    let (status, killed) = server.delete("/v1/processes/stuck").await;
    assert_eq!(status, 200);
    assert!(
        killed["killed"].as_array().unwrap().len() >= 3,
        "the shell and both sleeps: {killed}"
    );
    let (took, result) = call.await.unwrap();
    assert!(took < Duration::from_secs(30), "answered after {took:?}");
    assert!(
        [json!(9), json!(15)].contains(&result["signal"]),
        "{result}"
    );
    assert_eq!(result["background_pids"], json!([]), "{result}");
    let (status, _) = server.get_json("/v1/processes/stuck").await;
    assert_eq!(status, 404, "a deleted call is forgotten");
}

/// Old calls are forgotten as new ones come (their artifacts stay): the table keeps the last
/// few ended calls, and every process started by id.
#[tokio::test]
async fn ended_calls_are_forgotten_oldest_first() {
    let server = common::start().await;
    let (status, _) = super::post(
        &server,
        "/v1/processes",
        json!({"id": "kept", "cmd": "true"}),
    )
    .await;
    assert_eq!(status, 201);
    for i in 0..40 {
        let (status, body) = named_call(&server, &format!("c-{i}"), "true").await;
        assert_eq!(status, 200, "{body}");
    }
    let listed = get(&server, "/v1/processes").await;
    let ids: Vec<&str> = listed["managed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    let calls = ids.iter().filter(|id| id.starts_with("c-")).count();
    assert_eq!(calls, 32, "{ids:?}");
    assert!(
        ids.contains(&"kept") && ids.contains(&"c-39") && !ids.contains(&"c-0"),
        "{ids:?}"
    );
}

/// A call that ended leaving a child running: deleting the call kills the child.
#[tokio::test]
async fn deleting_an_ended_call_kills_the_children_it_left() {
    let server = common::start().await;
    let (status, result) = named_call(&server, "left-1", "sleep 60 & echo $! > child.pid").await;
    assert_eq!(status, 200, "{result}");
    let child = common::read_pid_file(&server.path("child.pid"));
    assert_eq!(result["background_pids"], json!([child]), "{result}");
    let host = server.host_pid(child);
    assert_eq!(
        get(&server, "/v1/processes/left-1").await["state"],
        "exited"
    );
    let (status, killed) = server.delete("/v1/processes/left-1").await;
    assert_eq!(status, 200);
    assert_eq!(killed["killed"], json!([child]), "{killed}");
    assert!(common::gone_within(host, Duration::from_secs(10)).await);
}
