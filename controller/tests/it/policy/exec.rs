//! The opt-in `exec` and `write_stdin` tools under the policy, end to end.

use std::time::Duration;

use serde_json::Value;

use super::{chat_run, policy_events};
use crate::common;
use crate::double::{ModelDouble, ev_chat};

/// `exec` and `write_stdin` (opt-in tools) pass the same rules as `bash`: a command `exec`
/// runs is judged as that command, and a line typed into a shell `exec` started is judged as
/// the command it is; allowed calls run, and the shell keeps its directory between them.
#[tokio::test(flavor = "multi_thread")]
async fn exec_and_input_to_a_shell_are_judged_as_the_commands_they_run() {
    let calls = [
        ("c1", "exec", r#"{"cmd": "bash", "yield_ms": 300}"#),
        (
            "c2",
            "write_stdin",
            r#"{"process_id": "exec-1", "input": "cd sub\n", "yield_ms": 300}"#,
        ),
        (
            "c3",
            "write_stdin",
            r#"{"process_id": "exec-1", "input": "export A=1\n", "yield_ms": 300}"#,
        ),
        (
            "c4",
            "write_stdin",
            r#"{"process_id": "exec-1", "input": "echo forbidden-$A > x\n", "yield_ms": 300}"#,
        ),
        (
            "c5",
            "write_stdin",
            r#"{"process_id": "exec-1", "input": "pwd\n", "yield_ms": 3000}"#,
        ),
        ("c6", "exec", r#"{"cmd": "echo forbidden"}"#),
    ];
    let (run, workspace) = session(
        &calls,
        "deny: ['bash(*forbidden*)']\nallow: ['bash(bash)', 'bash(export A=1)']\n",
        "bash,exec,write_stdin",
    )
    .await;
    let decisions: Vec<(String, String)> = policy_events(&run)
        .iter()
        .map(|d| {
            (
                d["decision"].as_str().unwrap().to_owned(),
                d["rule"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect();
    let expected = [
        ("allow", "rule bash(bash)"),
        ("allow", "read-only cd"),
        ("allow", "rule bash(export A=1)"),
        ("deny", "rule bash(*forbidden*)"),
        ("allow", "read-only pwd"),
        ("deny", "rule bash(*forbidden*)"),
    ];
    assert_eq!(
        decisions,
        expected.map(|(a, b)| (a.to_owned(), b.to_owned())).to_vec()
    );
    let echoed = tool_result_text(&run, "c5");
    let sub = workspace.path().canonicalize().unwrap().join("sub");
    assert!(
        echoed.contains(&sub.display().to_string()),
        "the shell kept its directory: {echoed}"
    );
    assert!(!workspace.path().join("sub/x").exists());
    // The re-run starts its sandbox with the session's tools, the opt-in ones included.
    reruns_without_divergence(&run, "4 calls re-executed").await;
}

/// `replay rerun` of `run`'s session ends well, says `executed` and finds no divergence.
async fn reruns_without_divergence(run: &common::Run, executed: &str) {
    let rerun = common::harness(
        &["replay", "rerun", run.log_dir().to_str().unwrap()],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(rerun.code, 0, "{}\n{}", rerun.stdout, rerun.stderr);
    assert!(
        rerun.stderr.contains(executed) && rerun.stderr.contains("0 divergences"),
        "{}",
        rerun.stderr
    );
}

/// A session whose model makes `calls`, one a turn, then answers; under the rules `policy`
/// with the tools `tools`, in a workspace with a folder `sub`. It must end well.
async fn session(
    calls: &[(&str, &str, &str)],
    policy: &str,
    tools: &str,
) -> (common::Run, tempfile::TempDir) {
    let double = ModelDouble::start().await;
    for call in calls {
        double.push_json(ev_chat(None, &[*call], 10, 10));
    }
    double.push_json(ev_chat(Some("done"), &[], 10, 10));
    let workspace = tempfile::tempdir().unwrap();
    std::fs::create_dir(workspace.path().join("sub")).unwrap();
    let rules = tempfile::tempdir().unwrap();
    let policy_file = rules.path().join("policy.yaml");
    std::fs::write(&policy_file, policy).unwrap();
    let run = common::run(
        chat_run(
            &double,
            workspace.path(),
            &["--policy", policy_file.to_str().unwrap(), "--tools", tools],
        ),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    double.assert_clean();
    (run, workspace)
}

/// A call's `tool_result` event in `run`'s log.
fn tool_result(run: &common::Run, call_id: &str) -> Option<Value> {
    common::events(&run.log_dir())
        .into_iter()
        .find(|e| e["type"] == "tool_result" && e["data"]["call_id"] == call_id)
}

/// The text a call's `tool_result` gave the model.
fn tool_result_text(run: &common::Run, call_id: &str) -> String {
    tool_result(run, call_id)
        .map(|e| {
            e["data"]["output"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .unwrap_or_default()
}

/// The opt-in `shell` tool: each command is judged as `bash`, runs in the session's one
/// shell (which keeps its directory), and is logged as a `bash` call is, with
/// its exit code and full outputs; `replay rerun` re-runs it.
#[tokio::test(flavor = "multi_thread")]
async fn the_shell_tool_is_judged_as_bash_and_keeps_its_state() {
    let calls = [
        ("s1", "shell", r#"{"cmd": "cd sub && export B=2"}"#),
        ("s2", "shell", r#"{"cmd": "echo forbidden > y"}"#),
        ("s3", "shell", r#"{"cmd": "pwd; exit 3"}"#),
    ];
    let (run, workspace) = session(
        &calls,
        "deny: ['bash(*forbidden*)']\nallow: ['bash(export B=2)', 'bash(exit 3)']\n",
        "bash,shell",
    )
    .await;
    let decisions: Vec<String> = policy_events(&run)
        .iter()
        .map(|d| d["decision"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(decisions, ["allow", "deny", "allow"]);
    let sub = workspace.path().canonicalize().unwrap().join("sub");
    let third = tool_result_text(&run, "s3");
    assert!(
        third.starts_with("exit=3\n") && third.contains(&format!("  {}\n", sub.display())),
        "the shell kept its directory: {third}"
    );
    let result = tool_result(&run, "s3").unwrap();
    assert_eq!(result["data"]["exit_code"], 3, "{result}");
    assert_eq!(result["data"]["outputs"][0]["stream"], "stdout", "{result}");
    reruns_without_divergence(&run, "2 calls re-executed").await;
}
