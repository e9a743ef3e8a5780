//! Two batches side by side (`harness replay compare A B`): per task whether it passes in each
//! (a flip is a task that passes on one side only), its reward, cost, time, turns and tool
//! calls, the differences in calls per tool, and the tasks found on one side only. Both sides
//! are read with [`report::load`](super::report::load), so the figures are the reports'.
//! Written as a table, JSON or a self-contained HTML page ([`write`]).

mod write;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use write::{write_html, write_text};

use super::ReplayError;
use super::report::{self, BatchReport, TaskRow};

/// What changed for a task between A and B.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Passed in A, not in B.
    Broke,
    /// Failed in A, passed in B.
    Fixed,
    StillFailing,
    StillPassing,
}

impl Change {
    /// Its name in words, as the report's table says it (`still failing`).
    pub fn words(self) -> String {
        sandbox_protocol::names::variant_name(&self).replace('_', " ")
    }
}

/// One batch, in brief.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    /// The folder as given.
    pub path: PathBuf,
    pub batch_id: String,
    pub tasks: usize,
    pub passed: usize,
    pub pass_rate: f64,
    pub cost: f64,
    pub task_time_ms: u64,
    pub tool_calls: u64,
}

/// A task on one side.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskSide {
    pub passed: bool,
    /// The outcome, or the failure class when it failed with one.
    pub status: String,
    pub reward: Option<f64>,
    /// A benchmark trial's named rewards, when it has several.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub rewards: BTreeMap<String, f64>,
    pub cost: f64,
    pub duration_ms: u64,
    pub turns: u32,
    pub tool_calls: u64,
}

/// A task in both batches: each side, and B minus A.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskDelta {
    pub task: String,
    pub change: Change,
    pub a: TaskSide,
    pub b: TaskSide,
    /// When both sides have a reward.
    pub reward_delta: Option<f64>,
    pub cost_delta: f64,
    pub duration_delta_ms: i64,
    pub turns_delta: i64,
    pub tool_calls_delta: i64,
    /// Calls per tool that differ: B minus A.
    pub tools_delta: BTreeMap<String, i64>,
}

/// A tool's calls over each whole batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolDelta {
    pub tool: String,
    pub a: u64,
    pub b: u64,
    pub delta: i64,
}

/// Batch A against batch B.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub a: Side,
    pub b: Side,
    /// Every task in both: the broken first, then the fixed, then the rest; by name within.
    pub tasks: Vec<TaskDelta>,
    pub only_in_a: Vec<String>,
    pub only_in_b: Vec<String>,
    pub fixed: usize,
    pub broke: usize,
    /// Every tool either side called, the largest difference first.
    pub tools: Vec<ToolDelta>,
}

/// A batch folder, or a file in one (its `events.jsonl`, `report.json`, …).
fn batch_dir(path: &Path) -> Result<PathBuf, ReplayError> {
    let dir = if path.is_file() {
        path.parent().unwrap_or(path).to_owned()
    } else {
        path.to_owned()
    };
    if !dir.exists() {
        return Err(ReplayError::Io(format!(
            "{}: no such folder (a batch folder is the one `harness batch --out` wrote)",
            path.display()
        )));
    }
    if !report::is_batch(&dir) {
        return Err(ReplayError::NotABatch(path.to_owned()));
    }
    Ok(dir)
}

/// Reads both batches and compares them.
pub fn load(a: &Path, b: &Path, files: &dyn report::TrialFiles) -> Result<Comparison, ReplayError> {
    let (dir_a, dir_b) = (batch_dir(a)?, batch_dir(b)?);
    let (report_a, report_b) = (report::load(&dir_a, files)?, report::load(&dir_b, files)?);
    Ok(compare((a, &report_a), (b, &report_b)))
}

fn side(path: &Path, report: &BatchReport) -> Side {
    let t = &report.totals;
    Side {
        path: path.to_owned(),
        batch_id: report.batch_id.clone(),
        tasks: t.tasks,
        passed: t.passed,
        pass_rate: t.pass_rate,
        cost: t.cost,
        task_time_ms: t.task_time_ms,
        tool_calls: t.tool_calls,
    }
}

fn task_side(row: &TaskRow) -> TaskSide {
    TaskSide {
        passed: row.passed,
        status: if row.passed {
            "passed".to_owned()
        } else {
            row.failure
                .map_or(row.outcome.as_str(), |f| f.as_str())
                .to_owned()
        },
        reward: row.reward,
        rewards: row.rewards.clone(),
        cost: row.cost,
        duration_ms: row.duration_ms,
        turns: row.turns,
        tool_calls: row.tool_calls,
    }
}

fn delta(a: u64, b: u64) -> i64 {
    b as i64 - a as i64
}

fn task_delta(a: &TaskRow, b: &TaskRow) -> TaskDelta {
    let change = match (a.passed, b.passed) {
        (true, false) => Change::Broke,
        (false, true) => Change::Fixed,
        (false, false) => Change::StillFailing,
        (true, true) => Change::StillPassing,
    };
    let tools: BTreeSet<&String> = a.tools.keys().chain(b.tools.keys()).collect();
    let calls = |row: &TaskRow, tool: &str| row.tools.get(tool).copied().unwrap_or(0);
    TaskDelta {
        task: a.task.clone(),
        change,
        a: task_side(a),
        b: task_side(b),
        reward_delta: a.reward.zip(b.reward).map(|(a, b)| b - a),
        cost_delta: b.cost - a.cost,
        duration_delta_ms: delta(a.duration_ms, b.duration_ms),
        turns_delta: i64::from(b.turns) - i64::from(a.turns),
        tool_calls_delta: delta(a.tool_calls, b.tool_calls),
        tools_delta: tools
            .into_iter()
            .map(|tool| (tool.clone(), delta(calls(a, tool), calls(b, tool))))
            .filter(|(_, d)| *d != 0)
            .collect(),
    }
}

/// Calls per tool over a whole batch.
fn tool_totals(report: &BatchReport) -> BTreeMap<&str, u64> {
    let mut totals = BTreeMap::new();
    for row in &report.tasks {
        for (tool, n) in &row.tools {
            *totals.entry(tool.as_str()).or_default() += n;
        }
    }
    totals
}

/// Compares two loaded batches, their tasks matched by log folder name.
pub fn compare(a: (&Path, &BatchReport), b: (&Path, &BatchReport)) -> Comparison {
    let ((path_a, a), (path_b, b)) = (a, b);
    let in_b: BTreeMap<&str, &TaskRow> = b.tasks.iter().map(|r| (r.task.as_str(), r)).collect();
    let in_a: BTreeSet<&str> = a.tasks.iter().map(|r| r.task.as_str()).collect();
    let mut tasks: Vec<TaskDelta> = a
        .tasks
        .iter()
        .filter_map(|row| {
            in_b.get(row.task.as_str())
                .map(|other| task_delta(row, other))
        })
        .collect();
    tasks.sort_by(|x, y| (x.change, &x.task).cmp(&(y.change, &y.task)));
    let only_in_a = a
        .tasks
        .iter()
        .filter(|r| !in_b.contains_key(r.task.as_str()))
        .map(|r| r.task.clone())
        .collect();
    let only_in_b = b
        .tasks
        .iter()
        .filter(|r| !in_a.contains(r.task.as_str()))
        .map(|r| r.task.clone())
        .collect();
    let (tools_a, tools_b) = (tool_totals(a), tool_totals(b));
    let names: BTreeSet<&str> = tools_a.keys().chain(tools_b.keys()).copied().collect();
    let mut tools: Vec<ToolDelta> = names
        .into_iter()
        .map(|tool| {
            let count = |totals: &BTreeMap<&str, u64>| totals.get(tool).copied().unwrap_or(0);
            let (a, b) = (count(&tools_a), count(&tools_b));
            ToolDelta {
                tool: tool.to_owned(),
                a,
                b,
                delta: delta(a, b),
            }
        })
        .collect();
    tools.sort_by(|x, y| {
        y.delta
            .abs()
            .cmp(&x.delta.abs())
            .then_with(|| x.tool.cmp(&y.tool))
    });
    Comparison {
        a: side(path_a, a),
        b: side(path_b, b),
        fixed: tasks.iter().filter(|t| t.change == Change::Fixed).count(),
        broke: tasks.iter().filter(|t| t.change == Change::Broke).count(),
        tasks,
        only_in_a,
        only_in_b,
        tools,
    }
}

#[cfg(test)]
mod tests;
