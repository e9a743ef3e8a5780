//! One session end to end, as the seed's `run()` with a sandbox around it: open the log, start
//! (or reach) the sandbox, prepare the workspace, run the agent, run the check, close the log,
//! stop the sandbox. `harness run` runs one; `harness batch` runs many, each through
//! [`run_session`].
//!
//! Every path that started a sandbox stops it, and every path that opened the log finishes it
//! with `session_finished`, whose `failure` classifies what went wrong.
//!
//! - [`outcome`]: how a session ended, and why it stopped early (one mapping to exit codes,
//!   failure and error classes).
//! - [`sandbox`]: the session's sandbox behind one type (local, docker, URL, pool lease, or
//!   what a [`provider`] started).
//! - [`provider`]: the seam to what a session is part of: who starts its sandbox, who grades.
//! - `prepare`, `check`, `header`: the steps before and after the agent.

pub mod check;
mod header;
mod host_paths;
pub mod outcome;
mod prepare;
pub mod provider;
pub mod sandbox;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::Instrument as _;

use tokio_util::sync::CancellationToken;

pub use outcome::{SessionOutcome, Stop};

use crate::config::RunConfig;
use crate::input::InputError;
use crate::mcp::{McpConfig, McpTools};
use crate::recording::Recorder;
use crate::run_loop::{Agent, Observer, Resume, Totals};
use crate::sandbox::docker::warm::WarmPool;
use crate::sandbox::pool::Lease;
use crate::step::{self, Step, StepError};
use harness_log::{Durability, ErrorClass, ErrorEvent, Event, EventLog};
use harness_models::{self, Model};
use harness_policy::{Approval, Asker, BuildPolicy, Policy};
use header::{Header, finish};
use prepare::{Prepared, prepare};
use sandbox::{Sandbox, StartContext};

/// The largest workspace `.mcp.json` read (`--mcp-workspace`).
const MCP_FILE_MAX: usize = 1 << 20;

/// Everything a session needs besides its model.
#[derive(Debug)]
pub struct SessionOptions {
    pub config: RunConfig,
    /// From [`harness_log::new_session_id`].
    pub session_id: String,
    /// The session's own folder; `<log-dir>/<session-id>` for `harness run`.
    pub log_dir: PathBuf,
    pub durability: Durability,
    /// A local sandbox's own log lines go to `<log_dir>/sandbox-server.log` instead of stderr
    /// (a batch, whose display they would break).
    pub sandbox_log_in_folder: bool,
    /// The rate gates a classifier model's requests pass too (a batch's, shared by all tasks).
    pub gates: Option<Arc<harness_models::gate::Gates>>,
    /// The pool member the batch leased, for a `SandboxTarget::Pool`.
    pub lease: Option<Lease>,
    /// Docker containers started ahead of need, for a `SandboxTarget::Docker` (a batch's).
    pub warm: Option<Arc<WarmPool>>,
    /// Makes the policy from `config.policy` (`harness_judge::build_policy`, which the binary
    /// hands in: the runtime knows the policy's contract, not its rules).
    pub build_policy: BuildPolicy,
    /// A forked session: the parent's conversation it continues (its workspace is the one
    /// the config names, restored to the same step).
    pub resume: Option<Arc<Resume>>,
    /// A subagent: its parent, its tree's limits and the sandbox it works in.
    pub subagent: Option<crate::subagent::spawn::ChildOf>,
}

/// Who a session talks to: a display for its progress, and someone to settle asks.
#[derive(Clone, Copy)]
pub struct Audience<'a> {
    pub observer: &'a dyn Observer,
    pub asker: &'a dyn Asker,
}

/// How a session ended.
#[derive(Debug, Clone)]
pub struct SessionSummary {
    pub session_id: String,
    pub log_dir: PathBuf,
    pub outcome: SessionOutcome,
    pub answer: String,
    pub totals: Totals,
    pub duration: Duration,
    /// Why it stopped early (the message of its stopping `error` event); `None` when it ran
    /// to its end.
    pub reason: Option<String>,
}

/// Runs one session to its end. Never fails: whatever goes wrong after the log is open is in
/// the log and the summary; before that (the log folder cannot be made) only in the summary.
pub async fn run_session(
    options: SessionOptions,
    model: Arc<dyn Model>,
    audience: Audience<'_>,
    totals: &Mutex<Totals>,
    cancel: CancellationToken,
) -> SessionSummary {
    // The root of the session's trace: the sandbox's start, the seeding, every turn and the
    // check are below it, and so are the sandbox's own spans.
    let span = tracing::info_span!(
        "session",
        session_id = %options.session_id,
        model = %model.describe(),
        outcome = tracing::field::Empty,
    );
    // Boxed: a session's future is deep (model, hooks, MCP, sandbox, log), and a caller that
    // nests it (a batch's attempt) would otherwise pass the compiler's query depth limit.
    let summary = Box::pin(session(options, model, audience, totals, cancel))
        .instrument(span.clone())
        .await;
    span.record("outcome", summary.outcome.logged().as_str());
    summary
}

async fn session(
    mut options: SessionOptions,
    model: Arc<dyn Model>,
    audience: Audience<'_>,
    totals: &Mutex<Totals>,
    cancel: CancellationToken,
) -> SessionSummary {
    let started = Instant::now();
    let lease = options.lease.take();
    let options = options;
    let summarise =
        |options: &SessionOptions, outcome: SessionOutcome, answer: String| SessionSummary {
            session_id: options.session_id.clone(),
            log_dir: options.log_dir.clone(),
            outcome,
            answer,
            totals: *totals.lock().unwrap_or_else(|p| p.into_inner()),
            duration: started.elapsed(),
            reason: None,
        };
    let (token, policy, log) = match open(&options, &model, audience.observer) {
        Ok(opened) => opened,
        Err(err) => {
            let message = step::describe(&err);
            audience.observer.note(&format!("error: {message}"));
            let mut summary = summarise(&options, SessionOutcome::Error, String::new());
            summary.reason = Some(message);
            return summary;
        }
    };
    // From here every path writes `session_finished` and stops what it started.
    let boot = async {
        match &options.subagent {
            Some(child) => Ok(Sandbox::given(child.client.clone())),
            None => start_sandbox(&options, lease, &token, audience.observer).await,
        }
    };
    let boot = tokio::select! {
        result = boot => result,
        () = cancel.cancelled() => Err(Stop::interrupted("interrupted while the sandbox started")),
    };
    let mut sandbox = match boot {
        Ok(sandbox) => sandbox,
        Err(stop) => {
            let header = Header {
                options: &options,
                model: model.as_ref(),
                policy: policy.as_ref(),
                sandbox: None,
                prepared: None,
            };
            let _ = header.record(&log).await;
            let (outcome, answer) = stopped(&log, &stop, audience.observer).await;
            let mut summary = summarise(&options, outcome, answer);
            summary.reason = Some(stop.message.clone());
            finish(&log, &summary).await;
            return summary;
        }
    };
    let session = Session {
        options: &options,
        model: &model,
        policy: policy.as_ref(),
        sandbox: &sandbox,
        audience,
        recorder: Recorder::new(log.clone(), sandbox.client.clone(), &options.session_id)
            .on_host_network(matches!(
                options.config.sandbox,
                crate::config::SandboxTarget::Local
            ))
            .with_blob_source(
                options
                    .subagent
                    .as_ref()
                    .map(|child| child.blob_source.clone()),
            )
            .with_provided_blobs(
                options
                    .resume
                    .as_ref()
                    .map(|resume| std::sync::Arc::clone(&resume.provided_blobs))
                    .unwrap_or_default(),
            ),
        children: cancel.child_token(),
        stop_reason: Arc::default(),
        groups: AtomicUsize::new(0),
    };
    let lifetime = options.config.lifetime.unwrap_or(Duration::MAX);
    let mut run = Box::pin(session.run(totals));
    let stopped_by = tokio::select! {
        result = &mut run => Ok(result),
        () = cancel.cancelled() => Err(Stop::cancelled(options.subagent.as_ref())),
        () = sleep_for(lifetime) => Err(Stop::lifetime(lifetime)),
    };
    let ended = match stopped_by {
        Ok(result) => result,
        Err(stop) => {
            // Subagents running: they stop too, and each gets its log's end and its call's
            // result before this session's end is written.
            let _ = session.stop_reason.set(stop.message.clone());
            session.children.cancel();
            drain(run.as_mut(), &session.groups).await;
            Err(stop)
        }
    };
    drop(run);
    // A call the stop cut short (Ctrl-C, the lifetime) still gets its result in the log.
    let cut = ended.as_ref().err().and_then(Stop::cut_short_by);
    if let Some(why) = cut
        && let Err(err) = session.recorder.record_interrupted(why).await
    {
        audience.observer.note(&format!(
            "the interrupted call's output was not kept: {err}"
        ));
    }
    let reason = ended.as_ref().err().map(|stop| stop.message.clone());
    let (mut outcome, answer) = match ended {
        Ok(ran) => ran,
        Err(stop) => stopped(&log, &stop, audience.observer).await,
    };
    if outcome != SessionOutcome::Interrupted {
        outcome = confirm_alive(&mut sandbox, outcome, &log, audience.observer).await;
    }
    let mut summary = summarise(&options, outcome, answer);
    summary.reason = reason;
    finish(&log, &summary).await;
    sandbox.stop().await;
    summary
}

/// A sandbox that died is the infrastructure's failure, whatever the loop made of it, and
/// never a pass.
async fn confirm_alive(
    sandbox: &mut Sandbox,
    outcome: SessionOutcome,
    log: &EventLog,
    observer: &dyn Observer,
) -> SessionOutcome {
    match sandbox.dead().await {
        Some(reason) => {
            let stop = Stop::new(ErrorClass::Infrastructure, reason);
            record_stop(log, &stop, observer).await;
            stop.outcome()
        }
        None => outcome,
    }
}

/// Why a session could not open: the sandbox token, the policy or the log folder.
#[derive(Debug, thiserror::Error)]
enum OpenError {
    #[error(transparent)]
    Token(#[from] InputError),
    #[error(transparent)]
    Policy(#[from] harness_policy::PolicyError),
    #[error(transparent)]
    Log(#[from] harness_log::EventLogError),
}

/// The sandbox token, the policy and the log: what a session needs before anything starts.
fn open(
    options: &SessionOptions,
    model: &Arc<dyn Model>,
    observer: &dyn Observer,
) -> Result<(String, Box<dyn Policy>, EventLog), OpenError> {
    let config = &options.config;
    let token = sandbox::token(config)?;
    host_paths::check(config, &options.log_dir)?;
    let policy = (options.build_policy)(
        &config.policy,
        &config.model,
        model,
        options.gates.as_deref(),
    )?;
    if config.policy.allow_all {
        observer.note("policy: allow-all (every tool call runs unchecked)");
    } else {
        observer.note(&format!("policy: {}", policy.name()));
    }
    let mut known = vec![token.clone()];
    if let Some(child) = &options.subagent {
        // The sandbox it reaches is its parent's (or its spawner's).
        known.push(child.token.clone());
    }
    known.extend(config.mcp.secret_values());
    known.extend(config.hooks.secret_values());
    let secrets = harness_log::secrets::values(&known);
    let log = EventLog::create(&options.log_dir, options.durability, &secrets)?;
    observer.note(&format!("log: {}", options.log_dir.display()));
    Ok((token, policy, log))
}

async fn start_sandbox(
    options: &SessionOptions,
    lease: Option<Lease>,
    token: &str,
    observer: &dyn Observer,
) -> Result<Sandbox, Stop> {
    let server_log = options
        .sandbox_log_in_folder
        .then(|| options.log_dir.join("sandbox-server.log"));
    let context = StartContext {
        session_id: &options.session_id,
        token,
        lease,
        warm: options.warm.as_ref(),
        server_log: server_log.as_deref(),
        observer,
    };
    let provider = options.config.sandbox.label();
    let started = std::time::Instant::now();
    let span = tracing::info_span!("sandbox_start", provider);
    let sandbox = Sandbox::start(&options.config, context)
        .instrument(span)
        .await;
    harness_telemetry::metrics().sandbox_started(provider, started.elapsed(), sandbox.is_ok());
    sandbox.map_err(|err| Stop::start(&err))
}

/// A session that stopped early: its `error` event, its outcome, and the seed's "Stopped: …"
/// answer when a limit stopped it.
async fn stopped(log: &EventLog, stop: &Stop, observer: &dyn Observer) -> (SessionOutcome, String) {
    record_stop(log, stop, observer).await;
    let answer = match stop.class {
        ErrorClass::Limit => format!("Stopped: {}.", stop.message),
        _ => String::new(),
    };
    (stop.outcome(), answer)
}

/// An `error` event for a session that stopped early, shown as it is logged.
async fn record_stop(log: &EventLog, stop: &Stop, observer: &dyn Observer) {
    let note = match stop.class {
        ErrorClass::Interrupted => "interrupted: stopping the sandbox".to_owned(),
        ErrorClass::Limit => stop.message.clone(),
        _ => format!("error: {}", stop.message),
    };
    observer.note(&note);
    if stop.logged {
        return;
    }
    let event = ErrorEvent {
        class: stop.class,
        message: stop.message.clone(),
        call_id: None,
    };
    let _ = log.record(Event::Error(event)).await;
}

/// Polls a stopped session's run while a group of subagents is recording its end (at most
/// 30 s); the group then goes no further.
async fn drain<F: Future>(mut run: std::pin::Pin<&mut F>, groups: &AtomicUsize) {
    let waited = async {
        while groups.load(Ordering::SeqCst) > 0 {
            tokio::select! {
                _ = run.as_mut() => return,
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(30), waited).await;
}

async fn sleep_for(duration: Duration) {
    match tokio::time::Instant::now().checked_add(duration) {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// One session once its sandbox is up.
struct Session<'a> {
    options: &'a SessionOptions,
    model: &'a Arc<dyn Model>,
    policy: &'a dyn Policy,
    sandbox: &'a Sandbox,
    audience: Audience<'a>,
    recorder: Recorder,
    /// Its subagents' cancellation: Ctrl-C, or this session's lifetime.
    children: CancellationToken,
    /// Why it stopped, set before `children` is cancelled (its subagents say it).
    stop_reason: Arc<std::sync::OnceLock<String>>,
    /// Groups of `agent` calls running now.
    groups: AtomicUsize,
}

impl Session<'_> {
    /// The session with its MCP servers up for its length (when it has any).
    async fn run(&self, totals: &Mutex<Totals>) -> Result<(SessionOutcome, String), Stop> {
        let prepared = prepare(
            &self.options.config,
            self.model.as_ref(),
            &self.sandbox.client,
            self.audience.observer,
        )
        .await;
        // After the preparation: the workspace's own `.mcp.json` is there only once seeded.
        let (mcp, tools, servers) = match &prepared {
            Ok(_) => self.start_mcp().await,
            Err(_) => (McpTools::default(), Vec::new(), McpConfig::default()),
        };
        let result = self.run_with(&mcp, tools, servers, prepared, totals).await;
        mcp.stop().await;
        result
    }

    /// The session's MCP servers, started (none when it has none), and their list (what a
    /// subagent inherits).
    async fn start_mcp(&self) -> (McpTools, Vec<sandbox_protocol::ToolSpec>, McpConfig) {
        let config = self.mcp_config().await;
        if config.servers.is_empty() {
            return (McpTools::default(), Vec::new(), config);
        }
        let (mcp, tools, notes) =
            McpTools::start(&config, &self.options.log_dir, &self.sandbox.client).await;
        for note in &notes {
            self.audience.observer.note(note);
        }
        (mcp, tools, config)
    }

    /// The MCP servers: the run's, and with `--mcp-workspace` the workspace's `.mcp.json` (a
    /// file that cannot be read or used is a note, and its servers are left out).
    async fn mcp_config(&self) -> McpConfig {
        let mut config = (*self.options.config.mcp).clone();
        if !self.options.config.mcp_workspace {
            return config;
        }
        let note = |text: String| self.audience.observer.note(&format!("mcp: {text}"));
        match self
            .sandbox
            .client
            .get_file(".mcp.json", MCP_FILE_MAX)
            .await
        {
            Ok(Some(head)) if head.truncated() => note(format!(
                "the workspace's .mcp.json is left out: it is {} bytes, over the {MCP_FILE_MAX} this harness reads",
                head.size
            )),
            Ok(Some(head)) => {
                match McpConfig::from_workspace(&String::from_utf8_lossy(&head.bytes)) {
                    Ok(workspace) => {
                        for name in config.merge(workspace) {
                            note(format!(
                                "the workspace's server {name} is left out: --mcp names one so"
                            ));
                        }
                    }
                    Err(err) => note(format!("the workspace's .mcp.json is left out: {err}")),
                }
            }
            Ok(None) => note("the workspace has no .mcp.json".to_owned()),
            Err(err) => note(format!("reading the workspace's .mcp.json: {err}")),
        }
        config
    }

    /// The seed's run: prepare, record where the agent starts, run it, check its work.
    async fn run_with(
        &self,
        mcp: &McpTools,
        mcp_tools: Vec<sandbox_protocol::ToolSpec>,
        servers: McpConfig,
        mut prepared: Result<Prepared, StepError>,
        totals: &Mutex<Totals>,
    ) -> Result<(SessionOutcome, String), Stop> {
        if let Ok(prepared) = &mut prepared {
            prepared.tools.extend(mcp_tools);
        }
        let header = self.header(prepared.as_ref().ok());
        header
            .record(&self.recorder.log)
            .await
            .map_err(|err| Stop::preparing(&err))?;
        let prepared = prepared.map_err(|err| Stop::preparing(&err))?;
        let grader = self.sandbox.grader();
        grader
            .prepare(&self.recorder.log)
            .await
            .map_err(|err| Stop::preparing(&err))?;
        self.record_start()
            .await
            .map_err(|err| Stop::preparing(&err))?;
        let spawner = self.spawner(servers);
        let agent = Agent {
            model: self.model.as_ref(),
            sandbox: &self.sandbox.client,
            policy: self.policy,
            approval: Approval {
                mode: self.options.config.policy.approve,
                asker: self.audience.asker,
            },
            tools: prepared.tools.clone(),
            limits: self.options.config.limits,
            observer: self.audience.observer,
            recorder: &self.recorder,
            hooks: &self.options.config.hooks,
            mcp,
            resume: self.options.resume.as_deref(),
            subagents: spawner.as_ref().map(|s| s as &dyn crate::run_loop::Spawn),
        };
        let grading = provider::Grading {
            agent: &agent,
            system_prompt: &prepared.system.text,
            config: &self.options.config,
            client: &self.sandbox.client,
            recorder: &self.recorder,
            observer: self.audience.observer,
            log_dir: &self.options.log_dir,
            totals,
        };
        grader.run(grading).await
    }

    /// Who starts this session's subagents, when it has the `agent` tool.
    fn spawner(&self, servers: McpConfig) -> Option<crate::subagent::spawn::Spawner<'_>> {
        let limits = self.options.config.subagents?;
        let (tree, depth) = match &self.options.subagent {
            Some(child) => (child.tree.clone(), child.link.depth),
            None => {
                let config = &self.options.config;
                let tree = crate::subagent::tree::Tree::new(
                    limits,
                    config.limits.max_cost,
                    &config.prompt,
                );
                (Arc::new(tree), 0)
            }
        };
        Some(crate::subagent::spawn::Spawner {
            tree,
            depth,
            options: self.options,
            model: self.model,
            audience: self.audience,
            client: &self.sandbox.client,
            log: &self.recorder.log,
            mcp: Arc::new(servers),
            cancel: &self.children,
            stop_reason: Arc::clone(&self.stop_reason),
            groups: &self.groups,
            parallel: tokio::sync::Semaphore::new(limits.max_parallel as usize),
            shared: tokio::sync::Mutex::new(()),
            asks: tokio::sync::Mutex::new(()),
        })
    }

    fn header<'a>(&'a self, prepared: Option<&'a Prepared>) -> Header<'a> {
        Header {
            options: self.options,
            model: self.model.as_ref(),
            policy: self.policy,
            sandbox: Some(self.sandbox),
            prepared,
        }
    }

    /// The workspace as the agent finds it, and the state fingerprint.
    async fn record_start(&self) -> Result<(), StepError> {
        self.recorder
            .initial_snapshot()
            .await
            .step("recording the initial workspace")?;
        self.recorder
            .fingerprint(None)
            .await
            .step("recording the state fingerprint")
    }
}
