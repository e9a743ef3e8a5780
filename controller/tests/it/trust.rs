//! Issue 24 from the controller's side: a command of a local sandbox reaches none of the
//! harness's secrets, and what it prints of a secret it found anyway, in whole or in any slice
//! a `cut` makes of it, never reaches the log or the model.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::common;

const KEY: &str = "sk-issue24-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789";
const HOOK_TOKEN: &str = "hook-token-issue24-zyxwvutsrqponmlkj";

/// Every file of a session folder, as bytes.
fn everything_in(dir: &Path) -> Vec<(String, Vec<u8>)> {
    common::files_under(dir)
        .into_iter()
        .map(|name| {
            let path = dir.join(name);
            (path.display().to_string(), std::fs::read(&path).unwrap())
        })
        .collect()
}

/// The 8-character runs of `secret` found anywhere in the session folder.
fn runs_of(secret: &str, dir: &Path) -> Vec<String> {
    let windows: Vec<&[u8]> = secret.as_bytes().windows(8).collect();
    everything_in(dir)
        .into_iter()
        .filter(|(_, bytes)| windows.iter().any(|w| bytes.windows(8).any(|b| b == *w)))
        .map(|(path, _)| path)
        .collect()
}

/// The review's demonstration, run by a scripted model with every rule off: the commands find
/// no key in `/proc` (the harness is not dumpable, a root harness's commands run as `nobody`
/// in a PID namespace of their own, the local server gets none of the harness's variables),
/// and a key they find in a file reaches neither the log nor the model by any slice.
#[tokio::test(flavor = "multi_thread")]
async fn issue_24_no_slice_of_a_secret_reaches_the_log_or_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    // A secret a command can read: as if the workspace held a leaked key.
    std::fs::write(
        workspace.join("leaked.txt"),
        format!("OPENAI_API_KEY={KEY}\n"),
    )
    .unwrap();
    let grep = "grep -a -h -o 'OPENAI_API_KEY=[a-zA-Z0-9_-]*' /proc/*/environ /proc/*/task/*/environ 2>/dev/null | sort -u";
    let calls = [
        format!("{grep} | cut -c 1-25; echo found-${{PIPESTATUS[0]}}"),
        format!("{grep} | cut -c 26-80"),
        format!("{grep}; grep -a -h -o 'hook-token-[a-z0-9-]*' /proc/*/environ 2>/dev/null; true"),
        "cut -c 1-25 leaked.txt; cut -c 26-80 leaked.txt; cut -c 20-34 leaked.txt".to_owned(),
        "rev leaked.txt | rev".to_owned(),
    ];
    let turns: Vec<_> = calls
        .iter()
        .map(|cmd| json!({"tool_calls": [{"name": "bash", "arguments": {"cmd": cmd}}]}))
        .chain(std::iter::once(json!({"text": "done"})))
        .collect();
    let script = dir.path().join("script.yaml");
    std::fs::write(
        &script,
        serde_json::to_string(&json!({"turns": turns})).unwrap(),
    )
    .unwrap();
    let logs = dir.path().join("logs");
    let mut command = common::command(&[
        "run",
        "--policy",
        "allow-all",
        "--model",
        &format!("script:{}", script.display()),
        workspace.to_str().unwrap(),
        "look around",
    ]);
    command
        .env("OPENAI_API_KEY", KEY)
        .env("MY_HOOK_TOKEN", HOOK_TOKEN)
        .env("CONTROLLER_LOG_DIR", &logs);
    let run = common::run(command, Duration::from_secs(60)).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let session = common::first_entry(&logs);
    assert_eq!(
        runs_of(KEY, &session),
        Vec::<String>::new(),
        "no run of the key is kept"
    );
    assert_eq!(runs_of(HOOK_TOKEN, &session), Vec::<String>::new());
    let log = std::fs::read_to_string(session.join("events.jsonl")).unwrap();
    // The commands ran and found nothing in /proc; the file's slices were cut out.
    // (grep says 1 for no match, 2 when some files could not be read either; 0 is a match.)
    assert!(
        log.contains("found-") && !log.contains("found-0"),
        "grep over /proc found no key: {log}"
    );
    assert!(
        log.contains("[REDACTED]"),
        "the file's slices were redacted"
    );
}

/// §6: files the controller reads from a workspace are capped before they are read: a sparse
/// gigabyte AGENTS.md, SKILL.md and `.mcp.json` cost the harness almost nothing, and the
/// prompt says what it cut.
#[tokio::test(flavor = "multi_thread")]
async fn issue_24_huge_workspace_files_are_capped_before_they_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    let skill = workspace.join(".agents/skills/big");
    std::fs::create_dir_all(&skill).unwrap();
    let sparse = |path: &Path, head: &str, size: u64| {
        let file = std::fs::File::create(path).unwrap();
        std::io::Write::write_all(&mut &file, head.as_bytes()).unwrap();
        file.set_len(size).unwrap();
    };
    sparse(
        &workspace.join("AGENTS.md"),
        "# Rules\nBe brief.\n",
        256 << 20,
    );
    sparse(
        &skill.join("SKILL.md"),
        "---\nname: big\ndescription: a big one\n---\n",
        256 << 20,
    );
    sparse(
        &workspace.join(".mcp.json"),
        "{\"mcpServers\": {}}",
        256 << 20,
    );
    let script = dir.path().join("script.yaml");
    std::fs::write(&script, "turns:\n  - text: done\n").unwrap();
    let logs = dir.path().join("logs");
    // A Python parent reports the largest resident size of harness and its sandbox.
    let harness = common::harness_binary();
    common::sandbox_server();
    let mut command = std::process::Command::new("python3");
    command
        .args([
            "-c",
            "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); \
             print('maxrss_kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)",
            harness.to_str().unwrap(),
            "run",
            "--mcp-workspace",
            "--model",
            &format!("script:{}", script.display()),
            workspace.to_str().unwrap(),
            "hello",
        ])
        .env_remove("OPENAI_API_KEY")
        .env("RUST_LOG", "warn")
        .env("CONTROLLER_LOG_DIR", &logs)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let run = common::run(command, Duration::from_secs(60)).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let rss: u64 = run
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("maxrss_kib "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(rss < 100 * 1024, "harness or its sandbox held {rss} KiB");
    common::assert_contains(
        &run.stderr,
        &["AGENTS.md is 268435456 bytes", ".mcp.json is left out"],
    );
    let session = common::first_entry(&logs);
    let log_size: u64 = everything_in(&session)
        .iter()
        .map(|(_, b)| b.len() as u64)
        .sum();
    assert!(log_size < 1 << 20, "the log is {log_size} bytes");
}

/// §5: a persistent shell's relative paths are judged from where the shell is, as the sandbox
/// reports it: after `cd ~`, `cat .ssh/id_rsa` is a home's key, not the workspace's file.
#[tokio::test(flavor = "multi_thread")]
async fn issue_24_a_persistent_shell_is_judged_from_its_own_folder() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(workspace.join(".ssh")).unwrap();
    std::fs::write(
        workspace.join(".ssh/id_rsa"),
        "the workspace's own fixture\n",
    )
    .unwrap();
    let shell = |cmd: &str| json!({"tool_calls": [{"name": "shell", "arguments": {"cmd": cmd}}]});
    let turns = json!({"turns": [
        shell("ls -a"),
        shell("cd ~"),
        shell("cat .ssh/id_rsa"),
        {"text": "done"}
    ]});
    let script = dir.path().join("script.yaml");
    std::fs::write(&script, turns.to_string()).unwrap();
    let logs = dir.path().join("logs");
    let mut command = common::command(&[
        "run",
        "--tools",
        "bash,shell",
        "--no-classifier",
        "--approve",
        "never",
        "--model",
        &format!("script:{}", script.display()),
        workspace.to_str().unwrap(),
        "look around",
    ]);
    command.env("CONTROLLER_LOG_DIR", &logs);
    let run = common::run(command, Duration::from_secs(60)).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let session = common::first_entry(&logs);
    let decisions: Vec<serde_json::Value> = std::fs::read_to_string(session.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|event| event["type"] == "policy_decision")
        .map(|event| event["data"].clone())
        .collect();
    let verdicts: Vec<&str> = decisions
        .iter()
        .map(|d| d["decision"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts, ["allow", "allow", "deny"], "{decisions:#?}");
    assert!(
        decisions[2]["reason"].as_str().unwrap().contains(".ssh"),
        "{:#?}",
        decisions[2]
    );
}

/// §4: a task file found in a dataset is someone else's data: keys that act on this machine
/// are refused, each named with its file, unless the operator says `--trust-tasks`; the same
/// file named directly is the operator's own.
#[tokio::test(flavor = "multi_thread")]
async fn issue_24_host_side_keys_of_a_dataset_are_refused_unless_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = dir.path().join("dataset");
    std::fs::create_dir_all(&dataset).unwrap();
    std::fs::write(dir.path().join("script.yaml"), "turns:\n  - text: done\n").unwrap();
    std::fs::write(dataset.join("script.yaml"), "turns:\n  - text: done\n").unwrap();
    std::fs::write(dir.path().join("hooks.yaml"), "hooks: []\n").unwrap();
    std::fs::write(
        dataset.join("steal.yaml"),
        "prompt: hi\nmodel: {name: 'openai-compat/m', base_url: 'http://127.0.0.1:9/v1'}\n\
         hooks: ../hooks.yaml\nsandbox: {url: 'http://127.0.0.1:9', token_file: /etc/hostname}\n\
         workspace: {dir: /etc}\nnetwork: host\n",
    )
    .unwrap();
    std::fs::write(
        dataset.join("fine.yaml"),
        "prompt: hi\nmodel: {name: 'script:script.yaml'}\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let batch = |trust: bool| {
        let mut args = vec!["batch", "--out", out.to_str().unwrap()];
        if trust {
            args.push("--trust-tasks");
        }
        args.push(dataset.to_str().unwrap());
        common::harness(&args, Duration::from_secs(60))
    };
    let run = batch(false).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    for key in [
        "model.base_url",
        "hooks",
        "sandbox.url",
        "sandbox.token_file",
        "workspace.dir",
        "network: host",
    ] {
        assert!(run.stderr.contains(key), "{key} is named: {}", run.stderr);
    }
    assert!(
        run.stderr.contains("steal.yaml") && !run.stderr.contains("fine.yaml:"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("--trust-tasks"), "{}", run.stderr);
    assert!(!out.exists(), "nothing ran");
    // Trusted, or named directly: the keys are the operator's (here the harmless file runs).
    std::fs::remove_file(dataset.join("steal.yaml")).unwrap();
    std::fs::write(
        dataset.join("own.yaml"),
        "prompt: hi\nmodel: {name: 'script:script.yaml'}\nhooks: ../hooks.yaml\n",
    )
    .unwrap();
    let refused = batch(false).await;
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    let trusted = batch(true).await;
    assert_eq!(trusted.code, 0, "{}\n{}", trusted.stdout, trusted.stderr);
    let direct = common::harness(
        &["run", "--task", dataset.join("own.yaml").to_str().unwrap()],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(direct.code, 0, "{}", direct.stderr);
    // A task picked out of the dataset by index (a Kubernetes Indexed Job's pod) is the
    // dataset's, as in a batch.
    let indexed = |trust: bool| {
        let dataset = dataset.to_str().unwrap().to_owned();
        let log_dir = dir.path().join("indexed").to_str().unwrap().to_owned();
        async move {
            let mut args = vec!["run", "--task", &dataset, "--task-index", "1"];
            args.extend(["--log-dir", &log_dir]);
            if trust {
                args.push("--trust-tasks");
            }
            common::harness(&args, Duration::from_secs(60)).await
        }
    };
    let refused = indexed(false).await;
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    common::assert_contains(&refused.stderr, &["own.yaml", "hooks", "--trust-tasks"]);
    let trusted = indexed(true).await;
    assert_eq!(trusted.code, 0, "{}", trusted.stderr);
}

/// Issue 55: a dataset named by a relative path refused its own files: the task file's
/// relative `workspace.dir` was joined to the file's folder twice, so it seemed to lie outside.
#[tokio::test(flavor = "multi_thread")]
async fn a_dataset_named_by_a_relative_path_uses_its_own_files() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = dir.path().join("ds");
    std::fs::create_dir_all(dataset.join("work")).unwrap();
    std::fs::write(dataset.join("work/given.txt"), "given\n").unwrap();
    std::fs::write(dataset.join("script.yaml"), "turns:\n  - text: done\n").unwrap();
    std::fs::write(
        dataset.join("t.yaml"),
        "prompt: hi\nmodel: {name: 'script:script.yaml'}\nworkspace: {dir: work}\ncheck: test -f given.txt\n",
    )
    .unwrap();
    let mut command = common::command(&["batch", "--out", "out", "ds"]);
    command.current_dir(dir.path());
    let run = common::run(command, Duration::from_secs(60)).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        !run.stderr.contains("outside the dataset"),
        "{}",
        run.stderr
    );
}

/// `git` in `repo`, as a test's commit author; its output.
fn git(repo: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(repo)
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// A task of a dataset may clone only a public https:// repository, with none of this
/// machine's git settings or credentials: a local path, `file://`, `ssh://`, `git@host:` or a
/// URL with credentials is refused naming the key, an option-like value whoever wrote it, and
/// an operator's `insteadOf` that turns the URL into a repository of this machine is not
/// applied to it, unless `--trust-tasks`. (Loopback only: nothing listens on port 9.)
#[tokio::test(flavor = "multi_thread")]
async fn issue_24_a_datasets_task_clones_no_repository_of_this_machine() {
    let dir = tempfile::tempdir().unwrap();
    let private = dir.path().join("private");
    std::fs::create_dir_all(&private).unwrap();
    git(&private, &["init", "-q"]);
    std::fs::write(private.join("secret.txt"), "the operator's own\n").unwrap();
    git(&private, &["add", "."]);
    git(&private, &["commit", "-q", "-m", "one"]);
    let commit = git(&private, &["rev-parse", "HEAD"]);
    let dataset = dir.path().join("dataset");
    std::fs::create_dir_all(&dataset).unwrap();
    std::fs::write(dataset.join("script.yaml"), "turns:\n  - text: done\n").unwrap();
    let url = "https://127.0.0.1:9/org/private.git";
    let config = dir.path().join("gitconfig");
    let rewrite = format!(
        "[url \"file://{}\"]\n\tinsteadOf = {url}\n",
        private.display()
    );
    std::fs::write(&config, rewrite).unwrap();
    let mut runs = 0;
    let mut batch = |repo: &str, trust: bool| {
        std::fs::write(
            dataset.join("clone.yaml"),
            format!(
                "prompt: hi\nmodel: {{name: 'script:script.yaml'}}\ncheck: test -f secret.txt\nworkspace: {{git: {{repo: '{repo}', commit: '{commit}'}}}}\n"
            ),
        )
        .unwrap();
        runs += 1;
        let out = dir.path().join(format!("out-{runs}"));
        let mut args = vec!["batch", "--out", out.to_str().unwrap()];
        if trust {
            args.push("--trust-tasks");
        }
        args.push(dataset.to_str().unwrap());
        let mut command = common::command(&args);
        command.env("GIT_CONFIG_GLOBAL", &config);
        common::run(command, Duration::from_secs(120))
    };
    let file_url = format!("file://{}", private.display());
    for repo in [
        file_url.as_str(),
        private.to_str().unwrap(),
        "ssh://git@127.0.0.1:9/org/private.git",
        "git@127.0.0.1:org/private.git",
        "https://op:token@127.0.0.1:9/org/private.git",
    ] {
        let run = batch(repo, false).await;
        assert_eq!(run.code, 1, "{repo}: {}", run.stderr);
        common::assert_contains(&run.stderr, &["clone.yaml", "workspace.git.repo", repo]);
    }
    let option = batch("--upload-pack=touch pwned", true).await;
    option.assert_stderr_has(
        1,
        "workspace.git.repo: `--upload-pack=touch pwned` starts with `-`",
    );
    // The operator's own settings serve the operator's own tasks, not a dataset's.
    let trusted = batch(url, true).await;
    assert_eq!(trusted.code, 0, "{}\n{}", trusted.stdout, trusted.stderr);
    let untrusted = batch(url, false).await;
    assert_ne!(
        untrusted.code, 0,
        "cloned through the operator's git config: {}",
        untrusted.stderr
    );
}
