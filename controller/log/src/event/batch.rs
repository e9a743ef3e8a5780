//! A batch's own log (`<batch folder>/events.jsonl`): its tasks, their attempts, its end.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::kinds::{FailureClass, Outcome};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchStarted {
    pub format_version: u32,
    pub batch_id: String,
    pub harness_version: String,
    /// Every task of the batch, in order.
    pub tasks: Vec<BatchTask>,
    /// Tasks at once.
    pub parallel: u32,
    /// How `parallel` was chosen, in words.
    pub parallel_reason: String,
    /// `local`, `docker` or `pool` (with its URLs).
    pub sandbox: String,
    /// Retries of an infrastructure failure, per task.
    pub retries: u32,
    /// Whether this run resumes an earlier one in the same folder.
    pub resumed: bool,
    /// Independent trials per task (`--attempts`); absent means 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchTask {
    /// Its log folder's name: the task's name, with `__N` for its N-th trial from the second.
    pub id: String,
    /// The task file, or a benchmark task's folder.
    pub file: String,
    /// The task's name, when `id` is not it (a trial past the first, a name with `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// Which of the task's trials (`--attempts`), from 1; absent for a single trial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskStarted {
    pub task: String,
    /// From 1.
    pub attempt: u32,
    /// The session folder, relative to the batch folder.
    pub log_dir: String,
    /// The sandbox it runs in (a pool member's URL), when known before it starts.
    pub sandbox: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskFinished {
    pub task: String,
    pub attempt: u32,
    /// The session's outcome (`session_finished`).
    pub outcome: Outcome,
    /// The session's failure class; absent for a pass.
    pub failure: Option<FailureClass>,
    pub passed: bool,
    pub duration_ms: u64,
    pub cost: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskRetried {
    pub task: String,
    /// The attempt about to run.
    pub attempt: u32,
    pub reason: String,
    /// Where the failed attempt's log was moved, relative to the batch folder.
    pub previous_log: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskSkipped {
    pub task: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskNotRunnable {
    /// The task's name.
    pub task: String,
    /// Its folder or file.
    pub file: String,
    pub reason: String,
    /// Its author's `[metadata] expected_not_runnable`: they say this harness cannot run it
    /// here, and why (reports count it as expected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchFinished {
    /// Ctrl-C stopped it before every task ran.
    pub interrupted: bool,
    pub n_passed: u32,
    pub n_failed: u32,
    /// Tasks never started (Ctrl-C).
    pub n_not_run: u32,
    pub n_retries: u32,
    pub duration_ms: u64,
    /// Per model endpoint: 429s seen and time tasks waited at the rate gate.
    pub rate_limits: Vec<GateRecord>,
    /// `--pool-size`: how the tasks' containers were served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_pool: Option<WarmPoolRecord>,
}

/// What a batch's warm pool of containers did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WarmPoolRecord {
    /// `--pool-size`.
    pub size: u32,
    /// Sandboxes leased from the pool, started ahead of need.
    pub leased_ready: u64,
    /// Sandboxes started for a task because none was ready or coming.
    pub started_on_demand: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GateRecord {
    pub endpoint: String,
    pub requests: u64,
    pub throttled: u64,
    pub waited_ms: u64,
}
