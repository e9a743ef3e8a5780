//! `harness batch` stopped by Ctrl-C, once and twice, and resumed.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::batches::{
    DONE, bash, batch_into, events_so_far, of_type, report, spawn_piped, write_task,
};
use crate::common;

/// Waits (bounded) until the batch log in `out` has `n` task_started events.
fn wait_started(out: &Path, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if out.join("events.jsonl").is_file()
            && of_type(&events_so_far(out), "task_started").len() >= n
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{n} tasks did not start within 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn interrupt(pid: u32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
}

fn finish(child: Child) -> (i32, String) {
    let output = child.wait_with_output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_once_lets_running_tasks_finish_and_resume_runs_only_the_rest() {
    let tasks = tempfile::tempdir().unwrap();
    for i in 0..6 {
        write_task(
            tasks.path(),
            &format!("slow-{i}"),
            &(bash("sleep 1; echo ok > out.txt") + DONE),
            "check: \"test -e out.txt\"\n",
        );
    }
    let out = tempfile::tempdir().unwrap().path().join("batch");
    let child = spawn_piped(batch_into(tasks.path(), &out, &["--parallel", "2"]));
    wait_started(&out, 2);
    interrupt(child.id());
    let (code, output) = tokio::task::spawn_blocking(move || finish(child))
        .await
        .unwrap();
    assert_eq!(code, 130, "{output}");
    let report = report(&out);
    assert_eq!(
        report["totals"]["passed"], 2,
        "the two running tasks finished: {output}"
    );
    assert_eq!(report["totals"]["not_run"], 4);
    assert_eq!(report["interrupted"], true);
    let hint = output
        .lines()
        .find_map(|line| line.strip_prefix("to run the rest of this batch: "))
        .unwrap_or_else(|| panic!("the way to finish it is said: {output}"));
    assert!(
        hint.ends_with(" --resume") && hint.contains(&format!(" --out {} ", out.display())),
        "{hint}"
    );
    let batch_id = report["batch_id"].clone();

    let resume = batch_into(tasks.path(), &out, &["--resume", "--parallel", "2"]);
    let run = common::run(resume, Duration::from_secs(120)).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let batch_events = events_so_far(&out);
    let second_run = batch_events
        .iter()
        .rposition(|e| e["type"] == "batch_started")
        .unwrap();
    assert_eq!(batch_events[second_run]["data"]["resumed"], true);
    let started: Vec<&str> = batch_events[second_run..]
        .iter()
        .filter(|e| e["type"] == "task_started")
        .map(|e| e["data"]["task"].as_str().unwrap())
        .collect();
    assert_eq!(started.len(), 4, "only the rest ran: {started:?}");
    assert_eq!(
        of_type(&batch_events[second_run..], "task_skipped").len(),
        2
    );
    let report = self::report(&out);
    assert_eq!(report["totals"]["passed"], 6);
    assert_eq!(report["interrupted"], false);
    assert_eq!(report["batch_id"], batch_id, "a resumed batch keeps its id");
    // Seq goes on without a gap across the two runs of the one batch log.
    for (i, event) in batch_events.iter().enumerate() {
        assert_eq!(event["seq"], i, "{event}");
    }
}

/// The sandbox-server processes whose command line names `needle`.
fn servers_with(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let text = String::from_utf8_lossy(&c);
                text.contains("sandbox-server") && text.contains(needle)
            }) && common::alive(*pid)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_twice_stops_running_tasks_marks_them_interrupted_and_stops_their_sandboxes() {
    let tasks = tempfile::tempdir().unwrap();
    let names = ["hang-a7f3", "hang-b7f3"];
    for name in names {
        write_task(tasks.path(), name, &(bash("sleep 60") + DONE), "");
    }
    let out = tempfile::tempdir().unwrap().path().join("batch");
    let child = spawn_piped(batch_into(tasks.path(), &out, &["--parallel", "2"]));
    wait_started(&out, 2);
    // Both sandboxes are up and running their command.
    let deadline = Instant::now() + Duration::from_secs(30);
    while names.iter().any(|n| servers_with(n).is_empty()) {
        assert!(Instant::now() < deadline, "the sandboxes did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let started = Instant::now();
    interrupt(child.id());
    std::thread::sleep(Duration::from_millis(300));
    interrupt(child.id());
    let (code, output) = tokio::task::spawn_blocking(move || finish(child))
        .await
        .unwrap();
    assert_eq!(code, 130, "{output}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "stopping took {:?}",
        started.elapsed()
    );
    for name in names {
        let log = events_so_far(&out.join(name));
        let finished = of_type(&log, "session_finished");
        assert_eq!(finished.len(), 1, "{name}'s log is finished");
        assert_eq!(finished[0]["data"]["outcome"], "interrupted");
        assert!(
            servers_with(name).is_empty(),
            "{name}'s sandbox is still running"
        );
    }
    let report = report(&out);
    // Stopped, not failed: counted apart, out of the pass rate and the failure classes.
    assert_eq!(report["totals"]["interrupted"], 2);
    assert_eq!(report["totals"]["failed"], 0);
    assert_eq!(report["totals"]["failures"], json!({}));
}
