//! `harness batch`: many scripted tasks in parallel against real local sandboxes (and a pool of
//! running servers, and the model double), read back through the logs and the report.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common;
use crate::double::{Answer, ModelDouble};

/// Writes `<dir>/<name>.yaml` (its prompt and model, then `extra`) and its script
/// `<name>.turns` (turns as YAML); the task file's path.
pub fn write_task(dir: &Path, name: &str, turns: &str, extra: &str) -> PathBuf {
    std::fs::write(
        dir.join(format!("{name}.turns")),
        format!("turns:\n{turns}"),
    )
    .unwrap();
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        format!("prompt: task {name}\nmodel: {{name: 'script:{name}.turns'}}\n{extra}"),
    )
    .unwrap();
    path
}

pub use common::bash_turn as bash;

pub const DONE: &str = "  - text: done\n";

/// `harness batch` over the test's own task files, which name its model double
/// (`model.base_url`): a dataset the operator wrote (`--trust-tasks`).
pub fn batch(args: &[&str]) -> Command {
    let mut all = vec!["batch", "--trust-tasks", "--policy", "allow-all"];
    all.extend_from_slice(args);
    common::command(&all)
}

/// `harness batch FLAGS --progress lines --out OUT TASKS`, as [`batch`].
pub fn batch_into(tasks: &Path, out: &Path, flags: &[&str]) -> Command {
    let mut args = flags.to_vec();
    args.extend(["--progress", "lines", "--out", out.to_str().unwrap()]);
    args.push(tasks.to_str().unwrap());
    batch(&args)
}

/// Starts `command` with its output piped.
pub fn spawn_piped(mut command: Command) -> std::process::Child {
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The events of a log that may still be written to: a line not yet whole is left out
/// (`common::events` reads a finished log, every line).
pub fn events_so_far(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

pub fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

pub fn report(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap()
}

pub fn row<'a>(report: &'a Value, task: &str) -> &'a Value {
    report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["task"] == task)
        .unwrap_or_else(|| panic!("no row for {task}"))
}

/// The most tasks the batch log shows running at once.
fn most_at_once(batch_events: &[Value]) -> usize {
    let (mut running, mut most) = (0usize, 0usize);
    for event in batch_events {
        match event["type"].as_str().unwrap() {
            "task_started" => running += 1,
            "task_finished" => running -= 1,
            _ => {}
        }
        most = most.max(running);
    }
    most
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_tasks_four_at_once_with_failures_a_retry_and_a_report_that_agrees_with_the_logs() {
    let tasks = tempfile::tempdir().unwrap();
    let marks = tempfile::tempdir().unwrap();
    let _double = write_twenty_tasks(tasks.path(), marks.path()).await;
    let out = tempfile::tempdir().unwrap().path().join("batch");
    let writable = [
        "--parallel",
        "4",
        "--writable",
        marks.path().to_str().unwrap(),
    ];
    let mut command = batch_into(tasks.path(), &out, &writable);
    command.env("OPENAI_API_KEY", "sk-test");
    let (run, killed) = tokio::join!(
        common::run(command, Duration::from_secs(300)),
        common::kill_the_sandbox_of(SANDBOX_DIES, Duration::from_secs(120))
    );
    assert!(
        killed,
        "the sandbox-dies task's sandbox was found and killed"
    );
    assert_eq!(
        run.code, 9,
        "some tasks fail: {}\n{}",
        run.stdout, run.stderr
    );
    assert!(
        run.stdout
            .contains("20 tasks: 15 passed, 5 failed, 0 not run"),
        "{}",
        run.stdout
    );

    let report = report(&out);
    the_report_files_each_failure(&report);
    the_batch_log_shows_four_at_once_and_the_retry(&out);
    every_row_agrees_with_its_own_metrics(&out, &report).await;
    a_folder_and_its_batch_measure_the_same(&out, &report).await;
    the_html_links_every_transcript(&out);
}

/// Twenty tasks: 14 that pass, 3 whose check fails, one over its turn limit, one whose sandbox
/// kills itself on its first attempt only, one whose model API refuses it. Returns the double
/// that refuses (it must live while the batch runs).
/// What the `sandbox-dies` task runs the first time: the test kills its sandbox meanwhile
/// (`common::kill_the_sandbox_of`).
const SANDBOX_DIES: &str = "sleep 29.25";

async fn write_twenty_tasks(tasks: &Path, marks: &Path) -> ModelDouble {
    for i in 0..14 {
        write_task(
            tasks,
            &format!("pass-{i:02}"),
            &(bash(&format!("echo {i} > out.txt")) + DONE),
            &format!("check: \"test $(cat out.txt) = {i}\"\n"),
        );
    }
    for i in 0..3 {
        write_task(
            tasks,
            &format!("wrong-{i}"),
            &(bash("echo nope > out.txt") + DONE),
            "check: \"test $(cat out.txt) = yes\"\n",
        );
    }
    write_task(
        tasks,
        "too-long",
        &(bash("true") + &bash("true") + DONE),
        "limits: {max_turns: 1}\n",
    );
    // Kills its own sandbox-server on the first attempt only (the mark is outside the workspace).
    let mark = marks.join("killed-once");
    write_task(
        tasks,
        "sandbox-dies",
        &(bash(&format!(
            "if [ ! -e {0} ]; then touch {0}; {SANDBOX_DIES}; fi; echo alive > out.txt",
            mark.display()
        )) + DONE),
        "check: \"test $(cat out.txt) = alive\"\n",
    );
    // The model API refuses the request (400): a model failure, not retried.
    let double = ModelDouble::start().await;
    double.push(Answer::Status {
        status: 400,
        retry_after: None,
        body: json!({"error": {"message": "model `m` does not exist", "type": "invalid_request_error"}}),
    });
    std::fs::write(
        tasks.join("model-fails.yaml"),
        format!(
            "prompt: hi\nmodel: {{name: openai-compat/m, base_url: '{}/v1'}}\n",
            double.base
        ),
    )
    .unwrap();

    double
}

fn the_report_files_each_failure(report: &Value) {
    assert_eq!(report["tasks"].as_array().unwrap().len(), 20);
    let totals = &report["totals"];
    assert_eq!(totals["passed"], 15);
    assert_eq!(totals["retries"], 1);
    assert_eq!(
        totals["failures"],
        json!({"check": 3, "limit": 1, "model": 1})
    );
    let retried = row(report, "sandbox-dies");
    assert_eq!(retried["passed"], true);
    assert_eq!(retried["attempts"], 2);
    assert_eq!(row(report, "too-long")["outcome"], "turn_limit");
    assert_eq!(row(report, "model-fails")["failure"], "model");
    assert_eq!(row(report, "wrong-1")["outcome"], "check_failed");
}

fn the_batch_log_shows_four_at_once_and_the_retry(out: &Path) {
    // The batch log: at most 4 at once, the retry with the first attempt's log kept.
    let batch_events = events_so_far(out);
    assert_eq!(batch_events[0]["type"], "batch_started");
    let most = most_at_once(&batch_events);
    assert!((2..=4).contains(&most), "{most} tasks ran at once");
    let retry = of_type(&batch_events, "task_retried");
    assert_eq!(retry.len(), 1);
    let previous = out.join(retry[0]["data"]["previous_log"].as_str().unwrap());
    let first_attempt = events_so_far(&previous);
    let finished = of_type(&first_attempt, "session_finished");
    assert_eq!(finished[0]["data"]["failure"], "infrastructure");
    assert!(
        of_type(&first_attempt, "error")
            .iter()
            .any(|e| e["data"]["class"] == "infrastructure"),
        "the first attempt says its sandbox died"
    );
}

async fn every_row_agrees_with_its_own_metrics(out: &Path, report: &Value) {
    // Every row agrees with its task's own log, measured on its own.
    for task in report["tasks"].as_array().unwrap() {
        let name = task["task"].as_str().unwrap();
        let metrics = common::harness(
            &[
                "replay",
                "metrics",
                "--json",
                out.join(name).to_str().unwrap(),
            ],
            Duration::from_secs(30),
        )
        .await;
        let m: Value = serde_json::from_str::<Vec<Value>>(&metrics.stdout).unwrap()[0].clone();
        assert_eq!(task["outcome"], m["outcome"], "{name}");
        assert_eq!(task["turns"], m["turns"], "{name}");
        let tools: u64 = m["tool_calls"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(task["tool_calls"], tools, "{name}");
        assert_eq!(task["duration_ms"], m["total_ms"], "{name}");
    }
}

async fn a_folder_and_its_batch_measure_the_same(out: &Path, report: &Value) {
    // A log folder holding the batch measures the batch's tasks, not the batch log itself.
    let folder = common::harness(
        &[
            "replay",
            "metrics",
            "--json",
            out.parent().unwrap().to_str().unwrap(),
        ],
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(folder.code, 0, "{}", folder.stderr);
    let rows: Vec<Value> = serde_json::from_str(&folder.stdout).unwrap();
    assert_eq!(rows.len(), 20);
    assert!(
        rows.iter().all(|r| r["outcome"] != "incomplete"),
        "{rows:?}"
    );
    // `replay metrics` on the batch folder is the same report.
    let again = common::harness(
        &["replay", "metrics", "--json", out.to_str().unwrap()],
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(
        serde_json::from_str::<Value>(&again.stdout).unwrap(),
        *report
    );
}

fn the_html_links_every_transcript(out: &Path) {
    // The HTML page: a row per task, each that ran linking its transcript, which exists.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert_eq!(html.matches("<tr class=").count(), 20);
    for i in 0..14 {
        let link = format!("transcripts/pass-{i:02}.html");
        assert!(html.contains(&link), "{link}");
        assert!(out.join(&link).is_file(), "{link}");
    }
}

/// Runs a batch that must be refused before anything runs: exit 1, naming `why`.
async fn refused(args: &[&str], why: &str) {
    let run = common::run(batch(args), Duration::from_secs(30)).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains(why), "expected `{why}`: {}", run.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_batches_are_refused_before_anything_runs() {
    let tasks = tempfile::tempdir().unwrap();
    write_task(tasks.path(), "fine", DONE, "");
    let fine = tasks.path().join("fine.yaml");
    let fine = fine.to_str().unwrap();
    std::fs::write(
        tasks.path().join("broken.yaml"),
        "prompt: hi\nlimits: {max_turns: many}\n",
    )
    .unwrap();
    let out: PathBuf = tempfile::tempdir().unwrap().path().join("batch");
    let (out_arg, tasks_arg) = (out.to_str().unwrap(), tasks.path().to_str().unwrap());
    refused(&["--out", out_arg, tasks_arg], "broken.yaml").await;
    refused(&["--out", out_arg, tasks_arg], "max_turns").await;
    assert!(!out.exists(), "nothing was written");

    let other = tempfile::tempdir().unwrap();
    write_task(other.path(), "fine", DONE, "");
    let other_arg = other.path().to_str().unwrap();
    refused(&[fine, other_arg], "two tasks are named `fine`").await;

    // A session's log is never taken for a batch's, even with --resume.
    let session = tempfile::tempdir().unwrap();
    let header = "{\"seq\":0,\"ts\":\"2026-11-30T00:00:00.000Z\",\"type\":\"session_started\",\"data\":{}}\n";
    std::fs::write(session.path().join("events.jsonl"), header).unwrap();
    let session_arg = session.path().to_str().unwrap();
    refused(&["--resume", "--out", session_arg, fine], "not a batch's").await;
    assert_eq!(
        std::fs::read_to_string(session.path().join("events.jsonl")).unwrap(),
        header
    );

    // An existing folder that is not a batch is never written into.
    refused(&["--out", other_arg, fine], "is not a batch folder").await;
    assert!(!other.path().join("events.jsonl").exists());
    refused(&["--rate-limit", "openai", fine], "--rate-limit `openai`").await;

    // A task whose model has no API key stops the batch before any task starts, named with
    // the variable to set (the test environment has no keys).
    std::fs::write(
        other.path().join("keyed.yaml"),
        "prompt: hi\nmodel: {name: openai/gpt-5-mini}\n",
    )
    .unwrap();
    let keyed = other.path().join("keyed.yaml");
    refused(
        &["--out", out_arg, fine, keyed.to_str().unwrap()],
        "keyed.yaml: OPENAI_API_KEY is not set",
    )
    .await;
    assert!(!out.exists(), "nothing was written");
}

/// A task named as one of the batch's own files or folders (its log, its report, Harbor's job
/// files, the folder earlier attempts move to) would overwrite or move them: such a task is
/// refused by name before anything runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_cannot_take_the_name_of_a_batch_file() {
    let dir = tempfile::tempdir().unwrap();
    let names = [
        "events.jsonl",
        "report.json",
        "result.json",
        "attempts",
        "blobs",
    ];
    for (i, name) in names.into_iter().enumerate() {
        let dataset = dir.path().join(format!("dataset-{i}"));
        std::fs::create_dir_all(dataset.join(name)).unwrap();
        write_task(&dataset.join(name), "task", DONE, "");
        let out = dir.path().join(format!("out-{i}"));
        let (out_arg, dataset_arg) = (out.to_str().unwrap(), dataset.to_str().unwrap());
        let why = format!("`{name}` would name its log folder, but that name is the batch's own");
        refused(&["--out", out_arg, dataset_arg], &why).await;
        assert!(!out.exists(), "{name}: nothing was written");
    }
}

/// Issue 57 §4: a task file run three times (`--attempts 3`) is one task of three trials, with
/// its pass@1 and pass@3 in the terminal, `report.json` and `report.html`.
#[tokio::test(flavor = "multi_thread")]
async fn attempts_of_a_task_file_give_pass_at_k() {
    let tasks = tempfile::tempdir().unwrap();
    write_task(tasks.path(), "hello", DONE, "");
    let out = tempfile::tempdir().unwrap().path().join("batch");
    let run = common::run(
        batch_into(tasks.path(), &out, &["--attempts", "3"]),
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    for needle in [
        "\n1 task × 3 trials: 3 passed",
        "trials (3 per task;",
        "over the tasks: pass@1 100.0%, pass@3 100.0%",
    ] {
        assert!(run.stdout.contains(needle), "{needle}: {}", run.stdout);
    }
    let report = report(&out);
    let task = &report["trials"]["tasks"][0];
    assert_eq!(
        (task["task"].as_str(), task["trials"].as_u64()),
        (Some("hello"), Some(3))
    );
    assert_eq!(task["pass_at_k"], 1.0);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("<table id=\"trials\">"),
        "the HTML report has the trials"
    );
}
