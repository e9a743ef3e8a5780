//! Forked subagents' changes coming back to the parent: what clashes, what is withheld, what
//! a failed copy leaves, what a fork of the parent counts, and merges of thousands of paths.
//! Real local sandboxes and the scripted model, as in `subagents.rs`.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{self, events};
use crate::subagents::{agent, bash, of_type, result_of, run, write, write_task};

/// A forked child whose copy of the workspace fails never starts: the call's result says why,
/// the parent goes on, and no half-made child folder is left in the parent's log (a copy
/// whose sandbox log said something would be kept and named).
#[tokio::test(flavor = "multi_thread")]
async fn a_fork_whose_copy_fails_is_refused_and_leaves_no_folder() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({"turns": [
        {"text": "many files", "tool_calls": [bash("mkdir many && for i in $(seq 40); do echo $i > many/$i; done")]},
        {"text": "a helper", "tool_calls": [agent("count them", "fork", &json!({"turns": [{"text": "never"}]}))]},
        {"text": "Done without it."},
    ]});
    let task = write_task(dir.path(), &script, &json!({"max_turns": 5}), &json!({}));
    let target = dir.path().join("target");
    let (task, target) = (task.to_str().unwrap(), target.to_str().unwrap());
    let mut command = common::command(&["run", "--policy", "allow-all", "--task", task, target]);
    // Every sandbox takes an archive of at most 20 entries: the seed fits, the copy does not.
    command.env("SANDBOX_ARCHIVE_MAX_ENTRIES", "20");
    let parent = common::run(command, Duration::from_secs(120)).await;
    assert_eq!(parent.code, 0, "{}", parent.stderr);
    let log = parent.log_dir();
    let all = events(&log);
    assert!(of_type(&all, "subagent_started").is_empty());
    let call = of_type(&all, "tool_call")
        .into_iter()
        .find(|e| e["data"]["name"] == "agent")
        .unwrap();
    let said = result_of(&all, call["data"]["call_id"].as_str().unwrap());
    assert!(
        said.contains("its workspace could not be copied")
            && said.contains("more than 20 entries (--archive-max-entries)"),
        "{said}"
    );
    let left: Vec<_> = std::fs::read_dir(log.join("agents"))
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(
        of_type(&all, "session_finished")[0]["data"]["outcome"],
        "completed"
    );
}

/// A forked child that deletes a folder is not merged over a sibling that added a file inside
/// it meanwhile: a folder's own entry does not change when a file is added to it, so only
/// looking inside finds the clash; applying the deletion would have lost the file.
#[tokio::test(flavor = "multi_thread")]
async fn a_forked_folder_deletion_does_not_take_a_siblings_new_file() {
    let dir = tempfile::tempdir().unwrap();
    let shared = json!({"turns": [
        {"text": "adding", "tool_calls": [write("build/new.rs", "fn main() {}\n")]},
        {"text": "added build/new.rs"},
    ]});
    let forked = json!({"turns": [
        {"text": "cleaning", "tool_calls": [bash("rm -rf build")]},
        {"text": "removed build/"},
    ]});
    let script = json!({"turns": [
        {"text": "a folder", "tool_calls": [bash("mkdir build && echo old > build/a.rs")]},
        {"text": "two helpers", "tool_calls": [
            agent("add a file to build/", "shared", &shared),
            agent("clean build/", "fork", &forked),
        ]},
        {"text": "look", "tool_calls": [bash("ls build")]},
        {"text": "Done."},
    ]});
    let task = write_task(dir.path(), &script, &json!({"max_turns": 10}), &json!({}));
    let parent = run(&task, &dir.path().join("target"), &[]).await;
    assert_eq!(parent.code, 0, "{}", parent.stderr);
    let all = events(&parent.log_dir());
    let finished = of_type(&all, "subagent_finished");
    let merge = finished
        .iter()
        .find_map(|f| f["data"]["merge"].as_object())
        .expect("the forked child's merge");
    assert_eq!(merge["applied"], false, "{merge:?}");
    assert!(
        merge["conflicts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == "build"),
        "{merge:?}"
    );
    let calls = of_type(&all, "tool_call");
    let look = calls.last().unwrap()["data"]["call_id"].as_str().unwrap();
    let listed = result_of(&all, look);
    assert!(
        listed.contains("a.rs") && listed.contains("new.rs"),
        "{listed}"
    );
}

/// A fork of a session after one of its subagents finished counts what the subagent spent: the
/// tree's budget is the root's, so the children get only what is left of it.
#[tokio::test(flavor = "multi_thread")]
async fn a_fork_after_a_subagent_counts_its_cost_against_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let child = json!({"turns": [{"text": "helped", "cost": 0.25}]});
    let script = json!({"turns": [
        {"text": "a helper", "tool_calls": [agent("help", "shared", &child)], "cost": 0.05},
        {"text": "look", "tool_calls": [bash("true")]},
        {"text": "Done."},
    ]});
    let task = write_task(
        dir.path(),
        &script,
        &json!({"max_turns": 5, "max_cost": 1.0}),
        &json!({}),
    );
    let parent = run(&task, &dir.path().join("target"), &[]).await;
    assert_eq!(parent.code, 0, "{}", parent.stderr);
    let log = parent.log_dir();
    let all = events(&log);
    // Between the turns: the agent call's result, the last event before the second turn.
    let seq = of_type(&all, "tool_result")[0]["seq"].as_u64().unwrap();
    let fork = common::command(&[
        "replay",
        "fork",
        log.to_str().unwrap(),
        "--step",
        &seq.to_string(),
        "--count",
        "1",
        "--policy",
        "allow-all",
        "--trust-log",
    ]);
    let forked = common::run(fork, Duration::from_secs(120)).await;
    assert_eq!(forked.code, 0, "{}\n{}", forked.stdout, forked.stderr);
    let out = common::first_entry(&log.join("forks"));
    let summary: Value =
        serde_json::from_slice(&std::fs::read(out.join("forks.json")).unwrap()).unwrap();
    let spent = summary["parent"]["cost"].as_f64().unwrap();
    assert!((spent - 0.30).abs() < 1e-9, "{summary}");
    let child_log = Path::new(summary["children"][0]["log_dir"].as_str().unwrap());
    let started = &events(child_log)[0]["data"];
    let budget = started["config"]["max_cost"].as_f64().unwrap();
    assert!((budget - 0.70).abs() < 1e-9, "{started}");
}

/// A forked child's change of thousands of paths is merged whole: its script is longer than
/// one command line may be (128 KiB), so it runs in pieces.
#[tokio::test(flavor = "multi_thread")]
async fn a_forked_child_with_thousands_of_changes_is_merged() {
    let dir = tempfile::tempdir().unwrap();
    let forked = json!({"turns": [
        {"text": "many folders", "tool_calls": [bash("mkdir -p many && cd many && seq -w 3000 | sed 's/^/folder-with-a-long-name-/' | xargs mkdir")]},
        {"text": "made them"},
    ]});
    let script = json!({"turns": [
        {"text": "a helper", "tool_calls": [agent("make folders", "fork", &forked)]},
        {"text": "count", "tool_calls": [bash("ls many | wc -l")]},
        {"text": "Done."},
    ]});
    let task = write_task(dir.path(), &script, &json!({"max_turns": 5}), &json!({}));
    let parent = run(&task, &dir.path().join("target"), &[]).await;
    assert_eq!(parent.code, 0, "{}", parent.stderr);
    let all = events(&parent.log_dir());
    let merge = &of_type(&all, "subagent_finished")[0]["data"]["merge"];
    assert_eq!(merge["applied"], true, "{}", result_of(&all, "script_1_1"));
    assert_eq!(merge["changes"].as_array().unwrap().len(), 3001);
    let counted = result_of(&all, "script_2_1");
    assert!(counted.contains("3000"), "{counted}");
}
