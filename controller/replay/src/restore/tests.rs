use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::{Value, json};

use super::{State, manifest, state_at, write_state, write_state_within};
use harness_log::testing::{put_blob, write_events};
use harness_log::{BlobRef, Event, WorkspaceSnapshot};

/// A log in `dir` whose only event is an initial snapshot with the manifest `entries`.
fn crafted_log(dir: &Path, entries: &[Value]) {
    let manifest = put_blob(dir, &serde_json::to_vec(entries).unwrap());
    let event = Event::WorkspaceSnapshot(WorkspaceSnapshot {
        snapshot_id: "snap".to_owned(),
        manifest,
        n_files: 0,
        n_bytes: 0,
    });
    write_events(dir, [event]);
}

fn file(path: &str, blob: &BlobRef, mode: u32) -> Value {
    json!({"path": path, "kind": "file", "size": blob.size, "mode": mode, "sha256": blob.sha256, "target": null})
}

fn folder(path: &str, mode: u32) -> Value {
    json!({"path": path, "kind": "dir", "size": 0, "mode": mode, "sha256": null, "target": null})
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// A shared log's setuid file and setgid, sticky folder are restored with their permissions
/// only, and the restore says what it left out.
#[test]
fn setuid_setgid_and_sticky_bits_are_never_restored() {
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("log");
    let blob = put_blob(&log, b"#!/bin/sh\nid\n");
    crafted_log(
        &log,
        &[
            file("copy1", &blob, 0o4755),
            folder("shared", 0o3777),
            file("shared/plain", &blob, 0o644),
        ],
    );
    let (state, _) = state_at(&log, 0).unwrap();
    let to = root.path().join("out");
    let restored = write_state(&log, &state, &to).unwrap();
    assert_eq!((restored.n_files, restored.n_dirs), (2, 1));
    assert_eq!(mode(&to.join("copy1")), 0o755);
    assert_eq!(mode(&to.join("shared")), 0o777);
    assert_eq!(mode(&to.join("shared/plain")), 0o644);
    assert_eq!(restored.notes.len(), 2, "{:?}", restored.notes);
    for (problem, said) in restored.notes.iter().zip(["copy1: ", "shared: "]) {
        assert!(problem.starts_with(said), "{problem}");
        assert!(
            problem.contains("without the setuid, setgid or sticky bits"),
            "{problem}"
        );
    }
    assert!(restored.notes[0].contains("recorded mode 4755"));
    assert!(restored.notes[1].contains("recorded mode 3777"));
}

/// Many files naming one blob are each a copy on disk: past the restore's limit, counted at the
/// blob's real size (not the size the log claims), nothing is written.
#[test]
fn a_restore_past_its_limit_is_refused_before_anything_is_written() {
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("log");
    let mut blob = put_blob(&log, &[b'b'; 100]);
    blob.size = 1;
    let entries: Vec<Value> = (0..5)
        .map(|i| file(&format!("copy{i}"), &blob, 0o644))
        .collect();
    crafted_log(&log, &entries);
    let (state, _) = state_at(&log, 0).unwrap();
    let to = root.path().join("out");
    let err = write_state_within(&log, &state, &to, 499)
        .unwrap_err()
        .to_string();
    assert!(err.contains("come to 500 bytes"), "{err}");
    assert!(err.contains("(499 bytes)"), "{err}");
    assert!(!to.exists(), "nothing written");
    let restored = write_state_within(&log, &state, &to, 500).unwrap();
    assert_eq!(restored.n_files, 5);
}

/// A manifest is read as typed entries, no more of them than the limit.
#[test]
fn a_manifest_past_its_entry_limit_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let blob = put_blob(root.path(), b"x");
    let entries: Vec<Value> = (0..3)
        .map(|i| file(&format!("f{i}"), &blob, 0o644))
        .collect();
    let reference = put_blob(root.path(), &serde_json::to_vec(&entries).unwrap());
    let state: State = manifest::read(root.path(), &reference, 3).unwrap();
    assert_eq!(state.len(), 3);
    assert_eq!(state["f1"].mode, 0o644);
    let err = manifest::read(root.path(), &reference, 2)
        .unwrap_err()
        .to_string();
    assert!(err.contains("more than 2 entries"), "{err}");
    let not_utf8 = json!([{"path": "a\\xff", "path_b64": "Yf8=", "kind": "dir", "size": 0, "mode": 493, "sha256": null, "target": null}]);
    let reference = put_blob(root.path(), &serde_json::to_vec(&not_utf8).unwrap());
    let err = manifest::read(root.path(), &reference, 3)
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not UTF-8"), "{err}");
}

/// Issue 55: a crafted log's links that lead out of the target were made; they are left out
/// now, each named, and the links that stay inside are made.
#[test]
fn links_that_lead_out_of_the_target_are_never_made() {
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("log");
    let blob = put_blob(&log, b"x\n");
    let link = |path: &str, target: &str| json!({"path": path, "kind": "symlink", "size": 0, "mode": 0o777, "sha256": null, "target": target});
    crafted_log(
        &log,
        &[
            folder("d", 0o755),
            file("d/f", &blob, 0o644),
            link("d/inside", "f"),
            link("d/up", "../d/f"),
            link("keys", "/root/.ssh"),
            link("d/climb", "../../etc/cron.d"),
            link("d/deep", "a/../../../x"),
        ],
    );
    let (state, _) = state_at(&log, 0).unwrap();
    let to = root.path().join("out");
    let restored = write_state(&log, &state, &to).unwrap();
    assert_eq!(restored.n_symlinks, 2, "{:?}", restored.notes);
    for gone in ["keys", "d/climb", "d/deep"] {
        assert!(std::fs::symlink_metadata(to.join(gone)).is_err(), "{gone}");
        assert!(
            restored
                .notes
                .iter()
                .any(|n| n.starts_with(&format!("{gone}: ")) && n.contains("leads out")),
            "{gone}: {:?}",
            restored.notes
        );
    }
    assert_eq!(std::fs::read_to_string(to.join("d/up")).unwrap(), "x\n");
}
