//! Subagents (`--tools …,agent`): child sessions scripted inside the parent's script, on real
//! local sandboxes: one in the parent's workspace and one in a copy, at once; their logs linked
//! both ways, their cost rolled up, their limits (depth, count, budget) held by the harness.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{self, events};
use crate::forks::{restored, tree};

pub(crate) use crate::batches::of_type;
pub(crate) use crate::common::{bash_call as bash, write_call as write};

pub(crate) fn agent(task: &str, workspace: &str, script: &Value) -> Value {
    json!({"name": "agent", "arguments": {"task": task, "workspace": workspace}, "agent": script})
}

/// A task over a workspace with `seed.txt`, whose model plays `script`, with the `agent` tool.
pub(crate) fn write_task(dir: &Path, script: &Value, limits: &Value, agents: &Value) -> PathBuf {
    let workspace = dir.join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("seed.txt"), "seed\n").unwrap();
    std::fs::write(workspace.join("gone.txt"), "to be deleted\n").unwrap();
    let task = json!({
        "prompt": "Split the work between two helpers.",
        "workspace": {"dir": "workspace"},
        "tools": ["bash", "read_file", "write_file", "agent"],
        "limits": limits,
        "agents": agents,
    });
    common::scripted_task(dir, script, task)
}

pub(crate) async fn run(task: &Path, target: &Path, more: &[&str]) -> common::Run {
    let (task, target) = (task.to_str().unwrap(), target.to_str().unwrap());
    let mut args = vec!["run", "--policy", "allow-all", "--task", task];
    args.extend_from_slice(more);
    args.push(target);
    common::harness(&args, Duration::from_secs(120)).await
}

/// The result text of call `id`.
pub(crate) fn result_of(all: &[Value], id: &str) -> String {
    let result = all
        .iter()
        .find(|e| e["type"] == "tool_result" && e["data"]["call_id"] == id)
        .unwrap_or_else(|| panic!("no result for {id}"));
    result["data"]["output"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A task whose model starts two helpers at once, one in its workspace and one in a copy (which
/// tries a helper of its own), then looks at what they did.
fn two_helpers(dir: &Path) -> PathBuf {
    let shared = json!({"turns": [
        {"text": "writing", "tool_calls": [write("a.txt", "from the shared child\n")], "cost": 0.01},
        {"text": "wrote a.txt"},
    ]});
    let forked = json!({"turns": [
        {"text": "writing", "tool_calls": [
            write("b.txt", "from the forked child\n"),
            bash("rm gone.txt && mkdir -p sub && ln -s ../seed.txt sub/link && cat seed.txt"),
        ], "cost": 0.02},
        {"text": "deeper", "tool_calls": [agent("one more level", "shared", &json!({"turns": [{"text": "never"}]}))]},
        {"text": "wrote b.txt"},
    ]});
    let script = json!({"turns": [
        {"text": "Two helpers.", "tool_calls": [
            agent("write a.txt", "shared", &shared),
            agent("write b.txt and tidy up", "fork", &forked),
        ]},
        {"text": "check", "tool_calls": [bash("cat a.txt b.txt; ls; readlink sub/link")]},
        {"text": "Both done."},
    ]});
    write_task(
        dir,
        &script,
        &json!({"max_turns": 10}),
        &json!({"max_depth": 1}),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn two_subagents_at_once_one_shared_one_forked_linked_and_rolled_up() {
    let dir = tempfile::tempdir().unwrap();
    let task = two_helpers(dir.path());
    let target = dir.path().join("target");
    let parent = run(&task, &target, &[]).await;
    assert_eq!(parent.code, 0, "{}", parent.stderr);
    let log = parent.log_dir();
    let all = events(&log);
    let session_id = all[0]["data"]["session_id"].as_str().unwrap().to_owned();

    // Both children start before either ends: they ran at once.
    let kinds: Vec<&str> = all
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .filter(|k| k.starts_with("subagent_"))
        .collect();
    assert_eq!(
        kinds,
        [
            "subagent_started",
            "subagent_started",
            "subagent_finished",
            "subagent_finished"
        ]
    );
    let started = of_type(&all, "subagent_started");
    let finished = of_type(&all, "subagent_finished");
    for (event, (call, mode)) in started
        .iter()
        .zip([("script_1_1", "shared"), ("script_1_2", "fork")])
    {
        let data = &event["data"];
        assert_eq!(data["call_id"], call);
        assert_eq!(data["workspace"], mode);
        assert_eq!(data["depth"], 1);
        // Linked back: the child's header names this session and call.
        let child_log = log.join(data["log_dir"].as_str().unwrap());
        let child = events(&child_log);
        let of = &child[0]["data"]["subagent_of"];
        assert_eq!(of["session_id"], session_id.as_str());
        assert_eq!(of["call_id"], call);
        assert_eq!(child[0]["data"]["session_id"], data["session_id"]);
        assert_eq!(child.last().unwrap()["type"], "session_finished");
        assert_eq!(child.last().unwrap()["data"]["outcome"], "completed");
    }
    assert!(result_of(&all, "script_1_1").contains("wrote a.txt"));
    let fork_result = result_of(&all, "script_1_2");
    assert!(fork_result.contains("wrote b.txt"), "{fork_result}");
    assert!(
        fork_result.contains("applied to your workspace"),
        "{fork_result}"
    );
    assert!(
        fork_result.contains("+from the forked child"),
        "{fork_result}"
    );
    let merge = &finished[1]["data"]["merge"];
    assert_eq!(merge["applied"], true, "{merge}");
    let changed: Vec<(&str, &str)> = merge["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["path"].as_str().unwrap(), c["change"].as_str().unwrap()))
        .collect();
    assert_eq!(
        changed,
        [
            ("b.txt", "added"),
            ("gone.txt", "deleted"),
            ("sub", "added"),
            ("sub/link", "added")
        ]
    );

    // The forked child's own child was refused: depth 1 is the limit.
    let forked_log = log.join(started[1]["data"]["log_dir"].as_str().unwrap());
    let deeper = result_of(&events(&forked_log), "script_2_1");
    assert!(
        deeper.contains("refused") && deeper.contains("--agent-depth"),
        "{deeper}"
    );

    // The parent saw both children's work in its workspace.
    let seen = result_of(&all, "script_2_1");
    assert!(
        seen.contains("from the shared child") && seen.contains("from the forked child"),
        "{seen}"
    );
    assert!(
        !seen.contains("gone.txt") && seen.contains("../seed.txt"),
        "{seen}"
    );
    assert!(!target.join("gone.txt").exists());

    // The cost rolls up: the children's 0.03 beside the parent's own 0.
    let end = &all.last().unwrap()["data"];
    assert_eq!(end["cost"], 0.0);
    assert_eq!(end["subagents"]["count"], 2);
    let cost = end["subagents"]["cost"].as_f64().unwrap();
    assert!((cost - 0.03).abs() < 1e-9, "{cost}");

    // The parent's log holds the group's net change: its restore equals the workspace.
    let last = all.last().unwrap()["seq"].as_u64().unwrap();
    let restored = restored(&log, last, &dir.path().join("restored")).await;
    assert_eq!(restored, tree(&target));

    // `replay show` lists the children and links back from a child.
    let show = common::harness(
        &["replay", "show", log.to_str().unwrap()],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(
        show.stdout.contains("Subagent started for call script_1_2"),
        "{}",
        show.stdout
    );
    let child_show = common::harness(
        &["replay", "show", forked_log.to_str().unwrap()],
        Duration::from_secs(60),
    )
    .await;
    assert!(
        child_show
            .stdout
            .contains(&format!("subagent of session {session_id}"))
    );

    // A rerun of the parent re-runs the children's calls too, and nothing differs.
    let rerun = common::harness(
        &["replay", "rerun", log.to_str().unwrap()],
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(rerun.code, 0, "{}\n{}", rerun.stdout, rerun.stderr);
    assert!(rerun.stderr.contains(" 0 divergences"), "{}", rerun.stderr);
    // The parent's three calls, the shared child's one, the forked child's two (its refused
    // `agent` call started nothing and is skipped).
    assert!(
        rerun
            .stderr
            .contains("6 calls re-executed, 1 refused calls skipped"),
        "{}",
        rerun.stderr
    );

    // `replay metrics` counts the children's spending beside the session's own.
    let metrics = common::harness(
        &["replay", "metrics", "--json", log.to_str().unwrap()],
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(metrics.code, 0, "{}", metrics.stderr);
    let measured: Value = serde_json::from_str(&metrics.stdout).unwrap();
    let run = &measured[0];
    assert_eq!(run["subagents"], 2, "{measured}");
    assert!((run["subagent_cost"].as_f64().unwrap() - 0.03).abs() < 1e-9);
    assert_eq!(run["tool_calls"]["agent"], 2);

    // ATIF: each child's trajectory embedded, the call's result referring to it (Harbor's own
    // model reads it in `harbor_accepts_the_exported_trajectory_of_a_session_with_subagents`).
    let exported = export(&log, dir.path()).await;
    let trajectory: Value = serde_json::from_slice(&std::fs::read(&exported).unwrap()).unwrap();
    let embedded = trajectory["subagent_trajectories"].as_array().unwrap();
    let ids: Vec<&Value> = embedded.iter().map(|t| &t["trajectory_id"]).collect();
    assert_eq!(
        ids,
        [
            &started[0]["data"]["session_id"],
            &started[1]["data"]["session_id"]
        ]
    );
    let refs: Vec<&Value> = trajectory["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|step| step["observation"]["results"].as_array())
        .flatten()
        .filter_map(|result| {
            result["subagent_trajectory_ref"][0]["trajectory_id"]
                .as_str()
                .map(|_| result)
        })
        .collect();
    assert_eq!(refs.len(), 2);

    // A rerun notices when a child's workspace went another way: its file changed in its log.
    let shared_log = log.join(started[0]["data"]["log_dir"].as_str().unwrap());
    let events_file = shared_log.join("events.jsonl");
    let text = std::fs::read_to_string(&events_file).unwrap();
    std::fs::write(
        &events_file,
        text.replace("from the shared child", "from someone else"),
    )
    .unwrap();
    let diverged = common::harness(
        &["replay", "rerun", log.to_str().unwrap()],
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(diverged.code, 6, "{}\n{}", diverged.stdout, diverged.stderr);
    assert!(
        diverged.stdout.contains(&format!(
            "of the subagent {}",
            started[0]["data"]["log_dir"].as_str().unwrap()
        )),
        "{}",
        diverged.stdout
    );

    // A shared log whose child folder links back to its parent is refused, not followed.
    std::fs::remove_dir_all(&shared_log).unwrap();
    std::os::unix::fs::symlink("..", &shared_log).unwrap();
    for args in [
        vec!["replay", "rerun", log.to_str().unwrap()],
        common::export_args(&log, &exported).to_vec(),
    ] {
        let refused = common::harness(&args, Duration::from_secs(60)).await;
        assert_ne!(refused.code, 0, "{args:?}");
        assert!(
            refused
                .stderr
                .contains("a subagent's log must be a folder beneath its parent's"),
            "{args:?}: {}",
            refused.stderr
        );
    }
}

/// `harness replay export` of the session at `log` into `dir`: the trajectory file.
async fn export(log: &std::path::Path, dir: &std::path::Path) -> std::path::PathBuf {
    let exported = dir.join("trajectory.json");
    let export = common::harness(
        &common::export_args(log, &exported),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(export.code, 0, "{}", export.stderr);
    exported
}

/// Harbor's own model accepts the ATIF trajectory of a session with subagents, each child's
/// embedded.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(harness_harbor_python),
    ignore = "needs HARNESS_TEST_HARBOR_PYTHON=PATH (bash .ci/run sets it up)"
)]
async fn harbor_accepts_the_exported_trajectory_of_a_session_with_subagents() {
    let dir = tempfile::tempdir().unwrap();
    let task = two_helpers(dir.path());
    let parent = run(&task, &dir.path().join("target"), &[]).await;
    assert_eq!(parent.code, 0, "{}", parent.stderr);
    let log = parent.log_dir();
    let exported = export(&log, dir.path()).await;
    let check = "import json,sys\nfrom harbor.models.trajectories import Trajectory\nTrajectory.model_validate(json.load(open(sys.argv[1])))\nprint('valid')";
    let output = std::process::Command::new(testkit::gates::value("HARNESS_TEST_HARBOR_PYTHON"))
        .args(["-c", check, exported.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "Harbor refused the trajectory: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_tree_budget_and_the_count_are_held_by_the_harness() {
    let dir = tempfile::tempdir().unwrap();
    // The first child spends the whole budget on its first turn, and stops there.
    let spender = json!({"turns": [
        {"text": "spending", "tool_calls": [bash("echo one")], "cost": 0.2},
        {"text": "never reached"},
    ]});
    let script = json!({"turns": [
        {"text": "helpers", "tool_calls": [
            agent("spend", "shared", &spender),
            agent("another", "shared", &json!({"turns": [{"text": "fine"}]})),
            agent("one too many", "shared", &json!({"turns": [{"text": "never"}]})),
        ]},
        {"text": "never reached"},
    ]});
    let task = write_task(
        dir.path(),
        &script,
        &json!({"max_turns": 10, "max_cost": 0.1}),
        &json!({"max_total": 2}),
    );
    let run = run(&task, &dir.path().join("target"), &[]).await;
    // The parent's next turn finds the tree's budget spent.
    assert_eq!(run.code, 4, "{}", run.stderr);
    let log = run.log_dir();
    let all = events(&log);
    let spent = of_type(&all, "subagent_finished");
    assert_eq!(spent.len(), 2);
    assert_eq!(spent[0]["data"]["outcome"], "cost_limit");
    let third = result_of(&all, "script_1_3");
    assert!(
        third.contains("refused") && third.contains("--agent-max"),
        "{third}"
    );
    let end = &all.last().unwrap()["data"];
    assert_eq!(end["outcome"], "cost_limit");
    assert_eq!(end["subagents"]["count"], 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_settings_without_the_tool_are_refused_and_a_spent_budget_refuses_a_child() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!({"turns": [{"text": "done"}]});
    let task = common::scripted_task(
        dir.path(),
        &script,
        json!({"prompt": "p", "tools": ["bash"]}),
    );
    let refused = run(&task, &dir.path().join("t1"), &["--agent-depth", "2"]).await;
    refused.assert_stderr_has(1, "--tools …,agent");

    // The parent's own first turn spends the budget: its agent call is refused, with why.
    let script = json!({"turns": [
        {"text": "costly", "tool_calls": [agent("late", "fork", &json!({"turns": [{"text": "never"}]}))], "cost": 0.5},
        {"text": "never reached"},
    ]});
    let task = write_task(dir.path(), &script, &json!({"max_cost": 0.1}), &json!({}));
    let run = run(&task, &dir.path().join("t2"), &[]).await;
    assert_eq!(run.code, 4, "{}", run.stderr);
    let all = events(&run.log_dir());
    assert!(of_type(&all, "subagent_started").is_empty());
    let text = result_of(&all, "script_1_1");
    assert!(
        text.contains("refused: the cost budget ($0.10, --max-cost) is spent ($0.50 so far"),
        "{text}"
    );
}

/// A task whose session starts two subagents at once (one shared, one forked) whose commands
/// take a minute.
fn two_slow_subagents(dir: &Path) -> PathBuf {
    let slow = json!({"turns": [
        {"text": "slow", "tool_calls": [bash("echo child-started-4e2; sleep 60")]},
        {"text": "never"},
    ]});
    // The copy changes something first: a stopped session must not apply it.
    let slow_copy = json!({"turns": [
        {"text": "slow", "tool_calls": [bash("echo made > forked.txt; echo child-started-4e2; sleep 60")]},
        {"text": "never"},
    ]});
    let script = json!({"turns": [
        {"text": "helpers", "tool_calls": [
            agent("slow in place", "shared", &slow),
            agent("slow in a copy", "fork", &slow_copy),
        ]},
        {"text": "never reached"},
    ]});
    write_task(dir, &script, &json!({"max_turns": 5}), &json!({}))
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_during_subagents_ends_every_log_and_every_call() {
    let dir = tempfile::tempdir().unwrap();
    let task = two_slow_subagents(dir.path());
    let logs = dir.path().join("logs");
    let target = dir.path().join("target");
    let mut command = common::run_into(&logs, &task, &target);
    let child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let log = {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !logs.is_dir() || std::fs::read_dir(&logs).unwrap().next().is_none() {
            assert!(std::time::Instant::now() < deadline, "no session folder");
            std::thread::sleep(Duration::from_millis(50));
        }
        common::first_entry(&logs)
    };
    common::wait_for_text(
        &log.join("agents/1-script_1_1/events.jsonl"),
        "\"tool_call\"",
    );
    common::wait_for_text(
        &log.join("agents/2-script_1_2/events.jsonl"),
        "\"tool_call\"",
    );
    std::thread::sleep(Duration::from_millis(700));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(130), "{said}");
    let all = events(&log);
    assert_eq!(
        all.last().unwrap()["data"]["outcome"],
        "interrupted",
        "{said}"
    );
    for call in ["script_1_1", "script_1_2"] {
        let result = all
            .iter()
            .find(|e| e["type"] == "tool_result" && e["data"]["call_id"] == call)
            .unwrap_or_else(|| panic!("no result for {call}: {said}"));
        assert_eq!(result["data"]["status"], "interrupted", "{result}");
    }
    for child in ["agents/1-script_1_1", "agents/2-script_1_2"] {
        let theirs = events(&log.join(child));
        let end = theirs.last().unwrap();
        assert_eq!(end["type"], "session_finished", "{child}");
        assert_eq!(end["data"]["outcome"], "interrupted", "{child}");
        // Ctrl-C reaches every session of the tree: each says so (on its own, or through its
        // parent, whichever came first).
        let error = theirs
            .iter()
            .find(|e| e["type"] == "error")
            .unwrap_or_else(|| panic!("{child}: no error event"));
        let message = error["data"]["message"].as_str().unwrap();
        assert!(
            message.ends_with("interrupted (Ctrl-C)"),
            "{child}: {message}"
        );
        let text = result_of(&theirs, "script_1_1");
        assert!(text.contains("child-started-4e2"), "{child}: {text}");
    }
    // The forked child's change is recorded, and withheld from the stopped parent.
    let merge = of_type(&all, "subagent_finished")
        .into_iter()
        .find_map(|f| f["data"]["merge"].as_object().cloned())
        .unwrap_or_else(|| panic!("no merge record: {said}"));
    assert_eq!(merge["applied"], false, "{merge:?}");
    assert!(
        merge["changes"].to_string().contains("forked.txt"),
        "{merge:?}"
    );
    assert!(!target.join("forked.txt").exists());
}

/// A parent stopped by its lifetime stops its subagents, who say that it did and why, rather
/// than blame a Ctrl-C nobody pressed.
#[tokio::test(flavor = "multi_thread")]
async fn a_parents_lifetime_stops_its_subagents_who_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let task = two_slow_subagents(dir.path());
    let logs = dir.path().join("logs");
    let mut command = common::run_into(&logs, &task, &dir.path().join("target"));
    command.args(["--lifetime", "4s"]);
    let run = common::run(command, Duration::from_secs(60)).await;
    let log = common::first_entry(&logs);
    let all = events(&log);
    let end = all.last().unwrap();
    assert_eq!(end["type"], "session_finished", "{}", run.stderr);
    for child in ["agents/1-script_1_1", "agents/2-script_1_2"] {
        let theirs = events(&log.join(child));
        assert_eq!(
            theirs.last().unwrap()["data"]["outcome"],
            "interrupted",
            "{child}"
        );
        let error = theirs
            .iter()
            .find(|e| e["type"] == "error")
            .unwrap_or_else(|| panic!("{child}: no error event"));
        assert_eq!(
            error["data"]["message"],
            "stopped with its parent session: the session hit its lifetime of 4s",
            "{child}"
        );
        let result = theirs
            .iter()
            .find(|e| e["type"] == "tool_result")
            .unwrap_or_else(|| panic!("{child}: no tool result"));
        assert_eq!(result["data"]["status"], "interrupted", "{child}: {result}");
    }
}
