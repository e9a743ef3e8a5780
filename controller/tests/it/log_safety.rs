//! What a session log withstands: a harness killed at any moment, secrets in commands and
//! outputs, and restore and rerun against a running sandbox.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{self, events, harness};
use crate::replays::{LIMIT, assert_blobs_resolve, recorded_session};

/// Kills a real run with SIGKILL at several moments: every complete line is a valid event,
/// `seq` has no gap, every blob resolves, at most the last line is torn, and readers carry on.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_killed_at_any_moment_leaves_a_valid_log() {
    let dir = tempfile::tempdir().unwrap();
    // Outputs over 4 KiB, so blobs are written all the time.
    let turns: Vec<Value> = (0..400)
        .map(|idx| json!({"text": format!("step {idx}"), "tool_calls": [{"name": "bash", "arguments": {"cmd": format!("head -c 6000 /dev/zero | tr '\\\\0' {}; echo > f{idx}.txt", idx % 10)}}]}))
        .collect();
    std::fs::write(
        dir.path().join("script.yaml"),
        serde_json::to_string(&json!({"turns": turns})).unwrap(),
    )
    .unwrap();
    for (attempt, delay_ms) in [400u64, 900, 1600].into_iter().enumerate() {
        let (session, sandbox_pids) = kill_a_flooding_run(dir.path(), attempt, delay_ms).await;
        let what = format!("attempt {attempt}, killed after {delay_ms} ms");
        every_complete_line_is_an_event_in_order(&session, &what);
        the_sandbox_dies_with_its_harness(&sandbox_pids).await;
        a_torn_last_line_is_reported_and_readers_carry_on(&session).await;
    }
}

/// Starts a run of the flooding script, SIGKILLs it after `delay_ms`; its session folder and
/// the pids of its sandbox.
async fn kill_a_flooding_run(dir: &Path, attempt: usize, delay_ms: u64) -> (PathBuf, Vec<u32>) {
    let logs = dir.join(format!("logs-{attempt}"));
    let workspace = dir.join(format!("ws-{attempt}"));
    std::fs::create_dir(&workspace).unwrap();
    let script = format!("script:{}", dir.join("script.yaml").display());
    let mut command = common::command(&[
        "run",
        "--policy",
        "allow-all",
        "--model",
        &script,
        "--max-turns",
        "400",
        workspace.to_str().unwrap(),
        "flood",
    ]);
    command
        .env("CONTROLLER_LOG_DIR", &logs)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = command.spawn().unwrap();
    // The moments are counted from the session's first events (on a loaded machine the start
    // alone can take longer than the shortest delay); at most 30 s of waiting for them.
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(30) && events_written(&logs) < 6 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
    let sandbox_pids = children_of(child.id());
    std::process::Command::new("kill")
        .arg("-KILL")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let _ = child.wait();
    let session = std::fs::read_dir(&logs)
        .unwrap()
        .next()
        .expect("a session folder")
        .unwrap()
        .path();
    (session, sandbox_pids)
}

/// The complete lines of the one session log under `logs` so far (0 before it exists).
fn events_written(logs: &Path) -> usize {
    let Some(Ok(session)) = std::fs::read_dir(logs).ok().and_then(|mut dir| dir.next()) else {
        return 0;
    };
    std::fs::read(session.path().join("events.jsonl"))
        .map(|bytes| bytes.iter().filter(|b| **b == b'\n').count())
        .unwrap_or(0)
}

fn children_of(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit(')').next().unwrap().split_whitespace().nth(1) == Some(&parent.to_string())
            })
        })
        .collect()
}

fn every_complete_line_is_an_event_in_order(session: &Path, what: &str) {
    let text = std::fs::read_to_string(session.join("events.jsonl")).unwrap();
    let complete: Vec<&str> = text
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .collect();
    assert!(complete.len() > 5, "{what}: only {} events", complete.len());
    for (idx, line) in complete.iter().enumerate() {
        let envelope: harness_log::Envelope =
            serde_json::from_str(line).unwrap_or_else(|err| panic!("{what}, line {idx}: {err}"));
        assert_eq!(envelope.seq, idx as u64);
    }
    assert!(
        !text.contains("session_finished"),
        "a killed run does not finish"
    );
    assert_blobs_resolve(session);
}

/// The kernel stops the sandbox when its harness dies (PR_SET_PDEATHSIG).
async fn the_sandbox_dies_with_its_harness(sandbox_pids: &[u32]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while sandbox_pids.iter().any(|pid| common::alive(*pid)) && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        sandbox_pids.iter().all(|pid| !common::alive(*pid)),
        "the sandbox outlived a killed harness"
    );
}

async fn a_torn_last_line_is_reported_and_readers_carry_on(session: &Path) {
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(session.join("events.jsonl"))
        .unwrap();
    std::io::Write::write_all(&mut file, b"{\"seq\":999,\"ts\":\"2026-").unwrap();
    let metrics = harness(
        &["replay", "metrics", session.to_str().unwrap(), "--json"],
        LIMIT,
    )
    .await;
    assert_eq!(metrics.code, 0, "{}", metrics.stderr);
    let figures: Value = serde_json::from_str(&metrics.stdout).unwrap();
    assert_eq!(figures[0]["torn_lines"], 1);
    assert_eq!(figures[0]["outcome"], "incomplete");
    let show = harness(&["replay", "show", session.to_str().unwrap()], LIMIT).await;
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(
        show.stdout.contains("torn last line"),
        "the transcript says so"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_never_reach_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "sk-test-0123456789abcdefSECRET";
    let script = json!({"turns": [
        {"tool_calls": [{"name": "bash", "arguments": {"cmd": format!("echo leaked {secret}; env | grep -c API_KEY || true")}}]},
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "k.txt", "content": format!("key={secret}\n")}}]},
        {"text": format!("I saw {secret}")},
    ]});
    std::fs::write(
        dir.path().join("script.yaml"),
        serde_json::to_string(&script).unwrap(),
    )
    .unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let model = format!("script:{}", dir.path().join("script.yaml").display());
    let mut command = common::command(&[
        "run",
        "--policy",
        "allow-all",
        "--model",
        &model,
        workspace.to_str().unwrap(),
        "go",
    ]);
    command.env("OPENAI_API_KEY", secret);
    let run = common::run(command, Duration::from_secs(60)).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let log = run.log_dir();
    let mut n_files = 0;
    for entry in std::fs::read_dir(log.join("blobs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .chain([log.join("events.jsonl")])
    {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(secret),
            "{} holds the secret",
            entry.display()
        );
        n_files += 1;
    }
    assert!(n_files > 3);
    let events = std::fs::read_to_string(log.join("events.jsonl")).unwrap();
    assert!(
        events.contains("leaked [REDACTED]"),
        "the output is kept, redacted"
    );
    // The sandbox never had the key: `env | grep -c API_KEY` found nothing.
    assert!(
        events.contains("stdout:\\n  leaked [REDACTED]\\n  0"),
        "{events}"
    );
}

/// Restore and rerun into a running sandbox (a remote one, reached by URL and token), whose
/// workspace they replace.
#[tokio::test(flavor = "multi_thread")]
async fn restore_and_rerun_work_against_a_running_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let (_, log) = recorded_session(dir.path()).await;

    let remote = tempfile::tempdir().unwrap();
    std::fs::write(remote.path().join("stale.txt"), "replaced by the restore").unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "remote-token-0123456789").unwrap();
    let server = common::start_sandbox(remote.path(), Some(&token_file));
    let url = server.url.clone();

    let initial = events(&log)
        .into_iter()
        .find(|e| e["type"] == "workspace_snapshot")
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    // Both commands reach the running sandbox with its token.
    let token = token_file.to_str().unwrap();
    let there = ["--sandbox", url.as_str(), "--sandbox-token-file", token];
    let step = initial.to_string();
    let restore = [
        &["replay", "restore", log.to_str().unwrap(), "--step", &step][..],
        &there,
    ]
    .concat();
    let restore = harness(&restore, LIMIT).await;
    assert_eq!(restore.code, 0, "{}", restore.stderr);
    assert!(!remote.path().join("stale.txt").exists());
    assert_eq!(
        std::fs::read_to_string(remote.path().join("src/app.py")).unwrap(),
        "def main():\n    print('v1')\n"
    );

    let rerun = [&["replay", "rerun", log.to_str().unwrap()][..], &there].concat();
    let rerun = harness(&rerun, LIMIT).await;
    assert_eq!(rerun.code, 0, "{}\n{}", rerun.stdout, rerun.stderr);
    assert!(rerun.stderr.contains("0 divergences"), "{}", rerun.stderr);
    assert!(
        std::fs::read_to_string(remote.path().join("src/app.py"))
            .unwrap()
            .contains("v2"),
        "the calls ran there"
    );
    drop(server);
}

/// A folder the harness writes or runs programs from may not lie where the agent's commands
/// can write (the served workspace, a `--writable` path): a command could swap the log's
/// `blobs/` for a link, and the harness would write through it. Refused before anything starts.
#[tokio::test(flavor = "multi_thread")]
async fn a_log_or_hooks_folder_the_agent_can_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    let extra = dir.path().join("extra");
    std::fs::create_dir_all(workspace.join("hooks")).unwrap();
    std::fs::create_dir_all(&extra).unwrap();
    let hooks = workspace.join("hooks/hooks.yaml");
    let hook = "hooks:\n  - event: pre_tool_use\n    command: 'true'\n";
    std::fs::write(&hooks, hook).unwrap();
    let ws = workspace.display().to_string();
    let inside = workspace.join("runs").display().to_string();
    let under_writable = extra.join("logs").display().to_string();
    let outside = dir.path().join("logs").display().to_string();
    let extra_arg = extra.display().to_string();
    let hooks_arg = hooks.display().to_string();
    let script = dir.path().join("script.yaml");
    std::fs::write(&script, "turns:\n  - text: hello\n").unwrap();
    let model = format!("script:{}", script.display());
    // A link in the workspace to a folder outside it: the log would be reached through a link
    // a command can point elsewhere.
    std::fs::create_dir_all(dir.path().join("big-disk")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("big-disk"), workspace.join("linked")).unwrap();
    let through_link = workspace.join("linked/runs").display().to_string();
    let cases: [(&[&str], &str); 4] = [
        (&["--log-dir", &through_link], "is reached through the link"),
        (&["--log-dir", &inside], "the log folder (--log-dir)"),
        (
            &["--log-dir", &under_writable, "--writable", &extra_arg],
            "the log folder (--log-dir)",
        ),
        (
            &["--log-dir", &outside, "--hooks", &hooks_arg],
            "the hooks file's folder",
        ),
    ];
    for (flags, what) in cases {
        let mut args = vec!["run", "--model", &model];
        args.extend_from_slice(flags);
        args.extend([ws.as_str(), "say hello"]);
        let run = common::harness(&args, Duration::from_secs(60)).await;
        assert_ne!(run.code, 0, "{flags:?} ran: {}", run.stderr);
        common::assert_contains(&run.stderr, &[what, "which the agent's commands can write"]);
    }
    assert!(!workspace.join("runs").exists(), "nothing was written");
    assert!(!extra.join("logs").exists());
    assert!(!dir.path().join("big-disk/runs").exists());
    assert!(
        !dir.path().join("logs").exists()
            || common::files_under(&dir.path().join("logs")).is_empty()
    );
}
