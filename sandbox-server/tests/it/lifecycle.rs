use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common;

fn serve_fails(args: &[&str]) -> String {
    let workspace = tempfile::tempdir().unwrap();
    let output = Command::new(common::binary())
        .arg("serve")
        .arg("--workspace")
        .arg(workspace.path())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success(), "{args:?} should fail");
    assert!(output.stdout.is_empty(), "no address line on failure");
    String::from_utf8(output.stderr).unwrap()
}

#[test]
fn refuses_a_non_loopback_address_without_a_token() {
    let stderr = serve_fails(&["--listen", "0.0.0.0:0"]);
    assert!(
        stderr.contains("refusing to listen on a non-loopback address without a token"),
        "{stderr}"
    );
}

/// Issue 55: the server's own files are refused at start where commands write (a command
/// emptied the audit log and swapped the client CA, after which a rogue certificate passed).
#[test]
fn the_servers_own_files_are_refused_where_commands_write() {
    let workspace = tempfile::tempdir().unwrap();
    let writable = tempfile::tempdir().unwrap();
    let inside = workspace.path().join("sub");
    std::fs::create_dir(&inside).unwrap();
    std::fs::write(inside.join("token"), "a-token-of-sixteen-chars\n").unwrap();
    std::fs::write(writable.path().join("ca.pem"), "not read").unwrap();
    let cases = [
        (
            vec![
                "--token-file".to_owned(),
                inside.join("token").display().to_string(),
            ],
            "--token-file",
        ),
        // A file not made yet is judged by its folder.
        (
            vec![
                "--audit-log".to_owned(),
                inside.join("audit.jsonl").display().to_string(),
            ],
            "--audit-log",
        ),
        (
            vec![
                "--token-store".to_owned(),
                inside.join("tokens.json").display().to_string(),
            ],
            "--token-store",
        ),
        (
            vec![
                "--writable".to_owned(),
                writable.path().display().to_string(),
                "--tls-cert".to_owned(),
                writable.path().join("cert.pem").display().to_string(),
                "--tls-key".to_owned(),
                writable.path().join("key.pem").display().to_string(),
                "--client-ca".to_owned(),
                writable.path().join("ca.pem").display().to_string(),
            ],
            "--tls-cert",
        ),
    ];
    for (args, flag) in cases {
        let output = testkit::serve(common::binary(), workspace.path())
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?} should fail");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(
            stderr.contains(flag) && stderr.contains("where commands write"),
            "{args:?}: {stderr}"
        );
    }
    assert!(
        !inside.join("audit.jsonl").exists() && !inside.join("tokens.json").exists(),
        "a refused start writes nothing"
    );
}

#[test]
fn bad_flags_are_named() {
    let stderr = serve_fails(&["--listen", "127.0.0.1:0", "--tools", "bash,rm"]);
    assert!(stderr.contains("--tools: unknown tool `rm`"), "{stderr}");
    let stderr = serve_fails(&[
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        "/nonexistent/token",
    ]);
    assert!(
        stderr.contains("--token-file /nonexistent/token"),
        "{stderr}"
    );
    let output = Command::new(common::binary())
        .args([
            "serve",
            "--workspace",
            "/nonexistent/workspace",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("--workspace /nonexistent/workspace"),
        "{stderr}"
    );
}

#[tokio::test]
async fn every_flag_is_also_an_environment_variable() {
    let workspace = tempfile::tempdir().unwrap();
    let mut child = Command::new(common::binary())
        .arg("serve")
        .env("SANDBOX_WORKSPACE", workspace.path())
        .env("SANDBOX_LISTEN", "127.0.0.1:0")
        .env("SANDBOX_TOOLS", "read_file")
        .env("SANDBOX_LOG_FORMAT", "json")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let address = common::read_address(&mut child);
    let info: serde_json::Value = reqwest::get(format!("http://{address}/v1/info"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info["tools"], json!(["read_file"]));
    common::signal(child.id(), "TERM");
    assert!(
        common::wait_exit(&mut child, Duration::from_secs(15))
            .unwrap()
            .success()
    );
}

#[tokio::test]
async fn sigterm_lets_in_flight_calls_finish_then_kills_background_processes() {
    let mut server = common::start().await;
    let background = server
        .ok("bash", json!({"cmd": "sleep 300 & echo started"}))
        .await;
    let background_pid = server.host_pid(background["background_pids"][0].as_u64().unwrap() as u32);
    assert!(common::alive(background_pid));

    let request = server
        .request(reqwest::Method::POST, "/v1/tools/bash")
        .json(&json!({"cmd": "sleep 1; echo finished"}))
        .send();
    let in_flight = tokio::spawn(request);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = server.pid();
    let stopping = tokio::task::spawn_blocking(move || {
        common::signal(pid, "TERM");
    });
    stopping.await.unwrap();
    let response = in_flight.await.unwrap().unwrap();
    let result: serde_json::Value = response.json().await.unwrap();
    assert_eq!(result["stdout"], "finished\n");
    let status = server.stop();
    assert!(status.success(), "{status:?}");
    assert!(
        !common::alive(background_pid),
        "background process outlived the server"
    );
}

#[tokio::test]
async fn calls_that_outlive_the_shutdown_grace_are_killed_and_the_exit_is_still_clean() {
    let mut server =
        common::start_with_args(["--shutdown-grace-secs", "1", "--kill-grace-ms", "200"]).await;
    let request = server
        .request(reqwest::Method::POST, "/v1/tools/bash")
        .json(&json!({"cmd": "echo $$ > long.pid; sleep 120"}))
        .send();
    let in_flight = tokio::spawn(request);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let shell_pid = server.host_pid(common::read_pid_file(&server.path("long.pid")));
    let start = Instant::now();
    let status = server.stop();
    assert!(status.success(), "{status:?}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert!(!common::alive(shell_pid));
    // The call was answered (killed by a signal) or its connection closed; it did not hang.
    let _ = tokio::time::timeout(Duration::from_secs(5), in_flight)
        .await
        .expect("the in-flight call ended");
}

#[tokio::test]
async fn orphans_are_reaped_not_left_as_zombies() {
    let server = common::start().await;
    // The subshell exits at once; its sleep is orphaned, adopted by the server, and exits.
    server
        .ok("bash", json!({"cmd": "(sleep 0.2 &); (sleep 0.2 &); true"}))
        .await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let pid = server.pid();
    let zombies: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| std::fs::read_to_string(entry.ok()?.path().join("stat")).ok())
        .filter(|stat| {
            let fields: Vec<&str> = stat
                .rsplit(')')
                .next()
                .unwrap()
                .split_whitespace()
                .collect();
            fields[0] == "Z" && fields[1] == pid.to_string()
        })
        .collect();
    assert_eq!(zombies, Vec::<String>::new());
}

/// Regression: the signal handlers were installed after the address line was printed, so a
/// parent that signalled at once killed the server without its cleanup.
#[test]
fn sigterm_right_after_the_address_line_still_exits_cleanly() {
    for _ in 0..5 {
        let workspace = tempfile::tempdir().unwrap();
        let mut command = testkit::serve(common::binary(), workspace.path());
        command.env("RUST_LOG", "warn").stderr(Stdio::null());
        let (mut child, _) = testkit::spawn_server(&mut command);
        common::signal(child.id(), "TERM");
        let status = common::wait_exit(&mut child, Duration::from_secs(15)).expect("exits");
        assert!(status.success(), "{status:?}");
    }
}

/// A log written to a file or a pipe holds no terminal escape codes (and `NO_COLOR` is honoured
/// on a terminal too).
#[test]
fn a_redirected_log_has_no_colour_codes() {
    let workspace = tempfile::tempdir().unwrap();
    let log = workspace.path().join("server.log");
    let mut command = testkit::serve(common::binary(), workspace.path());
    command
        .env("RUST_LOG", "info")
        .stderr(std::fs::File::create(&log).unwrap());
    let (mut child, _) = testkit::spawn_server(&mut command);
    common::signal(child.id(), "TERM");
    common::wait_exit(&mut child, Duration::from_secs(15)).unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("INFO"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "escape codes in a redirected log: {text:?}"
    );
}

#[test]
fn a_bad_known_files_line_is_refused_by_number() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("known.jsonl");
    let good = json!({"path": "a.txt", "sha256": "0".repeat(64), "size": 1,
        "mtime": [1, 0], "ctime": [1, 0], "ino": 7});
    let escapes = json!({"path": "../a.txt", "sha256": "0".repeat(64), "size": 1,
        "mtime": [1, 0], "ctime": [1, 0], "ino": 7});
    std::fs::write(&file, format!("{good}\n\n{escapes}\n")).unwrap();
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--known-files",
        file.to_str().unwrap(),
    ];
    let stderr = serve_fails(&args);
    assert!(
        stderr.contains("--known-files") && stderr.contains("line 3: `../a.txt`"),
        "{stderr}"
    );
    std::fs::write(&file, format!("{good}\n{{\"path\": \"b\"}}\n")).unwrap();
    let stderr = serve_fails(&args);
    assert!(stderr.contains("line 2: missing field"), "{stderr}");
}
