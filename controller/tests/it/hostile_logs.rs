//! A shared log is untrusted input: a crafted one cannot make `replay restore` write outside
//! its target, nor `replay rerun` run what the current policy denies; a log is its owner's
//! alone on disk.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::common::{self, events};
use crate::replays::{harness, recorded_session};

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
    harness(&common::restore_args(log, &initial, to)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crafted_log_cannot_write_outside_the_restore_target() {
    let dir = tempfile::tempdir().unwrap();
    let (_, log) = recorded_session(dir.path()).await;
    let blob = std::fs::read_dir(log.join("blobs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|name| name.len() == 64)
        .unwrap();
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
        restored.stderr.contains("link: the symlink was not made"),
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
    let rerun = harness(&["replay", "rerun", log.to_str().unwrap()]).await;
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
    let trusted = harness(&["replay", "rerun", "--trust-log", log.to_str().unwrap()]).await;
    assert!(
        trusted.stdout.contains("forged-ran"),
        "--trust-log runs it (and finds it diverges): {}\n{}",
        trusted.stdout,
        trusted.stderr
    );
}
