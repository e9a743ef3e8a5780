//! A batch's report: one row per task and the totals, as text, JSON or one self-contained HTML
//! page whose rows link to each task's transcript ([`write`]). Every figure comes from the
//! logs: the task rows from each task's session log, the attempts and wall time from the
//! batch's own log.

mod bench;
mod write;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

pub use bench::{BenchSummary, BenchTaskRow};
pub use write::{write_html, write_text};

use super::metrics::{self, Latency, RunOutcome, Unfinished};
use super::{ReplayError, events};
use crate::event_log::{Event, FailureClass, GateRecord, Outcome};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskRow {
    /// Its log folder's name (a trial of a task past the first has `__N`).
    pub task: String,
    /// The task's name (trials of one task share it).
    pub name: String,
    /// A benchmark trial's reward (absent without a verdict, or for a task with a check).
    pub reward: Option<f64>,
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
    /// Model turns: the loop's steps.
    pub steps: u32,
    pub tool_calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost: f64,
    pub cost_known: bool,
    pub duration_ms: u64,
    /// The task's session folder, relative to the batch folder.
    pub log: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Totals {
    pub tasks: usize,
    pub run: usize,
    pub passed: usize,
    pub failed: usize,
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
    /// Benchmark tasks by task: pass@1, pass@k, mean reward, health.
    pub benchmark: Option<BenchSummary>,
}

/// Whether `dir` is a batch folder: its log starts with `batch_started`.
pub fn is_batch(dir: &Path) -> bool {
    let Ok(file) = std::fs::File::open(dir.join("events.jsonl")) else {
        return false;
    };
    let mut first = String::new();
    let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(file), &mut first);
    matches!(
        serde_json::from_str::<crate::event_log::Envelope>(&first),
        Ok(envelope) if matches!(envelope.event, Event::BatchStarted(_))
    )
}

/// What the batch's own log says.
#[derive(Debug, Default)]
struct BatchLog {
    batch_id: String,
    task_ids: Vec<String>,
    /// The task's name per log folder, where they differ.
    names: BTreeMap<String, String>,
    /// Trials per task.
    trials: u32,
    /// The log folders of benchmark tasks.
    bench_ids: std::collections::BTreeSet<String>,
    attempts: BTreeMap<String, u32>,
    retries: u32,
    wall_ms: u64,
    interrupted: bool,
    gates: BTreeMap<String, GateRecord>,
}

/// Reads a batch folder.
pub fn load(dir: &Path) -> Result<BatchReport, ReplayError> {
    let log = read_batch_log(dir)?;
    let mut rows = Vec::new();
    let mut samples: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for id in &log.task_ids {
        let attempts = log.attempts.get(id).copied();
        let mut row = task_row(dir, id, attempts, &mut samples)?;
        row.name = log.names.get(id).cloned().unwrap_or_else(|| id.clone());
        row.benchmark |= log.bench_ids.contains(id);
        rows.push(row);
    }
    let totals = totals(&rows, &log, samples);
    let benchmark = bench::summarise(&rows, log.trials);
    Ok(BatchReport {
        batch_id: log.batch_id,
        interrupted: log.interrupted,
        tasks: rows,
        totals,
        rate_limits: log.gates.into_values().collect(),
        benchmark,
    })
}

fn read_batch_log(dir: &Path) -> Result<BatchLog, ReplayError> {
    let mut log = BatchLog::default();
    for envelope in events(dir, |_| {})? {
        match envelope?.event {
            Event::BatchStarted(started) => {
                log.batch_id = started.batch_id;
                log.trials = started.attempts.unwrap_or(1);
                for task in &started.tasks {
                    if crate::bench::detect(Path::new(&task.file)).is_some() {
                        log.bench_ids.insert(task.id.clone());
                    }
                    if let Some(name) = &task.task {
                        log.names.insert(task.id.clone(), name.clone());
                    }
                }
                log.task_ids = started.tasks.into_iter().map(|t| t.id).collect();
                log.interrupted = false;
            }
            Event::TaskStarted(started) => *log.attempts.entry(started.task).or_default() += 1,
            Event::TaskRetried(_) => log.retries += 1,
            Event::BatchFinished(finished) => {
                log.wall_ms += finished.duration_ms;
                log.interrupted = finished.interrupted;
                for gate in finished.rate_limits {
                    let entry =
                        log.gates
                            .entry(gate.endpoint.clone())
                            .or_insert_with(|| GateRecord {
                                endpoint: gate.endpoint.clone(),
                                requests: 0,
                                throttled: 0,
                                waited_ms: 0,
                            });
                    entry.requests += gate.requests;
                    entry.throttled += gate.throttled;
                    entry.waited_ms += gate.waited_ms;
                }
            }
            _ => {}
        }
    }
    Ok(log)
}

/// A task's row from its session log; a task without one never ran. Its tool call durations
/// go to `samples`.
fn task_row(
    dir: &Path,
    id: &str,
    attempts: Option<u32>,
    samples: &mut BTreeMap<String, Vec<u64>>,
) -> Result<TaskRow, ReplayError> {
    let folder = dir.join(id);
    if !folder.join("events.jsonl").is_file() {
        return Ok(TaskRow {
            task: id.to_owned(),
            name: id.to_owned(),
            reward: None,
            benchmark: false,
            agent: None,
            outcome: RunOutcome::Unfinished(Unfinished::NotRun),
            failure: None,
            passed: false,
            attempts: attempts.unwrap_or(0),
            steps: 0,
            tool_calls: 0,
            input_tokens: 0,
            output_tokens: 0,
            cost: 0.0,
            cost_known: true,
            duration_ms: 0,
            log: None,
        });
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
    Ok(TaskRow {
        task: id.to_owned(),
        name: id.to_owned(),
        reward: m.reward,
        benchmark: m.benchmark,
        agent: m.agent.clone(),
        passed: m.outcome == RunOutcome::Finished(Outcome::Completed) && failure.is_none(),
        failure,
        outcome: m.outcome,
        attempts: attempts.unwrap_or(1),
        steps: m.turns,
        tool_calls: m.tool_calls.values().sum(),
        input_tokens: m.input_tokens + m.cached_input_tokens,
        output_tokens: m.output_tokens,
        cost: m.cost,
        cost_known: m.cost_known,
        duration_ms: m.total_ms,
        log: Some(id.to_owned()),
    })
}

fn totals(rows: &[TaskRow], log: &BatchLog, samples: BTreeMap<String, Vec<u64>>) -> Totals {
    let run = rows
        .iter()
        .filter(|r| r.outcome != RunOutcome::Unfinished(Unfinished::NotRun))
        .count();
    let passed = rows.iter().filter(|r| r.passed).count();
    let mut failures = BTreeMap::new();
    for failure in rows.iter().filter_map(|row| row.failure) {
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
        tasks: rows.len(),
        run,
        passed,
        failed: run - passed,
        not_run: rows.len() - run,
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
        task_time_ms: rows.iter().map(|r| r.duration_ms).sum(),
        wall_ms: log.wall_ms,
        tool_latency_ms,
    }
}
