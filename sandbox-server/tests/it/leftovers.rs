//! Nothing outlives its server, and no command reads a server's state: a `SIGKILL`ed server's
//! commands, cgroups and folders are swept; state folders are out of commands' reach.

use std::path::PathBuf;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common;

/// The folders of the server with this pid, under the shared parent.
fn folders_of(pid: u32) -> Vec<PathBuf> {
    let parent = std::env::temp_dir().join("sandbox-server");
    std::fs::read_dir(&parent)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("{pid}-"))
                })
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Waits (bounded: 5 s) until the server's folder is gone.
async fn wait_for_no_folder(pid: u32) {
    for _ in 0..100 {
        if folders_of(pid).is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The janitor of a server: its child started as `sandbox-server janitor`.
fn janitor_of(pid: u32) -> Option<u32> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    children
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .find(|child: &u32| {
            std::fs::read(format!("/proc/{child}/cmdline"))
                .is_ok_and(|line| line.split(|&b| b == 0).nth(1) == Some(b"janitor".as_slice()))
        })
}

async fn start_background_sleep(server: &common::Server) -> u32 {
    server
        .ok(
            "bash",
            json!({"cmd": "nohup sleep 1000 > /dev/null 2>&1 & echo $! > sleep.pid"}),
        )
        .await;
    server.host_pid(common::read_pid_file(&server.path("sleep.pid")))
}

#[tokio::test]
async fn a_killed_server_leaves_no_process_and_no_folder() {
    let mut server = common::start().await;
    let pid = server.pid();
    let sleeper = start_background_sleep(&server).await;
    assert!(common::alive(sleeper));
    assert_eq!(
        folders_of(pid).len(),
        1,
        "the server's folder exists while it runs"
    );
    common::signal(pid, "KILL");
    common::wait_exit(&mut server.child, Duration::from_secs(10)).unwrap();
    assert!(
        common::gone_within(sleeper, Duration::from_secs(10)).await,
        "the janitor killed the background sleep"
    );
    wait_for_no_folder(pid).await;
    assert!(folders_of(pid).is_empty(), "the janitor removed the folder");
}

/// When the janitor dies with its server, the next server to start sweeps after both.
#[tokio::test]
async fn the_next_server_sweeps_after_a_server_killed_with_its_janitor() {
    let mut server = common::start().await;
    let pid = server.pid();
    let sleeper = start_background_sleep(&server).await;
    let janitor = janitor_of(pid).expect("the server started a janitor");
    common::signal(janitor, "KILL");
    common::signal(pid, "KILL");
    common::wait_exit(&mut server.child, Duration::from_secs(10)).unwrap();
    assert!(common::gone_within(janitor, Duration::from_secs(5)).await);
    // (Servers of tests running alongside may be the ones that sweep: any start does.)
    let _next = common::start().await;
    assert!(
        common::gone_within(sleeper, Duration::from_secs(10)).await,
        "the next server's start killed it"
    );
    wait_for_no_folder(pid).await;
    assert!(folders_of(pid).is_empty(), "and removed the folder");
}

/// A command of one server reads neither that server's artifacts and blobs, nor another
/// server's state or `TMPDIR`; its own `TMPDIR` works.
#[tokio::test]
#[cfg_attr(
    not(harness_landlock),
    ignore = "needs Landlock (in /sys/kernel/security/lsm)"
)]
async fn commands_cannot_read_any_servers_state() {
    let other = common::start().await;
    let secret = other
        .ok(
            "bash",
            json!({"cmd": "echo other-secret-$((6*7)); echo kept > $TMPDIR/other.txt"}),
        )
        .await;
    assert_eq!(secret["stdout"], "other-secret-42\n");
    other
        .send(reqwest::Method::POST, "/v1/workspace/snapshot")
        .await;
    let server = common::start().await;
    let landlock = server.get_json("/v1/info").await.1["protections"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == "landlock" && p["active"] == true);
    assert!(
        landlock,
        "the kernel runs Landlock, yet the server did not apply it"
    );
    let probe = server
        .ok(
            "bash",
            json!({"cmd": "cat /tmp/sandbox-server/*/state/artifacts/* /tmp/sandbox-server/*/state/blobs/* /tmp/sandbox-server/*/tmp/* 2>/dev/null | grep -c other-secret-42; echo mine > $TMPDIR/x && cat $TMPDIR/x"}),
        )
        .await;
    assert_eq!(probe["stdout"], "0\nmine\n", "{probe}");
    for mode_of in ["/tmp/sandbox-server/*/state"] {
        let stat = server
            .ok(
                "bash",
                json!({"cmd": format!("stat -c %a {mode_of} | sort -u")}),
            )
            .await;
        // Absent from the commands' view (issue 55), or there and private.
        let mode = stat["stdout"].as_str().unwrap();
        assert!(mode.is_empty() || mode == "700\n", "{mode_of}: {stat}");
    }
}

/// Landlock grants no right to make device nodes, even to root (who may otherwise).
#[tokio::test]
#[cfg_attr(not(harness_root), ignore = "needs root")]
async fn commands_cannot_make_device_nodes() {
    let server = common::start().await;
    let made = server
        .ok(
            "bash",
            json!({"cmd": "mknod null2 c 1 3; echo rc=$? uid=$(id -u)"}),
        )
        .await;
    let stdout = made["stdout"].as_str().unwrap();
    // Only root could make a device node at all.
    assert!(stdout.trim_end().ends_with("uid=0"), "{made}");
    assert!(!stdout.starts_with("rc=0"), "{made}");
    assert!(!server.path("null2").exists());
}
