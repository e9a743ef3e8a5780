//! One session end to end: start (or reach) its sandbox, open its log, seed and set up the
//! workspace, run the agent, run the check, close the log, stop the sandbox. `harness run`
//! runs one; `harness batch` runs many at once, each through [`run_session`].
//!
//! Every path that started a sandbox stops it, and every path that opened the log finishes it
//! with `session_finished`, whose `failure` classifies what went wrong for batch reports.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use sandbox_protocol::ToolSpec;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::cli::SessionArgs;
use crate::config::{RunConfig, SandboxTarget};
use crate::docker_sandbox::DockerSandbox;
use crate::event_log::{
    self, CheckResult, ContainerRecord, Durability, ErrorEvent, Event, EventLog, RunSettings,
    SessionFinished, SessionStarted, Text,
};
use crate::exit_code;
use crate::llm::{self, RetryPolicy};
use crate::local_sandbox::LocalSandbox;
use crate::policy::{self, AllowAll, Approve, Classifier, Pipeline, Policy};
use crate::recording::Recorder;
use crate::run_loop::{Agent, Observer, Outcome, Totals};
use crate::sandbox_client::SandboxClient;
use crate::{prompt, seed};

/// An error that is the input's fault, not the infrastructure's: not worth a retry.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

impl BadInput {
    pub fn wrap(err: &anyhow::Error) -> anyhow::Error {
        anyhow::Error::new(BadInput(format!("{err:#}")))
    }
}

/// Why a session did not pass, as batch reports group them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The agent finished but the task's check failed.
    Check,
    /// A turn, cost or time limit stopped it.
    Limit,
    /// The model API failed (after its retries).
    Model,
    /// The sandbox died, could not start or stopped answering: the only class worth a retry.
    Infrastructure,
    /// Ctrl-C.
    Interrupted,
    /// Anything else: bad input, a tool the sandbox lacks, a failing setup command, a log error.
    Error,
}

impl Failure {
    pub fn name(self) -> &'static str {
        match self {
            Failure::Check => "check",
            Failure::Limit => "limit",
            Failure::Model => "model",
            Failure::Infrastructure => "infrastructure",
            Failure::Interrupted => "interrupted",
            Failure::Error => "error",
        }
    }
}

/// How the session's tool calls are judged.
#[derive(Debug, Clone)]
pub struct PolicySettings {
    /// A rules file, or `allow-all`.
    pub policy: Option<String>,
    pub classifier_model: Option<String>,
    pub classifier_timeout: Duration,
    pub no_classifier: bool,
    pub approve: Approve,
}

impl PolicySettings {
    pub fn from_args(args: &SessionArgs) -> PolicySettings {
        PolicySettings {
            policy: args.policy.clone(),
            classifier_model: args.classifier_model.clone(),
            classifier_timeout: Duration::from_secs(args.classifier_timeout.max(1)),
            no_classifier: args.no_classifier,
            approve: args.approve,
        }
    }
}

/// Everything a session needs besides its model.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    pub config: RunConfig,
    pub policy: PolicySettings,
    /// From [`event_log::new_session_id`].
    pub session_id: String,
    /// The session's own folder; `<log-dir>/<session-id>` for `harness run`.
    pub log_dir: PathBuf,
    pub durability: Durability,
    /// A local sandbox's own log lines go to `<log_dir>/sandbox-server.log` instead of stderr
    /// (a batch, whose display they would break).
    pub sandbox_log_in_folder: bool,
    /// The rate gates a classifier model's requests pass too (a batch's, shared by all tasks).
    pub gates: Option<Arc<crate::llm::gate::Gates>>,
}

/// How a session ended.
#[derive(Debug, Clone)]
pub struct SessionSummary {
    pub session_id: String,
    pub log_dir: PathBuf,
    /// `harness run`'s exit code.
    pub code: i32,
    pub outcome: &'static str,
    pub failure: Option<Failure>,
    pub answer: String,
    pub totals: Totals,
    pub duration: Duration,
}

/// The sandbox a session started, to stop when it ends and to ask whether it died.
#[derive(Debug)]
pub enum SandboxHandle {
    Local(LocalSandbox),
    Docker(DockerSandbox),
    /// Someone else's server: neither started nor stopped here.
    Remote,
}

impl SandboxHandle {
    /// Why the sandbox is gone, if it is: its process or container exited, or it stopped
    /// answering. `None` while it is healthy.
    pub async fn dead(&mut self, client: &SandboxClient) -> Option<String> {
        let unanswered = match tokio::time::timeout(Duration::from_secs(10), client.health()).await
        {
            Ok(Ok(())) => return None,
            Ok(Err(err)) => format!("the sandbox stopped answering: {err}"),
            Err(_) => "the sandbox did not answer /healthz within 10 s".to_owned(),
        };
        // Say what happened to it if we can: a process or container takes a moment to be
        // reported gone after its connections drop.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        loop {
            match self {
                SandboxHandle::Local(local) => {
                    if let Some(status) = local.exited() {
                        return Some(format!("the local sandbox-server exited ({status})"));
                    }
                }
                SandboxHandle::Docker(docker) => match docker.state().await {
                    Ok(state) if !state.running => {
                        return Some(format!(
                            "the sandbox container {} {}",
                            &docker.id[..12.min(docker.id.len())],
                            state.describe()
                        ));
                    }
                    Ok(_) => {}
                    Err(err) => return Some(format!("{unanswered}; the Docker engine: {err:#}")),
                },
                SandboxHandle::Remote => return Some(unanswered),
            }
            if tokio::time::Instant::now() >= deadline {
                return Some(unanswered);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops what this session started.
    pub async fn stop(self) {
        match self {
            SandboxHandle::Local(local) => local.stop().await,
            SandboxHandle::Docker(mut docker) => docker.remove().await,
            SandboxHandle::Remote => {}
        }
    }

    /// The container, for the log's header.
    fn container(&self, config: &RunConfig) -> Option<ContainerRecord> {
        match (self, &config.sandbox) {
            (SandboxHandle::Docker(docker), SandboxTarget::Docker(spec)) => Some(ContainerRecord {
                id: docker.id.clone(),
                image: spec.image.clone(),
                memory_bytes: spec.memory,
                cpus: spec.cpus,
                pids: spec.pids,
            }),
            _ => None,
        }
    }
}

/// Starts or reaches the sandbox the config names, with `token` (a remote one brings its own).
pub async fn start_sandbox(
    config: &RunConfig,
    session_id: &str,
    token: &str,
    server_log: Option<&Path>,
    observer: &dyn Observer,
) -> anyhow::Result<(SandboxHandle, SandboxClient)> {
    match &config.sandbox {
        SandboxTarget::Local => {
            let dir = local_workspace(config).map_err(|err| BadInput::wrap(&err))?;
            observer.note(&format!("workspace: {}", dir.display()));
            let sandbox = LocalSandbox::start(
                &dir,
                token,
                config.tools.as_deref(),
                &config.network,
                &config.writable,
                server_log,
            )
            .await?;
            let client = sandbox.client.clone();
            Ok((SandboxHandle::Local(sandbox), client))
        }
        SandboxTarget::Docker(spec) => {
            if let Some(dir) = &config.working_dir {
                observer.note(&format!(
                    "note: the working directory {} is not used by a docker sandbox (its workspace is in the container)",
                    dir.display()
                ));
            }
            let sandbox = DockerSandbox::start(spec, session_id, token).await?;
            observer.note(&format!(
                "sandbox: container {} of {}",
                &sandbox.id[..12.min(sandbox.id.len())],
                spec.image
            ));
            let client = sandbox.client.clone();
            Ok((SandboxHandle::Docker(sandbox), client))
        }
        SandboxTarget::Remote { url, .. } => {
            if let Some(dir) = &config.working_dir {
                observer.note(&format!(
                    "note: the working directory {} is ignored with a remote sandbox",
                    dir.display()
                ));
            }
            let client = SandboxClient::new(url, Some(token.to_owned()).filter(|t| !t.is_empty()));
            client
                .wait_healthy(Duration::from_secs(10))
                .await
                .with_context(|| format!("reaching the sandbox at {url}"))?;
            Ok((SandboxHandle::Remote, client))
        }
    }
}

/// The token the session's sandbox will use: a remote server's from its file, else a new one.
pub fn sandbox_token(config: &RunConfig) -> anyhow::Result<String> {
    match &config.sandbox {
        SandboxTarget::Remote {
            token_file: Some(file),
            ..
        } => Ok(std::fs::read_to_string(file)
            .with_context(|| format!("reading the sandbox token {}", file.display()))?
            .trim()
            .to_owned()),
        SandboxTarget::Remote {
            token_file: None, ..
        } => Ok(String::new()),
        _ => Ok(format!("{:032x}", rand::random::<u128>())),
    }
}

/// The folder a local sandbox serves: the working directory (created when missing), or, for a
/// task that brings its own workspace, an empty folder to seed.
fn local_workspace(config: &RunConfig) -> anyhow::Result<PathBuf> {
    match (&config.workspace, &config.working_dir) {
        (None, Some(dir)) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating the working directory {}", dir.display()))?;
            Ok(dir.clone())
        }
        (None, None) => Ok(PathBuf::from(".")),
        (Some(_), Some(dir)) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let empty = std::fs::read_dir(dir)
                .with_context(|| format!("reading {}", dir.display()))?
                .next()
                .is_none();
            if !empty {
                anyhow::bail!(
                    "{} is not empty: a task with a workspace source is copied into an empty folder",
                    dir.display()
                );
            }
            Ok(dir.clone())
        }
        (Some(_), None) => {
            let dir = tempfile::Builder::new()
                .prefix("harness-workspace-")
                .tempdir()
                .context("creating a workspace folder")?;
            Ok(dir.keep())
        }
    }
}

/// The policy of a run: `allow-all`, or rules (a file's and the built-in ones) then the classifier.
pub fn build_policy(
    settings: &PolicySettings,
    config: &RunConfig,
    model: &Arc<dyn llm::Model>,
    gates: Option<&crate::llm::gate::Gates>,
) -> anyhow::Result<Box<dyn Policy>> {
    if settings.policy.as_deref() == Some("allow-all") {
        return Ok(Box::new(AllowAll));
    }
    let file = settings.policy.as_deref().map(Path::new);
    let rules = policy::load_rules(file)?;
    let classifier = if settings.no_classifier {
        None
    } else {
        let (name, classifier_model) = match &settings.classifier_model {
            Some(name) => {
                let spec = llm::ModelSpec {
                    name: name.clone(),
                    ..config.model.clone()
                };
                (
                    name.clone(),
                    llm::build_gated(&spec, RetryPolicy::default(), gates)?,
                )
            }
            None => (config.model.name.clone(), model.clone()),
        };
        Some(Classifier {
            model: classifier_model,
            model_name: name,
            timeout: settings.classifier_timeout,
        })
    };
    let description = format!(
        "rules ({}{} deny, {} ask, {} allow){}; asks settled by: {}",
        file.map(|f| format!("{} + built-in: ", f.display()))
            .unwrap_or_else(|| "built-in: ".to_owned()),
        rules.deny.len(),
        rules.ask.len(),
        rules.allow.len(),
        classifier
            .as_ref()
            .map(|c| format!(" then classifier {}", c.model_name))
            .unwrap_or_default(),
        match settings.approve {
            Approve::Ask => "the person at the terminal (none means no)",
            Approve::Never => "nobody (--approve never: every ask is a no)",
            Approve::Auto => "automatic approval (--approve auto)",
        }
    );
    Ok(Box::new(Pipeline {
        rules,
        classifier,
        description,
    }))
}

/// Runs one session to its end. Never fails: whatever goes wrong after the log is open is in
/// the log and the summary; before that (the log folder cannot be made) only in the summary.
pub async fn run_session(
    options: &SessionOptions,
    model: Arc<dyn llm::Model>,
    observer: &dyn Observer,
    totals: &Mutex<Totals>,
    cancel: CancellationToken,
) -> SessionSummary {
    let started = Instant::now();
    let session_id = options.session_id.clone();
    let config = &options.config;
    let summary = |code, outcome, failure, answer: String, totals: &Mutex<Totals>| SessionSummary {
        session_id: session_id.clone(),
        log_dir: options.log_dir.clone(),
        code,
        outcome,
        failure,
        answer,
        totals: *totals.lock().unwrap_or_else(|p| p.into_inner()),
        duration: started.elapsed(),
    };
    let fail = |err: anyhow::Error, totals: &Mutex<Totals>| {
        observer.note(&format!("error: {err:#}"));
        summary(
            exit_code::ERROR,
            "error",
            Some(Failure::Error),
            String::new(),
            totals,
        )
    };
    let token = match sandbox_token(config) {
        Ok(token) => token,
        Err(err) => return fail(err, totals),
    };
    let policy = match build_policy(&options.policy, config, &model, options.gates.as_deref()) {
        Ok(policy) => policy,
        Err(err) => return fail(err, totals),
    };
    if options.policy.policy.as_deref() == Some("allow-all") {
        observer.note("policy: allow-all (every tool call runs unchecked)");
    } else {
        observer.note(&format!("policy: {}", policy.name()));
    }
    let secrets = crate::secrets::values(std::slice::from_ref(&token));
    let log = match EventLog::create(&options.log_dir, options.durability, secrets) {
        Ok(log) => log,
        Err(err) => return fail(err.into(), totals),
    };
    observer.note(&format!("log: {}", options.log_dir.display()));

    // From here every path writes `session_finished` and stops what it started.
    let server_log = options
        .sandbox_log_in_folder
        .then(|| options.log_dir.join("sandbox-server.log"));
    let boot = tokio::select! {
        result = start_sandbox(config, &session_id, &token, server_log.as_deref(), observer) => Some(result),
        () = cancel.cancelled() => None,
    };
    let nowhere = SandboxClient::new("http://unreachable.invalid", None);
    let unstarted = Parts {
        options,
        session_id: &session_id,
        model: model.as_ref(),
        policy: policy.as_ref(),
        client: &nowhere,
        container: None,
        recorder: None,
        observer,
    };
    let (mut handle, client) = match boot {
        Some(Ok(pair)) => pair,
        Some(Err(err)) => {
            // Nothing of the task ran. A sandbox that would not start is the infrastructure's
            // failure, unless the input was wrong (a folder that is not empty, an image the
            // engine does not have).
            let bad_input = err.chain().any(|cause| cause.is::<BadInput>());
            let (class, failure, code) = if bad_input {
                ("internal", Failure::Error, exit_code::ERROR)
            } else {
                (
                    "infrastructure",
                    Failure::Infrastructure,
                    exit_code::INFRASTRUCTURE,
                )
            };
            let message = format!("starting the sandbox: {err:#}");
            observer.note(&format!("error: {message}"));
            let _ = unstarted.header(&log, None, None).await;
            let event = ErrorEvent {
                class: class.to_owned(),
                message,
                call_id: None,
            };
            let _ = log.record(Event::Error(event)).await;
            return finish(
                &log,
                summary(code, "error", Some(failure), String::new(), totals),
            )
            .await;
        }
        None => {
            let _ = unstarted.header(&log, None, None).await;
            let _ = log
                .record(Event::Error(ErrorEvent {
                    class: "interrupted".to_owned(),
                    message: "interrupted while the sandbox started".to_owned(),
                    call_id: None,
                }))
                .await;
            return finish(
                &log,
                summary(
                    exit_code::INTERRUPTED,
                    "interrupted",
                    Some(Failure::Interrupted),
                    String::new(),
                    totals,
                ),
            )
            .await;
        }
    };
    let recorder = Recorder::new(log.clone(), client.clone());
    let parts = Parts {
        options,
        session_id: &session_id,
        model: model.as_ref(),
        policy: policy.as_ref(),
        client: &client,
        container: handle.container(config),
        recorder: Some(&recorder),
        observer,
    };
    let lifetime = config.lifetime.unwrap_or(Duration::MAX);
    let ended = tokio::select! {
        result = parts.run(totals) => Ended::Ran(result),
        () = cancel.cancelled() => Ended::Interrupted,
        () = sleep_for(lifetime) => Ended::TimedOut,
    };
    let (mut code, mut outcome, mut failure, answer) = match ended {
        Ended::Ran(Ok(ran)) => (ran.code, ran.outcome, ran.failure, ran.answer),
        Ended::Ran(Err(err)) => (exit_code::ERROR, "error", Some(err.failure), String::new()),
        Ended::Interrupted => {
            observer.note("interrupted: stopping the sandbox");
            let _ = log
                .record(Event::Error(ErrorEvent {
                    class: "interrupted".to_owned(),
                    message: "interrupted (Ctrl-C)".to_owned(),
                    call_id: None,
                }))
                .await;
            (
                exit_code::INTERRUPTED,
                "interrupted",
                Some(Failure::Interrupted),
                String::new(),
            )
        }
        Ended::TimedOut => {
            let message = format!(
                "the session hit its lifetime of {}",
                humantime::format_duration(lifetime)
            );
            observer.note(&message);
            let _ = log
                .record(Event::Error(ErrorEvent {
                    class: "limit".to_owned(),
                    message: message.clone(),
                    call_id: None,
                }))
                .await;
            (
                exit_code::TIME_LIMIT,
                "time_limit",
                Some(Failure::Limit),
                format!("Stopped: {message}."),
            )
        }
    };
    // A sandbox that died is the infrastructure's failure, whatever the loop made of it, and
    // never a pass.
    if !matches!(failure, Some(Failure::Interrupted))
        && let Some(reason) = handle.dead(&client).await
    {
        observer.note(&format!("error: {reason}"));
        let _ = log
            .record(Event::Error(ErrorEvent {
                class: "infrastructure".to_owned(),
                message: reason,
                call_id: None,
            }))
            .await;
        (code, outcome, failure) = (
            exit_code::INFRASTRUCTURE,
            "error",
            Some(Failure::Infrastructure),
        );
    }
    let result = finish(&log, summary(code, outcome, failure, answer, totals)).await;
    handle.stop().await;
    result
}

async fn sleep_for(duration: Duration) {
    match tokio::time::Instant::now().checked_add(duration) {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

enum Ended {
    Ran(Result<Ran, Failed>),
    Interrupted,
    TimedOut,
}

/// What the session reached when it ran to its end.
struct Ran {
    code: i32,
    outcome: &'static str,
    failure: Option<Failure>,
    answer: String,
}

/// A session that stopped on an error (already in the log).
struct Failed {
    failure: Failure,
}

/// Writes `session_finished` and closes the log.
async fn finish(log: &EventLog, summary: SessionSummary) -> SessionSummary {
    let totals = summary.totals;
    let empty = Text {
        text: Some(String::new()),
        blob: None,
        preview: None,
        size: 0,
    };
    let finished = SessionFinished {
        outcome: summary.outcome.to_owned(),
        failure: summary.failure.map(|f| f.name().to_owned()),
        answer: log.text(&summary.answer).unwrap_or(empty),
        turns: totals.turns,
        model_calls: totals.model_calls,
        tool_calls: totals.tool_calls,
        usage: totals.usage,
        cost: totals.cost,
        cost_known: totals.cost_known,
        duration_ms: summary.duration.as_millis() as u64,
    };
    if let Err(err) = log
        .record(Event::SessionFinished(finished))
        .await
        .and(log.close().await)
    {
        tracing::error!("closing the session log: {err}");
    }
    summary
}

/// One session once its sandbox is up.
struct Parts<'a> {
    options: &'a SessionOptions,
    session_id: &'a str,
    model: &'a dyn llm::Model,
    policy: &'a dyn Policy,
    client: &'a SandboxClient,
    container: Option<ContainerRecord>,
    recorder: Option<&'a Recorder>,
    observer: &'a dyn Observer,
}

impl Parts<'_> {
    async fn run(&self, totals: &Mutex<Totals>) -> Result<Ran, Failed> {
        let Some(recorder) = self.recorder else {
            return Err(Failed {
                failure: Failure::Error,
            });
        };
        match self.run_inner(recorder, totals).await {
            Ok(ran) => Ok(ran),
            Err((failure, err)) => {
                if let Some(err) = err {
                    self.observer.note(&format!("error: {err:#}"));
                    let event = ErrorEvent {
                        class: match failure {
                            Failure::Infrastructure => "sandbox",
                            Failure::Model => "model",
                            _ => "internal",
                        }
                        .to_owned(),
                        message: format!("{err:#}"),
                        call_id: None,
                    };
                    let _ = recorder.log.record(Event::Error(event)).await;
                }
                Err(Failed { failure })
            }
        }
    }

    /// On error: the class, and the error unless the log has it already.
    async fn run_inner(
        &self,
        recorder: &Recorder,
        totals: &Mutex<Totals>,
    ) -> Result<Ran, (Failure, Option<anyhow::Error>)> {
        let (config, client) = (&self.options.config, self.client);
        let sandbox_failure = |err: anyhow::Error| {
            let infrastructure = err.chain().any(|cause| {
                cause
                    .downcast_ref::<crate::sandbox_client::SandboxError>()
                    .is_some_and(|e| e.is_infrastructure())
            });
            let class = if infrastructure {
                Failure::Infrastructure
            } else {
                Failure::Error
            };
            (class, Some(err))
        };
        let (system, tools, root) = match prepare(config, self.model, client, self.observer).await {
            Ok(ready) => ready,
            Err(err) => {
                self.header(&recorder.log, None, None)
                    .await
                    .map_err(sandbox_failure)?;
                return Err(sandbox_failure(err));
            }
        };
        self.header(&recorder.log, Some((&system.text, &tools)), Some(&root))
            .await
            .map_err(sandbox_failure)?;
        recorder
            .initial_snapshot()
            .await
            .context("recording the initial workspace")
            .map_err(sandbox_failure)?;
        recorder
            .fingerprint(None)
            .await
            .context("recording the state fingerprint")
            .map_err(sandbox_failure)?;

        let agent = Agent {
            model: self.model,
            sandbox: client,
            policy: self.policy,
            approve: self.options.policy.approve,
            tools,
            limits: config.limits,
            observer: self.observer,
            recorder,
        };
        let report = match agent.run(&system.text, &config.prompt, totals).await {
            Ok(report) => report,
            Err(err) => {
                // Already an `error` event, with its class.
                let failure = match err.class() {
                    "model" => Failure::Model,
                    "sandbox" => Failure::Infrastructure,
                    _ => Failure::Error,
                };
                self.observer.note(&format!("error: {err}"));
                return Err((failure, None));
            }
        };
        recorder
            .fingerprint(None)
            .await
            .context("recording the state fingerprint")
            .map_err(sandbox_failure)?;
        let (mut code, mut outcome, mut failure) = match report.outcome {
            Outcome::Completed => (exit_code::COMPLETED, "completed", None),
            Outcome::TurnLimit => (exit_code::TURN_LIMIT, "turn_limit", Some(Failure::Limit)),
            Outcome::CostLimit => (exit_code::COST_LIMIT, "cost_limit", Some(Failure::Limit)),
        };
        if let Some(check) = &config.check {
            let started = Instant::now();
            let result = bash(client, check, config.check_timeout)
                .await
                .context("running the check")
                .map_err(sandbox_failure)?;
            let passed = result["exit_code"] == 0;
            let output = result["output"].as_str().unwrap_or("");
            self.observer.note(&format!(
                "check: {} ({check})",
                if passed { "passed" } else { "failed" }
            ));
            let event = CheckResult {
                command: check.clone(),
                passed,
                exit_code: result["exit_code"].as_i64().unwrap_or(-1) as i32,
                output: recorder
                    .log
                    .text(output)
                    .map_err(|e| (Failure::Error, Some(e.into())))?,
                duration_ms: started.elapsed().as_millis() as u64,
            };
            recorder
                .log
                .record(Event::CheckResult(event))
                .await
                .map_err(|e| (Failure::Error, Some(e.into())))?;
            if !passed {
                self.observer.note(output);
                if code == exit_code::COMPLETED {
                    (code, outcome, failure) = (
                        exit_code::CHECK_FAILED,
                        "check_failed",
                        Some(Failure::Check),
                    );
                }
            }
        }
        Ok(Ran {
            code,
            outcome,
            failure,
            answer: report.answer,
        })
    }

    /// The header: written first, with whatever of the prompt and tools exist by then.
    async fn header(
        &self,
        log: &EventLog,
        prompt: Option<(&str, &[ToolSpec])>,
        workspace_root: Option<&str>,
    ) -> anyhow::Result<()> {
        let config = &self.options.config;
        let (system_prompt, tools) = match prompt {
            Some((text, tools)) => (
                Some(log.text(text)?),
                Some(log.json_blob(&serde_json::to_value(tools)?)?),
            ),
            None => (None, None),
        };
        let settings = RunSettings {
            model: config.model.name.clone(),
            model_description: self.model.describe(),
            reasoning_effort: config.model.reasoning_effort.clone(),
            web_search: config.model.web_search,
            max_turns: config.limits.max_turns,
            max_cost: config.limits.max_cost,
            compact_at: config.limits.compact_at as u64,
            tool_names: prompt
                .map(|(_, tools)| tools.iter().map(|t| t.name.clone()).collect())
                .unwrap_or_default(),
            policy: self.policy.name(),
            sandbox: config.sandbox.kind().to_owned(),
            sandbox_url: self.client.url().to_owned(),
            container: self.container.clone(),
            lifetime_secs: config.lifetime.map(|l| l.as_secs()),
            workspace_root: workspace_root.map(str::to_owned),
            working_dir: config
                .working_dir
                .as_ref()
                .map(|dir| dir.display().to_string()),
            setup: config.setup.clone(),
            check: config.check.clone(),
            log_durability: self.options.durability.name().to_owned(),
        };
        let started = SessionStarted {
            format_version: event_log::FORMAT_VERSION,
            session_id: self.session_id.to_owned(),
            harness_version: env!("CARGO_PKG_VERSION").to_owned(),
            task: config.prompt.clone(),
            config: settings,
            system_prompt,
            tools,
        };
        log.record(Event::SessionStarted(Box::new(started))).await?;
        Ok(())
    }
}

/// Seeds the workspace, runs setup, and builds the system prompt and tool list.
async fn prepare(
    config: &RunConfig,
    model: &dyn llm::Model,
    client: &SandboxClient,
    observer: &dyn Observer,
) -> anyhow::Result<(prompt::SystemPrompt, Vec<ToolSpec>, String)> {
    if let Some(source) = &config.workspace {
        let seeded = seed::seed(client, source)
            .await
            .context("seeding the workspace")?;
        observer.note(&format!(
            "seeded the workspace: {} files, {} bytes",
            seeded.n_files, seeded.n_bytes
        ));
        for skipped in &seeded.skipped {
            observer.note(&format!("  skipped {skipped}"));
        }
    }
    for command in &config.setup {
        observer.note(&format!("setup: {command}"));
        let result = bash(client, command, config.check_timeout)
            .await
            .context("running a setup command")?;
        if result["exit_code"] != 0 {
            observer.note(result["output"].as_str().unwrap_or(""));
            anyhow::bail!("setup command failed: {command}");
        }
    }
    let info = client
        .info()
        .await
        .context("asking the sandbox for its info")?;
    let offered = client
        .tools()
        .await
        .context("listing the sandbox's tools")?;
    let tools = match &config.tools {
        None => offered,
        Some(wanted) => {
            if let Some(missing) = wanted
                .iter()
                .find(|name| !offered.iter().any(|tool| &tool.name == *name))
            {
                let names: Vec<&str> = offered.iter().map(|tool| tool.name.as_str()).collect();
                anyhow::bail!(
                    "tool `{missing}` is not offered by the sandbox (it has: {})",
                    names.join(", ")
                );
            }
            offered
                .into_iter()
                .filter(|tool| wanted.contains(&tool.name))
                .collect()
        }
    };
    let system = prompt::build(client, &info.workspace_root)
        .await
        .context("reading AGENTS.md and skills")?;
    for warning in &system.warnings {
        observer.note(&format!("warning: {warning}"));
    }
    if !model.has_price() {
        observer.note(&format!(
            "warning: no price is known for this model, so its cost is unknown and --max-cost ({:.2}) cannot stop the run; give one with --price INPUT,OUTPUT",
            config.limits.max_cost
        ));
    }
    Ok((system, tools, info.workspace_root))
}

async fn bash(
    client: &SandboxClient,
    cmd: &str,
    timeout: u32,
) -> anyhow::Result<serde_json::Value> {
    Ok(client
        .call_tool(
            "bash",
            &json!({"cmd": cmd, "timeout": timeout.clamp(1, 3600)}),
        )
        .await?)
}
