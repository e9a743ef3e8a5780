//! Issue 27: what a new user met in their first hour, each fixed and kept fixed.

use std::os::unix::process::CommandExt;
use std::time::Duration;

use crate::batches::{
    DONE, bash, batch, batch_into, events_so_far, of_type, report, row, spawn_piped, write_task,
};
use crate::benchmarks::harbor_task::HarborTask;
use crate::common;
use crate::common::wait_for_text;

/// §1 and §8: Ctrl-C at a terminal goes to the terminal's whole foreground process group.
/// The sandbox-server children are not in it, so the running task is interrupted (not an
/// infrastructure failure, not retried), and the interrupted command's output so far is its
/// result in the log.
#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_at_a_terminal_interrupts_the_task_keeps_its_output_and_retries_nothing() {
    let tasks = tempfile::tempdir().unwrap();
    write_task(
        tasks.path(),
        "slow",
        &(bash("echo started-7c1; sleep 60") + DONE),
        "",
    );
    let out = tempfile::tempdir().unwrap().path().join("batch");
    let mut command = batch_into(tasks.path(), &out, &["--retries", "2"]);
    // A group of its own, as a shell makes for a foreground job.
    command.process_group(0);
    let child = spawn_piped(command);
    let group = nix::unistd::Pid::from_raw(child.id() as i32);
    wait_for_text(&out.join("slow/events.jsonl"), "\"tool_call\"");
    // The command has printed its line (the sandbox holds it) before the keys are pressed.
    std::thread::sleep(Duration::from_millis(700));
    for _ in 0..2 {
        nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGINT).unwrap();
        std::thread::sleep(Duration::from_millis(300));
    }
    let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&output.stderr).into_owned()
        + &String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(130), "{said}");
    let batch_log = events_so_far(&out);
    assert!(of_type(&batch_log, "task_retried").is_empty(), "{said}");
    let log = events_so_far(&out.join("slow"));
    let finished = of_type(&log, "session_finished");
    assert_eq!(finished[0]["data"]["outcome"], "interrupted", "{said}");
    let results = of_type(&log, "tool_result");
    assert_eq!(results.len(), 1, "{results:?}");
    let result = &results[0]["data"];
    assert_eq!(result["status"], "interrupted", "{result}");
    let text = result["output"]["text"].as_str().unwrap();
    assert!(text.contains("started-7c1"), "{text}");
    assert_eq!(row(&report(&out), "slow")["failure"], "interrupted");
}

/// §2 and §6: a scripted model without verdicts, with nobody at a terminal: the classifier's
/// missing answer stops the session loudly at the first call that needs one, and the refusal
/// is printed where the call is, with its reason, and counted at the end.
#[tokio::test]
async fn a_refused_call_says_so_and_a_script_without_verdicts_fails_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let script = dir.path().join("script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - text: write\n    tool_calls:\n      - name: write_file\n        arguments: {path: a.txt, content: hi}\n  - text: done\n",
    )
    .unwrap();
    let model = format!("script:{}", script.display());
    let run = common::harness(
        &[
            "run",
            workspace.to_str().unwrap(),
            "write a file",
            "--model",
            &model,
        ],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    let call = lines
        .iter()
        .position(|l| l.trim() == "> write_file")
        .unwrap();
    assert!(
        lines[call + 1].trim().starts_with("refused: ") && lines[call + 1].contains("verdicts"),
        "{}",
        run.stderr
    );
    common::assert_contains(
        &run.stderr,
        &["--no-classifier", "1 call was refused by the policy"],
    );
    assert!(!workspace.join("a.txt").exists());
    // The call the session stopped on still has its result in the log.
    let log = events_so_far(&run.log_dir());
    let result = &of_type(&log, "tool_result")[0]["data"];
    assert_eq!(result["status"], "error", "{result}");
    assert!(
        result["output"]["text"]
            .as_str()
            .unwrap()
            .contains("verdicts"),
        "{result}"
    );
}

/// §3: a task that could not start has its reason in the table, report.json and report.html;
/// and counts read as words (`1 task`).
#[tokio::test]
async fn a_failed_tasks_reason_is_in_every_view_of_the_batch() {
    let tasks = tempfile::tempdir().unwrap();
    // An archive that is there (the task loads) but is no tar archive: the session fails as
    // its workspace is seeded.
    let elsewhere = tempfile::tempdir().unwrap();
    let archive = elsewhere.path().join("bad.tar");
    std::fs::write(&archive, [b'x'; 1024]).unwrap();
    write_task(
        tasks.path(),
        "missingws",
        DONE,
        &format!("workspace:\n  archive: {}\n", archive.display()),
    );
    let out = tempfile::tempdir().unwrap().path().join("batch");
    let run = common::run(
        batch(&[
            "--out",
            out.to_str().unwrap(),
            tasks.path().to_str().unwrap(),
        ]),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(run.code, 9, "{}", run.stderr);
    let reason = "bad.tar";
    assert!(
        run.stdout.contains(reason) && run.stdout.contains("a broken tar entry"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("\n1 task: 0 passed"), "{}", run.stdout);
    let progress = format!("{}{}", run.stdout, run.stderr);
    assert!(
        progress.contains("         missingws: seeding the workspace"),
        "the progress line under FAILED: {progress}"
    );
    let row = row(&report(&out), "missingws").clone();
    assert!(
        row["reason"]
            .as_str()
            .unwrap()
            .contains("a broken tar entry"),
        "{row}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("a broken tar entry"),
        "the HTML report has the reason"
    );
}

/// §5: a working folder that does not exist is not created: the run refuses and says what was
/// probably meant (an unquoted task).
#[tokio::test]
async fn a_missing_working_folder_is_refused_with_what_was_meant() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = common::command(&["run", "add", "a", "verbose", "flag"]);
    command.current_dir(dir.path());
    let run = common::run(command, Duration::from_secs(30)).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("the working directory `add` does not exist")
            && run
                .stderr
                .contains("quote it: harness run \"add a verbose flag\""),
        "{}",
        run.stderr
    );
    assert!(!dir.path().join("add").exists(), "no folder was made");
}

/// §10: bad numbers are usage errors, and a step past the log's end is refused.
#[tokio::test]
async fn max_turns_zero_is_a_usage_error_and_a_step_past_the_end_is_refused() {
    let run = common::harness(&["run", "--max-turns", "0", "x"], Duration::from_secs(30)).await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let script = dir.path().join("s.yaml");
    std::fs::write(&script, "turns:\n  - text: nothing to do\n").unwrap();
    let model = format!("script:{}", script.display());
    let done = common::harness(
        &[
            "run",
            workspace.to_str().unwrap(),
            "look",
            "--model",
            &model,
        ],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let log = done.log_dir();
    // §9: the transcript says the outcome first.
    let show = common::harness(
        &["replay", "show", log.to_str().unwrap()],
        Duration::from_secs(30),
    )
    .await;
    let second = show.stdout.lines().nth(2).unwrap_or_default();
    assert!(
        second.starts_with("**Outcome: completed · 1 turn · 0 tool calls"),
        "{}",
        show.stdout
    );
    let restore = common::harness(
        &common::restore_args(&log, "999", &dir.path().join("r")),
        Duration::from_secs(30),
    )
    .await;
    restore.assert_stderr_has(1, "step 999 is past its end");
    assert!(!dir.path().join("r").exists());
}

/// §4: a benchmark task built on this project's base image, when the engine lacks it, is named
/// with the command that makes it (not the engine's lookup of a registry it cannot reach).
#[tokio::test]
#[cfg_attr(
    not(harness_docker),
    ignore = "needs HARNESS_TEST_DOCKER=1 (bash .ci/run sets it up)"
)]
async fn a_missing_base_image_is_named_with_the_command_that_makes_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    HarborTask {
        dockerfile: "FROM agent-harness/no-such-base:1\n",
        ..HarborTask::quick("true", "true")
    }
    .write(&data.join("nobase"));
    let out = dir.path().join("job");
    let run = crate::benchmarks::run_batch(&data, &out, &["--agent", "oracle"], 120).await;
    let said = format!("{}{}", run.stdout, run.stderr);
    assert_ne!(run.code, 0, "{said}");
    let reason = row(&report(&out), "nobase")["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        reason.contains("agent-harness/no-such-base:1")
            && reason.contains("docker/build-base-image.sh"),
        "{reason}\n{said}"
    );
}

/// Issue 57 §5: a task whose workspace folder is not there is refused as it loads, naming the
/// value as written, where it was looked for and the folder probably meant: `harness run`
/// before any session or log, `harness batch` before it starts, with no batch folder.
#[tokio::test]
async fn a_missing_workspace_folder_is_refused_before_anything_starts() {
    let tasks = tempfile::tempdir().unwrap();
    std::fs::create_dir(tasks.path().join("workspace")).unwrap();
    let task = write_task(tasks.path(), "typo", DONE, "workspace: {dir: workspce}\n");
    let logs = tempfile::tempdir().unwrap();
    let run = common::harness(
        &[
            "run",
            "--log-dir",
            logs.path().to_str().unwrap(),
            "--task",
            task.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    let looked = tasks.path().join("workspce");
    for needle in [
        "workspace.dir: `workspce` does not exist".to_owned(),
        format!("looked for at {}", looked.display()),
        "did you mean `workspace`?".to_owned(),
    ] {
        assert!(run.stderr.contains(&needle), "{needle}: {}", run.stderr);
    }
    assert!(
        !run.stderr.contains("log: "),
        "no session began: {}",
        run.stderr
    );
    assert_eq!(std::fs::read_dir(logs.path()).unwrap().count(), 0, "no log");
    let out = tempfile::tempdir().unwrap().path().join("batch");
    let run = common::run(
        batch(&["--out", out.to_str().unwrap(), task.to_str().unwrap()]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("the batch did not start") && run.stderr.contains("`workspce`"),
        "{}",
        run.stderr
    );
    assert!(!out.exists(), "no batch folder");
}
