//! `harness batch` over a pool of running sandboxes, and under a model API's rate limit.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::batches::{DONE, bash, batch_into, events_so_far, of_type, report, write_task};
use crate::common;
use crate::double::{Answer, ModelDouble, ev_message, ev_response};

/// A sandbox-server on 127.0.0.1:0 with `token`; returns the child and its URL. Its log is
/// `server-<pid>.log` beside the token file (see [`server_log`]).
pub(crate) fn start_server(workspace: &Path, token_file: &Path) -> (std::process::Child, String) {
    static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let log = token_file.with_file_name(format!("server-{n}.log"));
    let mut command = testkit::serve(common::sandbox_server(), workspace);
    command
        .arg("--token-file")
        .arg(token_file)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(std::fs::File::create(&log).unwrap());
    let (server, line) = testkit::spawn_server(&mut command);
    std::fs::rename(&log, server_log(token_file, server.id())).unwrap();
    (server, testkit::url_of(&line))
}

/// The log of the server `pid` that [`start_server`] started with `token_file`.
pub(crate) fn server_log(token_file: &Path, pid: u32) -> std::path::PathBuf {
    token_file.with_file_name(format!("server-{pid}.log"))
}

/// Where a server is stuck and what it logged: for a test that failed.
fn server_report(token_file: &Path, pid: u32) -> String {
    let log = std::fs::read_to_string(server_log(token_file, pid)).unwrap_or_default();
    format!("{}{log}", common::stacks(pid))
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
        batch_into(
            tasks.path(),
            &out,
            &[
                "--sandbox",
                &pool,
                "--sandbox-token-file",
                token_file.to_str().unwrap(),
            ],
        ),
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(
        run.code,
        0,
        "{}\n{}\nthe pool's servers:\n{}{}",
        run.stdout,
        run.stderr,
        server_report(&token_file, s1.id()),
        server_report(&token_file, s2.id())
    );
    assert!(
        run.stderr.contains("2: one per pool member"),
        "{}",
        run.stderr
    );
    every_task_found_a_clean_member_and_both_were_used(&out);
    the_last_task_on_each_member_left_its_process(&[w1.path(), w2.path()]);
    // The pool's servers are not the batch's to stop.
    assert!(common::alive(s1.id()) && common::alive(s2.id()));
    let _ = s1.kill();
    let _ = s2.kill();
    let _ = (s1.wait(), s2.wait());
}

fn every_task_found_a_clean_member_and_both_were_used(out: &Path) {
    let batch_events = events_so_far(out);
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
        let log = events_so_far(&out.join(format!("pooled-{i}")));
        let output = of_type(&log, "tool_result")[0]["data"]["output"]["text"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            output.contains("files=0 procs=0"),
            "pooled-{i} found a dirty sandbox: {output}"
        );
    }
}

/// The probe would have seen a leftover: the last task on each member left its process.
fn the_last_task_on_each_member_left_its_process(workspaces: &[&Path]) {
    for workspace in workspaces {
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
    let flags = ["--parallel", "3", "--rate-limit", "openai=1"];
    let mut command = batch_into(tasks.path(), &out, &flags);
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
