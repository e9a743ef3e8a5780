//! `harness replay fork`: children that start from a recorded session's state after a step
//! (its conversation, a compaction included, and its workspace) and go on live.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{self, bash_call as bash, events, harness, write_call as write};

/// A session of six turns over a small workspace; with `compact_at` low, the history is
/// compacted at the start of turns 5 and 6.
fn write_task(dir: &Path) -> PathBuf {
    let workspace = dir.join("workspace");
    std::fs::create_dir_all(workspace.join("docs")).unwrap();
    std::fs::write(workspace.join("a.txt"), "zero\n").unwrap();
    std::fs::write(workspace.join("docs/readme.md"), "# notes\n").unwrap();
    let script = json!({"turns": [
        {"text": "one", "tool_calls": [bash("echo one >> a.txt")]},
        {"text": "two", "tool_calls": [write("b.txt", "two\n")]},
        {"text": "three", "tool_calls": [bash("echo three >> a.txt")]},
        {"text": "four", "tool_calls": [bash("cat a.txt b.txt")]},
        {"text": "five", "tool_calls": [write("docs/c.txt", "five\n")]},
        {"text": "All done."},
    ], "summary": "Earlier: a.txt and b.txt were written."});
    let task = json!({
        "prompt": "Write the files, then say so.",
        "workspace": {"dir": "workspace"},
        "check": "grep -q three a.txt && test -f docs/c.txt",
        "limits": {"max_turns": 10, "compact_at": 40},
    });
    common::scripted_task(dir, &script, task)
}

/// Every file beneath `dir`, path to bytes.
pub(crate) fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    common::files_under(dir)
        .into_iter()
        .map(|name| {
            (
                name.display().to_string(),
                std::fs::read(dir.join(&name)).unwrap(),
            )
        })
        .collect()
}

/// `replay restore LOG --step SEQ` into a new folder; its files.
pub(crate) async fn restored(log: &Path, seq: u64, to: &Path) -> BTreeMap<String, Vec<u8>> {
    let run = harness(&common::restore_args(log, &seq.to_string(), to), LIMIT).await;
    assert_eq!(run.code, 0, "restore failed: {}", run.stderr);
    tree(to)
}

/// How long a `harness` command here may take.
const LIMIT: Duration = Duration::from_secs(120);

/// The session of `write_task` recorded in `dir`: its log folder and events.
pub async fn recorded(dir: &Path) -> (PathBuf, Vec<Value>) {
    let task = write_task(dir);
    let parent = common::run_task(&task, &dir.join("ws")).await;
    assert_eq!(parent.code, 0, "{}", parent.stderr);
    let log = parent.log_dir();
    let all = events(&log);
    (log, all)
}

/// `replay fork LOG --step STEP --count 2 --trust-log` (the log is the test's own) and `more`.
async fn fork_of(log: &Path, step: u64, more: &[&str]) -> common::Run {
    let step = step.to_string();
    let mut args = vec!["replay", "fork", log.to_str().unwrap(), "--step", &step];
    args.extend_from_slice(&["--count", "2", "--trust-log"]);
    args.extend_from_slice(more);
    harness(&args, LIMIT).await
}

pub fn seq_of(event: &Value) -> u64 {
    event["seq"].as_u64().unwrap()
}

/// The first event of `kind` (whose data matches `when`).
pub fn first<'a>(all: &'a [Value], kind: &str, when: impl Fn(&Value) -> bool) -> &'a Value {
    all.iter()
        .find(|e| e["type"] == kind && when(&e["data"]))
        .unwrap_or_else(|| panic!("no {kind} event"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_at_a_middle_step_continues_from_its_conversation_and_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let task = write_task(dir.path());
    let target = dir.path().join("parent-workspace");
    let parent = common::run_task(&task, &target).await;
    assert_eq!(parent.code, 0, "{}", parent.stderr);
    let parent_log = parent.log_dir();
    let all = events(&parent_log);
    // After the first compaction: the children's conversation is the compacted one.
    let compaction = first(&all, "compaction", |_| true);
    let seq = seq_of(compaction);
    let next_request = first(&all, "model_request", |d| {
        d["purpose"] == "turn" && d["turn"] == 5
    });
    assert!(seq < seq_of(next_request));

    let mut fork = common::command(&[
        "replay",
        "fork",
        parent_log.to_str().unwrap(),
        "--step",
        &seq.to_string(),
        "--count",
        "3",
        "--parallel",
        "3",
        "--trust-log",
    ]);
    // The servers say what they were told (`--known-files`) at info.
    fork.env("RUST_LOG", "warn,sandbox_server=info");
    let run = common::run(fork, Duration::from_secs(120)).await;
    assert_eq!(run.code, 0, "fork failed: {}\n{}", run.stdout, run.stderr);
    // In the parent's own folder by default, where its transcript finds it.
    let out = common::first_entry(&parent_log.join("forks"));
    assert!(run.stdout.contains("3 of 3 passed"), "{}", run.stdout);
    if nix::unistd::geteuid().is_root() {
        assert!(
            run.stderr
                .contains("children's workspaces: an overlay mount"),
            "{}",
            run.stderr
        );
    }
    let summary: Value =
        serde_json::from_slice(&std::fs::read(out.join("forks.json")).unwrap()).unwrap();
    assert_eq!(summary["value"], 1.0);
    assert_eq!(summary["parent"]["seq"], seq);
    assert_eq!(summary["parent"]["turns"], 4);
    assert_eq!(summary["children"].as_array().unwrap().len(), 3);
    assert_eq!(summary["prefix"].as_array().unwrap().len(), 9);
    // The fork's folder reads as a batch of its children: a report, metrics, pass@k.
    assert!(out.join("report.html").is_file());
    let batch = events(&out);
    assert_eq!(batch[0]["type"], "batch_started");
    assert_eq!(batch.last().unwrap()["type"], "batch_finished");
    let args = ["replay", "metrics", "--json", out.to_str().unwrap()];
    let metrics = harness(&args, LIMIT).await;
    assert_eq!(metrics.code, 0, "{}", metrics.stderr);
    let report: Value = serde_json::from_str(&metrics.stdout).unwrap();
    assert_eq!(report["tasks"].as_array().unwrap().len(), 3);
    assert_eq!(report["totals"]["passed"], 3, "{report}");

    let at_step = restored(&parent_log, seq, &dir.path().join("at-step")).await;
    assert!(at_step["a.txt"].ends_with(b"three\n"), "{at_step:?}");
    for child in summary["children"].as_array().unwrap() {
        assert_eq!(child["outcome"], "completed", "{child}");
        assert_eq!(child["reward"], 1.0);
        assert_eq!(child["turns"], 2, "turns 5 and 6 of the script");
        let log = PathBuf::from(child["log_dir"].as_str().unwrap());
        let child_events = events(&log);
        let header = &child_events[0]["data"];
        let from = &header["forked_from"];
        assert_eq!(from["seq"], seq);
        assert_eq!(from["session_id"], all[0]["data"]["session_id"]);
        assert_eq!(from["turns"], 4);
        assert_eq!(from["child"], child["child"]);
        // The child's first request is the one the parent made next: the same messages.
        let request = first(&child_events, "model_request", |d| d["purpose"] == "turn");
        assert_eq!(request["data"]["turn"], 5);
        for field in ["n_messages", "estimated_tokens"] {
            assert_eq!(
                request["data"][field], next_request["data"][field],
                "{field} of the child's first request"
            );
        }
        // Its workspace began as the parent's at the step, file for file.
        let snapshot = first(&child_events, "workspace_snapshot", |_| true);
        let name = format!("child-{}", child["child"]);
        let began = restored(&log, seq_of(snapshot), &dir.path().join(&name)).await;
        assert_eq!(began, at_step, "{name}'s initial workspace");
        // Its server was told the verified hashes, so its first snapshot read no file.
        let server_log = std::fs::read_to_string(log.join("sandbox-server.log")).unwrap();
        let seeded = format!("files={}", at_step.len());
        assert!(
            server_log
                .lines()
                .any(|line| line.contains("--known-files") && line.contains(&seeded)),
            "{name}'s server was not seeded with {seeded}: {server_log}"
        );
        let finished = child_events.last().unwrap();
        assert_eq!(finished["type"], "session_finished");
        let check = first(&child_events, "check_result", |_| true);
        assert_eq!(check["data"]["passed"], true);
    }
    // A fork of a fork begins with the conversation its parent began with, and more.
    let child_log = PathBuf::from(summary["children"][0]["log_dir"].as_str().unwrap());
    let child_events = events(&child_log);
    let sixth = first(&child_events, "model_request", |d| {
        d["purpose"] == "turn" && d["turn"] == 6
    });
    let step = (seq_of(sixth) - 1).to_string();
    let child = child_log.to_str().unwrap();
    let args = ["replay", "fork", child, "--step", &step, "--trust-log"];
    let again = harness(&args, LIMIT).await;
    assert_eq!(again.code, 0, "{}\n{}", again.stdout, again.stderr);
    assert!(again.stdout.contains("1 of 1 passed"), "{}", again.stdout);
    let grandchild = events(&common::first_entry(&child_log.join("forks")).join("child-1"));
    let request = first(&grandchild, "model_request", |d| d["purpose"] == "turn");
    for field in ["turn", "n_messages", "estimated_tokens"] {
        assert_eq!(request["data"][field], sixth["data"][field], "{field}");
    }
    // The parent's transcript lists the fork; a child's links back.
    let shown = harness(&["replay", "show", parent_log.to_str().unwrap()], LIMIT).await;
    assert!(
        shown
            .stdout
            .contains(&format!("at step {seq}: 3 children, 3 passed")),
        "{}",
        shown.stdout
    );
    let child_log = summary["children"][0]["log_dir"].as_str().unwrap();
    let shown = harness(&["replay", "show", child_log], LIMIT).await;
    assert!(
        shown.stdout.contains(&format!(
            "forked from session {}",
            all[0]["data"]["session_id"].as_str().unwrap()
        )),
        "{}",
        shown.stdout
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_inside_a_turn_or_past_the_end_is_refused_with_the_steps_it_can_take() {
    let dir = tempfile::tempdir().unwrap();
    let (log, all) = recorded(dir.path()).await;
    // The first call's result: its change to a.txt is recorded after it.
    let result = seq_of(first(&all, "tool_result", |_| true));
    let changed = seq_of(first(&all, "workspace_changed", |_| true));
    assert_eq!(changed, result + 1);
    let fork = |step: String| {
        let log = log.to_str().unwrap().to_owned();
        async move { harness(&["replay", "fork", &log, "--step", &step], LIMIT).await }
    };
    let run = fork(result.to_string()).await;
    assert_ne!(run.code, 0);
    assert!(
        run.stderr
            .contains(&format!("cannot fork at step {result}"))
            && run.stderr.contains("the nearest steps a fork can start at"),
        "{}",
        run.stderr
    );
    // Inside a turn: the reply's call has no result yet.
    let reply = seq_of(first(&all, "model_response", |_| true));
    let run = fork(reply.to_string()).await;
    assert!(run.stderr.contains("has no result yet"), "{}", run.stderr);
    // After the final answer there is nothing to go on with.
    let last = seq_of(all.last().unwrap());
    let run = fork(last.to_string()).await;
    assert!(run.stderr.contains("had ended by then"), "{}", run.stderr);
    let run = fork((last + 100).to_string()).await;
    assert!(run.stderr.contains("past its end"), "{}", run.stderr);
    // A model the children cannot have is refused once, before any child starts.
    let bad = [
        "replay",
        "fork",
        log.to_str().unwrap(),
        "--step",
        &changed.to_string(),
    ];
    let args = [&bad[..], &["--model", "script:/nonexistent.yaml"]].concat();
    let run = harness(&args, LIMIT).await;
    assert_ne!(run.code, 0);
    common::assert_contains(&run.stderr, &["the children's model", "/nonexistent.yaml"]);
    assert!(!log.join("forks").exists(), "a refused fork leaves nothing");
}

/// A parent whose opening hooks added words and whose `stop` hook sent the model back once:
/// the fork after that "go on" rebuilds both (the next request checks it), and the children
/// get the hooks they are given again.
#[tokio::test(flavor = "multi_thread")]
async fn a_fork_after_a_stop_hook_sent_the_model_back_rebuilds_the_hooks_words() {
    let dir = tempfile::tempdir().unwrap();
    let hook = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    hook(
        "context.sh",
        "cat > /dev/null\necho '{\"additional_context\": \"the tests live in t/\"}'\n",
    );
    hook(
        "not-yet.sh",
        "cat > /dev/null\nif [ -e stopped-once ]; then exit 0; fi\ntouch stopped-once\necho '{\"decision\": \"deny\", \"reason\": \"run the tests first\", \"additional_context\": \"t/run.sh\"}'\n",
    );
    std::fs::write(
        dir.path().join("hooks.yaml"),
        "hooks:\n  - {event: session_start, command: sh context.sh}\n  - {event: user_prompt, command: sh context.sh}\n  - {event: stop, name: not-yet, command: sh not-yet.sh}\n",
    )
    .unwrap();
    let script = json!({"turns": [
        {"text": "finished early"},
        {"text": "testing", "tool_calls": [{"name": "bash", "arguments": {"cmd": "echo ran > tests.log"}}]},
        {"text": "Tests ran."},
    ]});
    std::fs::create_dir(dir.path().join("workspace")).unwrap();
    let task = common::scripted_task(
        dir.path(),
        &script,
        json!({
            "prompt": "Run the tests.",
            "workspace": {"dir": "workspace"},
            "check": "grep -q ran tests.log",
            "hooks": "hooks.yaml",
        }),
    );
    let parent = common::run_task(&task, &dir.path().join("ws")).await;
    assert_eq!(parent.code, 0, "{}", parent.stderr);
    let log = parent.log_dir();
    let all = events(&log);
    let second = first(&all, "model_request", |d| d["turn"] == 2);
    assert_eq!(
        second["data"]["n_messages"], 4,
        "the hook's reason was sent"
    );
    let step = seq_of(second) - 1;
    assert_eq!(all[step as usize]["data"]["event"], "stop");
    let hooks = dir.path().join("hooks.yaml");
    let run = fork_of(
        &log,
        step,
        &["--hooks", hooks.to_str().unwrap(), "--keep-workspace"],
    )
    .await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("2 of 2 passed"), "{}", run.stdout);
    // Kept workspaces are copies (an overlay would not outlive the fork), with the child's work.
    assert!(
        run.stderr.contains("children's workspaces: a copy"),
        "{}",
        run.stderr
    );
    let kept = run
        .stderr
        .lines()
        .find_map(|line| line.strip_prefix("the children's workspaces are kept in "))
        .and_then(|rest| rest.strip_suffix(" (--keep-workspace)"))
        .map(PathBuf::from)
        .expect("the kept folder is named");
    for child in ["child-1-", "child-2-"] {
        let folder = std::fs::read_dir(&kept)
            .unwrap()
            .flatten()
            .find(|entry| entry.file_name().to_string_lossy().starts_with(child))
            .unwrap_or_else(|| panic!("no {child}* in {}", kept.display()));
        let log = std::fs::read_to_string(folder.path().join("tests.log")).unwrap();
        assert_eq!(log, "ran\n");
    }
    std::fs::remove_dir_all(&kept).unwrap();
    assert!(!run.stderr.contains("warning: hooks ran"), "{}", run.stderr);
    let out = common::first_entry(&log.join("forks"));
    let child = events(&out.join("child-1"));
    let request = first(&child, "model_request", |d| d["purpose"] == "turn");
    for field in ["turn", "n_messages", "estimated_tokens"] {
        assert_eq!(request["data"][field], second["data"][field], "{field}");
    }
    // The child's own stop hook ran (and, the marker made, let it finish).
    assert!(
        child
            .iter()
            .any(|e| e["type"] == "hook_run" && e["data"]["event"] == "stop"),
        "the child ran the hooks it was given"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_forks_every_recorded_session_at_one_step() {
    let dir = tempfile::tempdir().unwrap();
    let task = write_task(dir.path());
    let logs = dir.path().join("logs");
    for n in 0..2 {
        let target = dir.path().join(format!("ws-{n}"));
        let run = common::run(
            common::run_into(&logs, &task, &target),
            Duration::from_secs(120),
        )
        .await;
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    // The end of turn 2, the same step in both recordings of the same script.
    let steps: Vec<(u64, Vec<String>)> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|entry| {
            let all = events(&entry.unwrap().path());
            let third = seq_of(first(&all, "model_request", |d| d["turn"] == 3));
            let kinds = all.iter().take(third as usize);
            (third - 1, kinds.map(|e| e["type"].to_string()).collect())
        })
        .collect();
    assert_eq!(
        steps[0], steps[1],
        "the two recordings differ before turn 3"
    );
    let step = steps[0].0.to_string();
    let out = dir.path().join("forks");
    let args = [
        "batch",
        "--fork-at",
        &step,
        "--count",
        "2",
        "--parallel",
        "2",
        "--out",
        out.to_str().unwrap(),
        "--trust-log",
        logs.to_str().unwrap(),
    ];
    let run = harness(&args, LIMIT).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("2 of 2 sessions forked") && run.stdout.contains("mean value 1.000"),
        "{}",
        run.stdout
    );
    let summary: Value =
        serde_json::from_slice(&std::fs::read(out.join("forks.json")).unwrap()).unwrap();
    let sessions = summary["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2);
    for session in sessions {
        let fork = &session["fork"];
        assert_eq!(fork["value"], 1.0, "{session}");
        assert_eq!(fork["parent"]["turns"], 2);
        for child in fork["children"].as_array().unwrap() {
            assert_eq!(child["turns"], 4, "turns 3 to 6 of the script");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kept_state_is_reused_while_it_is_as_verified_and_rebuilt_when_not() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // A set-user-id file: giving the workspace to the commands' user (a chown) clears the bit,
    // which must be given back, or the kept workspace would never verify.
    let task = write_task(dir.path());
    let tool = dir.path().join("workspace/tool.sh");
    std::fs::write(&tool, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let parent = common::run_task(&task, &dir.path().join("ws")).await;
    assert_eq!(parent.code, 0, "{}", parent.stderr);
    let log = parent.log_dir();
    let all = events(&log);
    let step = seq_of(first(&all, "model_request", |d| d["turn"] == 4)) - 1;
    let at_step = restored(&log, step, &dir.path().join("at-step")).await;
    let kept = log.join("forks").join(format!(".state-{step}/workspace"));
    // Forks `--keep-state` into `name`; what it said of the kept workspace, and the first
    // child's initial workspace.
    let fork = |name: &'static str| {
        let (log, out) = (log.clone(), dir.path().join(name));
        async move {
            let run = fork_of(
                &log,
                step,
                &["--keep-state", "--out", out.to_str().unwrap()],
            )
            .await;
            assert_eq!(run.code, 0, "{name}: {}\n{}", run.stdout, run.stderr);
            assert!(
                run.stdout.contains("2 of 2 passed"),
                "{name}: {}",
                run.stdout
            );
            let said: Vec<&str> = run
                .stderr
                .lines()
                .filter(|line| {
                    line.starts_with("the workspace at step")
                        || line.starts_with("the kept workspace")
                })
                .collect();
            assert!(
                !said.is_empty(),
                "{name}: nothing said of the state: {}",
                run.stderr
            );
            let said = said.join("\n");
            let child = out.join("child-1");
            let snapshot = seq_of(first(&events(&child), "workspace_snapshot", |_| true));
            let began = restored(&child, snapshot, &out.join("began")).await;
            (said, began)
        }
    };
    let (said, began) = fork("first").await;
    assert!(said.contains("kept for the next fork in"), "{said}");
    assert!(
        !said.contains("rebuilt"),
        "nothing was there to rebuild: {said}"
    );
    assert_eq!(began, at_step);
    assert_eq!(tree(&kept), at_step, "the kept workspace is the step's");
    let mode = std::fs::metadata(kept.join("tool.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o7777,
        0o755,
        "a set-user-id bit is never set on this host"
    );

    let (said, began) = fork("second").await;
    assert!(said.contains("reused (every entry as verified)"), "{said}");
    assert_eq!(began, at_step);

    // A changed file (same size: only its stat tells), then an extra one: rebuilt each time,
    // and the children begin from the step's workspace, not the changed one.
    let a = kept.join("a.txt");
    let mut bytes = std::fs::read(&a).unwrap();
    bytes[0] ^= 0x20;
    std::fs::write(&a, &bytes).unwrap();
    let (said, began) = fork("changed").await;
    assert!(said.contains("kept for the next fork in"), "{said}");
    assert!(
        said.contains("rebuilt: a.txt: changed since it was verified"),
        "{said}"
    );
    assert_eq!(began, at_step);
    std::fs::write(kept.join("docs/extra.txt"), "not at the step\n").unwrap();
    let (said, began) = fork("extra").await;
    assert!(
        said.contains("rebuilt: docs/extra.txt: not in the workspace at the step"),
        "{said}"
    );
    assert_eq!(began, at_step);
    assert_eq!(tree(&kept), at_step);
    // A link in its place (as a log from elsewhere may carry): not followed, not reused, and
    // what it points to keeps its modes.
    let decoy = dir.path().join("decoy");
    std::fs::create_dir_all(decoy.join("workspace/inner")).unwrap();
    std::fs::set_permissions(&decoy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let state_dir = kept.parent().unwrap().to_owned();
    std::fs::remove_dir_all(&state_dir).unwrap();
    std::os::unix::fs::symlink(&decoy, &state_dir).unwrap();
    let (said, began) = fork("linked").await;
    assert!(
        said.contains("rebuilt: not a folder this harness kept"),
        "{said}"
    );
    assert_eq!(began, at_step);
    assert!(!std::fs::symlink_metadata(&state_dir).unwrap().is_symlink());
    for folder in [decoy.clone(), decoy.join("workspace/inner")] {
        let mode = std::fs::metadata(&folder).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755, "{} kept its mode", folder.display());
    }
    // The kept workspace is not a fork: the parent's transcript lists only forks.
    let shown = harness(&["replay", "show", log.to_str().unwrap()], LIMIT).await;
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert!(!shown.stdout.contains(".state-"), "{}", shown.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forks_folder_that_is_a_link_is_refused_and_nothing_is_written_through_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (log, all) = recorded(dir.path()).await;
    let step = seq_of(first(&all, "model_request", |d| d["turn"] == 4)) - 1;
    // A session folder from elsewhere whose `forks` points out of it.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(&elsewhere, log.join("forks")).unwrap();
    let out = dir.path().join("out");
    for more in [
        &[][..],
        &["--keep-state", "--out", out.to_str().unwrap()][..],
    ] {
        let run = fork_of(&log, step, more).await;
        assert_ne!(run.code, 0, "{more:?}: {}", run.stdout);
        assert!(
            run.stderr
                .contains("forks: not a folder (a link or a file)"),
            "{more:?}: {}",
            run.stderr
        );
    }
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing written there"
    );
    let mode = std::fs::metadata(&elsewhere).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755);
}
