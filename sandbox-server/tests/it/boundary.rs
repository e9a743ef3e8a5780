use std::os::unix::fs::symlink;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::common::{self, Server};

/// Every file tool must refuse `path` with 403 and `error_type`.
async fn refused_everywhere(server: &Server, path: &str, error_type: &str) {
    let calls: [(&str, Value); 3] = [
        ("read_file", json!({"path": path})),
        ("write_file", json!({"path": path, "content": "pwned"})),
        (
            "search_replace",
            json!({"path": path, "search": "a", "replace": "b"}),
        ),
    ];
    for (tool, args) in calls {
        let (status, body) = server.call(tool, args).await;
        assert_eq!(status, 403, "{tool} {path}: {body}");
        assert_eq!(body["error"]["type"], error_type, "{tool} {path}: {body}");
    }
}

#[tokio::test]
async fn every_escape_attempt_is_refused() {
    let server = common::start().await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "a secret").unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::create_dir(server.path("sub")).unwrap();
    std::fs::write(server.path("sub/inner.txt"), "inner").unwrap();

    symlink(&secret, server.path("link-to-secret")).unwrap();
    symlink(outside.path(), server.path("link-to-outside-dir")).unwrap();
    symlink(
        "../../../../../../../../etc/passwd",
        server.path("sub/relative-escape"),
    )
    .unwrap();
    symlink("link-b", server.path("link-a")).unwrap();
    symlink("link-a", server.path("link-b")).unwrap();

    for path in [
        secret.to_str().unwrap(),
        "/etc/passwd",
        "../secret.txt",
        "sub/../../secret.txt",
        "link-to-secret",
        "link-to-outside-dir/secret.txt",
        "link-to-outside-dir/new-file.txt",
        "sub/relative-escape",
        "link-a",
    ] {
        refused_everywhere(&server, path, "outside_workspace").await;
    }
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "a secret");
    assert!(!outside.path().join("new-file.txt").exists());
}

#[tokio::test]
async fn paths_that_stay_inside_are_allowed() {
    let server = common::start().await;
    std::fs::create_dir(server.path("sub")).unwrap();
    std::fs::write(server.path("sub/inner.txt"), "inner\n").unwrap();
    symlink("sub/inner.txt", server.path("inside-link")).unwrap();
    symlink("../sub", server.path("sub/self-dir")).unwrap();
    let absolute = server
        .workspace
        .path()
        .canonicalize()
        .unwrap()
        .join("sub/inner.txt");
    for path in [
        "sub/inner.txt",
        "./sub/../sub/inner.txt",
        "inside-link",
        "sub/self-dir/inner.txt",
        absolute.to_str().unwrap(),
    ] {
        let result = server.ok("read_file", json!({"path": path})).await;
        assert_eq!(result["output"], "   1: inner", "{path}");
    }
    // Writing through an inside symlink writes its target and keeps the link.
    server
        .ok(
            "write_file",
            json!({"path": "inside-link", "content": "changed\n"}),
        )
        .await;
    assert_eq!(
        std::fs::read_to_string(server.path("sub/inner.txt")).unwrap(),
        "changed\n"
    );
    assert!(
        std::fs::symlink_metadata(server.path("inside-link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[tokio::test]
async fn special_files_are_refused_without_blocking() {
    let server = common::start().await;
    let fifo = server.path("fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let socket = std::os::unix::net::UnixListener::bind(server.path("sock")).unwrap();
    std::fs::create_dir(server.path("dir")).unwrap();
    let start = Instant::now();
    for path in ["fifo", "sock", "dir"] {
        let (status, body) = server.call("read_file", json!({"path": path})).await;
        assert_eq!(
            (status, body["error"]["type"].as_str().unwrap()),
            (403, "not_a_regular_file"),
            "{path}"
        );
    }
    for path in ["fifo", "sock"] {
        refused_everywhere(&server, path, "not_a_regular_file").await;
    }
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "opening a FIFO must not block"
    );
    drop(socket);
}

#[tokio::test]
async fn a_symlink_swapped_in_during_resolution_never_leaks_outside_content() {
    let server = common::start().await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "OUTSIDE\n").unwrap();
    let real = server.workspace.path().canonicalize().unwrap().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("secret.txt"), "inside\n").unwrap();
    let swing = server.path("swing");

    let running = Arc::new(AtomicBool::new(true));
    let flipper = {
        let (running, outside, real, swing) = (
            running.clone(),
            outside.path().to_owned(),
            real.clone(),
            swing.clone(),
        );
        std::thread::spawn(move || {
            let staging = swing.with_extension("tmp");
            let mut n_flips = 0u32;
            // Bounded by the test's calls, and by a hard count.
            while running.load(Ordering::Relaxed) && n_flips < 200_000 {
                let target = if n_flips.is_multiple_of(2) {
                    &outside
                } else {
                    &real
                };
                let _ = std::fs::remove_file(&staging);
                symlink(target, &staging).unwrap();
                std::fs::rename(&staging, &swing).unwrap();
                n_flips += 1;
            }
        })
    };
    let mut n_inside = 0;
    for _ in 0..300 {
        let (status, body) = server
            .call("read_file", json!({"path": "swing/secret.txt"}))
            .await;
        match status {
            200 => {
                assert_eq!(body["output"], "   1: inside");
                n_inside += 1;
            }
            403 => assert_eq!(body["error"]["type"], "outside_workspace"),
            other => panic!("unexpected {other}: {body}"),
        }
        let (status, _) = server
            .call(
                "write_file",
                json!({"path": "swing/secret.txt", "content": "inside\n"}),
            )
            .await;
        assert!(status == 200 || status == 403, "{status}");
    }
    running.store(false, Ordering::Relaxed);
    flipper.join().unwrap();
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "OUTSIDE\n"
    );
    assert!(n_inside > 0, "the inside target was never read");
}
