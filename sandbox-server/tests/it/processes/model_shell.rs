//! The opt-in `shell` tool: a model's persistent shell, one command per call.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::get;
use crate::common::{self, Server};

async fn shell(server: &Server, cmd: &str) -> Value {
    let (status, body) = server
        .call("shell", json!({"cmd": cmd, "timeout": 20}))
        .await;
    assert_eq!(status, 200, "{cmd}: {body}");
    body
}

#[tokio::test]
async fn the_shell_tool_keeps_state_across_calls_and_comes_back_after_exit() {
    let server = common::start_with_args(["--tools", "bash,shell"]).await;
    let (_, tools) = server.get_json("/v1/tools").await;
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bash", "shell"]);
    let first = shell(
        &server,
        "mkdir -p sub && cd sub && export GREETING=hi && greet() { echo \"$GREETING $1\"; }",
    )
    .await;
    assert_eq!(first["exit_code"], 0, "{first}");
    let second = shell(&server, "greet model; pwd; echo oops >&2; (exit 3)").await;
    let sub = server.path("sub").canonicalize().unwrap();
    assert_eq!(
        second["stdout"].as_str().unwrap(),
        format!("hi model\n{}\n", sub.display())
    );
    assert_eq!(
        (
            &second["exit_code"],
            &second["stderr"],
            &second["shell_alive"]
        ),
        (&json!(3), &json!("oops\n"), &json!(true))
    );
    assert!(
        second["output"].as_str().unwrap().starts_with("exit=3\n"),
        "the model reads it as it reads bash: {second}"
    );
    let process = get(&server, "/v1/processes/model-shell").await;
    assert_eq!(
        (&process["kind"], &process["state"]),
        (&json!("shell"), &json!("running"))
    );
    let exited = shell(&server, "exit 4").await;
    assert_eq!(
        (&exited["exit_code"], &exited["shell_alive"]),
        (&json!(4), &json!(false))
    );
    assert!(
        exited["output"]
            .as_str()
            .unwrap()
            .contains("the next call starts a new one"),
        "{exited}"
    );
    let fresh = shell(&server, "pwd; echo ${GREETING:-unset}").await;
    let root = server.path("").canonicalize().unwrap();
    assert_eq!(
        fresh["stdout"].as_str().unwrap(),
        format!("{}\nunset\n", root.display())
    );
    assert!(
        fresh["output"]
            .as_str()
            .unwrap()
            .contains("ran in a new one"),
        "{fresh}"
    );
    // Not one of the default tools.
    let plain = common::start().await;
    let (status, body) = plain.call("shell", json!({"cmd": "true"})).await;
    assert_eq!(status, 404, "{body}");
}
