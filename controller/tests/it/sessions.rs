use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common;
use crate::double::{ModelDouble, ev_chat};

/// Live sandbox-server processes serving `workspace`.
fn sandboxes_serving(workspace: &Path) -> Vec<u32> {
    let needle = workspace.to_str().unwrap().to_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains("sandbox-server serve")
                && cmdline.contains(&needle)
                && common::alive(*pid)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_quick_start_example_passes_its_check() {
    let task = common::repo_root().join("examples/hello/task.yaml");
    let run = common::harness(
        &["run", "--task", task.to_str().unwrap()],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .starts_with("greet.sh now prints \"Hello, agent!\""),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains("a scripted model"),
        "the scripted model says so: {}",
        run.stderr
    );
    common::assert_contains(
        &run.stderr,
        &[
            "  > read_file\n  > search_replace\n  > bash\n",
            "check: passed",
            "cost=$0.0000",
        ],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_local_sandbox_is_gone_after_the_session() {
    let double = ModelDouble::start().await;
    double.push_json(ev_chat(None, &[("c1", "bash", r#"{"cmd": "true"}"#)], 1, 1));
    double.push_json(ev_chat(Some("done"), &[], 1, 1));
    let workspace = tempfile::tempdir().unwrap();
    let command = double.harness_run(
        "m",
        &[
            "--policy",
            "allow-all",
            workspace.path().to_str().unwrap(),
            "t",
        ],
    );
    let run = common::run(command, Duration::from_secs(60)).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(sandboxes_serving(workspace.path()), Vec::<u32>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_stops_the_sandbox_and_the_command_it_was_running() {
    let double = ModelDouble::start().await;
    double.push_json(ev_chat(
        None,
        &[(
            "c1",
            "bash",
            r#"{"cmd": "echo $$ > shell.pid; sleep 60", "timeout": 120}"#,
        )],
        1,
        1,
    ));
    let workspace = tempfile::tempdir().unwrap();
    let mut command = double.harness_run(
        "m",
        &[
            "--policy",
            "allow-all",
            workspace.path().to_str().unwrap(),
            "t",
        ],
    );
    command.stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = command.spawn().unwrap();
    let pid_file = workspace.path().join("shell.pid");
    let start = Instant::now();
    // The shell makes the file, then writes it: read it once its line is whole.
    let written = || std::fs::read_to_string(&pid_file).unwrap_or_default();
    while !written().ends_with('\n') && start.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let shell_pid: u32 = written().trim().parse().unwrap();
    let servers = sandboxes_serving(workspace.path());
    assert_eq!(servers.len(), 1);
    // The pid the command wrote is its own namespace's; the host's is needed once it is gone.
    let shell_pid = testkit::host_pid(servers[0], shell_pid).expect("the command runs");

    std::process::Command::new("kill")
        .arg("-INT")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let stopped = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(20),
            "harness did not exit after Ctrl-C"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.code(), Some(130));
    assert!(
        !common::alive(servers[0]),
        "the sandbox outlived the harness"
    );
    assert!(
        !common::alive(shell_pid),
        "the command outlived the sandbox"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_remote_sandbox_is_reached_by_url_and_token() {
    let workspace = tempfile::tempdir().unwrap();
    let token_dir = tempfile::tempdir().unwrap();
    let token_file = token_dir.path().join("token");
    std::fs::write(&token_file, "remote-token-0123456789\n").unwrap();
    let server = common::start_sandbox(workspace.path(), Some(&token_file));
    let url = server.url.clone();

    let double = ModelDouble::start().await;
    double.push_json(ev_chat(
        None,
        &[(
            "c1",
            "write_file",
            r#"{"path": "remote.txt", "content": "via url"}"#,
        )],
        1,
        1,
    ));
    double.push_json(ev_chat(Some("written"), &[], 1, 1));
    let command = double.harness_run(
        "m",
        &[
            "--policy",
            "allow-all",
            "--sandbox",
            &url,
            "--sandbox-token-file",
            token_file.to_str().unwrap(),
            "Write remote.txt",
        ],
    );
    let run = common::run(command, Duration::from_secs(60)).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("remote.txt")).unwrap(),
        "via url"
    );
    assert!(
        common::alive(server.child.id()),
        "a remote sandbox is not the harness's to stop"
    );
}

/// A task whose workspace comes from a tar archive, with setup and a check, on the scripted model.
#[tokio::test(flavor = "multi_thread")]
async fn task_files_seed_from_an_archive_and_run_setup_and_check() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("src");
    std::fs::create_dir_all(source.join("data")).unwrap();
    std::fs::write(source.join("data/x.txt"), "hello\n").unwrap();
    std::fs::write(source.join("run.sh"), "#!/bin/sh\ncat data/x.txt\n").unwrap();
    std::fs::set_permissions(
        source.join("run.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let tar = std::process::Command::new("tar")
        .arg("-czf")
        .arg(dir.path().join("ws.tar.gz"))
        .arg("-C")
        .arg(&source)
        .arg(".")
        .status()
        .unwrap();
    assert!(tar.success());
    let script = "turns:\n  - tool_calls: [{name: bash, arguments: {cmd: './run.sh > out.txt'}}]\n  - text: ran it\n";
    let task = json!({
        "prompt": "Run run.sh into out.txt",
        "workspace": {"archive": "ws.tar.gz"},
        "setup": ["test -x run.sh", "echo prepared > setup.txt"],
        "check": "grep -qx hello out.txt && test -f setup.txt",
        "limits": {"max_turns": 5},
    });
    let target = dir.path().join("ws");
    let run = common::run_task(&common::scripted_task(dir.path(), script, task), &target).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    common::assert_contains(
        &run.stderr,
        &[
            "seeded the workspace: 2 files",
            "setup: echo prepared > setup.txt",
            "check: passed",
        ],
    );
    assert_eq!(
        std::fs::read_to_string(target.join("out.txt")).unwrap(),
        "hello\n"
    );
}

/// A git workspace is checked out at the named commit, history included; a failing check is exit 5.
#[tokio::test(flavor = "multi_thread")]
async fn task_files_seed_from_a_git_commit_and_a_failing_check_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(&repo)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    std::fs::write(repo.join("version.txt"), "one\n").unwrap();
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "one"]);
    let first = String::from_utf8(
        std::process::Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(&repo)
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    std::fs::write(repo.join("version.txt"), "two\n").unwrap();
    git(&["commit", "-q", "-am", "two"]);

    let script = "turns:\n  - text: nothing to do\n";
    let task = json!({
        "prompt": "Look at version.txt",
        "workspace": {"git": {"repo": "repo", "commit": first.trim()}},
        "check": "grep -qx two version.txt",
    });
    let target = dir.path().join("ws");
    let run = common::run_task(&common::scripted_task(dir.path(), script, task), &target).await;
    assert_eq!(
        run.code, 5,
        "the check fails at the first commit: {}",
        run.stderr
    );
    assert!(run.stderr.contains("check: failed"), "{}", run.stderr);
    assert_eq!(
        std::fs::read_to_string(target.join("version.txt")).unwrap(),
        "one\n"
    );
    assert!(target.join(".git/HEAD").is_file(), "history comes along");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_task_file_names_the_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("task.yaml");
    std::fs::write(&path, "prompt: hi\nlimits:\n  max_turn: 3\n").unwrap();
    let run = common::harness(
        &[
            "run",
            "--policy",
            "allow-all",
            "--task",
            path.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .contains("task.yaml: limits: unknown field `max_turn`"),
        "{}",
        run.stderr
    );
}

/// The controller's side of the Kubernetes Indexed Job (deploy/evaluation): each pod mounts the
/// ConfigMap of task files as a folder and runs the task at its completion index; the log goes
/// to `<log-dir>/<task name>/`.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_pod_runs_the_task_at_its_completion_index_and_logs_under_its_name() {
    let tasks = tempfile::tempdir().unwrap();
    // The model's script is the dataset's own (a task picked by index is the dataset's, which
    // may name no file of this machine outside it).
    let script = tasks.path().join("script.yaml");
    std::fs::copy(
        common::repo_root().join("examples/hello/script.yaml"),
        &script,
    )
    .unwrap();
    for (name, word) in [
        ("a-first", "alpha"),
        ("b-second", "beta"),
        ("c-third", "gamma"),
    ] {
        std::fs::write(
            tasks.path().join(format!("{name}.yaml")),
            format!(
                "prompt: say {word}\nmodel: {{name: 'script:{}'}}\ncheck: 'true'\n",
                script.display()
            ),
        )
        .unwrap();
    }
    // A mounted ConfigMap's own entries, which are not tasks.
    std::fs::create_dir(tasks.path().join("..2026_11_30_data")).unwrap();
    std::fs::write(tasks.path().join("README.txt"), "not a task").unwrap();
    let logs = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let mut command = common::command(&[
        "run",
        "--policy",
        "allow-all",
        "--task",
        tasks.path().to_str().unwrap(),
        "--log-dir",
        logs.path().to_str().unwrap(),
        workspace.path().to_str().unwrap(),
    ]);
    command.env("JOB_COMPLETION_INDEX", "1");
    let run = common::run(command, Duration::from_secs(60)).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.log_dir(), logs.path().join("b-second"));
    let first = std::fs::read_to_string(logs.path().join("b-second/events.jsonl"))
        .unwrap()
        .lines()
        .next()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .unwrap();
    assert_eq!(first["data"]["task"], "say beta");
    let entries: Vec<_> = std::fs::read_dir(logs.path()).unwrap().collect();
    assert_eq!(entries.len(), 1, "one pod, one session folder");

    let mut command = common::command(&[
        "run",
        "--task",
        tasks.path().to_str().unwrap(),
        "--task-index",
        "3",
    ]);
    command.env_remove("JOB_COMPLETION_INDEX");
    let run = common::run(command, Duration::from_secs(60)).await;
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("--task-index 3") && run.stderr.contains("holds 3 tasks"),
        "{}",
        run.stderr
    );
}

/// Every usage error exits 2 with the usage line, whichever command: one rule (README).
#[tokio::test]
async fn a_usage_error_exits_2_from_every_command() {
    for args in [
        &["run"][..],
        &["batch"],
        &["replay", "show"],
        &["run", "--no-such-flag", "hi"],
        &["images"],
    ] {
        let run = common::harness(args, Duration::from_secs(30)).await;
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("Usage: harness"),
            "{args:?}: {}",
            run.stderr
        );
    }
}

#[tokio::test]
async fn replaying_a_folder_that_does_not_exist_says_so() {
    let missing = tempfile::tempdir().unwrap().path().join("no-such-run");
    let run = common::harness(
        &["replay", "show", missing.to_str().unwrap()],
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("no such folder"), "{}", run.stderr);
}

/// A sandbox URL where nothing listens fails at once, in one sentence naming it, and the log
/// the session opened says it never started.
#[tokio::test]
async fn a_sandbox_url_with_nothing_listening_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "refused-token-0123456789").unwrap();
    let run = common::harness(
        &[
            "run",
            "--policy",
            "allow-all",
            "--model",
            "script:../examples/hello/script.yaml",
            "--sandbox",
            "http://127.0.0.1:1",
            "--sandbox-token-file",
            token.to_str().unwrap(),
            "hi",
        ],
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.elapsed < Duration::from_secs(3), "{:?}", run.elapsed);
    let error = run
        .stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap();
    assert!(
        error.contains("nothing is listening at http://127.0.0.1:1"),
        "{error}"
    );
    assert_eq!(error.matches("127.0.0.1:1").count(), 1, "{error}");
    let events = std::fs::read_to_string(run.log_dir().join("events.jsonl")).unwrap();
    assert!(events.contains("\"outcome\":\"error\""), "{events}");
    assert!(!events.contains("\"type\":\"tool_call\""), "{events}");
}

/// A task's temporary workspace folder is removed when its session ends, unless
/// `--keep-workspace`; either way the run says where it is.
#[tokio::test]
async fn a_temporary_workspace_is_removed_unless_kept() {
    let task = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/hello/task.yaml");
    for keep in [false, true] {
        let mut args = vec!["run", "--task", task];
        if keep {
            args.push("--keep-workspace");
        }
        let run = common::harness(&args, Duration::from_secs(60)).await;
        assert_eq!(run.code, 0, "{}", run.stderr);
        let dir = run
            .stderr
            .lines()
            .find_map(|l| l.strip_prefix("workspace: "))
            .map(|rest| rest.split(" (").next().unwrap().to_owned())
            .expect("the run names its workspace");
        assert_eq!(
            std::path::Path::new(&dir).exists(),
            keep,
            "{dir}: {}",
            run.stderr
        );
        if keep {
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}
