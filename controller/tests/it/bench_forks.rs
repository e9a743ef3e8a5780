//! `replay fork` of a benchmark session (Docker): the children run in the task's own
//! containers, start from the workspace at the step (a task image's own workspace replaced by
//! it, symlinks kept), and are graded by the task's verifier.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::benchmarks::{dataset, json, scripted_batch};
use crate::common::{self, events, harness};
use crate::forks::restored;

/// `replay fork RUN --step SEQ` and `more`.
async fn fork(parent: &Path, seq: u64, more: &[&str]) -> common::Run {
    let seq = seq.to_string();
    let mut args = vec!["replay", "fork", parent.to_str().unwrap(), "--step", &seq];
    args.extend_from_slice(more);
    harness(&args, Duration::from_secs(300)).await
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(harness_docker),
    ignore = "needs HARNESS_TEST_DOCKER=1 (bash .ci/run sets it up)"
)]
async fn a_benchmark_session_forked_at_a_step_runs_in_its_task_image_and_is_graded() {
    let dir = tempfile::tempdir().unwrap();
    // The parent writes the answer, then deletes it: its verifier gives 0.
    let call = |name: &str, arguments: Value| json!({"name": name, "arguments": arguments});
    let parent_script = json!({"turns": [
        {"text": "Writing it.", "tool_calls": [
            call("write_file", json!({"path": "hello.txt", "content": "Hello, world!\n"})),
            call("write_file", json!({"path": "notes/draft.txt", "content": "draft\n"})),
            call("bash", json!({"cmd": "ln -s hello.txt link.txt && chmod 700 notes"})),
        ]},
        {"text": "Cleaning up.", "tool_calls": [call("bash", json!({"cmd": "rm hello.txt"}))]},
        {"text": "Done."},
    ]});
    let script = dir.path().join("parent.yaml");
    std::fs::write(&script, parent_script.to_string()).unwrap();
    // A copy of the task, changed at the end to show that a fork runs only the files it ran.
    let task = dir.path().join("hello-file");
    for file in [
        "task.toml",
        "instruction.md",
        "environment/Dockerfile",
        "tests/test.sh",
    ] {
        std::fs::create_dir_all(task.join(file).parent().unwrap()).unwrap();
        std::fs::copy(dataset().join("hello-file").join(file), task.join(file)).unwrap();
    }
    let out = dir.path().join("job");
    let run = scripted_batch(&task, &out, &script).await;
    assert_eq!(
        run.code, 9,
        "the task did not pass: {}\n{}",
        run.stdout, run.stderr
    );
    let parent = out.join("hello-file");
    let all = events(&parent);
    let verdict = all
        .iter()
        .find(|e| e["type"] == "verifier_finished")
        .unwrap();
    assert_eq!(
        verdict["data"]["reward"], 0.0,
        "the parent deleted its answer"
    );
    // After the first turn's calls, before the second turn's request.
    let second = all
        .iter()
        .find(|e| e["type"] == "model_request" && e["data"]["turn"] == 2)
        .unwrap();
    let seq = second["seq"].as_u64().unwrap() - 1;

    // The children are another model: one that finds the work done and says so.
    let child_script = dir.path().join("child.yaml");
    std::fs::write(
        &child_script,
        json!({"turns": [{"text": "The file is there already."}]}).to_string(),
    )
    .unwrap();
    let child_model = format!("script:{}", child_script.display());
    let run = fork(
        &parent,
        seq,
        &["--count", "2", "--parallel", "2", "--model", &child_model],
    )
    .await;
    assert_eq!(run.code, 0, "fork failed: {}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("2 of 2 passed"), "{}", run.stdout);
    // In the parent's own folder, where its transcript finds it.
    let fork_dir = common::first_entry(&parent.join("forks"));
    let summary = json(&fork_dir.join("forks.json"));
    assert_eq!(summary["value"], 1.0, "{summary}");

    let at_step = restored(&parent, seq, &dir.path().join("at-step")).await;
    assert_eq!(at_step["hello.txt"], b"Hello, world!\n");
    assert_eq!(at_step["notes/draft.txt"], b"draft\n");
    for child in summary["children"].as_array().unwrap() {
        assert_eq!(child["outcome"], "completed", "{child}");
        assert_eq!(
            child["reward"], 1.0,
            "graded by the task's verifier: {child}"
        );
        let log = PathBuf::from(child["log_dir"].as_str().unwrap());
        let child_events = events(&log);
        let header = &child_events[0]["data"];
        assert_eq!(header["forked_from"]["seq"], seq);
        assert_eq!(header["config"]["benchmark"]["name"], "hello-file");
        assert_eq!(header["config"]["workspace_root"], "/app");
        assert!(
            header["config"]["container"]["image"]
                .as_str()
                .unwrap()
                .starts_with("harness-task/hello-file:"),
            "{header}"
        );
        // Its workspace began as the parent's at the step: files, the link, the modes.
        let snapshot = child_events
            .iter()
            .find(|e| e["type"] == "workspace_snapshot")
            .unwrap();
        let name = format!("child-{}", child["child"]);
        let began_in = dir.path().join(&name);
        let began = restored(&log, snapshot["seq"].as_u64().unwrap(), &began_in).await;
        assert_eq!(began, at_step, "{name}'s initial workspace");
        assert!(
            std::fs::symlink_metadata(began_in.join("link.txt"))
                .unwrap()
                .is_symlink()
        );
        let mode = |root: &std::path::Path| {
            std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(root.join("notes")).unwrap().permissions(),
            ) & 0o777
        };
        assert_eq!(mode(&began_in), 0o700, "{name}: the folder's mode");
        let verifier = child_events
            .iter()
            .find(|e| e["type"] == "verifier_finished")
            .unwrap();
        assert_eq!(verifier["data"]["reward"], 1.0);
    }
    // The parent's transcript lists the fork.
    let shown = harness(
        &["replay", "show", parent.to_str().unwrap()].map(str::to_owned),
        Duration::from_secs(30),
    )
    .await;
    assert!(
        shown
            .stdout
            .contains(&format!("at step {seq}: 2 children, 2 passed")),
        "{}",
        shown.stdout
    );
    // A task folder whose files changed since the session is refused, naming why.
    std::fs::write(
        task.join("tests/test.sh"),
        "echo 1 > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    let run = fork(&parent, seq, &["--model", &child_model]).await;
    run.assert_stderr_has(1, "the task's files are not those the session ran");
}

/// A copy of the session log `log` in `to` whose header `edit` changed.
fn rewritten(log: &Path, to: &Path, edit: &dyn Fn(&mut Value)) -> PathBuf {
    std::fs::create_dir_all(to.join("blobs")).unwrap();
    for blob in std::fs::read_dir(log.join("blobs")).unwrap() {
        let blob = blob.unwrap();
        std::fs::copy(blob.path(), to.join("blobs").join(blob.file_name())).unwrap();
    }
    let mut lines: Vec<Value> = events(log);
    edit(&mut lines[0]["data"]["config"]);
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(to.join("events.jsonl"), text).unwrap();
    to.to_owned()
}

/// What a benchmark session's log says is checked before a container starts: a session of the
/// task's oracle (no model's conversation to go on with) forked without `--model`, a task
/// whose workspace is the container's root, and a multi-step task are refused, each saying why.
/// The log is a local session's made to say it was a benchmark's: a shared log may say anything.
#[tokio::test(flavor = "multi_thread")]
async fn a_benchmark_log_that_cannot_be_forked_is_refused_before_any_container_starts() {
    let dir = tempfile::tempdir().unwrap();
    let (log, all) = crate::forks::recorded(dir.path()).await;
    let step = crate::forks::seq_of(crate::forks::first(&all, "workspace_changed", |_| true));
    let task = common::repo_root().join("examples/benchmarks/multi-step-notes");
    let as_benchmark = |digest: &str, root: &str, agent: Option<&str>| {
        let record = json!({"format": "harbor", "name": "multi-step-notes",
            "dir": task.to_str().unwrap(), "digest": digest, "image": "harness-task/x:y", "online": false});
        let (root, agent) = (root.to_owned(), agent.map(str::to_owned));
        move |config: &mut Value| {
            config["benchmark"] = record.clone();
            config["workspace_root"] = json!(root);
            if let Some(agent) = &agent {
                config["agent"] = json!(agent);
            }
        }
    };
    let refusal = |name: &str, edit: &dyn Fn(&mut Value)| {
        let copy = rewritten(&log, &dir.path().join(name), edit);
        // The log is this test's own: trusted, so its scripted model is the one refused or not.
        async move { fork(&copy, step, &["--trust-log"]).await }
    };
    let run = refusal("oracle", &as_benchmark("0", "/app", Some("oracle"))).await;
    assert!(
        run.code != 0 && run.stderr.contains("not a model"),
        "{}",
        run.stderr
    );
    let run = refusal("root", &as_benchmark("0", "/", None)).await;
    assert!(
        run.code != 0 && run.stderr.contains("no working folder (WORKDIR)"),
        "{}",
        run.stderr
    );
    // The task's real digest, as the refusal of a wrong one names it.
    let run = refusal("digest", &as_benchmark("0", "/app", None)).await;
    let digest = run
        .stderr
        .split("the session ran (")
        .nth(1)
        .and_then(|rest| rest.split(" now").next())
        .unwrap_or_else(|| panic!("{}", run.stderr))
        .to_owned();
    let run = refusal("multi", &as_benchmark(&digest, "/app", None)).await;
    assert!(
        run.code != 0
            && run
                .stderr
                .contains("a multi-step task's session cannot be forked"),
        "{}",
        run.stderr
    );
    // Nothing was started for any of them.
    for name in ["oracle", "root", "digest", "multi"] {
        assert!(!dir.path().join(name).join("forks").exists(), "{name}");
    }
}
