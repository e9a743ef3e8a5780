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
//! - `running`: the session once its sandbox is up, and how a stop reaches what runs.

pub mod check;
mod header;
mod host_paths;
pub mod outcome;
mod prepare;
pub mod provider;
mod running;
pub mod sandbox;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::Instrument as _;

use tokio_util::sync::CancellationToken;

pub use outcome::{SessionOutcome, Stop};

use crate::config::RunConfig;
use crate::input::InputError;
use crate::run_loop::{Observer, Resume, Totals};
use crate::sandbox::docker::warm::WarmPool;
use crate::sandbox::pool::Lease;
use crate::step;
use harness_log::{Durability, ErrorClass, ErrorEvent, Event, EventLog};
use harness_models::{self, Model};
use harness_policy::{Asker, BuildPolicy, Policy};
use header::{Header, finish};
use running::Session;
use sandbox::{Sandbox, StartContext};

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

/// The session's steps in order; every path after the log opens writes `session_finished`
/// and stops what it started.
async fn session(
    mut options: SessionOptions,
    model: Arc<dyn Model>,
    audience: Audience<'_>,
    totals: &Mutex<Totals>,
    cancel: CancellationToken,
) -> SessionSummary {
    let tally = Tally {
        totals,
        started: Instant::now(),
    };
    let lease = options.lease.take();
    let options = options;
    let (token, policy, log) = match open(&options, &model, audience.observer) {
        Ok(opened) => opened,
        Err(err) => {
            let message = step::describe(&err);
            audience.observer.note(&format!("error: {message}"));
            return tally.summary(
                &options,
                SessionOutcome::Error,
                String::new(),
                Some(message),
            );
        }
    };
    // From here every path writes `session_finished` and stops what it started.
    let mut sandbox = match boot(&options, lease, &token, audience.observer, &cancel).await {
        Ok(sandbox) => sandbox,
        Err(stop) => {
            let header = Header {
                options: &options,
                model: model.as_ref(),
                policy: policy.as_ref(),
                sandbox: None,
                prepared: None,
            };
            return not_started(&header, &log, &stop, audience.observer, &tally).await;
        }
    };
    let session = Session::new(
        &options,
        &model,
        policy.as_ref(),
        &sandbox,
        audience,
        &log,
        &cancel,
    );
    let ended = session.run_to_end(totals, &cancel).await;
    let reason = ended.as_ref().err().map(|stop| stop.message.clone());
    let (mut outcome, answer) = match ended {
        Ok(ran) => ran,
        Err(stop) => stopped(&log, &stop, audience.observer).await,
    };
    if outcome != SessionOutcome::Interrupted {
        outcome = confirm_alive(&mut sandbox, outcome, &log, audience.observer).await;
    }
    let summary = tally.summary(&options, outcome, answer, reason);
    finish(&log, &summary).await;
    sandbox.stop().await;
    summary
}

/// What a summary takes besides how the session ended: its totals and when it started. One
/// value, so that every way out of `session` sums up the same.
struct Tally<'a> {
    totals: &'a Mutex<Totals>,
    started: Instant,
}

impl Tally<'_> {
    /// The summary now: the totals so far and the time since the start.
    fn summary(
        &self,
        options: &SessionOptions,
        outcome: SessionOutcome,
        answer: String,
        reason: Option<String>,
    ) -> SessionSummary {
        SessionSummary {
            session_id: options.session_id.clone(),
            log_dir: options.log_dir.clone(),
            outcome,
            answer,
            totals: *self.totals.lock().unwrap_or_else(|p| p.into_inner()),
            duration: self.started.elapsed(),
            reason,
        }
    }
}

/// The session's sandbox: its parent's for a subagent, else started here; Ctrl-C cuts the
/// start short.
async fn boot(
    options: &SessionOptions,
    lease: Option<Lease>,
    token: &str,
    observer: &dyn Observer,
    cancel: &CancellationToken,
) -> Result<Sandbox, Stop> {
    let boot = async {
        match &options.subagent {
            Some(child) => Ok(Sandbox::given(child.client.clone())),
            None => start_sandbox(options, lease, token, observer).await,
        }
    };
    tokio::select! {
        result = boot => result,
        () = cancel.cancelled() => Err(Stop::interrupted("interrupted while the sandbox started")),
    }
}

/// A session whose sandbox did not start: its header (without a sandbox), why it stopped, and
/// its end, so that its log reads as any other session's.
async fn not_started(
    header: &Header<'_>,
    log: &EventLog,
    stop: &Stop,
    observer: &dyn Observer,
    tally: &Tally<'_>,
) -> SessionSummary {
    let _ = header.record(log).await;
    let (outcome, answer) = stopped(log, stop, observer).await;
    let summary = tally.summary(header.options, outcome, answer, Some(stop.message.clone()));
    finish(log, &summary).await;
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
