//! `harness batch`: many scripted tasks in parallel against real local sandboxes (and a pool of
//! running servers, and the model double), read back through the logs and the report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common;
use crate::double::{Answer, ModelDouble, ev_message, ev_response};

/// Writes `<dir>/<name>.yaml` and its script `<name>.turns` (turns as YAML).
fn write_task(dir: &Path, name: &str, turns: &str, extra: &str) {
    std::fs::write(
        dir.join(format!("{name}.turns")),
        format!("turns:\n{turns}"),
    )
    .unwrap();
    std::fs::write(
        dir.join(format!("{name}.yaml")),
        format!("prompt: task {name}\nmodel: {{name: 'script:{name}.turns'}}\n{extra}"),
    )
    .unwrap();
}

use common::bash_turn as bash;

const DONE: &str = "  - text: done\n";

fn batch(args: &[&str]) -> Command {
    let mut all = vec!["batch", "--policy", "allow-all"];
    all.extend_from_slice(args);
    common::command(&all)
}

fn events(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

fn report(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap()
}

fn row<'a>(report: &'a Value, task: &str) -> &'a Value {
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
    for i in 0..14 {
        write_task(
            tasks.path(),
            &format!("pass-{i:02}"),
            &(bash(&format!("echo {i} > out.txt")) + DONE),
            &format!("check: \"test $(cat out.txt) = {i}\"\n"),
        );
    }
    for i in 0..3 {
        write_task(
            tasks.path(),
            &format!("wrong-{i}"),
            &(bash("echo nope > out.txt") + DONE),
            "check: \"test $(cat out.txt) = yes\"\n",
        );
    }
    write_task(
        tasks.path(),
        "too-long",
        &(bash("true") + &bash("true") + DONE),
        "limits: {max_turns: 1}\n",
    );
    // Kills its own sandbox-server on the first attempt only (the mark is outside the workspace).
    let mark = marks.path().join("killed-once");
    write_task(
        tasks.path(),
        "sandbox-dies",
        &(bash(&format!(
            "if [ ! -e {0} ]; then touch {0}; kill -9 $PPID; sleep 5; fi; echo alive > out.txt",
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
        tasks.path().join("model-fails.yaml"),
        format!(
            "prompt: hi\nmodel: {{name: openai-compat/m, base_url: '{}/v1'}}\n",
            double.base
        ),
    )
    .unwrap();

    let out = tempfile::tempdir().unwrap().path().join("batch");
    let mut command = batch(&[
        "--parallel",
        "4",
        "--progress",
        "lines",
        "--writable",
        marks.path().to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        tasks.path().to_str().unwrap(),
    ]);
    command.env("OPENAI_API_KEY", "sk-test");
    let run = common::run(command, Duration::from_secs(300)).await;
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
    assert_eq!(report["tasks"].as_array().unwrap().len(), 20);
    let totals = &report["totals"];
    assert_eq!(totals["passed"], 15);
    assert_eq!(totals["retries"], 1);
    assert_eq!(
        totals["failures"],
        json!({"check": 3, "limit": 1, "model": 1})
    );
    let retried = row(&report, "sandbox-dies");
    assert_eq!(retried["passed"], true);
    assert_eq!(retried["attempts"], 2);
    assert_eq!(row(&report, "too-long")["outcome"], "turn_limit");
    assert_eq!(row(&report, "model-fails")["failure"], "model");
    assert_eq!(row(&report, "wrong-1")["outcome"], "check_failed");

    // The batch log: at most 4 at once, the retry with the first attempt's log kept.
    let batch_events = events(&out);
    assert_eq!(batch_events[0]["type"], "batch_started");
    let most = most_at_once(&batch_events);
    assert!((2..=4).contains(&most), "{most} tasks ran at once");
    let retry = of_type(&batch_events, "task_retried");
    assert_eq!(retry.len(), 1);
    let previous = out.join(retry[0]["data"]["previous_log"].as_str().unwrap());
    let first_attempt = events(&previous);
    let finished = of_type(&first_attempt, "session_finished");
    assert_eq!(finished[0]["data"]["failure"], "infrastructure");
    assert!(
        of_type(&first_attempt, "error")
            .iter()
            .any(|e| e["data"]["class"] == "infrastructure"),
        "the first attempt says its sandbox died"
    );

    // Every row agrees with its task's own log, measured on its own.
    for task in report["tasks"].as_array().unwrap() {
        let name = task["task"].as_str().unwrap();
        let metrics = common::run(
            common::command(&[
                "replay",
                "metrics",
                "--json",
                out.join(name).to_str().unwrap(),
            ]),
            Duration::from_secs(30),
        )
        .await;
        let m: Value = serde_json::from_str::<Vec<Value>>(&metrics.stdout).unwrap()[0].clone();
        assert_eq!(task["outcome"], m["outcome"], "{name}");
        assert_eq!(task["steps"], m["turns"], "{name}");
        let tools: u64 = m["tool_calls"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(task["tool_calls"], tools, "{name}");
        assert_eq!(task["duration_ms"], m["total_ms"], "{name}");
    }
    // A log folder holding the batch measures the batch's tasks, not the batch log itself.
    let folder = common::run(
        common::command(&[
            "replay",
            "metrics",
            "--json",
            out.parent().unwrap().to_str().unwrap(),
        ]),
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
    let again = common::run(
        common::command(&["replay", "metrics", "--json", out.to_str().unwrap()]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(
        serde_json::from_str::<Value>(&again.stdout).unwrap(),
        report
    );

    // The HTML page: a row per task, each that ran linking its transcript, which exists.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert_eq!(html.matches("<tr class=").count(), 20);
    for i in 0..14 {
        let link = format!("transcripts/pass-{i:02}.html");
        assert!(html.contains(&link), "{link}");
        assert!(out.join(&link).is_file(), "{link}");
    }
}

/// Waits (bounded) until the batch log in `out` has `n` task_started events.
fn wait_started(out: &Path, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if out.join("events.jsonl").is_file() && of_type(&events(out), "task_started").len() >= n {
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

fn finish(child: std::process::Child) -> (i32, String) {
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
    let args = [
        "--parallel",
        "2",
        "--progress",
        "lines",
        "--out",
        out.to_str().unwrap(),
        tasks.path().to_str().unwrap(),
    ];
    let mut command = batch(&args);
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
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

    let mut args = args.to_vec();
    args.insert(0, "--resume");
    let run = common::run(batch(&args), Duration::from_secs(120)).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let batch_events = events(&out);
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
    let mut command = batch(&[
        "--parallel",
        "2",
        "--progress",
        "lines",
        "--out",
        out.to_str().unwrap(),
        tasks.path().to_str().unwrap(),
    ]);
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
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
        let log = events(&out.join(name));
        let finished = of_type(&log, "session_finished");
        assert_eq!(finished.len(), 1, "{name}'s log is finished");
        assert_eq!(finished[0]["data"]["outcome"], "interrupted");
        assert!(
            servers_with(name).is_empty(),
            "{name}'s sandbox is still running"
        );
    }
    let report = report(&out);
    assert_eq!(report["totals"]["failures"], json!({"interrupted": 2}));
}

/// A sandbox-server on 127.0.0.1:0 with `token`; returns the child and its URL.
fn start_server(workspace: &Path, token_file: &Path) -> (std::process::Child, String) {
    let mut server = Command::new(common::sandbox_server())
        .args(["serve", "--listen", "127.0.0.1:0", "--workspace"])
        .arg(workspace)
        .arg("--token-file")
        .arg(token_file)
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let address: Value = serde_json::from_str(&line).unwrap();
    let url = format!("http://{}", address["listening"].as_str().unwrap());
    (server, url)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_leases_running_sandboxes_and_resets_them_between_tasks() {
    let token_dir = tempfile::tempdir().unwrap();
    let token_file = token_dir.path().join("token");
    std::fs::write(&token_file, "pool-token-0123456789").unwrap();
    let (w1, w2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (mut s1, u1) = start_server(w1.path(), &token_file);
    let (mut s2, u2) = start_server(w2.path(), &token_file);
    let tasks = tempfile::tempdir().unwrap();
    for i in 0..4 {
        // Each finds an empty workspace and no process a previous task left, then leaves both.
        write_task(
            tasks.path(),
            &format!("pooled-{i}"),
            &(bash(
                "n=$(ls -A | wc -l); p=$(pgrep -c -f \"^left-by-$PWD\" || true); \
                 touch leftover; (exec -a \"left-by-$PWD\" sleep 1234 &); echo files=$n procs=$p",
            ) + DONE),
            "",
        );
    }
    let out = tempfile::tempdir().unwrap().path().join("batch");
    let pool = format!("pool:{u1},{u2}");
    let run = common::run(
        batch(&[
            "--sandbox",
            &pool,
            "--sandbox-token-file",
            token_file.to_str().unwrap(),
            "--progress",
            "lines",
            "--out",
            out.to_str().unwrap(),
            tasks.path().to_str().unwrap(),
        ]),
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("2: one per pool member"),
        "{}",
        run.stderr
    );
    let batch_events = events(&out);
    let mut per_member: BTreeMap<String, usize> = BTreeMap::new();
    for started in of_type(&batch_events, "task_started") {
        *per_member
            .entry(started["data"]["sandbox"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert_eq!(
        per_member.len(),
        2,
        "both members were used: {per_member:?}"
    );
    for i in 0..4 {
        let log = events(&out.join(format!("pooled-{i}")));
        let output = of_type(&log, "tool_result")[0]["data"]["output"]["text"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            output.contains("files=0 procs=0"),
            "pooled-{i} found a dirty sandbox: {output}"
        );
    }
    // The probe would have seen a leftover: the last task on each member left its process.
    for workspace in [w1.path(), w2.path()] {
        let marker = format!("left-by-{}", workspace.display());
        let left = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                std::fs::read(e.path().join("cmdline"))
                    .is_ok_and(|c| c.starts_with(marker.as_bytes()))
            })
            .count();
        assert_eq!(left, 1, "{marker}");
    }
    // The pool's servers are not the batch's to stop.
    assert!(common::alive(s1.id()) && common::alive(s2.id()));
    let _ = s1.kill();
    let _ = s2.kill();
    let _ = (s1.wait(), s2.wait());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_429_holds_every_task_on_that_endpoint() {
    let double = ModelDouble::start().await;
    double.push(Answer::Status {
        status: 429,
        retry_after: Some("2".into()),
        body: json!({"error": {"message": "Rate limit reached", "type": "rate_limit_error"}}),
    });
    for _ in 0..3 {
        double.push_json(ev_response(&[ev_message("done")], 10, 0, 5));
    }
    let tasks = tempfile::tempdir().unwrap();
    for i in 0..3 {
        std::fs::write(
            tasks.path().join(format!("ask-{i}.yaml")),
            format!(
                "prompt: hi\nmodel: {{name: openai/gpt-5-mini, base_url: '{}/v1'}}\n",
                double.base
            ),
        )
        .unwrap();
    }
    let out = tempfile::tempdir().unwrap().path().join("batch");
    let mut command = batch(&[
        "--parallel",
        "3",
        "--rate-limit",
        "openai=1",
        "--progress",
        "lines",
        "--out",
        out.to_str().unwrap(),
        tasks.path().to_str().unwrap(),
    ]);
    command.env("OPENAI_API_KEY", "sk-test");
    let run = common::run(command, Duration::from_secs(120)).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let requests = double.requests();
    assert_eq!(requests.len(), 4);
    double.assert_clean();
    // The first request got the 429; every later one, from any task, waited out its 2 s.
    for later in &requests[1..] {
        let after = later.at - requests[0].at;
        assert!(
            after >= Duration::from_millis(1900),
            "a request went {after:?} after the 429"
        );
    }
    let report = report(&out);
    assert_eq!(report["rate_limits"][0]["throttled"], 1);
    assert_eq!(report["rate_limits"][0]["requests"], 4);
    assert!(
        run.stdout.contains("1 rate-limited (429)"),
        "{}",
        run.stdout
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_batches_are_refused_before_anything_runs() {
    let tasks = tempfile::tempdir().unwrap();
    write_task(tasks.path(), "fine", DONE, "");
    std::fs::write(
        tasks.path().join("broken.yaml"),
        "prompt: hi\nlimits: {max_turns: many}\n",
    )
    .unwrap();
    let out: PathBuf = tempfile::tempdir().unwrap().path().join("batch");
    let run = common::run(
        batch(&[
            "--out",
            out.to_str().unwrap(),
            tasks.path().to_str().unwrap(),
        ]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("broken.yaml") && run.stderr.contains("max_turns"),
        "{}",
        run.stderr
    );
    assert!(!out.exists(), "nothing was written");

    let other = tempfile::tempdir().unwrap();
    write_task(other.path(), "fine", DONE, "");
    let run = common::run(
        batch(&[
            tasks.path().join("fine.yaml").to_str().unwrap(),
            other.path().to_str().unwrap(),
        ]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("two tasks are named `fine`"),
        "{}",
        run.stderr
    );

    // A session's log is never taken for a batch's, even with --resume.
    let session = tempfile::tempdir().unwrap();
    let header = "{\"seq\":0,\"ts\":\"2026-11-30T00:00:00.000Z\",\"type\":\"session_started\",\"data\":{}}\n";
    std::fs::write(session.path().join("events.jsonl"), header).unwrap();
    let run = common::run(
        batch(&[
            "--resume",
            "--out",
            session.path().to_str().unwrap(),
            tasks.path().join("fine.yaml").to_str().unwrap(),
        ]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("not a batch's"), "{}", run.stderr);
    assert_eq!(
        std::fs::read_to_string(session.path().join("events.jsonl")).unwrap(),
        header
    );

    // An existing folder that is not a batch is never written into.
    let run = common::run(
        batch(&[
            "--out",
            other.path().to_str().unwrap(),
            tasks.path().join("fine.yaml").to_str().unwrap(),
        ]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("is not a batch folder"),
        "{}",
        run.stderr
    );
    assert!(!other.path().join("events.jsonl").exists());

    let run = common::run(
        batch(&[
            "--rate-limit",
            "openai",
            tasks.path().join("fine.yaml").to_str().unwrap(),
        ]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("--rate-limit `openai`"),
        "{}",
        run.stderr
    );
}
