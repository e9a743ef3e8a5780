//! A batch's report: one row per task and the totals, as text, JSON or one self-contained HTML
//! page whose rows link to each task's transcript ([`write`]). Every figure comes from the
//! logs: the task rows from each task's session log, the attempts and wall time from the
//! batch's own log.

mod batch_log;
mod bench;
mod pictures;
mod trials;
mod verdict;
mod write;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

pub use bench::{BenchScores, BenchSummary, BenchTaskRow, NotRunnable, pass_at_k};
pub use trials::{TaskTrials, TrialsSummary};
pub use write::{write_html, write_text};

use super::ReplayError;
use super::metrics::{self, Latency, RunOutcome, Unfinished};
use batch_log::{BatchLog, read_batch_log};
use harness_log::reader;
use harness_log::{Event, FailureClass, GateRecord, Outcome, WarmPoolRecord};

/// What a benchmark trial's own files say beyond its log: which task files are benchmark
/// folders, and a trial's named rewards, error class and reward validity as its `result.json`
/// has them (so the report and the job agree). The benchmark adapter, which writes those
/// files, reads them; the report only shows what it is given.
pub trait TrialFiles: Sync {
    /// Whether a batch's task file names a benchmark task's folder.
    fn is_benchmark(&self, file: &Path) -> bool;
    /// A benchmark trial's result, when its folder holds one.
    fn trial(&self, folder: &Path) -> Option<TrialFacts>;
}

/// A benchmark trial's result as [`TrialFiles`] reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TrialFacts {
    pub rewards: Option<BTreeMap<String, f64>>,
    /// Harbor's class of its first error.
    pub error: Option<String>,
    pub reward_valid: bool,
    /// The agent tampered with the verifier's folders.
    pub tampered: bool,
    /// How the reward was reached when the output alone does not show it.
    pub note: Option<String>,
}

/// No benchmark files: a batch of task files alone.
pub struct NoTrialFiles;

impl TrialFiles for NoTrialFiles {
    fn is_benchmark(&self, _: &Path) -> bool {
        false
    }
    fn trial(&self, _: &Path) -> Option<TrialFacts> {
        None
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskRow {
    /// Its log folder's name (a trial of a task past the first has `__N`).
    pub task: String,
    /// The task's name (trials of one task share it).
    pub name: String,
    /// A benchmark trial's reward (absent without a verdict, or for a task with a check).
    pub reward: Option<f64>,
    /// A benchmark trial's named rewards, when it has several.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub rewards: BTreeMap<String, f64>,
    /// A benchmark trial's error, by Harbor's class (`AgentTimeoutError`, …), as its
    /// `result.json` says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether Harbor counts its reward (its job mean is over these).
    #[serde(skip)]
    pub reward_valid: bool,
    /// The agent tampered with the verifier's folders.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tampered: bool,
    /// How its reward was reached when the test output alone does not show it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub benchmark: bool,
    /// `oracle` or `nop`, when a benchmark task ran with one.
    pub agent: Option<String>,
    /// The session's outcome; `not_run` for a task never started, `incomplete` for a log that
    /// did not end (a killed harness).
    pub outcome: RunOutcome,
    /// Why it did not pass.
    pub failure: Option<FailureClass>,
    pub passed: bool,
    /// Attempts recorded in the batch log (retries and resumed runs add to it).
    pub attempts: u32,
    /// Model turns (the loop's steps).
    pub turns: u32,
    pub tool_calls: u64,
    /// Calls the policy refused.
    pub refused: u64,
    /// A benchmark task its author marks broken on purpose, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_broken: Option<String>,
    /// Calls per tool (for comparing batches; not in `report.json`).
    #[serde(skip)]
    pub tools: BTreeMap<String, u64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost: f64,
    pub cost_known: bool,
    pub duration_ms: u64,
    /// The task's session folder, relative to the batch folder.
    pub log: Option<String>,
    /// Why a task that was tried could not start its session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl TaskRow {
    /// The row of task `id` that never ran: no log, nothing counted.
    pub fn not_run(id: &str, attempts: u32) -> TaskRow {
        TaskRow {
            task: id.to_owned(),
            name: id.to_owned(),
            reward: None,
            rewards: BTreeMap::new(),
            error: None,
            reward_valid: false,
            tampered: false,
            note: None,
            benchmark: false,
            agent: None,
            outcome: RunOutcome::Unfinished(Unfinished::NotRun),
            failure: None,
            passed: false,
            attempts,
            turns: 0,
            tool_calls: 0,
            refused: 0,
            expected_broken: None,
            tools: BTreeMap::new(),
            input_tokens: 0,
            output_tokens: 0,
            cost: 0.0,
            cost_known: true,
            duration_ms: 0,
            log: None,
            reason: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Totals {
    /// Every task (trial) of the batch: passed, failed, not runnable and not run add up to it.
    pub tasks: usize,
    pub run: usize,
    pub passed: usize,
    pub failed: usize,
    /// Of the failed, the benchmark trials under the oracle that their task's author marks
    /// broken on purpose.
    pub failed_as_expected: usize,
    /// Trials of the tasks this harness could not run here (left out of the batch: no row).
    pub not_runnable: usize,
    /// Tasks a Ctrl-C stopped while they ran: neither passed nor failed, and not in `run`.
    pub interrupted: usize,
    pub not_run: usize,
    /// Passed over run.
    pub pass_rate: f64,
    pub retries: u32,
    /// Tasks by failure class.
    pub failures: BTreeMap<FailureClass, usize>,
    pub cost: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub tool_calls: u64,
    /// Calls the policy refused, over every task.
    pub refused: u64,
    /// The tasks' durations added up.
    pub task_time_ms: u64,
    /// The batch's own running time (every run of it, when resumed).
    pub wall_ms: u64,
    /// Over every tool call of every task.
    pub tool_latency_ms: BTreeMap<String, ToolLatency>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ToolLatency {
    pub calls: u64,
    #[serde(flatten)]
    pub latency: Latency,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchReport {
    pub batch_id: String,
    pub interrupted: bool,
    pub tasks: Vec<TaskRow>,
    pub totals: Totals,
    /// Per model endpoint, over every run of the batch.
    pub rate_limits: Vec<GateRecord>,
    /// `--pool-size`: how the containers were served, over every run of the batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_pool: Option<WarmPoolRecord>,
    /// Benchmark tasks by task: pass@1, pass@k, mean reward, health.
    pub benchmark: Option<BenchSummary>,
    /// Task files run more than once each (`--attempts K`): pass@1 and pass@K by task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trials: Option<TrialsSummary>,
}

/// Whether `dir` is a batch folder: its log starts with `batch_started`. A shared folder may be
/// hostile: only a regular file is read (not a link to `/dev/zero`, not a FIFO), and only its
/// first line, at most [`reader::MAX_LINE`] bytes of it.
pub fn is_batch(dir: &Path) -> bool {
    batch_started(dir).is_some()
}

/// The id of the batch whose log is in `dir`, as its first `batch_started` names it (a resumed
/// batch keeps it).
pub fn batch_id(dir: &Path) -> Option<String> {
    batch_started(dir).map(|started| started.batch_id)
}

/// The first event of `dir`'s log when it is a `batch_started`, read within the line bound.
fn batch_started(dir: &Path) -> Option<harness_log::BatchStarted> {
    use std::io::Read as _;
    let (file, _) = reader::open_regular(&dir.join("events.jsonl")).ok()?;
    let mut head = std::io::BufReader::new(file.take(reader::MAX_LINE as u64 + 1));
    let mut first = Vec::new();
    let read = reader::read_line(&mut head, &mut first, reader::MAX_LINE);
    if !matches!(read, Ok((n, _)) if n > 0) || first.len() > reader::MAX_LINE {
        return None;
    }
    match serde_json::from_slice::<harness_log::Envelope>(&first)
        .ok()?
        .event
    {
        Event::BatchStarted(started) => Some(started),
        _ => None,
    }
}

/// Reads a batch folder.
pub fn load(dir: &Path, files: &dyn TrialFiles) -> Result<BatchReport, ReplayError> {
    let log = read_batch_log(dir, files)?;
    let mut rows = Vec::new();
    let mut samples: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for id in &log.task_ids {
        let attempts = log.attempts.get(id).copied();
        let mut row = task_row(dir, id, attempts, &mut samples, files)?;
        if row.outcome == RunOutcome::Unfinished(Unfinished::NotRun)
            && let Some(reason) = log.unstarted.get(id)
        {
            // It was tried and could not start: a failure, with its reason.
            row.outcome = RunOutcome::Finished(Outcome::Error);
            row.failure = Some(FailureClass::Error);
            row.reason = Some(reason.clone());
        }
        row.name = log.names.get(id).cloned().unwrap_or_else(|| id.clone());
        row.benchmark |= log.bench_ids.contains(id);
        rows.push(row);
    }
    let totals = totals(&rows, &log, samples);
    let trials = trials::summarise(&rows, log.trials);
    let benchmark = bench::summarise(&rows, log.trials, log.not_runnable);
    Ok(BatchReport {
        batch_id: log.batch_id,
        interrupted: log.interrupted,
        tasks: rows,
        totals,
        rate_limits: log.gates.into_values().collect(),
        warm_pool: log.warm_pool,
        benchmark,
        trials,
    })
}

/// A task's row from its session log; a task without one never ran. Its tool call durations
/// go to `samples`.
fn task_row(
    dir: &Path,
    id: &str,
    attempts: Option<u32>,
    samples: &mut BTreeMap<String, Vec<u64>>,
    files: &dyn TrialFiles,
) -> Result<TaskRow, ReplayError> {
    let folder = dir.join(id);
    // A link would have another session on this machine read (and its transcript written into
    // the batch folder): a batch's task folders are its own.
    if std::fs::symlink_metadata(&folder).is_ok_and(|meta| meta.file_type().is_symlink()) {
        return Err(ReplayError::Io(format!(
            "{}: the task's log folder is a link: refused (a batch's task folders are its own)",
            folder.display()
        )));
    }
    if !folder.join("events.jsonl").is_file() {
        return Ok(TaskRow::not_run(id, attempts.unwrap_or(0)));
    }
    let m = metrics::measure(&folder)?;
    for (tool, values) in &m.tool_samples_ms {
        samples.entry(tool.clone()).or_default().extend(values);
    }
    // A log that never ended was cut short by something outside the session.
    let failure = match m.outcome {
        RunOutcome::Unfinished(_) => m.failure.or(Some(FailureClass::Infrastructure)),
        RunOutcome::Finished(_) => m.failure,
    };
    // A benchmark trial's result as Harbor reads it, so the report and the job agree.
    let record = m.benchmark.then(|| files.trial(&folder)).flatten();
    let passed = m.outcome == RunOutcome::Finished(Outcome::Completed) && failure.is_none();
    Ok(TaskRow {
        task: id.to_owned(),
        name: id.to_owned(),
        reward: m.reward,
        rewards: record
            .as_ref()
            .and_then(|r| r.rewards.clone())
            .filter(|r| r.len() > 1)
            .unwrap_or_default(),
        error: record.as_ref().and_then(|r| r.error.clone()),
        reward_valid: record.as_ref().is_some_and(|r| r.reward_valid),
        tampered: record.as_ref().is_some_and(|r| r.tampered),
        note: record.as_ref().and_then(|r| r.note.clone()),
        benchmark: m.benchmark,
        agent: m.agent.clone(),
        passed,
        failure,
        outcome: m.outcome,
        attempts: attempts.unwrap_or(1),
        turns: m.turns,
        tool_calls: m.tool_calls.values().sum(),
        refused: m.refused,
        expected_broken: m.expected_broken.clone(),
        tools: m.tool_calls.clone(),
        input_tokens: m.input_tokens + m.cached_input_tokens,
        output_tokens: m.output_tokens,
        cost: m.cost,
        cost_known: m.cost_known,
        duration_ms: m.total_ms,
        log: Some(id.to_owned()),
        // Why it stopped early, when it did not pass.
        reason: m.last_error.filter(|_| !passed),
    })
}

fn totals(rows: &[TaskRow], log: &BatchLog, samples: BTreeMap<String, Vec<u64>>) -> Totals {
    let interrupted = rows
        .iter()
        .filter(|r| r.outcome == RunOutcome::Finished(Outcome::Interrupted))
        .count();
    // Run to an end of their own: neither never started nor stopped by a Ctrl-C.
    let run = rows
        .iter()
        .filter(|r| r.outcome != RunOutcome::Unfinished(Unfinished::NotRun))
        .count()
        - interrupted;
    let passed = rows.iter().filter(|r| r.passed).count();
    let failed_as_expected = rows
        .iter()
        .filter(|r| !r.passed && r.outcome != RunOutcome::Unfinished(Unfinished::NotRun))
        .filter(|r| r.agent.as_deref() == Some("oracle") && r.expected_broken.is_some())
        .count();
    let not_runnable = log.not_runnable.len() * log.trials.max(1) as usize;
    let mut failures = BTreeMap::new();
    let ended = rows
        .iter()
        .filter(|r| r.outcome != RunOutcome::Finished(Outcome::Interrupted));
    for failure in ended.filter_map(|row| row.failure) {
        *failures.entry(failure).or_default() += 1;
    }
    let tool_latency_ms = samples
        .into_iter()
        .map(|(tool, values)| {
            let calls = values.len() as u64;
            let latency = metrics::latency(values);
            (tool, ToolLatency { calls, latency })
        })
        .collect();
    Totals {
        tasks: rows.len() + not_runnable,
        run,
        passed,
        failed: run - passed,
        failed_as_expected,
        not_runnable,
        interrupted,
        not_run: rows.len() - run - interrupted,
        pass_rate: if run == 0 {
            0.0
        } else {
            passed as f64 / run as f64
        },
        retries: log.retries,
        failures,
        cost: rows.iter().map(|r| r.cost).sum(),
        input_tokens: rows.iter().map(|r| r.input_tokens).sum(),
        output_tokens: rows.iter().map(|r| r.output_tokens).sum(),
        tool_calls: rows.iter().map(|r| r.tool_calls).sum(),
        refused: rows.iter().map(|r| r.refused).sum(),
        task_time_ms: rows.iter().map(|r| r.duration_ms).sum(),
        wall_ms: log.wall_ms,
        tool_latency_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness_log::BatchStarted;

    /// A task that was tried and could not start its session (no session log; its reason in
    /// the batch log) is a failure with that reason, not "not run".
    #[test]
    fn a_task_that_could_not_start_is_failed_with_its_reason() {
        let dir = tempfile::tempdir().unwrap();
        let lines = [
            r#"{"seq":0,"ts":"2026-11-30T21:47:40.067Z","type":"batch_started","data":{"format_version":1,"batch_id":"b1","harness_version":"0.1.0","tasks":[{"id":"a","file":"a.yaml"},{"id":"ab","file":"ab.yaml"}],"parallel":1,"parallel_reason":"1","sandbox":"local","retries":1,"resumed":false}}"#,
            r#"{"seq":1,"ts":"2026-11-30T21:47:40.073Z","type":"task_started","data":{"task":"ab","attempt":1,"log_dir":"ab","sandbox":null}}"#,
            r#"{"seq":2,"ts":"2026-11-30T21:47:40.077Z","type":"error","data":{"class":"internal","message":"ab: OPENAI_API_KEY is not set","call_id":null}}"#,
            r#"{"seq":3,"ts":"2026-11-30T21:47:40.081Z","type":"task_finished","data":{"task":"ab","attempt":1,"outcome":"error","failure":"error","passed":false,"duration_ms":0,"cost":0.0}}"#,
            r#"{"seq":4,"ts":"2026-11-30T21:47:40.317Z","type":"batch_finished","data":{"interrupted":false,"n_passed":0,"n_failed":1,"n_not_run":1,"n_retries":0,"duration_ms":251,"rate_limits":[]}}"#,
        ];
        std::fs::write(dir.path().join("events.jsonl"), lines.join("\n") + "\n").unwrap();
        let report = load(dir.path(), &NoTrialFiles).unwrap();
        let (a, ab) = (&report.tasks[0], &report.tasks[1]);
        assert_eq!(a.outcome, RunOutcome::Unfinished(Unfinished::NotRun));
        assert_eq!(a.reason, None, "task `a` is not `ab`'s prefix match");
        assert_eq!(ab.outcome, RunOutcome::Finished(Outcome::Error));
        assert_eq!(ab.failure, Some(FailureClass::Error));
        assert_eq!(ab.reason.as_deref(), Some("OPENAI_API_KEY is not set"));
        assert_eq!((report.totals.failed, report.totals.not_run), (1, 1));
    }

    /// A run of a batch of tasks `ids`.
    fn started(ids: &[&str]) -> BatchStarted {
        let tasks: Vec<serde_json::Value> = ids
            .iter()
            .map(|id| serde_json::json!({"id": id, "file": "t.yaml"}))
            .collect();
        let started = serde_json::json!({"format_version": 1, "batch_id": "b",
            "harness_version": "0", "tasks": tasks, "parallel": 1, "parallel_reason": "1",
            "sandbox": "local", "retries": 0, "resumed": false});
        serde_json::from_value(started).unwrap()
    }

    /// An error is its task's when it begins `{task}: `; of ids that are prefixes of one
    /// another the longest wins, as a scan of every id would have it. A repeated id is one task.
    #[test]
    fn an_errors_task_is_the_longest_id_it_begins_with() {
        let mut log = BatchLog::default();
        let run = started(&["a", "a: b", "ab", "a: b: c", "ab"]);
        log.started(Path::new("batch"), run, &NoTrialFiles).unwrap();
        assert_eq!(log.task_ids, ["a", "a: b", "ab", "a: b: c"]);
        assert_eq!(log.task_of("a: b: c: no key"), Some("a: b: c"));
        assert_eq!(log.task_of("a: b: cd: no key"), Some("a: b"));
        assert_eq!(log.task_of("a: no key"), Some("a"));
        assert_eq!(log.task_of("ab: no key"), Some("ab"));
        assert_eq!(log.task_of("abc: no key"), None);
        assert_eq!(log.task_of("a:no key"), None);
        assert_eq!(log.task_of(""), None);
    }

    /// A task id names a folder beside the batch's log: one that leaves it is refused, by name.
    #[test]
    fn a_task_id_that_is_not_a_plain_name_is_refused() {
        for bad in ["../x", "/etc", "a/b", ".", "..", "", "a\0b"] {
            let mut log = BatchLog::default();
            let run = started(&["ok", bad]);
            let err = log
                .started(Path::new("batch"), run, &NoTrialFiles)
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("{bad:?}")), "{bad}: {err}");
        }
    }

    /// A shared folder's log that is a link to an endless device, or a FIFO, is no batch, and
    /// is found not to be one at once.
    #[test]
    fn a_log_that_is_a_device_or_a_fifo_is_not_a_batch() {
        let root = tempfile::tempdir().unwrap();
        let (zero, fifo) = (root.path().join("zero"), root.path().join("fifo"));
        std::fs::create_dir_all(&zero).unwrap();
        std::fs::create_dir_all(&fifo).unwrap();
        std::os::unix::fs::symlink("/dev/zero", zero.join("events.jsonl")).unwrap();
        nix::unistd::mkfifo(
            fifo.join("events.jsonl").as_path(),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let begun = std::time::Instant::now();
        assert!(!is_batch(&zero));
        assert!(!is_batch(&fifo));
        assert!(begun.elapsed() < std::time::Duration::from_secs(5));
    }
}
