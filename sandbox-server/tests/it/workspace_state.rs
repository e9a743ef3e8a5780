use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::common::{self, Answer, Options};

async fn blob(server: &common::Server, sha256: &str) -> Vec<u8> {
    let response = server
        .send(reqwest::Method::GET, &format!("/v1/blobs/{sha256}"))
        .await;
    assert_eq!(response.status(), 200, "blob {sha256}");
    response.bytes().await.unwrap().to_vec()
}

#[tokio::test]
async fn changes_since_a_snapshot_name_every_file_with_both_versions() {
    let server = common::start().await;
    let first = seed_and_snapshot(&server).await;
    edit_remove_add_and_chmod(&server).await;
    let changes = changes_name_each_path_once(&server, &first).await;
    both_versions_are_blobs(&server, &changes).await;
    let second = changes["snapshot_id"].as_str().unwrap();
    nothing_changed_since_the_new_snapshot(&server, second).await;
    unknown_and_missing_ids_are_refused(&server).await;
}

/// Issue 57 §7: the changes since a snapshot as one unified diff, git style, bounded; and
/// between two kept snapshots without a scan.
#[tokio::test]
async fn a_diff_since_a_snapshot_is_unified_git_style_and_bounded() {
    let server = common::start().await;
    let first = seed_and_snapshot(&server).await;
    edit_remove_add_and_chmod(&server).await;
    std::fs::write(server.path("data.bin"), b"\x00\x01binary").unwrap();
    let (status, headers, body) = diff(&server, &format!("since={first}")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["content-type"], "text/x-diff; charset=utf-8");
    assert_eq!(headers["sandbox-diff-truncated"], "false");
    assert_eq!(
        body,
        "diff --git a/data.bin b/data.bin\n\
         new file mode 100644\n\
         Binary files /dev/null and b/data.bin differ\n\
         diff --git a/edit.txt b/edit.txt\n\
         --- a/edit.txt\n\
         +++ b/edit.txt\n\
         @@ -1 +1 @@\n\
         -before\n\
         \\ No newline at end of file\n\
         +after!\n\
         \\ No newline at end of file\n\
         diff --git a/keep.txt b/keep.txt\n\
         old mode 100644\n\
         new mode 100755\n\
         diff --git a/remove.txt b/remove.txt\n\
         deleted file mode 100644\n\
         --- a/remove.txt\n\
         +++ /dev/null\n\
         @@ -1 +0,0 @@\n\
         -bye\n\
         \\ No newline at end of file\n\
         diff --git a/sub-new.txt b/sub-new.txt\n\
         new file mode 100644\n\
         --- /dev/null\n\
         +++ b/sub-new.txt\n\
         @@ -0,0 +1 @@\n\
         +new\n"
    );
    let now = headers["sandbox-snapshot-id"].to_str().unwrap().to_owned();
    // Cut at 100 bytes, at a line's end, and said so.
    let (_, headers, cut) = diff(&server, &format!("since={first}&to={now}&max_bytes=100")).await;
    assert_eq!(headers["sandbox-diff-truncated"], "true");
    assert!(
        cut.len() <= 100 + 120
            && cut.ends_with(
                "# diff truncated at max_bytes=100: 4 of 5 changed files not shown whole\n"
            ),
        "{cut}"
    );
    assert!(body.starts_with(cut.lines().next().unwrap()));
    // Between two kept snapshots: no scan, and nothing since the last.
    let (status, headers, body) = diff(&server, &format!("since={now}&to={now}")).await;
    assert_eq!((status, body.as_str()), (200, ""));
    assert_eq!(headers["sandbox-snapshot-id"], now.as_str());
    for (query, expected) in [
        ("since=snap_nope".to_owned(), 404),
        (String::new(), 422),
        (format!("since={now}&max_bytes=0"), 422),
    ] {
        let (status, _, body) = diff(&server, &query).await;
        assert_eq!(status, expected, "{query}: {body}");
    }
}

/// `GET /v1/workspace/diff?QUERY`: the status, the headers and the text.
async fn diff(server: &common::Server, query: &str) -> (u16, reqwest::header::HeaderMap, String) {
    let response = server
        .send(reqwest::Method::GET, &format!("/v1/workspace/diff?{query}"))
        .await;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

/// Three files and an ignored `.git/objects` entry, then a snapshot; returns its id.
async fn seed_and_snapshot(server: &common::Server) -> String {
    std::fs::write(server.path("keep.txt"), "keep").unwrap();
    std::fs::write(server.path("edit.txt"), "before").unwrap();
    std::fs::write(server.path("remove.txt"), "bye").unwrap();
    std::fs::create_dir_all(server.path(".git/objects/ab")).unwrap();
    std::fs::write(server.path(".git/objects/ab/cd"), "packed").unwrap();
    let snapshot = server.post_ok("/v1/workspace/snapshot").await;
    assert_eq!(
        snapshot["n_files"], 3,
        ".git/objects is ignored by default: {snapshot}"
    );
    snapshot["snapshot_id"].as_str().unwrap().to_owned()
}

async fn edit_remove_add_and_chmod(server: &common::Server) {
    server
        .ok(
            "search_replace",
            json!({"path": "edit.txt", "search": "before", "replace": "after!"}),
        )
        .await;
    server
        .ok(
            "bash",
            json!({"cmd": "rm remove.txt && echo new > sub-new.txt && chmod +x keep.txt"}),
        )
        .await;
}

async fn changes_name_each_path_once(server: &common::Server, since: &str) -> Value {
    let (status, changes) = server
        .get_json(&format!("/v1/workspace/changes?since={since}"))
        .await;
    assert_eq!(status, 200);
    let summary = common::string_pairs(&changes["changes"], "path", "change");
    let expected = [
        ("edit.txt", "modified"),
        ("keep.txt", "mode_changed"),
        ("remove.txt", "deleted"),
        ("sub-new.txt", "added"),
    ];
    assert_eq!(summary, expected);
    changes
}

async fn both_versions_are_blobs(server: &common::Server, changes: &Value) {
    let edit = &changes["changes"][0];
    assert_eq!(
        (
            edit["before"]["size"].as_u64(),
            edit["after"]["size"].as_u64()
        ),
        (Some(6), Some(6))
    );
    let version =
        |change: &Value, which: &str| change[which]["sha256"].as_str().unwrap().to_owned();
    assert_eq!(blob(server, &version(edit, "before")).await, b"before");
    assert_eq!(blob(server, &version(edit, "after")).await, b"after!");
    let removed = &changes["changes"][2];
    assert_eq!(blob(server, &version(removed, "before")).await, b"bye");
}

async fn nothing_changed_since_the_new_snapshot(server: &common::Server, second: &str) {
    let (_, none) = server
        .get_json(&format!("/v1/workspace/changes?since={second}"))
        .await;
    assert_eq!(
        none["changes"],
        json!([]),
        "nothing changed since the new snapshot"
    );
    let (status, manifest) = server
        .get_json(&format!("/v1/workspace/snapshots/{second}"))
        .await;
    assert_eq!(status, 200);
    let paths: Vec<&str> = manifest["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, [".git", "edit.txt", "keep.txt", "sub-new.txt"]);
}

async fn unknown_and_missing_ids_are_refused(server: &common::Server) {
    let (status, body) = server
        .get_json("/v1/workspace/changes?since=snap_999")
        .await;
    assert_eq!(
        (status, body["error"]["type"].as_str().unwrap()),
        (404, "not_found")
    );
    let (status, _) = server.get_json("/v1/workspace/changes").await;
    assert_eq!(status, 422);
    let (status, _) = server
        .get_json(&format!("/v1/blobs/{}", "0".repeat(64)))
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn the_archive_round_trips_and_a_bad_one_changes_nothing() {
    let server = common::start().await;
    std::fs::create_dir_all(server.path("src/deep")).unwrap();
    std::fs::write(server.path("src/deep/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(server.path("run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        server.path("run.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::os::unix::fs::symlink("src/deep/main.rs", server.path("main-link")).unwrap();
    let archive = server
        .send(reqwest::Method::GET, "/v1/workspace/archive")
        .await;
    assert_eq!(archive.status(), 200);
    assert_eq!(archive.headers()["content-type"], "application/x-tar");
    let archive = archive.bytes().await.unwrap();

    let other = common::start().await;
    std::fs::write(other.path("stale.txt"), "stale").unwrap();
    let (status, body) = other
        .request(reqwest::Method::PUT, "/v1/workspace/archive")
        .body(archive.clone())
        .answer()
        .await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"n_files": 2, "n_bytes": 23}));
    assert!(!other.path("stale.txt").exists());
    assert_eq!(
        std::fs::read_to_string(other.path("src/deep/main.rs")).unwrap(),
        "fn main() {}\n"
    );
    assert_eq!(
        std::fs::read_link(other.path("main-link"))
            .unwrap()
            .to_str(),
        Some("src/deep/main.rs")
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(other.path("run.sh"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o755);

    let response = other
        .request(reqwest::Method::PUT, "/v1/workspace/archive")
        .body("not a tar")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 422);
    assert!(
        other.path("src/deep/main.rs").exists(),
        "a bad archive changes nothing"
    );
}

#[tokio::test]
async fn the_fingerprint_shows_processes_listeners_and_watched_paths() {
    let watched = tempfile::tempdir().unwrap();
    let profile = watched.path().join("profile");
    std::fs::write(&profile, "export A=1\n").unwrap();
    let server = common::start_with_args([
        "--watch".to_owned(),
        format!(
            "{},{}",
            profile.display(),
            watched.path().join("absent").display()
        ),
        // The listener below needs sockets: `--network none` would refuse them.
        "--network".to_owned(),
        "host".to_owned(),
    ])
    .await;
    let (status, before) = server.get_json("/v1/state/fingerprint").await;
    assert_eq!(status, 200);
    assert_eq!(before["processes"], json!([]));
    assert_eq!(before["watched"][1]["kind"], "missing");

    let script = "import socket,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); \
                  open('port','w').write(str(s.getsockname()[1])); time.sleep(60)";
    server
        .ok(
            "bash",
            json!({"cmd": format!("python3 -c \"{script}\" > /dev/null 2>&1 &")}),
        )
        .await;
    let port_file = server.path("port");
    let start = std::time::Instant::now();
    while std::fs::read_to_string(&port_file)
        .map(|p| p.is_empty())
        .unwrap_or(true)
        && start.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let port: u64 = std::fs::read_to_string(&port_file)
        .unwrap()
        .parse()
        .unwrap();
    std::fs::write(&profile, "export A=2 # changed by a command\n").unwrap();

    let (_, after) = server.get_json("/v1/state/fingerprint").await;
    let processes = after["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 1, "{after}");
    let command = processes[0]["command"].as_str().unwrap();
    assert!(command.contains("python3 -c import socket"), "{command}");
    let listener = after["listening"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["port"] == port)
        .expect("the listener is seen");
    assert_eq!(listener["pid"], processes[0]["pid"]);
    assert_eq!(listener["address"], "127.0.0.1");
    assert_ne!(
        before["watched"][0]["sha256"],
        after["watched"][0]["sha256"]
    );
}

/// `--known-files`: a file whose stat is still the one given keeps the given hash, unread and
/// not kept; a file whose stat differs, and any file after it changes, is read as usual.
#[tokio::test]
async fn known_files_are_taken_unread_while_their_stat_is_unchanged() {
    use std::os::unix::fs::MetadataExt;
    let workspace = tempfile::tempdir().unwrap();
    let (known, stale) = (
        workspace.path().join("known.txt"),
        workspace.path().join("stale.txt"),
    );
    std::fs::write(&known, "known").unwrap();
    std::fs::write(&stale, "stale").unwrap();
    // A hash no file has: the server can only have it from the list.
    let claimed = "ab".repeat(32);
    let line = |name: &str, path: &std::path::Path, mtime_ns: i64| {
        let meta = std::fs::metadata(path).unwrap();
        json!({"path": name, "sha256": claimed, "size": meta.size(),
            "mtime": [meta.mtime(), mtime_ns], "ctime": [meta.ctime(), meta.ctime_nsec()],
            "ino": meta.ino()})
    };
    let stale_ns = std::fs::metadata(&stale).unwrap().mtime_nsec() ^ 1;
    let list = tempfile::tempdir().unwrap();
    let file = list.path().join("known.jsonl");
    let known_ns = std::fs::metadata(&known).unwrap().mtime_nsec();
    let lines = [
        line("known.txt", &known, known_ns),
        line("stale.txt", &stale, stale_ns),
    ];
    std::fs::write(&file, format!("{}\n{}\n", lines[0], lines[1])).unwrap();
    let server = common::start_in(
        workspace,
        Options {
            token: true,
            extra_args: vec!["--known-files".into(), file.display().to_string()],
            ..Default::default()
        },
    )
    .await;
    let first = server.post_ok("/v1/workspace/snapshot").await;
    assert_eq!(first["n_hashed"], 1, "only the stale one is read: {first}");
    let id = first["snapshot_id"].as_str().unwrap();
    let (_, manifest) = server
        .get_json(&format!("/v1/workspace/snapshots/{id}"))
        .await;
    let sha = |name: &str| {
        common::item(&manifest["entries"], "path", name)["sha256"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(sha("known.txt"), claimed);
    assert_ne!(sha("stale.txt"), claimed);
    assert_eq!(blob(&server, &sha("stale.txt")).await, b"stale");
    let (status, _) = server.get_json(&format!("/v1/blobs/{claimed}")).await;
    assert_eq!(
        status, 404,
        "a known file's content is the client's, not kept"
    );

    std::fs::write(server.path("known.txt"), "changed").unwrap();
    let second = server.post_ok("/v1/workspace/snapshot").await;
    assert_eq!(second["n_hashed"], 1, "{second}");
    let (_, manifest) = server
        .get_json(&format!(
            "/v1/workspace/snapshots/{}",
            second["snapshot_id"].as_str().unwrap()
        ))
        .await;
    let entry = common::item(&manifest["entries"], "path", "known.txt").clone();
    assert_eq!(
        blob(&server, entry["sha256"].as_str().unwrap()).await,
        b"changed"
    );
}

/// `sandbox-server known-files`: the list a fork's container image is given is made where its
/// files are, from their verified hashes; only a regular file of the recorded size is named,
/// with the stat it has there, and a server given the list reads none of those files.
#[tokio::test]
async fn known_files_lists_the_files_as_this_machine_sees_them() {
    use std::os::unix::fs::MetadataExt;
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("same.txt"), "same").unwrap();
    std::fs::write(workspace.path().join("grown.txt"), "grown since").unwrap();
    std::os::unix::fs::symlink("same.txt", workspace.path().join("link")).unwrap();
    let claimed = "cd".repeat(32);
    let entry = |path: &str, size: u64| {
        json!({"path": path, "sha256": claimed, "size": size,
            "mtime": [0, 0], "ctime": [0, 0], "ino": 0})
    };
    let list = tempfile::tempdir().unwrap();
    let (hashes, out) = (
        list.path().join("hashes.jsonl"),
        list.path().join("known.jsonl"),
    );
    let lines = [
        entry("same.txt", 4),
        entry("grown.txt", 5),
        entry("link", 8),
        entry("gone.txt", 3),
    ];
    let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
    std::fs::write(&hashes, text).unwrap();
    let run = |hashes: &std::path::Path| {
        std::process::Command::new(common::binary())
            .arg("known-files")
            .arg("--workspace")
            .arg(workspace.path())
            .arg("--hashes")
            .arg(hashes)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap()
    };
    let made = run(&hashes);
    assert!(made.status.success(), "{made:?}");
    assert_eq!(
        String::from_utf8_lossy(&made.stdout).trim(),
        "1 files known"
    );
    let listed: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let meta = std::fs::metadata(workspace.path().join("same.txt")).unwrap();
    assert_eq!(
        listed,
        vec![json!({"path": "same.txt", "sha256": claimed, "size": 4,
            "mtime": [meta.mtime(), meta.mtime_nsec()],
            "ctime": [meta.ctime(), meta.ctime_nsec()], "ino": meta.ino()})]
    );
    // A line that is not a file's is refused by its number; no list is written.
    let bad = list.path().join("bad.jsonl");
    std::fs::write(&bad, format!("{}\n{{\"path\": \"../x\"}}\n", lines[0])).unwrap();
    std::fs::remove_file(&out).unwrap();
    let refused = run(&bad);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("line 2"),
        "{refused:?}"
    );
    assert!(!out.exists());

    run(&hashes);
    let server = common::start_in(
        workspace,
        Options {
            token: true,
            extra_args: vec!["--known-files".into(), out.display().to_string()],
            ..Default::default()
        },
    )
    .await;
    let first = server.post_ok("/v1/workspace/snapshot").await;
    assert_eq!(first["n_hashed"], 1, "only grown.txt is read: {first}");
}
