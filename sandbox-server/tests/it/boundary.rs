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

/// A benchmark task's container is its own boundary: `--files-anywhere` lets file tools take
/// absolute paths anywhere (relative ones still start in the workspace), the tool listing and
/// `/v1/info` say so, `--network container` names the network's rule, and
/// `--forget-token-file` leaves no token on disk.
#[tokio::test]
async fn in_a_task_container_the_file_tools_reach_the_whole_file_system() {
    let outside = tempfile::tempdir().unwrap();
    let token_dir = tempfile::tempdir().unwrap();
    let token = token_dir.path().join("token");
    std::fs::write(&token, format!("{}\n", common::TOKEN)).unwrap();
    let options = common::Options {
        env: Vec::new(),
        token: false,
        user: None,
        extra_args: [
            "--files-anywhere",
            "--network",
            "container",
            "--network-detail",
            "the task's own network",
            "--forget-token-file",
            "--token-file",
            token.to_str().unwrap(),
        ]
        .map(str::to_owned)
        .to_vec(),
    };
    let mut server = common::start_with(options).await;
    server.token = Some(common::TOKEN.to_owned());
    assert!(!token.exists(), "the token file is deleted once read");
    let elsewhere = outside.path().join("notes/out.txt");
    let path = elsewhere.to_str().unwrap();
    server
        .ok("write_file", json!({"path": path, "content": "anywhere\n"}))
        .await;
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "anywhere\n");
    let read = server.ok("read_file", json!({"path": path})).await;
    assert!(
        read["output"].as_str().unwrap().contains("anywhere"),
        "{read}"
    );
    server
        .ok("write_file", json!({"path": "here.txt", "content": "x"}))
        .await;
    assert!(
        server.path("here.txt").is_file(),
        "relative paths start in the workspace"
    );
    let (status, info) = server.get_json("/v1/info").await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["file_boundary"], "/");
    assert!(
        info.to_string().contains("the task's own network"),
        "{info}"
    );
    let (_, tools) = server.get_json("/v1/tools").await;
    let read_file = common::item(&tools, "name", "read_file");
    assert!(
        read_file["description"]
            .as_str()
            .unwrap()
            .contains("anywhere in this container"),
        "{read_file}"
    );
    let path_doc = read_file["parameters"]["properties"]["path"]["description"]
        .as_str()
        .unwrap();
    assert!(
        path_doc.starts_with("An absolute path, or one relative to the working folder /"),
        "{path_doc}"
    );

    // Without the flag the same absolute path is refused.
    let plain = common::start().await;
    let (status, body) = plain.call("read_file", json!({"path": path})).await;
    assert_eq!(status, 403, "{body}");
}

/// `sandbox-server install DIR` copies the executable, runnable, for another image to run.
#[test]
fn install_copies_the_server_into_a_folder() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("bin");
    testkit::stdout_of(
        std::process::Command::new(common::binary())
            .arg("install")
            .arg(&target),
    );
    let copied = target.join("sandbox-server");
    let version = std::process::Command::new(&copied)
        .arg("--version")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("sandbox-server"));
}
