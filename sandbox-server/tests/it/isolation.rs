//! Issue 24: what a command can reach of the machine. As root (CI, a container), the server puts
//! commands in a PID and a mount namespace of their own: they list and signal only the
//! sandbox's processes, read no other process's environment, open only the device nodes
//! programs need, and die with the server whatever they did. The tests that need root are
//! ignored without it (`harness_root`, which build.rs probes).

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common::{self, Options, protection};

const SECRET: &str = "sk-issue24-the-servers-own-secret-0123456789";

fn root() -> bool {
    nix::unistd::geteuid().is_root()
}

async fn stdout(server: &common::Server, cmd: &str) -> String {
    let result = server.ok("bash", json!({"cmd": cmd, "timeout": 30})).await;
    result["stdout"].as_str().unwrap().to_owned()
}

/// §1: the review's command, and every other way to another process: its environment by any
/// `/proc` path, its existence, a signal to it.
#[tokio::test]
#[cfg_attr(not(harness_root), ignore = "needs root")]
async fn issue_24_a_command_sees_and_signals_no_process_outside_its_sandbox() {
    let server = common::start_with(Options {
        env: vec![("OPENAI_API_KEY".to_owned(), SECRET.to_owned())],
        ..Options::default()
    })
    .await;
    let (_, info) = server.get_json("/v1/info").await;
    for name in ["pid_namespace", "not_dumpable", "signal_scope", "devices"] {
        assert_eq!(protection(&info, name)["active"], true, "{name}: {info}");
    }
    let leaked = stdout(
        &server,
        "grep -a -h -o 'OPENAI_API_KEY=[a-zA-Z0-9_-]*' /proc/*/environ /proc/*/task/*/environ \
         /proc/thread-self/../../*/environ 2>/dev/null | sort -u | cut -c 1-25; \
         cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c -- '--workspace [/]'; true",
    )
    .await;
    assert!(!leaked.contains("OPENAI_API_KEY"), "{leaked}");
    assert_eq!(
        leaked.trim(),
        "0",
        "no command line of the server is visible: {leaked}"
    );
    // Only the sandbox's own processes: its init, the shell and what it runs.
    let listing = stdout(
        &server,
        "ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' '",
    )
    .await;
    let pids: Vec<u32> = listing
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.first(), Some(&1), "{listing}");
    assert!(pids.iter().all(|&p| p < 100), "{listing}");
    assert!(
        stdout(&server, "cat /proc/1/cmdline | tr '\\0' ' '")
            .await
            .contains("pid-init")
    );
    // Neither the server nor this test process can be signalled or even named.
    let outside = [server.pid(), std::process::id()];
    for pid in outside {
        let answer = stdout(
            &server,
            &format!("kill -0 {pid} 2>&1; kill -STOP {pid} 2>&1; echo done"),
        )
        .await;
        assert!(
            answer.contains("No such process") && answer.ends_with("done\n"),
            "{pid}: {answer}"
        );
        assert!(common::alive(pid));
    }
    // PID 1 ignores what its namespace sends it.
    stdout(&server, "kill -KILL 1; kill -TERM 1; kill -STOP 1; true").await;
    let (status, _) = server.get_json("/v1/info").await;
    assert_eq!(status, 200);
    assert_eq!(stdout(&server, "echo still").await, "still\n");
}

/// §1: a command that scrubbed its environment and left its group still dies with its server,
/// even when the janitor was killed first: the namespace's init dies with the server, and the
/// kernel ends every process of the namespace with it.
#[tokio::test]
#[cfg_attr(not(harness_root), ignore = "needs root")]
async fn issue_24_nothing_outlives_a_server_killed_after_its_janitor() {
    let mut server = common::start().await;
    let result = server
        .ok(
            "bash",
            json!({"cmd": "(setsid env -i /bin/sh -c 'echo $$ > escaped.pid; exec sleep 600' > /dev/null 2>&1 &); sleep 0.5"}),
        )
        .await;
    assert_eq!(result["exit_code"], 0, "{result}");
    let escaped = server.host_pid(common::read_pid_file(&server.path("escaped.pid")));
    let janitor = testkit::tree(server.pid())
        .into_iter()
        .find(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| line.contains("janitor"))
        })
        .expect("the server has a janitor");
    common::signal(janitor, "KILL");
    assert!(common::gone_within(janitor, Duration::from_secs(5)).await);
    common::signal(server.pid(), "KILL");
    common::wait_exit(&mut server.child, Duration::from_secs(10)).unwrap();
    assert!(
        common::gone_within(escaped, Duration::from_secs(5)).await,
        "the escaped process died with the server"
    );
}

/// Calls share one Landlock domain: a later call may signal what an earlier one started, while
/// nothing outside the sandbox may be signalled (with or without the PID namespace).
#[tokio::test]
async fn issue_24_a_later_call_may_signal_an_earlier_calls_process() {
    for extra in [vec![], vec!["--no-pid-namespace".to_owned()]] {
        let server = common::start_with_args(extra.clone()).await;
        let started = server
            .ok("bash", json!({"cmd": "sleep 300 & echo $!"}))
            .await;
        let pid: u32 = started["stdout"].as_str().unwrap().trim().parse().unwrap();
        assert_eq!(
            started["background_pids"],
            json!([pid]),
            "{extra:?}: the API's pid is the command's: {started}"
        );
        let (_, listing) = server.get_json("/v1/processes").await;
        assert_eq!(listing["processes"][0]["pid"], pid, "{extra:?}: {listing}");
        let killed = stdout(&server, &format!("kill {pid} && echo killed")).await;
        assert_eq!(killed, "killed\n", "{extra:?}");
        let (_, info) = server.get_json("/v1/info").await;
        if protection(&info, "signal_scope")["active"] == true {
            let test = std::process::id();
            let answer = stdout(&server, &format!("kill -0 {test} 2>&1; echo done")).await;
            assert!(
                answer.contains("No such process") || answer.contains("Operation not permitted"),
                "{extra:?}: {answer}"
            );
        }
    }
}

/// §2: only the device nodes programs need open, by any path; a block device is never written.
#[tokio::test]
async fn issue_24_commands_open_only_the_device_nodes_programs_need() {
    let disk = std::fs::read_dir("/sys/block")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| format!("/dev/{}", entry.file_name().to_string_lossy()))
        .find(|path| std::path::Path::new(path).exists());
    for extra in [vec![], vec!["--no-pid-namespace".to_owned()]] {
        let server = common::start_with_args(extra.clone()).await;
        let (_, info) = server.get_json("/v1/info").await;
        if protection(&info, "devices")["active"] != true {
            continue;
        }
        let fine = stdout(
            &server,
            "echo x > /dev/null && head -c 4 /dev/zero | wc -c && head -c 4 /dev/urandom | wc -c \
             && echo shm > /dev/shm/f && cat /dev/shm/f && rm /dev/shm/f && echo ok",
        )
        .await;
        assert_eq!(fine, "4\n4\nshm\nok\n", "{extra:?}");
        let mut reads = vec!["/dev/mem", "/dev/kmem", "/dev/port", "/proc/kcore"]
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>();
        let mut writes = vec!["/dev/loop0".to_owned()];
        if let Some(disk) = &disk {
            reads.push(disk.clone());
            writes.push(disk.clone());
        }
        for path in reads {
            let read = stdout(&server, &format!("head -c 1 {path} 2>/dev/null | wc -c")).await;
            assert_eq!(read, "0\n", "{extra:?}: {path} was read");
        }
        for path in writes {
            let wrote = stdout(
                &server,
                &format!("(printf X >> {path}) 2>/dev/null && echo WROTE; true"),
            )
            .await;
            assert_eq!(wrote, "", "{extra:?}: {path} was written");
        }
        if extra.is_empty() && root() {
            let listed = stdout(&server, "ls /dev | tr '\\n' ' '").await;
            assert_eq!(
                listed, "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero ",
                "{info}"
            );
        }
    }
}

/// §1: as root with `--run-as`, commands are that user, the workspace's root-owned files are
/// theirs in their view while the files on disk keep their owner, and HOME is theirs.
#[tokio::test]
#[cfg_attr(not(harness_root), ignore = "needs root")]
async fn issue_24_an_unprivileged_user_gets_the_workspace_as_its_own() {
    use std::os::unix::fs::MetadataExt;
    let server = common::start_with_args(["--run-as", "nobody"]).await;
    std::fs::write(server.path("given.txt"), "from root\n").unwrap();
    let answer = stdout(
        &server,
        "id -u; stat -c %u given.txt; echo more >> given.txt && echo made > new.txt && \
         mkdir -p d/e && touch d/e/f && echo wrote; touch \"$HOME/.rc\" && echo home; \
         test -r /root/.bashrc || echo 1",
    )
    .await;
    assert_eq!(answer, "65534\n65534\nwrote\nhome\n1\n");
    for file in ["given.txt", "new.txt", "d/e/f"] {
        let meta = std::fs::metadata(server.path(file)).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (0, 0),
            "{file} keeps root as its owner on disk"
        );
    }
    assert_eq!(
        std::fs::read_to_string(server.path("given.txt")).unwrap(),
        "from root\nmore\n"
    );
    let (_, info) = server.get_json("/v1/info").await;
    assert_eq!(protection(&info, "unprivileged_user")["active"], true);
}
