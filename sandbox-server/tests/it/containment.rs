use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common::{self, Answer, Options, protection};

/// Whether a command's answer says that something was refused to it.
/// Refused by Landlock, or not there at all: the commands' view hides the folder (issue 55).
fn denied(result: &serde_json::Value) -> bool {
    let stderr = result["stderr"].as_str().unwrap();
    stderr.contains("Permission denied") || stderr.contains("No such file or directory")
}

/// Under `--network none` a command reaches Unix sockets beneath its workspace and its
/// temporary folder only: not a container engine's socket elsewhere on the host, not through a
/// symlink in the workspace, not with a datagram sent to a named address.
#[tokio::test]
async fn unix_sockets_outside_the_workspace_are_out_of_reach() {
    let outside = tempfile::tempdir().unwrap();
    let engine = outside.path().join("docker.sock");
    let _engine = std::os::unix::net::UnixListener::bind(&engine).unwrap();
    let datagrams = outside.path().join("log.sock");
    let _datagrams = std::os::unix::net::UnixDatagram::bind(&datagrams).unwrap();
    let server = common::start().await;
    std::os::unix::fs::symlink(&engine, server.path("engine.sock")).unwrap();
    let script = format!(
        r#"
import os, socket, sys
def attempt(name, address):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(address)
        print(name, "connected")
    except OSError as err:
        print(name, "refused", err.errno)
attempt("engine", "{engine}")
attempt("through-link", "engine.sock")
inside = socket.socket(socket.AF_UNIX); inside.bind("inside.sock"); inside.listen(1)
attempt("workspace", "inside.sock")
tmp = os.path.join(os.environ["TMPDIR"], "t.sock")
t = socket.socket(socket.AF_UNIX); t.bind(tmp); t.listen(1)
attempt("tmpdir", tmp)
d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
try:
    d.sendto(b"x", "{datagrams}")
    print("datagram sent")
except OSError as err:
    print("datagram refused", err.errno)
"#,
        engine = engine.display(),
        datagrams = datagrams.display()
    );
    std::fs::write(server.path("probe.py"), script).unwrap();
    let result = server.ok("bash", json!({"cmd": "python3 probe.py"})).await;
    assert_eq!(
        result["stdout"],
        "engine refused 13\nthrough-link refused 13\nworkspace connected\ntmpdir connected\ndatagram refused 13\n",
        "{result}"
    );
}

#[tokio::test]
async fn network_none_refuses_sockets_even_to_loopback() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let cmd = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");

    let closed = common::start().await;
    let (_, info) = closed.get_json("/v1/info").await;
    assert_eq!(protection(&info, "network_none")["active"], true);
    let result = closed.ok("bash", json!({"cmd": cmd})).await;
    assert_ne!(result["exit_code"], 0, "{result}");
    assert!(denied(&result), "{result}");
    let address = closed.base.trim_start_matches("http://").to_owned();
    let (host, server_port) = address.split_once(':').unwrap();
    let to_server = closed
        .ok(
            "bash",
            json!({"cmd": format!("exec 3<>/dev/tcp/{host}/{server_port}")}),
        )
        .await;
    assert_ne!(
        to_server["exit_code"], 0,
        "not even the server itself: {to_server}"
    );
    let unix = closed
        .ok(
            "bash",
            json!({"cmd": "python3 -c 'import socket; socket.socketpair(); print(\"unix ok\")'"}),
        )
        .await;
    assert_eq!(
        unix["stdout"], "unix ok\n",
        "Unix sockets still work: {unix}"
    );

    let open = common::start_with_args(["--network", "host"]).await;
    let result = open.ok("bash", json!({"cmd": cmd})).await;
    assert_eq!(
        result["stdout"], "connected\n",
        "control: with --network host it connects: {result}"
    );
}

#[tokio::test]
async fn commands_see_a_clean_environment() {
    let workspace = tempfile::tempdir().unwrap();
    let token_dir = tempfile::tempdir().unwrap();
    let token_file = token_dir.path().join("token");
    std::fs::write(&token_file, common::TOKEN).unwrap();
    let mut command = testkit::serve(common::binary(), workspace.path());
    command
        .env("SANDBOX_TOKEN_FILE", &token_file)
        .env("OPENAI_API_KEY", "sk-server-secret-123456")
        .env("DATABASE_URL", "postgres://admin:hunter2@db/prod")
        .env("RUST_LOG", "warn");
    let (mut child, line) = testkit::spawn_server(&mut command);
    let url = testkit::url_of(&line);
    let client = reqwest::Client::new();
    let bash = |cmd: &str| {
        let request = client
            .post(format!("{url}/v1/tools/bash"))
            .bearer_auth(common::TOKEN)
            .json(&json!({ "cmd": cmd }));
        request.json_body()
    };
    let result = bash("env; cat /proc/self/environ | tr '\\\\0' '\\\\n' | wc -l").await;
    let env = result["stdout"].as_str().unwrap();
    for leaked in [
        "SANDBOX_TOKEN_FILE",
        "sk-server-secret",
        "hunter2",
        common::TOKEN,
    ] {
        assert!(!env.contains(leaked), "{leaked} leaked into: {env}");
    }
    assert!(
        env.contains("PATH=") && env.contains("TMPDIR=") && env.contains("SANDBOX_CALL_ID="),
        "{env}"
    );
    // The token file itself is hidden: absent from the commands' view, or (without a mount
    // namespace) unreadable by Landlock.
    let read = bash(&format!("cat {}", token_file.display())).await;
    // Refused, or an empty file in its place (the mount namespace's view).
    assert!(denied(&read) || read["stdout"] == "", "{read}");
    assert!(!read["stdout"].as_str().unwrap().contains(common::TOKEN));
    common::signal(child.id(), "TERM");
    common::wait_exit(&mut child, Duration::from_secs(15));
}

#[tokio::test]
async fn landlock_confines_bash_writes_to_the_workspace_and_its_temp_folder() {
    let server = common::start().await;
    let (_, info) = server.get_json("/v1/info").await;
    if protection(&info, "landlock")["active"] != true {
        panic!(
            "Landlock is not available on this kernel: {}",
            protection(&info, "landlock")["detail"]
        );
    }
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("escaped.txt");
    let cmd = format!(
        "echo in > inside.txt && echo tmp > $TMPDIR/scratch && cat $TMPDIR/scratch && echo out > {} ; echo status=$?",
        target.display()
    );
    let result = server.ok("bash", json!({"cmd": cmd})).await;
    assert!(
        result["stdout"].as_str().unwrap().contains("tmp\nstatus=1"),
        "{result}"
    );
    assert!(denied(&result), "{result}");
    assert!(!target.exists(), "bash wrote outside the workspace");
    assert_eq!(
        std::fs::read_to_string(server.path("inside.txt")).unwrap(),
        "in\n"
    );
    // Reading the system stays allowed.
    let read = server
        .ok(
            "bash",
            json!({"cmd": "head -1 /etc/os-release > /dev/null && echo readable"}),
        )
        .await;
    assert_eq!(read["stdout"], "readable\n");
}

#[tokio::test]
async fn a_memory_bomb_and_a_disk_filler_end_with_a_clear_report_while_other_calls_go_on() {
    let server = std::sync::Arc::new(
        common::start_with_args([
            "--limit-memory".to_owned(),
            (1u64 << 30).to_string(),
            "--limit-file-size".to_owned(),
            (10u64 << 20).to_string(),
        ])
        .await,
    );
    std::fs::write(server.path("notes.txt"), "still here\n").unwrap();
    let bomb = {
        let server = server.clone();
        tokio::spawn(async move {
            server
                .ok(
                    "bash",
                    json!({"cmd": "python3 -c 'x = bytearray(10 * 1024**3)'", "timeout": 60}),
                )
                .await
        })
    };
    let read = server.ok("read_file", json!({"path": "notes.txt"})).await;
    assert_eq!(read["output"], "   1: still here");
    let bomb = bomb.await.unwrap();
    assert_ne!(bomb["exit_code"], 0);
    assert!(
        bomb["stderr"].as_str().unwrap().contains("MemoryError"),
        "{bomb}"
    );

    let filler = server
        .ok("bash", json!({"cmd": "head -c 100M /dev/zero > big.bin"}))
        .await;
    assert_eq!(filler["exit_code"], 153, "{filler}");
    assert!(
        filler["output"]
            .as_str()
            .unwrap()
            .contains("it tried to write a file larger than the file-size limit"),
        "{filler}"
    );
    assert_eq!(
        std::fs::metadata(server.path("big.bin")).unwrap().len(),
        10 << 20
    );
}

/// As root, a fork bomb is contained by running commands as an unprivileged user, whose process
/// limit binds. (Not as root, the server's own user is already unprivileged.)
#[tokio::test]
async fn a_fork_bomb_is_contained_and_the_server_keeps_answering() {
    let server = std::sync::Arc::new(unprivileged_server_with_a_process_limit().await);
    a_bomb_at_its_timeout_dies_with_its_call(&server).await;
    a_background_bomb_is_cleared_by_delete_processes(&server).await;
}

/// A server whose commands may start 200 processes; as root, they run as nobody.
async fn unprivileged_server_with_a_process_limit() -> common::Server {
    let workspace = tempfile::tempdir().unwrap();
    let is_root = nix::unistd::geteuid().is_root();
    let mut extra_args = vec![
        "--limit-processes".into(),
        "200".into(),
        "--kill-grace-ms".into(),
        "200".into(),
    ];
    if is_root {
        std::os::unix::fs::chown(workspace.path(), Some(65534), Some(65534)).unwrap();
        std::fs::set_permissions(workspace.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        extra_args.extend(["--run-as".into(), "65534:65534".into()]);
    }
    let options = Options {
        extra_args,
        ..Options::default()
    };
    let server = common::start_in(workspace, options).await;
    let (_, info) = server.get_json("/v1/info").await;
    assert_eq!(
        protection(&info, "unprivileged_user")["active"],
        true,
        "{info}"
    );
    let whoami = server.ok("bash", json!({"cmd": "id -u"})).await;
    if is_root {
        assert_eq!(whoami["stdout"], "65534\n");
    }
    server
}

/// A fork bomb in a `bash` call with a 3 s timeout, started in the background.
fn fork_bomb(
    server: &std::sync::Arc<common::Server>,
) -> tokio::task::JoinHandle<serde_json::Value> {
    let server = server.clone();
    let bomb = json!({"cmd": "bomb() { bomb | bomb & }; bomb; sleep 30", "timeout": 3});
    tokio::spawn(async move { server.ok("bash", bomb).await })
}

/// The answer of `fork_bomb`'s call: it timed out, and `limit` refused the bomb's forks.
fn the_bomb_timed_out_bound_by(bomb: &serde_json::Value, limit: &str) {
    assert_eq!(bomb["timed_out"], true, "{bomb}");
    assert!(
        bomb["stderr"]
            .as_str()
            .unwrap()
            .contains("Resource temporarily unavailable"),
        "{limit} bound: {bomb}"
    );
}

async fn a_bomb_at_its_timeout_dies_with_its_call(server: &std::sync::Arc<common::Server>) {
    let start = Instant::now();
    let bomb = fork_bomb(server);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (status, health) = server.get_json("/healthz").await;
    assert_eq!(
        (status, health["status"].as_str()),
        (200, Some("ok")),
        "the server answers during the bomb"
    );
    let bomb = bomb.await.unwrap();
    the_bomb_timed_out_bound_by(&bomb, "the process limit");
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "the call outlived its timeout by far ({:?}): {bomb}",
        start.elapsed()
    );
    let (_, processes) = server.get_json("/v1/processes").await;
    assert_eq!(
        processes["processes"],
        json!([]),
        "every bomb process died with its call"
    );
}

/// Round after round, until none is left.
async fn a_background_bomb_is_cleared_by_delete_processes(server: &common::Server) {
    let left = server
        .ok(
            "bash",
            json!({"cmd": "bomb() { bomb | bomb & }; bomb; sleep 1", "timeout": 10}),
        )
        .await;
    assert!(
        !left["background_pids"].as_array().unwrap().is_empty(),
        "{left}"
    );
    let (status, killed) = server.delete("/v1/processes").await;
    assert_eq!(status, 200);
    assert!(!killed["killed"].as_array().unwrap().is_empty());
    let (_, processes) = server.get_json("/v1/processes").await;
    assert_eq!(
        processes["processes"],
        json!([]),
        "the background bomb is gone"
    );
    let after = server.ok("bash", json!({"cmd": "echo alive"})).await;
    assert_eq!(after["stdout"], "alive\n");
}

/// Where the server may create cgroups, a fork bomb is contained even when commands run as
/// root: the call's `pids.max` binds the whole tree. Where it may not, the server says why (and
/// this test does not set off a bomb that nothing would stop).
#[tokio::test]
async fn a_fork_bomb_as_root_is_contained_by_the_commands_cgroup() {
    let server = std::sync::Arc::new(
        common::start_with_args(["--limit-processes", "100", "--kill-grace-ms", "200"]).await,
    );
    let (_, info) = server.get_json("/v1/info").await;
    let cgroup = protection(&info, "cgroup");
    if cgroup["active"] != true {
        assert!(!cgroup["detail"].as_str().unwrap().is_empty(), "{cgroup}");
        eprintln!(
            "no writable cgroup here ({}): not setting off a fork bomb",
            cgroup["detail"]
        );
        return;
    }
    assert!(
        cgroup["detail"].as_str().unwrap().contains("processes 100"),
        "{cgroup}"
    );
    let bomb = fork_bomb(&server);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (status, _) = server.get_json("/healthz").await;
    assert_eq!(status, 200, "the server answers during the bomb");
    let bomb = bomb.await.unwrap();
    the_bomb_timed_out_bound_by(&bomb, "pids.max");
    let (_, processes) = server.get_json("/v1/processes").await;
    assert_eq!(processes["processes"], json!([]));
}

/// Groups are reused once empty, each still with its limit; a group whose background process
/// lives on is never handed to another call.
#[tokio::test]
async fn cgroups_are_reused_with_their_limits_but_never_while_busy() {
    let server = common::start_with_args(["--limit-processes", "100"]).await;
    let (_, info) = server.get_json("/v1/info").await;
    if protection(&info, "cgroup")["active"] != true {
        eprintln!("no writable cgroup here: nothing to reuse");
        return;
    }
    // Prints the call's pids group and its limit.
    let group_of = r#"g=$(awk -F: '$2=="pids"{print $3}' /proc/self/cgroup); echo "$g $(cat /sys/fs/cgroup/pids$g/pids.max)""#;
    let busy = server
        .ok(
            "bash",
            json!({"cmd": format!("{group_of}; sleep 30 >/dev/null 2>&1 &")}),
        )
        .await;
    let busy_group = busy["stdout"].as_str().unwrap().to_owned();
    // 100 processes for the command, one task for the server's thread that clones it there.
    assert!(busy_group.trim_end().ends_with(" 101"), "{busy}");
    let mut groups = Vec::new();
    for _ in 0..3 {
        let call = server.ok("bash", json!({"cmd": group_of})).await;
        let line = call["stdout"].as_str().unwrap().to_owned();
        assert!(line.trim_end().ends_with(" 101"), "the limit binds: {call}");
        assert_ne!(line, busy_group, "a busy group is not shared");
        groups.push(line);
    }
    assert_eq!(groups[1], groups[2], "an empty group is reused: {groups:?}");
    // A reset (what a pool does between two tasks) empties the busy group and keeps reusing.
    let reset = server.send(reqwest::Method::POST, "/v1/reset").await;
    assert_eq!(reset.status(), 200);
    let mut after = Vec::new();
    for _ in 0..3 {
        let call = server.ok("bash", json!({"cmd": group_of})).await;
        after.push(call["stdout"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        after[1], after[2],
        "groups are reused after a reset: {after:?}"
    );
    assert!(
        groups.contains(&after[2]) || after[2] == busy_group,
        "the groups made before the reset are still in use: {after:?} vs {groups:?}"
    );
}

/// A group whose memory group is still charged after its command (100 MiB of page cache from
/// a file it wrote) is not handed to the next command, whose limit the charge would eat.
#[tokio::test]
async fn a_cgroup_still_charged_with_memory_is_not_reused() {
    let server = common::start_with_args(["--limit-memory", "1GiB"]).await;
    let (_, info) = server.get_json("/v1/info").await;
    let cgroup = protection(&info, "cgroup");
    if cgroup["active"] != true || !cgroup["detail"].as_str().unwrap().contains("memory under") {
        eprintln!("no writable memory cgroup here: nothing is charged");
        return;
    }
    let group_of = r#"awk -F: '$2=="memory"{print $3}' /proc/self/cgroup"#;
    let heavy = server
        .ok(
            "bash",
            json!({"cmd": format!("dd if=/dev/zero of=big bs=1M count=100 2>/dev/null; {group_of}")}),
        )
        .await;
    let light = server.ok("bash", json!({"cmd": group_of})).await;
    assert_ne!(heavy["stdout"], light["stdout"], "{heavy}\n{light}");
    let again = server.ok("bash", json!({"cmd": group_of})).await;
    assert_eq!(
        light["stdout"], again["stdout"],
        "an uncharged group is reused"
    );
}

#[test]
fn require_protections_refuses_to_start_without_them() {
    let workspace = tempfile::tempdir().unwrap();
    let output = testkit::serve(common::binary(), workspace.path())
        .args(["--require-protections", "--no-landlock"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--require-protections: ")
            && stderr.contains("landlock (turned off (--no-landlock))"),
        "{stderr}"
    );
}
