use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

// Shared with the benches.
#[path = "../../benches/support/log_events.rs"]
mod log_events;
#[path = "../../benches/support/log_line.rs"]
mod log_line;
#[path = "../../benches/support/run_args.rs"]
mod run_args;
#[path = "../../benches/support/scripted_task.rs"]
mod scripted_task;

pub(crate) use log_events::events;
pub(crate) use scripted_task::scripted_task;
pub use testkit::repo_root;

/// The `harness` binary under test.
pub fn harness_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_harness"))
}

/// The sandbox-server binary beside `harness`, where `cargo build`/`cargo test --workspace` put it.
pub fn sandbox_server() -> PathBuf {
    let path = harness_binary().with_file_name("sandbox-server");
    assert!(
        path.is_file(),
        "{} is missing: run the tests with `cargo test --workspace`, which builds it",
        path.display()
    );
    path
}

/// A sandbox-server on loopback, as a remote one would be: killed on drop.
pub struct Sandbox {
    pub child: std::process::Child,
    pub url: String,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a sandbox-server on `workspace` (with `--token-file` when given) and waits for its
/// address.
pub fn start_sandbox(workspace: &Path, token_file: Option<&Path>) -> Sandbox {
    let mut command = testkit::serve(sandbox_server(), workspace);
    command.env("RUST_LOG", "warn");
    if let Some(token_file) = token_file {
        command.arg("--token-file").arg(token_file);
    }
    let (child, line) = testkit::spawn_server(&mut command);
    let url = testkit::url_of(&line);
    Sandbox { child, url }
}

/// What a finished `harness` run printed.
#[derive(Debug)]
pub struct Run {
    /// The harness process's id (its containers carry it as a label).
    pub pid: u32,
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

/// A `harness` command with a clean environment: no keys or endpoints leak in from the machine.
pub fn command(args: &[&str]) -> Command {
    sandbox_server();
    let mut command = Command::new(harness_binary());
    command
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("CONTROLLER_MODEL")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env("RUST_LOG", "warn")
        // A test never builds the static server: `bash .ci/run` builds it before the tests.
        .env("HARNESS_NO_BUILD", "1")
        .env("CONTROLLER_LOG_DIR", log_root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs to the end, bounded by `limit` (then killed and reported as a failure).
pub async fn run(mut command: Command, limit: Duration) -> Run {
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        let child = command.spawn().expect("start harness");
        let pid = child.id();
        let watchdog = std::thread::spawn(move || {
            let deadline = Instant::now() + limit;
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    return;
                }
            }
            eprintln!(
                "harness ran out of time; where it and its children were:\n{}",
                stacks(pid)
            );
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg(pid.to_string())
                .status();
        });
        let output = child.wait_with_output().unwrap();
        let _ = watchdog.join();
        Run {
            pid,
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            elapsed: start.elapsed(),
        }
    })
    .await
    .unwrap()
}

/// `harness ARGS`, run to the end bounded by `limit` (the command made at once: the run holds
/// no borrow of `args`).
pub fn harness<S: AsRef<str>>(
    args: &[S],
    limit: Duration,
) -> impl std::future::Future<Output = Run> + use<S> {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    run(command(&args), limit)
}

/// Every file beneath `dir` (folders walked, not listed), relative to `dir`, sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path.strip_prefix(dir).unwrap().to_owned());
            }
        }
    }
    found.sort();
    found
}

/// The first entry of a folder (a log folder's one session).
pub fn first_entry(dir: &Path) -> PathBuf {
    let mut entries = std::fs::read_dir(dir).unwrap().flatten();
    entries.next().unwrap().path()
}

/// `harness run --policy allow-all --log-dir LOGS --task TASK TARGET`, not yet started.
pub fn run_into(logs: &Path, task: &Path, target: &Path) -> Command {
    command(&run_args::run_into(logs, task, target))
}

/// The arguments of `harness replay restore LOG --step STEP --to TO`.
pub fn restore_args<'a>(log: &'a Path, step: &'a str, to: &'a Path) -> [&'a str; 7] {
    let (log, to) = (log.to_str().unwrap(), to.to_str().unwrap());
    ["replay", "restore", log, "--step", step, "--to", to]
}

/// The arguments of `harness replay export --format atif LOG -o OUT`.
pub fn export_args<'a>(log: &'a Path, out: &'a Path) -> [&'a str; 7] {
    let (log, out) = (log.to_str().unwrap(), out.to_str().unwrap());
    ["replay", "export", "--format", "atif", log, "-o", out]
}

/// Asserts that `text` holds each of `needles` (showing `text` when one is missing).
#[track_caller]
pub fn assert_contains(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }
}

/// `harness run --policy allow-all --task TASK TARGET`, bounded by a minute.
pub async fn run_task(task: &Path, target: &Path) -> Run {
    let task = task.to_str().unwrap();
    let target = target.to_str().unwrap();
    let args = ["run", "--policy", "allow-all", "--task", task, target];
    harness(&args, Duration::from_secs(60)).await
}

/// A workspace with an AGENTS.md and a skill.
pub fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("AGENTS.md"),
        "\n# Rules\n\nBe brief & careful.\n\n",
    )
    .unwrap();
    let skill = dir.path().join(".agents/skills/data-tools");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: data-tools\ndescription: Summarise <CSV> files & tables.\n---\n# Data tools\n",
    )
    .unwrap();
    dir
}

pub use testkit::{alive, stacks};

/// Kills (SIGKILL) the sandbox-server above the live process whose command line is exactly
/// `marker` (a task's command that waits to be killed), once one appears within `within`: how
/// a test makes a sandbox die under a session. (A command cannot: it sees and signals no
/// process outside its sandbox.) Whether one was killed.
pub async fn kill_the_sandbox_of(marker: &str, within: Duration) -> bool {
    let cmdline = |pid: u32| {
        let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        String::from_utf8_lossy(&raw)
            .replace('\0', " ")
            .trim()
            .to_owned()
    };
    let parent = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit(')')
            .next()?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let start = Instant::now();
    while start.elapsed() < within {
        let found = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
            .find(|&pid| cmdline(pid) == marker);
        if let Some(mut pid) = found {
            for _ in 0..16 {
                let Some(up) = parent(pid) else { break };
                if cmdline(up).contains("sandbox-server serve") {
                    let _ = std::process::Command::new("kill")
                        .args(["-KILL", &up.to_string()])
                        .status();
                    return true;
                }
                pid = up;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Where test sessions write their logs (each run prints its own folder as `log: PATH`).
pub fn log_root() -> PathBuf {
    std::env::temp_dir().join("harness-test-logs")
}

impl Run {
    /// Asserts that the run exited with `code` and its stderr holds `needle` (showing its
    /// stderr).
    #[track_caller]
    pub fn assert_stderr_has(&self, code: i32, needle: &str) {
        assert_eq!(self.code, code, "{}", self.stderr);
        assert!(self.stderr.contains(needle), "{}", self.stderr);
    }

    /// The session folder this run reported.
    pub fn log_dir(&self) -> PathBuf {
        log_line::log_dir(&self.stderr)
    }
}

/// One turn of a scripted model (YAML, indented for `turns:`) that runs `cmd` with `bash`.
pub fn bash_turn(cmd: &str) -> String {
    format!(
        "  - text: run\n    tool_calls:\n      - name: bash\n        arguments: {{cmd: {}}}\n",
        serde_json::to_string(cmd).unwrap()
    )
}

/// A scripted model's call of `bash` that runs `cmd` (JSON, for a script's `tool_calls`).
pub fn bash_call(cmd: &str) -> serde_json::Value {
    serde_json::json!({"name": "bash", "arguments": {"cmd": cmd}})
}

/// A scripted model's call of `write_file` that writes `content` to `path` (JSON).
pub fn write_call(path: &str, content: &str) -> serde_json::Value {
    serde_json::json!({"name": "write_file", "arguments": {"path": path, "content": content}})
}

/// One turn of a scripted model (YAML, indented for `turns:`) that calls `tool` with `args`.
pub fn call_turn(tool: &str, args: &serde_json::Value) -> String {
    format!(
        "  - text: calling {tool}\n    tool_calls:\n      - name: {tool}\n        arguments: {args}\n"
    )
}

/// Headless Chromium (the first of its names installed) with a profile of its own and
/// `args`, run to the end (for the tests that need `HARNESS_TEST_BROWSER`).
pub fn chromium<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Output {
    let browser = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|name| {
            Command::new("which")
                .arg(name)
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("HARNESS_TEST_BROWSER is set but no Chromium is installed");
    let profile = tempfile::tempdir().unwrap();
    Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .output()
        .unwrap()
}

/// A CA made here, and a certificate it issued for `localhost` with its key: (CA, certificate,
/// key), PEM.
pub fn localhost_certificate() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// Waits (bounded) until `path` holds `needle`.
pub fn wait_for_text(path: &Path, needle: &str) {
    let what = format!("{} to hold {needle}", path.display());
    testkit::wait_for(&what, Duration::from_secs(60), || {
        std::fs::read_to_string(path)
            .is_ok_and(|text| text.contains(needle))
            .then_some(())
    });
}
