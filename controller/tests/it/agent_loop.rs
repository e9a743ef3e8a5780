use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::common;
use crate::double::{ModelDouble, ev_chat};

fn chat_command(
    double: &ModelDouble,
    workspace: &std::path::Path,
    extra: &[&str],
) -> std::process::Command {
    let mut args = vec!["--policy", "allow-all", "--price", "1,2"];
    args.extend_from_slice(extra);
    args.extend([workspace.to_str().unwrap(), "Do the task"]);
    double.harness_run("local-model", &args)
}

/// The `role: tool` messages of a captured Chat Completions request.
fn tool_messages(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_bad_call_comes_back_to_the_model_as_an_error() {
    let double = ModelDouble::start().await;
    double.push_json(ev_chat(
        Some("Trying things."),
        &[
            ("c1", "delete_everything", "{}"),
            ("c2", "bash", "{not json"),
            ("c3", "bash", r#"{"cmd": "ls", "timeout": 0}"#),
            ("c4", "read_file", r#"{"path": "missing.txt"}"#),
            ("c5", "read_file", r#"{"path": "../../etc/passwd"}"#),
            ("c6", "bash", r#"{"cmd": "echo ok"}"#),
        ],
        10,
        10,
    ));
    double.push_json(ev_chat(Some("Done."), &[], 10, 10));
    let workspace = tempfile::tempdir().unwrap();
    let run = common::run(
        chat_command(&double, workspace.path(), &[]),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    double.assert_clean();
    let results = tool_messages(&double.requests()[1].body);
    let expected = [
        ("c1", "ERROR: unknown tool delete_everything".to_owned()),
        ("c2", "ERROR: the arguments are not valid JSON (key must be a string at line 1 column 2): {not json".to_owned()),
        ("c3", "ERROR: timeout: must be between 1 and 3600 seconds, got 0".to_owned()),
        ("c4", "ERROR: missing.txt: no such file".to_owned()),
        ("c5", "ERROR: ../../etc/passwd: path is outside the workspace (`..` leads above the workspace root)".to_owned()),
        ("c6", "exit=0\nstdout:\n  ok".to_owned()),
    ];
    assert_eq!(
        results,
        expected.map(|(id, text)| (id.to_owned(), text)).to_vec()
    );
    for name in ["delete_everything", "bash", "read_file"] {
        assert!(
            run.stderr.contains(&format!("  > {name}\n")),
            "{}",
            run.stderr
        );
    }
    // Each failure is also an `error` event of class `tool` in the session log.
    let log = std::fs::read_to_string(run.log_dir().join("events.jsonl")).unwrap();
    let tool_errors: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|event| event["type"] == "error")
        .map(|event| event["data"].clone())
        .collect();
    assert_eq!(tool_errors.len(), 5);
    assert!(tool_errors.iter().all(|e| e["class"] == "tool"));
    assert_eq!(tool_errors[0]["call_id"], "c1");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_turn_limit_stops_the_loop() {
    let double = ModelDouble::start().await;
    for idx in 0..2 {
        double.push_json(ev_chat(
            None,
            &[(&format!("c{idx}"), "bash", r#"{"cmd": "true"}"#)],
            10,
            10,
        ));
    }
    let workspace = tempfile::tempdir().unwrap();
    let run = common::run(
        chat_command(&double, workspace.path(), &["--max-turns", "2"]),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert_eq!(run.stdout, "Stopped: hit 2 turns.\n");
    assert_eq!(double.requests().len(), 2);
    double.assert_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cost_limit_is_checked_before_each_turn() {
    let double = ModelDouble::start().await;
    // $1 / $2 per M tokens: each reply costs (400,000 × 1 + 100,000 × 2) / 1e6 = $0.60.
    for idx in 0..2 {
        double.push_json(ev_chat(
            None,
            &[(&format!("c{idx}"), "bash", r#"{"cmd": "true"}"#)],
            400_000,
            100_000,
        ));
    }
    let workspace = tempfile::tempdir().unwrap();
    let run = common::run(
        chat_command(&double, workspace.path(), &["--max-cost", "1.00"]),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(run.code, 4, "{}", run.stderr);
    assert_eq!(run.stdout, "Stopped: spent $1.20.\n");
    assert!(run.stderr.contains("cost=$1.2000\n"), "{}", run.stderr);
    assert_eq!(double.requests().len(), 2, "the third turn never starts");
    double.assert_clean();
}

/// A session of three tool-calling turns (two calls, one, two) under `--compact-at 10`, whose
/// fourth request is the summary request, answered with `summary`.
async fn compaction_session(summary: &str) -> (common::Run, ModelDouble) {
    let double = ModelDouble::start().await;
    let turns: [&[(&str, &str, &str)]; 3] = [
        &[
            ("a", "bash", r#"{"cmd": "echo a"}"#),
            ("b", "bash", r#"{"cmd": "echo b"}"#),
        ],
        &[("c", "bash", r#"{"cmd": "echo c"}"#)],
        &[
            ("d", "bash", r#"{"cmd": "echo d"}"#),
            ("e", "bash", r#"{"cmd": "echo e"}"#),
        ],
    ];
    for calls in turns {
        double.push_json(ev_chat(None, calls, 10, 10));
    }
    double.push_json(ev_chat(Some(summary), &[], 10, 10));
    double.push_json(ev_chat(Some("Finished."), &[], 10, 10));
    let workspace = tempfile::tempdir().unwrap();
    let run = common::run(
        chat_command(&double, workspace.path(), &["--compact-at", "10"]),
        Duration::from_secs(60),
    )
    .await;
    (run, double)
}

/// Four messages of history then a compaction: the summary replaces the middle, and the
/// second tool result of the first turn moves into the summarised part with its call.
#[tokio::test(flavor = "multi_thread")]
async fn compaction_replaces_the_middle_and_keeps_calls_with_their_results() {
    let (run, double) = compaction_session("Ran echo a and echo b.").await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "Finished.\n");
    assert!(
        run.stderr
            .contains("compacted the history: 10 messages -> 8"),
        "{}",
        run.stderr
    );
    double.assert_clean();

    let requests = double.requests();
    assert_eq!(requests.len(), 5);
    let summary_request = &requests[3].body;
    assert!(
        summary_request.get("tools").is_none(),
        "the summary request offers no tools"
    );
    let messages = summary_request["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        6,
        "system, task, a+b call, two results, the request to summarise"
    );
    assert_eq!(
        messages.last().unwrap(),
        &json!({"role": "user", "content": "Summarise the work so far. Keep decisions, file names and anything unresolved."})
    );

    let after = requests[4].body["messages"].as_array().unwrap();
    let roles: Vec<&str> = after.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "tool"
        ]
    );
    assert_eq!(after[1]["content"], "Do the task");
    assert_eq!(
        after[2]["content"],
        "<summary_of_earlier_work>\nRan echo a and echo b.\n</summary_of_earlier_work>"
    );
    // Every tool result follows the assistant message that asked for it.
    let mut open_calls: Vec<String> = Vec::new();
    for message in after {
        match message["role"].as_str().unwrap() {
            "assistant" => {
                open_calls = message["tool_calls"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c["id"].as_str().unwrap().to_owned())
                    .collect();
            }
            "tool" => assert!(
                open_calls.contains(&message["tool_call_id"].as_str().unwrap().to_owned()),
                "{message}"
            ),
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_summary_keeps_the_history_unchanged() {
    let (run, double) = compaction_session("").await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let requests = double.requests();
    assert_eq!(
        requests[4].body["messages"].as_array().unwrap().len(),
        10,
        "nothing was dropped"
    );
    // The history goes on unchanged: what the third request had, then the third turn.
    let after = requests[4].body["messages"].as_array().unwrap();
    let before = requests[2].body["messages"].as_array().unwrap();
    assert_eq!(&after[..7], before.as_slice());
    assert_eq!(after[7]["tool_calls"][1]["id"], "e");
    assert_eq!(
        (
            after[8]["tool_call_id"].as_str(),
            after[9]["tool_call_id"].as_str()
        ),
        (Some("d"), Some("e"))
    );
    assert!(
        !requests[4]
            .body
            .to_string()
            .contains("summary_of_earlier_work")
    );
    // The summary request had the first two messages and the middle, then the request.
    assert_eq!(requests[3].body["messages"].as_array().unwrap().len(), 6);
    double.assert_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_skill_that_breaks_the_spec_is_listed_with_a_warning() {
    let double = ModelDouble::start().await;
    double.push_json(ev_chat(Some("ok"), &[], 10, 10));
    let workspace = tempfile::tempdir().unwrap();
    let skills = workspace.path().join(".agents/skills");
    std::fs::create_dir_all(skills.join("Bad_Folder")).unwrap();
    std::fs::write(
        skills.join("Bad_Folder/SKILL.md"),
        "---\nname: Bad_Name\ndescription: Does things.\n---\n",
    )
    .unwrap();
    std::fs::create_dir_all(skills.join("no-description")).unwrap();
    std::fs::write(
        skills.join("no-description/SKILL.md"),
        "---\nname: no-description\n---\n",
    )
    .unwrap();
    let run = common::run(
        chat_command(&double, workspace.path(), &[]),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    common::assert_contains(
        &run.stderr,
        &[
            "warning: .agents/skills/Bad_Folder/SKILL.md: name `Bad_Name` may use only lowercase letters",
            "warning: skipping .agents/skills/no-description/SKILL.md: its frontmatter has no description",
        ],
    );
    let system = double.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(system.contains("<name>Bad_Name</name>"), "{system}");
    assert!(!system.contains("no-description"), "{system}");
    assert!(
        !system.contains("<project_instructions"),
        "no AGENTS.md, no section: {system}"
    );
}
