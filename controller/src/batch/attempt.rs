//! One task of a batch: its attempts, each on a fresh sandbox, the batch log's record of them,
//! and the progress a display shows.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{BatchConfig, BatchObserver, Progress, Running, Stopping, TaskSpec};
use harness_benchmark::results::{TrialLink, uuid_of};
use harness_log::{
    self, ErrorClass, ErrorEvent, Event, EventLog, FailureClass, TaskFinished, TaskRetried,
    TaskStarted,
};
use harness_models::gate::Gates;
use harness_policy::Nobody;
use harness_runtime::run_loop::{Observer, Totals};
use harness_runtime::sandbox::docker::warm::WarmPool;
use harness_runtime::sandbox::pool::{Lease, LeaseError, Pool};
use harness_runtime::session::{Audience, SessionOptions, SessionOutcome, SessionSummary};
use harness_runtime::task::WorkspaceSource;

/// What every task of a batch shares.
pub(super) struct TaskContext<'a> {
    pub config: &'a BatchConfig,
    pub log: &'a EventLog,
    pub progress: &'a Progress,
    pub observer: &'a dyn BatchObserver,
    pub gates: &'a Arc<Gates>,
    pub stopping: &'a Stopping,
    pub pool: Option<&'a Arc<Pool>>,
    /// Docker containers started ahead of need (`--pool-size`).
    pub warm: Option<&'a Arc<WarmPool>>,
}

/// Sessions in a batch print nothing (their logs have everything); the progress shows the
/// call each task is running.
struct Watched {
    current: Arc<Mutex<Option<String>>>,
}

impl Observer for Watched {
    fn tool_call(&self, call: &harness_models::ToolCall) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(call_summary(call));
    }

    fn tool_finished(&self, _call: &harness_models::ToolCall) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    fn compacted(&self, _before: usize, _after: usize) {}
}

/// A call in a few words, for a progress line: a `bash` call's command (its first line), a
/// file tool's path, or the tool's name.
pub(crate) fn call_summary(call: &harness_models::ToolCall) -> String {
    let args = serde_json::from_str(&call.arguments).unwrap_or_default();
    let input = sandbox_protocol::ToolInput::parse(&call.name, args).ok();
    let detail = match input
        .as_ref()
        .and_then(|i| i.command().or_else(|| i.path()))
    {
        Some(text) => {
            let first = text.lines().next().unwrap_or("");
            let more = if text.lines().nth(1).is_some() {
                " …"
            } else {
                ""
            };
            format!(" {first}{more}")
        }
        None => String::new(),
    };
    format!("{}{detail}", call.name)
}

/// A relative path for the log.
fn relative(path: &Path, base: &Path) -> String {
    path.strip_prefix(base)
        .unwrap_or(path)
        .display()
        .to_string()
}

impl TaskContext<'_> {
    /// Runs a task's attempts; whether it passed.
    pub(super) async fn run(&self, task: &TaskSpec) -> bool {
        let mut attempt = 1;
        loop {
            let summary = self.attempt(task, attempt).await;
            let outcome = summary.outcome;
            harness_telemetry::metrics().attempt(outcome.logged().as_str());
            let _ = self
                .log
                .record(Event::TaskFinished(TaskFinished {
                    task: task.id.clone(),
                    attempt,
                    outcome: outcome.logged(),
                    failure: outcome.failure_class(),
                    passed: outcome.passed(),
                    duration_ms: summary.duration.as_millis() as u64,
                    cost: summary.totals.cost_with_subagents(),
                }))
                .await;
            let retry = outcome.failure_class() == Some(FailureClass::Infrastructure)
                && attempt <= self.config.retries
                && !self.stopping.running.is_cancelled();
            if !retry {
                self.done(task, &summary);
                return outcome.passed();
            }
            attempt += 1;
            self.retried(task, attempt).await;
        }
    }

    fn done(&self, task: &TaskSpec, summary: &SessionSummary) {
        let passed = summary.outcome.passed();
        harness_telemetry::metrics().task_finished(summary.outcome.logged().as_str());
        self.progress.update(|p| {
            p.running.remove(&task.id);
            p.done += 1;
            if passed {
                p.passed += 1;
            } else {
                p.failed += 1;
            }
            p.durations.push(summary.duration);
        });
        self.observer.task_finished(&task.id, summary);
    }

    /// The failed attempt's log goes aside; the batch log says why the task runs again.
    async fn retried(&self, task: &TaskSpec, attempt: u32) {
        let out = &self.config.out;
        let reason =
            "infrastructure failure: the sandbox died, could not start or stopped answering";
        let moved = harness_log::set_aside(out, &task.id)
            .ok()
            .flatten()
            .map(|p| relative(&p, out))
            .unwrap_or_default();
        let _ = self
            .log
            .record(Event::TaskRetried(TaskRetried {
                task: task.id.clone(),
                attempt,
                reason: reason.to_owned(),
                previous_log: moved,
            }))
            .await;
        self.progress.update(|p| p.retries += 1);
        self.observer.task_retried(&task.id, attempt, reason);
    }

    /// One attempt, on a fresh sandbox.
    async fn attempt(&self, task: &TaskSpec, attempt: u32) -> SessionSummary {
        let log_dir = self.config.out.join(&task.id);
        // An earlier run's unfinished log (a resumed batch) is kept, out of the way.
        if let Err(err) = harness_log::set_aside(&self.config.out, &task.id) {
            self.observer
                .note(&format!("{}: moving an earlier log aside: {err}", task.id));
        }
        let totals = Arc::new(Mutex::new(Totals::default()));
        let current = Arc::new(Mutex::new(None));
        self.progress.update(|p| {
            let running = Running {
                attempt,
                started: Instant::now(),
                totals: totals.clone(),
                current: current.clone(),
            };
            p.running.insert(task.id.clone(), running);
        });
        self.observer.task_started(&task.id, attempt);
        let ready = match self.lease().await {
            Ok(lease) => self.session_options(task, &log_dir, lease),
            Err(stop) => Err(stop),
        };
        let (options, model, _workspace) = match ready {
            Ok(ready) => ready,
            Err((class, err)) => return self.unstarted(task, attempt, &log_dir, class, &err).await,
        };
        let sandbox = options.lease.as_ref().map(|lease| lease.url().to_owned());
        self.record_started(task, attempt, &log_dir, sandbox).await;
        let watched = Watched { current };
        let audience = Audience {
            observer: &watched,
            asker: &Nobody,
        };
        let cancel = self.stopping.running.child_token();
        // The leased member goes back to the pool when the session ends; the next lease
        // checks and resets it.
        let trial = options
            .config
            .sandbox
            .provider()
            .is_some()
            .then(|| TrialLink {
                job_id: Some(uuid_of(&self.config.batch_id)),
                source: task.dataset_name(),
            });
        harness_benchmark::run_session(options, trial.as_ref(), model, audience, &totals, cancel)
            .await
    }

    /// A pool member for the attempt, when the batch has a pool.
    async fn lease(&self) -> Result<Option<Lease>, (ErrorClass, anyhow::Error)> {
        let Some(pool) = self.pool else {
            return Ok(None);
        };
        pool.lease(&self.stopping.running)
            .await
            .map(Some)
            .map_err(|err| {
                let class = match err {
                    LeaseError::Interrupted => ErrorClass::Interrupted,
                    // Stopped as the wait ran out: the stop is what ended it.
                    LeaseError::NoneHealthy { .. } if self.stopping.running.is_cancelled() => {
                        ErrorClass::Interrupted
                    }
                    LeaseError::NoneHealthy { .. } => ErrorClass::Infrastructure,
                };
                (class, err.into())
            })
    }

    /// The session's options and model: its own workspace folder (removed when the returned
    /// folder is dropped) and log folder, the task file's settings under the batch's flags.
    #[allow(clippy::type_complexity)] // three parts of one answer, named where they are taken
    fn session_options(
        &self,
        task: &TaskSpec,
        log_dir: &Path,
        lease: Option<Lease>,
    ) -> Result<
        (
            SessionOptions,
            Arc<dyn harness_models::Model>,
            tempfile::TempDir,
        ),
        (ErrorClass, anyhow::Error),
    > {
        let internal = |err: anyhow::Error| (ErrorClass::Internal, err);
        let workspace = tempfile::Builder::new()
            .prefix(&format!("harness-batch-{}-", task.id))
            .tempdir()
            .map_err(|err| internal(err.into()))?;
        let mut config = crate::launch::run_config(
            &task.source,
            &task.task,
            &self.config.flags,
            &self.config.trial,
            Some(workspace.path().to_owned()),
            lease.is_some(),
        )
        .map_err(|err| internal(err.into()))?;
        // A dataset's task is someone else's unless the operator vouched for it.
        if task.dataset.is_some() && !self.config.trust_tasks {
            config.workspace = config.workspace.map(WorkspaceSource::untrusted);
        }
        let model = crate::launch::build_model(&config, Some(self.gates)).map_err(internal)?;
        let options = SessionOptions {
            config,
            session_id: harness_log::new_session_id(),
            log_dir: log_dir.to_owned(),
            durability: self.config.durability,
            sandbox_log_in_folder: true,
            gates: Some(self.gates.clone()),
            lease,
            warm: self.warm.cloned(),
            build_policy: harness_judge::build_policy,
            resume: None,
            subagent: None,
        };
        Ok((options, model, workspace))
    }

    async fn record_started(
        &self,
        task: &TaskSpec,
        attempt: u32,
        log_dir: &Path,
        sandbox: Option<String>,
    ) {
        let _ = self
            .log
            .record(Event::TaskStarted(TaskStarted {
                task: task.id.clone(),
                attempt,
                log_dir: relative(log_dir, &self.config.out),
                sandbox,
            }))
            .await;
    }

    /// An attempt that could not start its session: no session log, so the batch log and the
    /// summary carry it.
    async fn unstarted(
        &self,
        task: &TaskSpec,
        attempt: u32,
        log_dir: &Path,
        class: ErrorClass,
        err: &anyhow::Error,
    ) -> SessionSummary {
        self.observer.note(&format!("{}: {err:#}", task.id));
        self.record_started(task, attempt, log_dir, None).await;
        let event = ErrorEvent {
            class,
            message: format!("{}: {err:#}", task.id),
            call_id: None,
        };
        let _ = self.log.record(Event::Error(event)).await;
        SessionSummary {
            session_id: String::new(),
            log_dir: log_dir.to_owned(),
            outcome: SessionOutcome::after(class),
            answer: String::new(),
            totals: Totals::default(),
            duration: Duration::ZERO,
            reason: Some(format!("{err:#}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::call_summary;
    use harness_models::ToolCall;

    fn call(name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: "c1".to_owned(),
            name: name.to_owned(),
            arguments: arguments.to_owned(),
        }
    }

    #[test]
    fn a_call_is_summed_up_by_its_command_or_path() {
        assert_eq!(
            call_summary(&call("bash", r#"{"cmd": "make test\necho done"}"#)),
            "bash make test …"
        );
        assert_eq!(
            call_summary(&call("read_file", r#"{"path": "src/a.rs"}"#)),
            "read_file src/a.rs"
        );
        assert_eq!(call_summary(&call("think", "not json")), "think");
    }
}
