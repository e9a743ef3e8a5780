//! A shared log is untrusted input: a crafted one cannot make `replay restore` write outside
//! its target or set a setuid bit, nor `replay rerun` run what the current policy denies, nor
//! `replay export`'s ATIF embed its subagents without end; a log is its owner's alone on disk.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::common::{self, events, harness};
use crate::replays::{LIMIT, recorded_session};

/// Replaces the log's initial manifest with `entries` (and its event's reference to it).
fn forge_manifest(log: &Path, entries: &[Value]) {
    let bytes = serde_json::to_vec(entries).unwrap();
    let sha = hex::encode(Sha256::digest(&bytes));
    std::fs::write(log.join("blobs").join(&sha), &bytes).unwrap();
    let text = std::fs::read_to_string(log.join("events.jsonl")).unwrap();
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let mut event: Value = serde_json::from_str(line).unwrap();
            if event["type"] == "workspace_snapshot" {
                event["data"]["manifest"] = json!({"sha256": sha, "size": bytes.len()});
            }
            event.to_string()
        })
        .collect();
    std::fs::write(log.join("events.jsonl"), lines.join("\n") + "\n").unwrap();
}

fn file(path: &str, sha: &str) -> Value {
    json!({"path": path, "kind": "file", "size": 3, "mode": 420, "sha256": sha, "target": null})
}

async fn restore(log: &Path, to: &Path) -> crate::common::Run {
    let initial = events(log)
        .into_iter()
        .find(|e| e["type"] == "workspace_snapshot")
        .unwrap()["seq"]
        .as_u64()
        .unwrap()
        .to_string();
    harness(&common::restore_args(log, &initial, to), LIMIT).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crafted_log_cannot_write_outside_the_restore_target() {
    let dir = tempfile::tempdir().unwrap();
    let (_, log) = recorded_session(dir.path()).await;
    let blob = any_blob(&log);
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    // Paths that leave the target, and a blob id that is a path.
    for (i, entries) in [
        vec![file("../escape.txt", &blob)],
        vec![file(&format!("{}/abs.txt", outside.display()), &blob)],
        vec![file("a/./b.txt", &blob)],
        vec![file("ok.txt", "../../../../etc/passwd")],
    ]
    .into_iter()
    .enumerate()
    {
        forge_manifest(&log, &entries);
        let to = dir.path().join(format!("target-{i}"));
        let restored = restore(&log, &to).await;
        assert_ne!(restored.code, 0, "{entries:?}: {}", restored.stderr);
        assert!(
            restored.stderr.contains("not made of plain names")
                || restored.stderr.contains("is not a sha256"),
            "{}",
            restored.stderr
        );
        assert!(!dir.path().join("escape.txt").exists() && !outside.join("abs.txt").exists());
    }
    // A link out of the target, then a file "through" it: the file lands inside, the link is
    // never made, and the restore says so.
    forge_manifest(
        &log,
        &[
            json!({"path": "link", "kind": "symlink", "size": 0, "mode": 511, "sha256": null, "target": outside.display().to_string()}),
            file("link/x.txt", &blob),
        ],
    );
    let to = dir.path().join("target-link");
    let restored = restore(&log, &to).await;
    assert!(
        !outside.join("x.txt").exists(),
        "nothing written through the link"
    );
    assert!(to.join("link/x.txt").is_file());
    assert!(
        restored.stderr.contains("link: the symlink to")
            && restored
                .stderr
                .contains("was left out: it leads out of the restored folder"),
        "{}",
        restored.stderr
    );
    // The log itself: a folder only its owner may enter, files only they may read.
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&log), 0o700);
    assert_eq!(mode(&log.join("blobs")), 0o700);
    assert_eq!(mode(&log.join("events.jsonl")), 0o600);
    assert_eq!(mode(&log.join("blobs").join(&blob)), 0o600);
}

/// A shared log's setuid file and setgid, sticky folder (restored by root, the file would be
/// a setuid-root program of the log's author): restored with their permission bits only, and
/// the restore notes what it left out (the workspace is otherwise whole: no failure).
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_never_sets_a_logs_setuid_setgid_or_sticky_bits() {
    let dir = tempfile::tempdir().unwrap();
    let (_, log) = recorded_session(dir.path()).await;
    let blob = any_blob(&log);
    forge_manifest(
        &log,
        &[
            json!({"path": "copy1", "kind": "file", "size": 3, "mode": 0o4755, "sha256": blob, "target": null}),
            json!({"path": "shared", "kind": "dir", "size": 0, "mode": 0o3777, "sha256": null, "target": null}),
        ],
    );
    let to = dir.path().join("target");
    let restored = restore(&log, &to).await;
    assert_eq!(
        restored.code, 0,
        "a note, not a mismatch: {}",
        restored.stderr
    );
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&to.join("copy1")), 0o755);
    assert_eq!(mode(&to.join("shared")), 0o777);
    common::assert_contains(
        &restored.stderr,
        &[
            "note: copy1: restored with mode 755, without the setuid, setgid or sticky bits of its recorded mode 4755",
            "note: shared: restored with mode 777, without the setuid, setgid or sticky bits of its recorded mode 3777",
        ],
    );
}

/// A log that says a denied call was allowed: the rerun judges it again and does not run it,
/// unless told to trust the log.
#[tokio::test(flavor = "multi_thread")]
async fn a_rerun_judges_a_shared_logs_calls_again() {
    let dir = tempfile::tempdir().unwrap();
    let (_, log) = recorded_session(dir.path()).await;
    let forged = "cat ~/.ssh/id_rsa 2>/dev/null; echo forged-ran";
    let text = std::fs::read_to_string(log.join("events.jsonl")).unwrap();
    let mut replaced = false;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let mut event: Value = serde_json::from_str(line).unwrap();
            if !replaced && event["type"] == "tool_call" && event["data"]["name"] == "bash" {
                event["data"]["arguments"] = Value::String(json!({"cmd": forged}).to_string());
                replaced = true;
            }
            event.to_string()
        })
        .collect();
    std::fs::write(log.join("events.jsonl"), lines.join("\n") + "\n").unwrap();
    let rerun = harness(&["replay", "rerun", log.to_str().unwrap()], LIMIT).await;
    assert_ne!(rerun.code, 0, "{}", rerun.stderr);
    assert!(
        rerun.stdout.contains("refused by the current policy")
            && rerun.stdout.contains("credential location"),
        "{}\n{}",
        rerun.stdout,
        rerun.stderr
    );
    assert!(
        !rerun.stdout.contains("forged-ran"),
        "the denied call did not run"
    );
    let trusted = harness(
        &["replay", "rerun", "--trust-log", log.to_str().unwrap()],
        LIMIT,
    )
    .await;
    assert!(
        trusted.stdout.contains("forged-ran"),
        "--trust-log runs it (and finds it diverges): {}\n{}",
        trusted.stdout,
        trusted.stderr
    );
}

/// A `subagent_started` line naming the child folder `agents/<name>`.
fn subagent_started(seq: usize, name: &str) -> String {
    json!({
        "seq": seq, "ts": "2026-01-01T00:00:00.000Z", "type": "subagent_started",
        "data": {
            "call_id": format!("call_{seq}"), "session_id": format!("child-{name}"),
            "log_dir": format!("agents/{name}"), "depth": 1, "workspace": "shared",
            "task": {"text": "t", "size": 1},
        },
    })
    .to_string()
}

/// A log folder at `dir`: the recorded session's header (and its blobs, linked) then `lines`.
fn crafted_log(dir: &Path, recorded: &Path, header: &str, lines: &[String]) {
    std::fs::create_dir_all(dir.join("blobs")).unwrap();
    for blob in std::fs::read_dir(recorded.join("blobs")).unwrap() {
        let blob = blob.unwrap();
        std::fs::hard_link(blob.path(), dir.join("blobs").join(blob.file_name())).unwrap();
    }
    let mut text = format!("{header}\n");
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    std::fs::write(dir.join("events.jsonl"), text).unwrap();
}

async fn export(log: &Path, out: &Path) -> common::Run {
    harness(&common::export_args(log, out), LIMIT).await
}

/// A recorded session's log (its folder) and first line, and beneath `dir/chained` a log of
/// 16 levels, each holding `lines` and its child in `agents/x`, the 17th empty.
async fn chained_log(dir: &Path, lines: &[String]) -> (PathBuf, PathBuf, String) {
    let (_, recorded) = recorded_session(dir).await;
    let events = std::fs::read_to_string(recorded.join("events.jsonl")).unwrap();
    let header = events.lines().next().unwrap().to_owned();
    let chained = dir.join("chained");
    let mut level = chained.clone();
    for depth in 0..=16 {
        let here = if depth < 16 { lines } else { &[] };
        crafted_log(&level, &recorded, &header, here);
        level = level.join("agents/x");
    }
    (chained, recorded, header)
}

/// A log that names its one subagent four times at each of 16 levels would cost 4^16
/// trajectories: the ATIF export embeds each child once, and refuses a log with more children
/// than it embeds (1000), saying so.
#[tokio::test(flavor = "multi_thread")]
async fn a_crafted_log_cannot_blow_up_the_atif_export() {
    let dir = tempfile::tempdir().unwrap();
    let lines: Vec<String> = (1..=4).map(|seq| subagent_started(seq, "x")).collect();
    let (chained, recorded, header) = chained_log(dir.path(), &lines).await;
    let out = dir.path().join("chained.json");
    let run = export(&chained, &out).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut trajectory: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    for depth in 0..16 {
        let children = trajectory["subagent_trajectories"].as_array().unwrap();
        assert_eq!(children.len(), 1, "depth {depth}: the child once");
        trajectory = children[0].clone();
    }
    let wide = dir.path().join("wide");
    let lines: Vec<String> = (1..=1001)
        .map(|i| subagent_started(i, &format!("c{i}")))
        .collect();
    crafted_log(&wide, &recorded, &header, &lines);
    for i in 1..=1001 {
        crafted_log(&wide.join(format!("agents/c{i}")), &recorded, &header, &[]);
    }
    let run = export(&wide, &dir.path().join("wide.json")).await;
    assert_ne!(run.code, 0, "{}", run.stderr);
    common::assert_contains(&run.stderr, &["more than 1000 subagent trajectories"]);
}

/// The rerun's side of the same log: four `agent` calls at each of 16 levels, each naming the
/// one child folder, would read 4^16 logs; the rerun reads each call's child once and refuses
/// past 1000 logs, saying so, at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_crafted_log_cannot_blow_up_a_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = Vec::new();
    for call in 1..=4 {
        lines.push(
            json!({
                "seq": call * 2 - 1, "ts": "2026-01-01T00:00:00.000Z", "type": "tool_call",
                "data": {"call_id": format!("call_{}", call * 2), "name": "agent", "arguments": "{}"},
            })
            .to_string(),
        );
        lines.push(subagent_started(call * 2, "x"));
    }
    let (chained, _, _) = chained_log(dir.path(), &lines).await;
    let started = std::time::Instant::now();
    let rerun = harness(&["replay", "rerun", chained.to_str().unwrap()], LIMIT).await;
    assert_ne!(rerun.code, 0, "{}", rerun.stderr);
    common::assert_contains(&rerun.stderr, &["more than 1000 subagents' logs to rerun"]);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

/// The name of one of the log's blobs.
fn any_blob(log: &Path) -> String {
    std::fs::read_dir(log.join("blobs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|name| name.len() == 64)
        .unwrap()
}
