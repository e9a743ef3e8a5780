//! Running hooks: a command with the event's JSON on its stdin, or a POST of it; all the hooks
//! of one event at once, each bounded by its timeout (a command's whole process group is
//! killed at it).

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::config::{Handler, OnError};
use super::{HookAnswer, HookDecision, HookEvent, HookInput, HookSpec, Hooks, MAX_OUTPUT};

/// How a hook's run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    /// It answered (an empty answer has no opinion).
    Answered(HookAnswer),
    /// A command exited 2: a deny, with its stderr as the reason.
    Blocked(String),
    /// It could not run, exited otherwise, answered with something that is not an answer, or
    /// (HTTP) did not answer 2xx.
    Failed(String),
    TimedOut,
}

/// One hook's run, as the log records it.
#[derive(Debug, Clone, PartialEq)]
pub struct HookRun {
    pub name: String,
    pub event: HookEvent,
    /// `command: …` or `http: URL`.
    pub handler: String,
    pub outcome: RunOutcome,
    pub on_error: OnError,
    pub duration: Duration,
    /// What it printed on stdout (or the HTTP body), at most `MAX_OUTPUT` bytes.
    pub output: String,
}

impl HookRun {
    /// Its answer, with a failure turned into its `on_error` decision where a failure decides
    /// (`pre_tool_use` and `user_prompt`; elsewhere a failure is only logged).
    pub fn effective(&self) -> HookAnswer {
        let decides = matches!(self.event, HookEvent::PreToolUse | HookEvent::UserPrompt);
        let failed = |why: String| HookAnswer {
            decision: (decides && self.on_error == OnError::Deny).then_some(HookDecision::Deny),
            reason: Some(why),
            ..HookAnswer::default()
        };
        match &self.outcome {
            RunOutcome::Answered(answer) => answer.clone(),
            RunOutcome::Blocked(why) => HookAnswer {
                decision: Some(HookDecision::Deny),
                reason: Some(why.clone()),
                ..HookAnswer::default()
            },
            RunOutcome::Failed(why) => failed(format!("failed ({why})")),
            RunOutcome::TimedOut => failed(format!(
                "timed out after {:.1} s",
                self.duration.as_secs_f64()
            )),
        }
    }
}

impl Hooks {
    /// Runs the hooks that apply to `input` (its event, and its call's tool for tool events),
    /// all at once, each given `input`; their runs in configuration order.
    pub async fn run(&self, input: &HookInput) -> Vec<HookRun> {
        let hooks = self.matching(
            input.about.event(),
            input.about.call().map(|(_, tool)| tool),
        );
        if hooks.is_empty() {
            return Vec::new();
        }
        let body = serde_json::to_vec(input).unwrap_or_default();
        let runs = hooks.into_iter().map(|hook| self.run_one(hook, &body));
        futures::future::join_all(runs).await
    }

    async fn run_one(&self, hook: &HookSpec, body: &[u8]) -> HookRun {
        let started = Instant::now();
        let (outcome, output) = match &hook.handler {
            Handler::Command(command) => {
                run_command(command, &self.folder, body, hook.timeout).await
            }
            Handler::Http { url, headers } => run_http(url, headers, body, hook.timeout).await,
        };
        let handler = match &hook.handler {
            Handler::Command(command) => format!("command: {command}"),
            Handler::Http { url, .. } => format!("http: {url}"),
        };
        HookRun {
            name: hook.name.clone(),
            event: hook.event,
            handler,
            outcome,
            on_error: hook.on_error,
            duration: started.elapsed(),
            output,
        }
    }
}

/// An answer's text: nothing is no opinion; anything else must be an answer.
fn answer(text: &str) -> RunOutcome {
    if text.trim().is_empty() {
        return RunOutcome::Answered(HookAnswer::default());
    }
    match serde_json::from_str::<HookAnswer>(text) {
        Ok(answer) => RunOutcome::Answered(answer),
        Err(err) => RunOutcome::Failed(format!("its answer is not a hook answer: {err}")),
    }
}

/// Reads at most `MAX_OUTPUT` bytes.
async fn read_bounded(stream: Option<impl tokio::io::AsyncRead + Unpin>) -> String {
    let mut bytes = Vec::new();
    if let Some(stream) = stream {
        let _ = stream.take(MAX_OUTPUT as u64).read_to_end(&mut bytes).await;
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

async fn run_command(
    command: &str,
    folder: &std::path::Path,
    body: &[u8],
    timeout: Duration,
) -> (RunOutcome, String) {
    // Hooks are the user's own programs, run on the controller's machine as configured.
    #[allow(clippy::disallowed_methods)]
    let mut child = match tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(folder)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
    {
        Ok(child) => child,
        Err(err) => {
            return (
                RunOutcome::Failed(format!("could not start: {err}")),
                String::new(),
            );
        }
    };
    let group = child.id();
    let stdin = child.stdin.take();
    let feed = async move {
        if let Some(mut stdin) = stdin {
            // A hook that does not read its input is not an error.
            let _ = stdin.write_all(body).await;
        }
    };
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let work = async {
        let ((), out, err, status) = tokio::join!(
            feed,
            read_bounded(stdout),
            read_bounded(stderr),
            child.wait()
        );
        (out, err, status)
    };
    match tokio::time::timeout(timeout, work).await {
        Ok((out, err, Ok(status))) => {
            let outcome = match status.code() {
                Some(0) => answer(&out),
                Some(2) => {
                    let why = err.trim();
                    RunOutcome::Blocked(if why.is_empty() {
                        "exit 2".to_owned()
                    } else {
                        why.to_owned()
                    })
                }
                code => RunOutcome::Failed(format!(
                    "exit {}: {}",
                    code.map_or_else(|| "by a signal".to_owned(), |c| c.to_string()),
                    err.trim().chars().take(500).collect::<String>()
                )),
            };
            (outcome, out)
        }
        Ok((out, _, Err(err))) => (RunOutcome::Failed(format!("waiting: {err}")), out),
        Err(_) => {
            if let Some(pid) = group.and_then(|pid| i32::try_from(pid).ok()) {
                // Everything it started goes with it.
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            (RunOutcome::TimedOut, String::new())
        }
    }
}

async fn run_http(
    url: &str,
    headers: &[(String, String)],
    body: &[u8],
    timeout: Duration,
) -> (RunOutcome, String) {
    // A fresh connection per call: a hook server that writes its headers and body apart (as
    // Python's http.server does) otherwise stalls each reused connection for the client's
    // delayed ACK (40 ms measured, against ~1 ms).
    static CLIENT: std::sync::LazyLock<reqwest::Client> = std::sync::LazyLock::new(|| {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap_or_default()
    });
    let mut request = CLIENT
        .post(url)
        .timeout(timeout)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_vec());
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(err) if err.is_timeout() => return (RunOutcome::TimedOut, String::new()),
        Err(err) => return (RunOutcome::Failed(err.to_string()), String::new()),
    };
    let status = response.status();
    let text = match response.bytes().await {
        Ok(bytes) => String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_OUTPUT)]).into_owned(),
        Err(err) if err.is_timeout() => return (RunOutcome::TimedOut, String::new()),
        Err(err) => return (RunOutcome::Failed(err.to_string()), String::new()),
    };
    if !status.is_success() {
        let why = format!(
            "HTTP {}: {}",
            status.as_u16(),
            text.trim().chars().take(500).collect::<String>()
        );
        return (RunOutcome::Failed(why), text);
    }
    (answer(&text), text)
}
