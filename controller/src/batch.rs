//! `harness batch`: many tasks at once, each in its own sandbox with its own session log, under
//! one batch folder that also holds the batch's own log (`events.jsonl`, one writer).
//!
//! - At most `parallel` tasks run at once; model requests pass one rate gate per endpoint,
//!   shared by every task ([`harness_models::gate`]).
//! - Only infrastructure failures are retried, on a fresh sandbox; the failed attempt's log is
//!   kept under `attempts/`, and `task_retried` says why ([`attempt`]).
//! - Stopping is in two steps: `new_tasks` starts no more tasks and lets the running ones
//!   finish; `running` interrupts them too (their sandboxes are removed, their logs finished).
//! - `resume` runs only the tasks without a finished log.
//! - [`tasks`]: finding and naming tasks, and the default parallelism; [`progress`]: the
//!   batch as it goes, for a display. The report is `harness_replay::report`: it reads the logs.

mod attempt;
mod check;
mod job;
pub mod progress;
pub mod tasks;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

pub use progress::{Progress, ProgressState, Running};
pub use tasks::{TaskSpec, collect_tasks, default_parallel, refuse_host_side_keys};

use attempt::TaskContext;
use check::{Checked, check_tasks};
use harness_log::{
    self, BatchFinished, BatchStarted, BatchTask, Durability, Event, EventLog, GateRecord, Outcome,
    TaskNotRunnable, TaskSkipped, WarmPoolRecord,
};
use harness_models::gate::Gates;
use harness_runtime::config::SessionFlags;
use harness_runtime::sandbox::docker::warm::WarmPool;
use harness_runtime::sandbox::pool::Pool;
use harness_runtime::session::SessionSummary;

/// Where the batch's sandboxes come from.
#[derive(Debug, Clone, PartialEq)]
pub enum SandboxSource {
    /// A local sandbox-server per task.
    Local,
    /// A fresh container per task.
    Docker,
    /// Running servers, leased one task at a time, reset between tasks.
    Pool(Vec<String>),
}

impl SandboxSource {
    /// `local`, `docker` or `pool:URL,URL…`.
    pub fn parse(text: &str) -> Result<SandboxSource, String> {
        match text {
            "local" => Ok(SandboxSource::Local),
            "docker" => Ok(SandboxSource::Docker),
            _ => match text.strip_prefix("pool:") {
                Some(list) => parse_pool(list),
                None => Err(format!(
                    "--sandbox {text}: a batch takes `local`, `docker` or `pool:URL,URL…`"
                )),
            },
        }
    }

    fn describe(&self) -> String {
        match self {
            SandboxSource::Local => "local".to_owned(),
            SandboxSource::Docker => "docker".to_owned(),
            SandboxSource::Pool(urls) => format!("pool:{}", urls.join(",")),
        }
    }
}

fn parse_pool(list: &str) -> Result<SandboxSource, String> {
    let urls: Vec<String> = list
        .split(',')
        .map(|u| u.trim().trim_end_matches('/').to_owned())
        .filter(|u| !u.is_empty())
        .collect();
    if urls.is_empty() {
        return Err("--sandbox pool: give at least one URL".to_owned());
    }
    if let Some(bad) = urls
        .iter()
        .find(|u| !u.starts_with("http://") && !u.starts_with("https://"))
    {
        return Err(format!("--sandbox pool: `{bad}` is not an http(s) URL"));
    }
    Ok(SandboxSource::Pool(urls))
}

/// Everything a batch needs.
#[derive(Debug, Clone)]
pub struct BatchConfig {
    pub batch_id: String,
    pub tasks: Vec<TaskSpec>,
    /// The flags every session takes (a task's own file fills what they leave open).
    pub flags: SessionFlags,
    /// The flags benchmark tasks take.
    pub trial: harness_benchmark::flags::TrialFlags,
    pub sandbox: SandboxSource,
    pub parallel: usize,
    pub parallel_reason: String,
    pub retries: u32,
    /// Independent trials per task (`--attempts`).
    pub attempts: u32,
    /// Docker containers started ahead of need (`--pool-size`); 0 for none.
    pub pool_size: usize,
    /// The batch folder.
    pub out: PathBuf,
    pub resume: bool,
    /// Of every task's session log (the batch's own is always durable).
    pub durability: Durability,
    /// `--trust-tasks`: the task files of a dataset are taken as the operator's own (else a
    /// dataset's git workspace is cloned with none of this machine's git settings or
    /// credentials).
    pub trust_tasks: bool,
}

/// The two steps of stopping.
#[derive(Debug, Clone, Default)]
pub struct Stopping {
    /// Start no new task.
    pub new_tasks: CancellationToken,
    /// Interrupt the running ones.
    pub running: CancellationToken,
}

/// What a batch runs, once its tasks are checked (before any starts).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The batch's tasks (not their trials), those that cannot run here among them.
    pub tasks: usize,
    /// The tasks this harness cannot run here, by name (left out of the batch).
    pub not_runnable: Vec<String>,
    /// Benchmark trials the oracle plays whose task's author marks it broken on purpose
    /// (`[metadata] expected_broken`): why, by the trial's log folder.
    pub expected_broken: BTreeMap<String, String>,
}

/// Hooks for a display that prints a line per event.
pub trait BatchObserver: Send + Sync {
    /// The tasks are checked: what runs, said once before anything starts.
    fn planned(&self, _plan: &Plan) {}
    fn task_started(&self, task: &str, attempt: u32);
    fn task_finished(&self, task: &str, summary: &SessionSummary);
    fn task_retried(&self, task: &str, attempt: u32, reason: &str);
    fn note(&self, text: &str);
}

/// How a batch ended.
#[derive(Debug, Clone)]
pub struct BatchOutcome {
    pub passed: usize,
    pub failed: usize,
    pub not_run: usize,
    /// Tasks of its datasets the harness could not run (each trial of them left out).
    pub not_runnable: usize,
    pub skipped: usize,
    pub interrupted: bool,
}

/// Runs the batch to its end (or its stop). Errors are for a batch that could not start
/// (bad input, a batch folder that cannot be written); a task's failure is in its row.
pub async fn run_batch(
    config: &BatchConfig,
    progress: Arc<Progress>,
    observer: Arc<dyn BatchObserver>,
    gates: Arc<Gates>,
    stopping: Stopping,
) -> anyhow::Result<BatchOutcome> {
    let started = Instant::now();
    let log_started = harness_log::now();
    let checked = check_tasks(config)?;
    observer.planned(&checked.plan(config));
    checked.note(observer.as_ref());
    let warm = new_warm_pool(config)?;
    let resumed = prepare_out(config)?;
    let log = open_log(config, resumed, &checked.not_runnable).await?;
    for task in &checked.not_runnable {
        log.record(Event::TaskNotRunnable(task.clone())).await?;
    }
    let mut todo = tasks_to_run(config, &log, observer.as_ref()).await?;
    todo.retain(|t| !checked.not_runnable.iter().any(|n| n.task == t.task));
    let skipped = config.tasks.len() - todo.len() - checked.trials_not_runnable;
    progress.update(|p| {
        p.total = todo.len();
        p.skipped = skipped;
    });
    let pool = sandbox_pool(config)?;
    let context = TaskContext {
        config,
        log: &log,
        progress: &progress,
        observer: observer.as_ref(),
        gates: &gates,
        stopping: &stopping,
        pool: pool.as_ref(),
        warm: warm.as_ref(),
    };
    let outcomes = run_tasks(&context, todo).await;
    let outcome = tally(&outcomes, checked.not_runnable.len(), skipped, &stopping);
    let warm_pool = match &warm {
        Some(warm) => Some(drain_warm_pool(warm, config.pool_size, observer.as_ref()).await),
        None => None,
    };
    let retries = progress.snapshot().retries;
    close_log(&log, &outcome, retries, started, &gates, warm_pool).await?;
    write_job(config, &log_started, &checked, observer.as_ref());
    Ok(outcome)
}

/// Docker containers started ahead of need (`--pool-size`), which only `--sandbox docker`
/// takes.
fn new_warm_pool(config: &BatchConfig) -> anyhow::Result<Option<Arc<WarmPool>>> {
    Ok(match (&config.sandbox, config.pool_size) {
        (_, 0) => None,
        (SandboxSource::Docker, size) => Some(WarmPool::new(size)),
        _ => anyhow::bail!("--pool-size keeps Docker containers ready: it needs --sandbox docker"),
    })
}

/// The running servers a `pool:` batch leases, one task at a time.
fn sandbox_pool(config: &BatchConfig) -> anyhow::Result<Option<Arc<Pool>>> {
    Ok(match &config.sandbox {
        SandboxSource::Pool(urls) => Some(Arc::new(Pool::new(
            urls,
            config.flags.sandbox_token_file.as_deref(),
            &config.flags.sandbox_tls,
        )?)),
        SandboxSource::Local | SandboxSource::Docker => None,
    })
}

/// The tasks, `parallel` at once; once new tasks are stopped the rest do not start. Each
/// task's entry: whether it passed, `None` when it did not run.
async fn run_tasks(context: &TaskContext<'_>, todo: Vec<TaskSpec>) -> Vec<Option<bool>> {
    futures::stream::iter(todo)
        .map(move |task| async move {
            if context.stopping.new_tasks.is_cancelled() {
                return None;
            }
            Some(context.run(&task).await)
        })
        .buffer_unordered(context.config.parallel.max(1))
        .collect()
        .await
}

/// The batch's outcome from its tasks' entries (see [`run_tasks`]).
fn tally(
    outcomes: &[Option<bool>],
    not_runnable: usize,
    skipped: usize,
    stopping: &Stopping,
) -> BatchOutcome {
    BatchOutcome {
        passed: outcomes.iter().filter(|o| **o == Some(true)).count(),
        failed: outcomes.iter().filter(|o| **o == Some(false)).count(),
        not_run: outcomes.iter().filter(|o| o.is_none()).count(),
        not_runnable,
        skipped,
        interrupted: stopping.new_tasks.is_cancelled() || stopping.running.is_cancelled(),
    }
}

/// The job's result files; the batch has run, so a failure here is a warning.
fn write_job(
    config: &BatchConfig,
    log_started: &str,
    checked: &Checked,
    observer: &dyn BatchObserver,
) {
    let not_runnable: Vec<&str> = checked
        .not_runnable
        .iter()
        .map(|n| n.task.as_str())
        .collect();
    if let Err(err) = job::write(config, log_started, &not_runnable) {
        observer.note(&format!("warning: writing the job's result files: {err:#}"));
    }
}

/// Removes the warm containers no task leased, and says how the tasks' containers were served.
async fn drain_warm_pool(
    warm: &WarmPool,
    size: usize,
    observer: &dyn BatchObserver,
) -> WarmPoolRecord {
    warm.drain().await;
    let (leased_ready, started_on_demand) = warm.hits_and_misses();
    observer.note(&format!(
        "warm pool: {leased_ready} of {} sandboxes were leased ready, {started_on_demand} started on demand",
        leased_ready + started_on_demand
    ));
    WarmPoolRecord {
        size: size as u32,
        leased_ready,
        started_on_demand,
    }
}

/// Checks `--out`: a batch folder to resume, a new or empty one, never someone else's folder.
/// Returns whether it resumes.
fn prepare_out(config: &BatchConfig) -> anyhow::Result<bool> {
    let out = &config.out;
    let log_exists = out.join("events.jsonl").is_file();
    if log_exists && !harness_replay::report::is_batch(out) {
        anyhow::bail!(
            "{} holds a log that is not a batch's (a session's?): choose another --out",
            out.display()
        );
    }
    if log_exists && !config.resume {
        anyhow::bail!(
            "{} holds a batch already: add --resume to run the tasks it has not finished, or \
             choose another --out",
            out.display()
        );
    }
    if !log_exists && out.exists() {
        let empty = std::fs::read_dir(out)
            .with_context(|| format!("reading {}", out.display()))?
            .next()
            .is_none();
        if !empty {
            anyhow::bail!(
                "{} exists and is not a batch folder (it has no batch log): choose another --out",
                out.display()
            );
        }
        // An empty folder made for the batch: the log makes it again.
        std::fs::remove_dir(out).with_context(|| format!("using {}", out.display()))?;
    }
    Ok(log_exists)
}

/// Opens (or reopens) the batch log and records `batch_started`, with the tasks that run.
async fn open_log(
    config: &BatchConfig,
    resumed: bool,
    not_runnable: &[TaskNotRunnable],
) -> anyhow::Result<EventLog> {
    let secrets = harness_log::secrets::values(&[]);
    let log = if resumed {
        EventLog::reopen(&config.out, Durability::Durable, &secrets)
    } else {
        EventLog::create(&config.out, Durability::Durable, &secrets)
    }
    .with_context(|| format!("opening the batch log in {}", config.out.display()))?;
    log.record(Event::BatchStarted(BatchStarted {
        format_version: harness_log::FORMAT_VERSION,
        batch_id: config.batch_id.clone(),
        harness_version: env!("CARGO_PKG_VERSION").to_owned(),
        tasks: config
            .tasks
            .iter()
            .filter(|t| !not_runnable.iter().any(|n| n.task == t.task))
            .map(|t| BatchTask {
                id: t.id.clone(),
                file: t.source.path().display().to_string(),
                task: (t.task != t.id).then(|| t.task.clone()),
                trial: (config.attempts > 1).then_some(t.trial),
            })
            .collect(),
        parallel: config.parallel as u32,
        parallel_reason: config.parallel_reason.clone(),
        sandbox: config.sandbox.describe(),
        retries: config.retries,
        resumed,
        attempts: (config.attempts > 1).then_some(config.attempts),
    }))
    .await?;
    Ok(log)
}

/// The tasks to run: all, or on `resume` those without a finished log (the others are
/// recorded as skipped).
async fn tasks_to_run(
    config: &BatchConfig,
    log: &EventLog,
    observer: &dyn BatchObserver,
) -> anyhow::Result<Vec<TaskSpec>> {
    let mut todo = Vec::new();
    for task in &config.tasks {
        let dir = config.out.join(&task.id);
        let done = match (finished(&dir), &task.source) {
            // A benchmark trial is done once it has its score (a reward, or the verifier's
            // own failure); one cut short or failed on the sandbox runs again.
            (Some(_), harness_runtime::task::TaskSource::Folder(_)) => {
                job::scored(&dir).then(|| "its trial has its score already".to_owned())
            }
            (Some(outcome), _) => Some(format!("its log finished already ({})", outcome.as_str())),
            (None, _) => None,
        };
        match done {
            Some(reason) if config.resume => {
                log.record(Event::TaskSkipped(TaskSkipped {
                    task: task.id.clone(),
                    reason,
                }))
                .await?;
            }
            _ => todo.push(task.clone()),
        }
    }
    let skipped = config.tasks.len() - todo.len();
    if skipped > 0 {
        observer.note(&format!(
            "resuming: {skipped} tasks have finished logs (benchmark trials: their score); running the other {}",
            todo.len()
        ));
    }
    Ok(todo)
}

/// How a task's log ended, when it ended (and was not interrupted).
fn finished(dir: &Path) -> Option<Outcome> {
    let text = std::fs::read_to_string(dir.join("events.jsonl")).ok()?;
    let last = text
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str::<harness_log::Envelope>(line).ok())?;
    match last.event {
        Event::SessionFinished(finished) if finished.outcome != Outcome::Interrupted => {
            Some(finished.outcome)
        }
        _ => None,
    }
}

async fn close_log(
    log: &EventLog,
    outcome: &BatchOutcome,
    retries: usize,
    started: Instant,
    gates: &Gates,
    warm_pool: Option<WarmPoolRecord>,
) -> anyhow::Result<()> {
    log.record(Event::BatchFinished(BatchFinished {
        interrupted: outcome.interrupted,
        n_passed: outcome.passed as u32,
        n_failed: outcome.failed as u32,
        n_not_run: outcome.not_run as u32,
        n_retries: retries as u32,
        duration_ms: started.elapsed().as_millis() as u64,
        rate_limits: gates
            .stats()
            .into_iter()
            .map(|g| GateRecord {
                endpoint: g.endpoint,
                requests: g.requests,
                throttled: g.throttled,
                waited_ms: g.waited.as_millis() as u64,
            })
            .collect(),
        warm_pool,
    }))
    .await?;
    log.close().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_sources_parse_and_bad_ones_are_named() {
        assert_eq!(SandboxSource::parse("local"), Ok(SandboxSource::Local));
        assert_eq!(
            SandboxSource::parse("pool:http://a:1/, http://b:2"),
            Ok(SandboxSource::Pool(vec![
                "http://a:1".to_owned(),
                "http://b:2".to_owned()
            ]))
        );
        assert!(
            SandboxSource::parse("pool:")
                .unwrap_err()
                .contains("at least one")
        );
        assert!(
            SandboxSource::parse("pool:ftp://x")
                .unwrap_err()
                .contains("`ftp://x`")
        );
        assert!(
            SandboxSource::parse("http://x")
                .unwrap_err()
                .contains("pool:")
        );
    }
}
