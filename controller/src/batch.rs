//! `harness batch`: many tasks at once, each in its own sandbox with its own session log, under
//! one batch folder that also holds the batch's own log (`events.jsonl`, one writer).
//!
//! - At most `parallel` tasks run at once; model requests pass one rate gate per endpoint,
//!   shared by every task ([`crate::llm::gate`]).
//! - Only infrastructure failures are retried, on a fresh sandbox; the failed attempt's log is
//!   kept under `attempts/`, and `task_retried` says why.
//! - Stopping is in two steps: `stop_new` starts no more tasks and lets the running ones
//!   finish; `stop_all` interrupts them too (their sandboxes are removed, their logs finished).
//! - `resume` runs only the tasks without a finished log.

pub mod pool;
pub mod report;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::cli::SessionArgs;
use crate::config::RunConfig;
use crate::event_log::{
    self, BatchFinished, BatchStarted, BatchTask, Durability, Event, EventLog, GateRecord,
    TaskFinished, TaskRetried, TaskSkipped, TaskStarted,
};
use crate::llm::gate::Gates;
use crate::llm::{self, RetryPolicy};
use crate::run_loop::{Observer, Totals};
use crate::session::{self, Failure, PolicySettings, SessionOptions, SessionSummary};
use pool::Pool;

/// One task of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    /// Its file name without the extension; the name of its log folder.
    pub id: String,
    pub file: PathBuf,
}

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
                Some(list) => {
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

/// Everything a batch needs.
#[derive(Debug, Clone)]
pub struct BatchOptions {
    pub batch_id: String,
    pub tasks: Vec<TaskSpec>,
    /// The flags every session takes; `sandbox` is set per task from `sandbox`.
    pub session: SessionArgs,
    pub sandbox: SandboxSource,
    pub parallel: usize,
    pub parallel_reason: String,
    pub retries: u32,
    /// The batch folder.
    pub out: PathBuf,
    pub resume: bool,
}

/// The two steps of stopping.
#[derive(Debug, Clone, Default)]
pub struct Stop {
    /// Start no new task.
    pub new_tasks: CancellationToken,
    /// Interrupt the running ones.
    pub running: CancellationToken,
}

/// A task while it runs, for progress displays.
#[derive(Debug, Clone)]
pub struct Running {
    pub attempt: u32,
    pub started: Instant,
    pub totals: Arc<Mutex<Totals>>,
}

/// The batch as it goes, shared with whoever shows it.
#[derive(Debug, Default)]
pub struct Progress {
    inner: Mutex<ProgressState>,
}

#[derive(Debug, Default, Clone)]
pub struct ProgressState {
    pub total: usize,
    pub skipped: usize,
    pub done: usize,
    pub passed: usize,
    pub failed: usize,
    pub retries: usize,
    pub running: BTreeMap<String, Running>,
    /// How long each finished task took, for the estimate of the time left.
    pub durations: Vec<Duration>,
}

impl Progress {
    pub fn snapshot(&self) -> ProgressState {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn update(&self, f: impl FnOnce(&mut ProgressState)) {
        f(&mut self.inner.lock().unwrap_or_else(|p| p.into_inner()));
    }
}

/// Hooks for a display that prints a line per event.
pub trait BatchObserver: Send + Sync {
    fn task_started(&self, task: &str, attempt: u32);
    fn task_finished(&self, task: &str, summary: &SessionSummary, passed: bool);
    fn task_retried(&self, task: &str, attempt: u32, reason: &str);
    fn note(&self, text: &str);
}

/// How a batch ended.
#[derive(Debug, Clone)]
pub struct BatchOutcome {
    pub passed: usize,
    pub failed: usize,
    pub not_run: usize,
    pub skipped: usize,
    pub interrupted: bool,
}

/// Sessions in a batch print nothing; their logs have everything.
struct Quiet;

impl Observer for Quiet {
    fn tool_call(&self, _call: &crate::llm::ToolCall) {}
    fn compacted(&self, _before: usize, _after: usize) {}
}

/// The tasks of files and folders (a folder's `*.yaml`/`*.yml`), in order; names must differ.
pub fn collect_tasks(paths: &[PathBuf]) -> anyhow::Result<Vec<TaskSpec>> {
    let mut tasks: Vec<TaskSpec> = Vec::new();
    for path in paths {
        let files = if path.is_dir() {
            let files = crate::task::task_files(path)?;
            if files.is_empty() {
                anyhow::bail!("{} holds no task files (*.yaml, *.yml)", path.display());
            }
            files
        } else if path.is_file() {
            vec![path.clone()]
        } else {
            anyhow::bail!("{}: no such task file or folder", path.display());
        };
        for file in files {
            let id = crate::task::task_id(&file);
            if let Some(other) = tasks.iter().find(|t| t.id == id) {
                anyhow::bail!(
                    "two tasks are named `{id}` ({} and {}): task names are their file names and \
                     name their log folders, so they must differ",
                    other.file.display(),
                    file.display()
                );
            }
            tasks.push(TaskSpec { id, file });
        }
    }
    if tasks.is_empty() {
        anyhow::bail!("no tasks given");
    }
    Ok(tasks)
}

/// The default parallelism: what the machine's cores and available memory allow, and how it
/// was chosen. A session mostly waits on its model, so two per core; each needs `per_task`
/// bytes of memory (its sandbox's limit in a container, else 512 MiB for a local sandbox's
/// commands); a pool allows one per member.
pub fn default_parallel(per_task: u64, pool: Option<usize>) -> (usize, String) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let available = available_memory();
    let by_cores = 2 * cores;
    let by_memory = available.map(|bytes| (bytes / per_task.max(1)) as usize);
    let mut parallel = by_cores.min(by_memory.unwrap_or(usize::MAX)).max(1);
    let mut reason = format!(
        "{parallel} from {cores} cores (2 per core) and {} available at {} MiB per task",
        available.map_or_else(
            || "unknown memory".to_owned(),
            |b| format!("{} MiB", b / (1 << 20))
        ),
        per_task / (1 << 20)
    );
    if let Some(members) = pool
        && members < parallel
    {
        parallel = members;
        reason = format!("{parallel}: one per pool member");
    }
    (parallel, reason)
}

/// `MemAvailable` from /proc/meminfo.
fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Whether a task's folder holds a log that ended (and was not interrupted).
fn finished(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("events.jsonl")).ok()?;
    let last = text
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())?;
    if last["type"] != "session_finished" || last["data"]["outcome"] == "interrupted" {
        return None;
    }
    Some(last["data"]["outcome"].as_str().unwrap_or("?").to_owned())
}

/// A relative path for the log.
fn relative(path: &Path, base: &Path) -> String {
    path.strip_prefix(base)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Runs the batch to its end (or its stop). Errors are for a batch that could not start
/// (bad input, a batch folder that cannot be written); a task's failure is in its row.
pub async fn run_batch(
    options: &BatchOptions,
    progress: Arc<Progress>,
    observer: Arc<dyn BatchObserver>,
    gates: Arc<Gates>,
    stop: Stop,
) -> anyhow::Result<BatchOutcome> {
    let started = Instant::now();
    // Every task's settings resolve before anything starts: bad input stops the batch here.
    let mut problems = Vec::new();
    for task in &options.tasks {
        if let Err(err) = task_config(options, task, None, Path::new("/nonexistent")) {
            problems.push(format!("{}: {err:#}", task.file.display()));
        }
    }
    if !problems.is_empty() {
        anyhow::bail!("the batch did not start:\n  {}", problems.join("\n  "));
    }
    let log_exists = options.out.join("events.jsonl").is_file();
    if log_exists && !report::is_batch(&options.out) {
        anyhow::bail!(
            "{} holds a log that is not a batch's (a session's?): choose another --out",
            options.out.display()
        );
    }
    if log_exists && !options.resume {
        anyhow::bail!(
            "{} holds a batch already: add --resume to run the tasks it has not finished, or \
             choose another --out",
            options.out.display()
        );
    }
    if !log_exists && options.out.exists() {
        let empty = std::fs::read_dir(&options.out)
            .with_context(|| format!("reading {}", options.out.display()))?
            .next()
            .is_none();
        if !empty {
            anyhow::bail!(
                "{} exists and is not a batch folder (it has no batch log): choose another --out",
                options.out.display()
            );
        }
        // An empty folder made for the batch: the log makes it again.
        std::fs::remove_dir(&options.out)
            .with_context(|| format!("using {}", options.out.display()))?;
    }
    let secrets = crate::secrets::values(&[]);
    let log = if log_exists {
        EventLog::reopen(&options.out, Durability::Durable, secrets)
    } else {
        EventLog::create(&options.out, Durability::Durable, secrets)
    }
    .with_context(|| format!("opening the batch log in {}", options.out.display()))?;
    log.record(Event::BatchStarted(BatchStarted {
        format_version: event_log::FORMAT_VERSION,
        batch_id: options.batch_id.clone(),
        harness_version: env!("CARGO_PKG_VERSION").to_owned(),
        tasks: options
            .tasks
            .iter()
            .map(|t| BatchTask {
                id: t.id.clone(),
                file: t.file.display().to_string(),
            })
            .collect(),
        parallel: options.parallel as u32,
        parallel_reason: options.parallel_reason.clone(),
        sandbox: options.sandbox.describe(),
        retries: options.retries,
        resumed: log_exists,
    }))
    .await?;

    let mut todo = Vec::new();
    for task in &options.tasks {
        match finished(&options.out.join(&task.id)) {
            Some(outcome) if options.resume => {
                log.record(Event::TaskSkipped(TaskSkipped {
                    task: task.id.clone(),
                    reason: format!("its log finished already ({outcome})"),
                }))
                .await?;
            }
            _ => todo.push(task.clone()),
        }
    }
    let skipped = options.tasks.len() - todo.len();
    if skipped > 0 {
        observer.note(&format!(
            "resuming: {skipped} tasks have finished logs; running the other {}",
            todo.len()
        ));
    }
    progress.update(|p| {
        p.total = todo.len();
        p.skipped = skipped;
    });
    let pool = match &options.sandbox {
        SandboxSource::Pool(urls) => Some(Arc::new(Pool::new(
            urls,
            options.session.sandbox_token_file.as_deref(),
        )?)),
        _ => None,
    };

    let outcomes: Vec<Option<bool>> = futures::stream::iter(todo)
        .map(|task| {
            let (log, progress, observer, gates, stop, pool) = (
                log.clone(),
                progress.clone(),
                observer.clone(),
                gates.clone(),
                stop.clone(),
                pool.clone(),
            );
            async move {
                if stop.new_tasks.is_cancelled() {
                    return None;
                }
                let context = TaskContext {
                    options,
                    log: &log,
                    progress: &progress,
                    observer: observer.as_ref(),
                    gates: &gates,
                    stop: &stop,
                    pool: pool.as_deref(),
                };
                Some(context.run(&task).await)
            }
        })
        .buffer_unordered(options.parallel.max(1))
        .collect()
        .await;
    let passed = outcomes.iter().filter(|o| **o == Some(true)).count();
    let failed = outcomes.iter().filter(|o| **o == Some(false)).count();
    let not_run = outcomes.iter().filter(|o| o.is_none()).count();
    let state = progress.snapshot();
    log.record(Event::BatchFinished(BatchFinished {
        interrupted: stop.new_tasks.is_cancelled() || stop.running.is_cancelled(),
        n_passed: passed as u32,
        n_failed: failed as u32,
        n_not_run: not_run as u32,
        n_retries: state.retries as u32,
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
    }))
    .await?;
    log.close().await?;
    Ok(BatchOutcome {
        passed,
        failed,
        not_run,
        skipped,
        interrupted: stop.new_tasks.is_cancelled() || stop.running.is_cancelled(),
    })
}

/// One task's settings, with its sandbox: a pool member's URL, or the batch's kind.
fn task_config(
    options: &BatchOptions,
    task: &TaskSpec,
    pool_url: Option<&str>,
    workspace: &Path,
) -> anyhow::Result<RunConfig> {
    let mut args = options.session.clone();
    // `local` and `docker` are the flag as given (absent: each task's own `sandbox:`, else
    // local); a pool member replaces it.
    if let SandboxSource::Pool(urls) = &options.sandbox {
        args.sandbox = Some(pool_url.unwrap_or(&urls[0]).to_owned());
    }
    let words = vec![workspace.display().to_string()];
    RunConfig::build(&words, Some(&task.file), &args)
}

struct TaskContext<'a> {
    options: &'a BatchOptions,
    log: &'a EventLog,
    progress: &'a Progress,
    observer: &'a dyn BatchObserver,
    gates: &'a Arc<Gates>,
    stop: &'a Stop,
    pool: Option<&'a Pool>,
}

impl TaskContext<'_> {
    /// Runs a task's attempts; whether it passed.
    async fn run(&self, task: &TaskSpec) -> bool {
        let options = self.options;
        let mut attempt = 1;
        loop {
            let summary = self.attempt(task, attempt).await;
            let passed = summary.failure.is_none();
            let _ = self
                .log
                .record(Event::TaskFinished(TaskFinished {
                    task: task.id.clone(),
                    attempt,
                    outcome: summary.outcome.to_owned(),
                    failure: summary.failure.map(|f| f.name().to_owned()),
                    passed,
                    duration_ms: summary.duration.as_millis() as u64,
                    cost: summary.totals.cost,
                }))
                .await;
            let retry = summary.failure == Some(Failure::Infrastructure)
                && attempt <= options.retries
                && !self.stop.running.is_cancelled();
            if retry {
                let reason = "infrastructure failure: the sandbox died, could not start or stopped answering".to_owned();
                let moved = event_log::set_aside(&options.out, &task.id)
                    .ok()
                    .flatten()
                    .map(|p| relative(&p, &options.out))
                    .unwrap_or_default();
                attempt += 1;
                let _ = self
                    .log
                    .record(Event::TaskRetried(TaskRetried {
                        task: task.id.clone(),
                        attempt,
                        reason: reason.clone(),
                        previous_log: moved,
                    }))
                    .await;
                self.progress.update(|p| p.retries += 1);
                self.observer.task_retried(&task.id, attempt, &reason);
                continue;
            }
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
            self.observer.task_finished(&task.id, &summary, passed);
            return passed;
        }
    }

    /// One attempt, on a fresh sandbox.
    async fn attempt(&self, task: &TaskSpec, attempt: u32) -> SessionSummary {
        let options = self.options;
        let log_dir = options.out.join(&task.id);
        // An earlier run's unfinished log (a resumed batch) is kept, out of the way.
        if let Err(err) = event_log::set_aside(&options.out, &task.id) {
            self.observer
                .note(&format!("{}: moving an earlier log aside: {err}", task.id));
        }
        let totals = Arc::new(Mutex::new(Totals::default()));
        self.progress.update(|p| {
            p.running.insert(
                task.id.clone(),
                Running {
                    attempt,
                    started: Instant::now(),
                    totals: totals.clone(),
                },
            );
        });
        self.observer.task_started(&task.id, attempt);
        let lease = match self.pool {
            Some(pool) => match pool.lease(&self.stop.running).await {
                Ok(lease) => Some(lease),
                Err(err) => {
                    let failure = if self.stop.running.is_cancelled() {
                        Failure::Interrupted
                    } else {
                        Failure::Infrastructure
                    };
                    return self.unstarted(task, attempt, &log_dir, failure, &err).await;
                }
            },
            None => None,
        };
        let workspace = match tempfile::Builder::new()
            .prefix(&format!("harness-batch-{}-", task.id))
            .tempdir()
        {
            Ok(dir) => dir,
            Err(err) => {
                return self
                    .unstarted(task, attempt, &log_dir, Failure::Error, &err.into())
                    .await;
            }
        };
        let config = match task_config(
            options,
            task,
            lease.as_ref().map(|l| l.url()),
            workspace.path(),
        ) {
            Ok(config) => config,
            Err(err) => {
                return self
                    .unstarted(task, attempt, &log_dir, Failure::Error, &err)
                    .await;
            }
        };
        let model = match llm::build_gated(&config.model, RetryPolicy::default(), Some(self.gates))
        {
            Ok(model) => model,
            Err(err) => {
                return self
                    .unstarted(task, attempt, &log_dir, Failure::Error, &err)
                    .await;
            }
        };
        let _ = self
            .log
            .record(Event::TaskStarted(TaskStarted {
                task: task.id.clone(),
                attempt,
                log_dir: relative(&log_dir, &options.out),
                sandbox: lease.as_ref().map(|l| l.url().to_owned()),
            }))
            .await;
        let session_options = SessionOptions {
            config,
            policy: PolicySettings::from_args(&options.session),
            session_id: event_log::new_session_id(),
            log_dir,
            durability: options.session.log_durability,
            sandbox_log_in_folder: true,
            gates: Some(self.gates.clone()),
        };
        let summary = session::run_session(
            &session_options,
            model,
            &Quiet,
            &totals,
            self.stop.running.child_token(),
        )
        .await;
        // The member goes back to the pool; the next lease checks and resets it.
        drop(lease);
        summary
    }

    /// An attempt that could not start its session: no session log, so the batch log and the
    /// summary carry it.
    async fn unstarted(
        &self,
        task: &TaskSpec,
        attempt: u32,
        log_dir: &Path,
        failure: Failure,
        err: &anyhow::Error,
    ) -> SessionSummary {
        self.observer.note(&format!("{}: {err:#}", task.id));
        let _ = self
            .log
            .record(Event::TaskStarted(TaskStarted {
                task: task.id.clone(),
                attempt,
                log_dir: relative(log_dir, &self.options.out),
                sandbox: None,
            }))
            .await;
        let _ = self
            .log
            .record(Event::Error(crate::event_log::ErrorEvent {
                class: match failure {
                    Failure::Infrastructure => "infrastructure",
                    Failure::Interrupted => "interrupted",
                    _ => "internal",
                }
                .to_owned(),
                message: format!("{}: {err:#}", task.id),
                call_id: None,
            }))
            .await;
        SessionSummary {
            session_id: String::new(),
            log_dir: log_dir.to_owned(),
            code: crate::exit_code::INFRASTRUCTURE,
            outcome: "error",
            failure: Some(failure),
            answer: String::new(),
            totals: Totals::default(),
            duration: Duration::ZERO,
        }
    }
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

    #[test]
    fn the_default_parallelism_follows_cores_memory_and_the_pool() {
        let (n, reason) = default_parallel(512 << 20, None);
        assert!(n >= 1, "{reason}");
        assert!(reason.contains("cores"), "{reason}");
        let (n, reason) = default_parallel(512 << 20, Some(1));
        assert_eq!(n, 1, "{reason}");
        // A task that needs more memory than the machine has still runs, one at a time.
        let (n, _) = default_parallel(u64::MAX, None);
        assert_eq!(n, 1);
    }
}
