//! A batch as a grid: its tasks down, their attempts across, each cell a trial's outcome and
//! reward from the index, with the batch log's own word on what is pending, running, retried
//! or not runnable. Then pass@k, failures by class, each task's health, and the totals.

use std::collections::BTreeMap;
use std::path::Path;

use harness_log::views::{Line, View};
use serde::Serialize;
use serde_json::Value;

use crate::ViewError;
use crate::index::Runs;
use crate::summary::Status;

/// Trials a grid holds at most (as many as the index holds runs).
const MAX_CELLS: usize = crate::index::MAX_RUNS;

/// One trial: a cell of the grid.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Cell {
    /// The batch's id for the attempt (`task`, `task__2`).
    pub task_id: String,
    /// The task's name, which its trials share (a fork's children: `parent@step`).
    #[serde(skip)]
    pub task: String,
    pub trial: u32,
    /// The run to open (its session), once it has a log.
    pub run: Option<String>,
    /// `pending`, `running`, `passed`, `failed`, `not_runnable`, `skipped`.
    pub state: &'static str,
    pub outcome: Option<String>,
    pub failure: Option<String>,
    pub reward: Option<f64>,
    pub cost: Option<f64>,
    pub tokens: Option<u64>,
    pub turns: Option<u64>,
    pub duration_ms: Option<u64>,
    pub attempts: u32,
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub task: String,
    pub cells: Vec<Cell>,
    pub passed: usize,
    pub finished: usize,
    pub mean_reward: Option<f64>,
    pub health: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Grid {
    pub rows: Vec<Row>,
    /// pass@k for k = 1..=attempts, over the tasks with at least k finished trials.
    pub pass_at_k: Vec<(usize, f64)>,
    pub failures: BTreeMap<String, usize>,
    pub trials: usize,
    pub finished: usize,
    pub passed: usize,
    pub cost: f64,
    pub tokens: u64,
    pub agent: Option<String>,
}

/// The largest k the grid gives pass@k for.
const MAX_K: usize = 100;

/// What the batch log says of each attempt, in the order it lists them.
fn attempts(dir: &Path) -> Result<Vec<Cell>, ViewError> {
    let io = |err: std::io::Error| ViewError::Io(format!("{}: {err}", dir.display()));
    let file = harness_log::reader::open_regular(&dir.join("events.jsonl"))
        .map(|(file, _)| file)
        .map_err(io)?;
    let mut reader = std::io::BufReader::with_capacity(256 * 1024, file);
    let mut cells: Vec<Cell> = Vec::new();
    let mut at: BTreeMap<String, usize> = BTreeMap::new();
    let mut line = Vec::new();
    loop {
        let (_, whole) =
            crate::pages::read_line(&mut reader, &mut line, crate::pages::MAX_BATCH_LINE)
                .map_err(io)?;
        if !whole {
            break;
        }
        let Ok(event) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        match Line::of(&event).event {
            View::BatchStarted(batch) => {
                // A hostile header listing millions of tasks (or a log repeating its header)
                // gives a grid of the first ones.
                for listed in batch.tasks().take(MAX_CELLS.saturating_sub(cells.len())) {
                    let id = listed.id.unwrap_or_default().to_owned();
                    let task = listed
                        .task
                        .map_or_else(|| task_name(&id).to_owned(), str::to_owned);
                    at.insert(id.clone(), cells.len());
                    cells.push(Cell {
                        task_id: id,
                        task,
                        trial: listed.trial.unwrap_or(1) as u32,
                        state: "pending",
                        ..Cell::default()
                    });
                }
            }
            event => {
                let Some(cell) = task_of(&event)
                    .and_then(|task| at.get(task))
                    .map(|i| &mut cells[*i])
                else {
                    continue;
                };
                apply(cell, &event);
            }
        }
    }
    Ok(cells)
}

/// A string of the batch log as a cell keeps it: at most 300 characters.
fn short(text: Option<&str>) -> Option<String> {
    text.map(|text| text.chars().take(300).collect())
}

/// The task a task's event is about.
fn task_of<'a>(event: &View<'a>) -> Option<&'a str> {
    match event {
        View::TaskStarted(task)
        | View::TaskFinished(task)
        | View::TaskRetried(task)
        | View::TaskSkipped(task)
        | View::TaskNotRunnable(task) => task.task,
        _ => None,
    }
}

fn apply(cell: &mut Cell, event: &View<'_>) {
    match event {
        View::TaskStarted(task) => {
            cell.state = "running";
            cell.attempts = task.attempt.unwrap_or(1) as u32;
        }
        View::TaskFinished(task) => {
            cell.state = if task.passed == Some(true) {
                "passed"
            } else {
                "failed"
            };
            cell.outcome = short(task.outcome);
            cell.failure = short(task.failure);
            cell.cost = task.cost;
            cell.duration_ms = task.duration_ms;
        }
        View::TaskRetried(task) => {
            cell.note = Some(format!(
                "retried: {}",
                short(task.reason).unwrap_or_default()
            ));
        }
        View::TaskNotRunnable(task) => {
            cell.state = "not_runnable";
            cell.note = short(task.reason);
        }
        View::TaskSkipped(task) => {
            cell.state = "skipped";
            cell.note = short(task.reason);
        }
        _ => {}
    }
}

/// The grid of the batch `id` (its folder `dir`), its trials' figures from `runs`.
pub fn grid(runs: &Runs, id: &str, dir: &Path) -> Result<Grid, ViewError> {
    let mut cells = attempts(dir)?;
    let mut agent = None;
    for cell in &mut cells {
        let run = format!("{id}/{}", cell.task_id);
        let Some(trial) = runs.by_id.get(&run) else {
            continue;
        };
        let s = &trial.summary;
        cell.run = Some(run);
        cell.reward = s.reward;
        cell.tokens = s.tokens;
        cell.turns = s.turns;
        cell.cost = cell.cost.or(s.cost);
        cell.duration_ms = cell.duration_ms.or(s.duration_ms);
        cell.outcome = cell.outcome.clone().or_else(|| s.outcome.clone());
        cell.failure = cell.failure.clone().or_else(|| s.failure.clone());
        if cell.state == "running" && s.status == Some(Status::Unfinished) {
            cell.note = Some("its log stopped without an end".to_owned());
        }
        agent = agent.or_else(|| s.agent.clone());
    }
    Ok(assemble(cells, agent))
}

fn assemble(cells: Vec<Cell>, agent: Option<String>) -> Grid {
    let mut by_task: BTreeMap<String, Vec<Cell>> = BTreeMap::new();
    for cell in cells {
        let name = if cell.task.is_empty() {
            task_name(&cell.task_id).to_owned()
        } else {
            cell.task.clone()
        };
        by_task.entry(name).or_default().push(cell);
    }
    let mut failures = BTreeMap::new();
    let (mut trials, mut finished, mut passed, mut cost, mut tokens) = (0, 0, 0, 0.0, 0);
    let mut rows = Vec::new();
    let mut most = 0;
    for (task, mut cells) in by_task {
        cells.sort_by_key(|c| c.trial);
        let done: Vec<&Cell> = cells
            .iter()
            .filter(|c| matches!(c.state, "passed" | "failed"))
            .collect();
        let ok = done.iter().filter(|c| c.state == "passed").count();
        for cell in &done {
            if cell.state == "failed" {
                let class = cell
                    .failure
                    .clone()
                    .or_else(|| cell.outcome.clone())
                    .unwrap_or_else(|| "unknown".to_owned());
                *failures.entry(class).or_insert(0) += 1;
            }
        }
        let rewards: Vec<f64> = cells.iter().filter_map(|c| c.reward).collect();
        trials += cells.len();
        finished += done.len();
        passed += ok;
        cost += cells.iter().filter_map(|c| c.cost).sum::<f64>();
        tokens += cells.iter().filter_map(|c| c.tokens).sum::<u64>();
        most = most.max(done.len());
        let health = health(agent.as_deref(), &cells, done.len(), ok);
        rows.push(Row {
            task,
            passed: ok,
            finished: done.len(),
            mean_reward: (!rewards.is_empty())
                .then(|| rewards.iter().sum::<f64>() / rewards.len() as f64),
            health,
            cells,
        });
    }
    // Each k costs O(k) a task: bounded, as a crafted log can claim any number of trials.
    let pass_at_k = (1..=most.min(MAX_K))
        .filter_map(|k| {
            let values: Vec<f64> = rows
                .iter()
                .filter(|r| r.finished >= k)
                .map(|r| harness_replay::report::pass_at_k(r.finished, r.passed, k))
                .collect();
            (!values.is_empty()).then(|| (k, values.iter().sum::<f64>() / values.len() as f64))
        })
        .collect();
    Grid {
        rows,
        pass_at_k,
        failures,
        trials,
        finished,
        passed,
        cost,
        tokens,
        agent,
    }
}

/// A task's name from an attempt's id: `task__3` is trial 3 of `task`.
pub fn task_name(task_id: &str) -> &str {
    match task_id.rsplit_once("__") {
        Some((name, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => task_id,
    }
}

/// A task broken for everyone (an oracle that fails, a do-nothing agent that passes), or its
/// trials' trouble with the infrastructure.
fn health(agent: Option<&str>, cells: &[Cell], done: usize, ok: usize) -> Option<String> {
    let trouble = cells.iter().find_map(|c| match c.state {
        "not_runnable" => Some(format!(
            "not runnable: {}",
            c.note.clone().unwrap_or_default()
        )),
        _ => c.note.clone(),
    });
    match agent {
        _ if done == 0 => trouble,
        Some("oracle") if ok == done => Some("ok".to_owned()),
        Some("oracle") => Some("broken: its oracle does not pass".to_owned()),
        Some("nop") if ok > 0 => Some("broken: passes with nothing done".to_owned()),
        Some("nop") => Some("ok".to_owned()),
        _ => trouble,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_grouped_by_task_and_pass_at_k_counts_finished_trials() {
        let cell = |id: &str, trial, state| Cell {
            task_id: id.to_owned(),
            trial,
            state,
            ..Cell::default()
        };
        let grid = assemble(
            vec![
                cell("a", 1, "passed"),
                cell("a__2", 2, "failed"),
                cell("b", 1, "failed"),
                cell("b__2", 2, "running"),
            ],
            None,
        );
        assert_eq!(grid.rows.len(), 2);
        assert_eq!((grid.rows[0].passed, grid.rows[0].finished), (1, 2));
        // pass@1: a 0.5, b 0; pass@2 only over a (b has one finished trial): 1.
        assert_eq!(grid.pass_at_k, vec![(1, 0.25), (2, 1.0)]);
        assert_eq!(grid.failures.get("unknown"), Some(&2));
        assert_eq!(task_name("x__12"), "x");
        assert_eq!(task_name("x__"), "x__");
    }

    /// A crafted batch log repeating its header cannot grow the grid past its bound, and a
    /// task claiming thousands of trials gives pass@k only up to [`MAX_K`].
    #[test]
    fn repeated_headers_and_many_trials_stay_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let header = |n: usize| {
            let tasks: Vec<Value> = (0..n)
                .map(|i| serde_json::json!({"id": format!("t{i}"), "task": "t", "trial": i + 1}))
                .collect();
            serde_json::json!({"seq": 0, "ts": "2026-01-01T00:00:00.000Z", "type": "batch_started", "data": {"tasks": tasks}})
                .to_string()
        };
        let one = header(MAX_CELLS / 2 + 10);
        std::fs::write(
            dir.path().join("events.jsonl"),
            format!("{one}\n{one}\n{one}\n"),
        )
        .unwrap();
        let cells = attempts(dir.path()).unwrap();
        assert_eq!(cells.len(), MAX_CELLS);
        let finished: Vec<Cell> = (1..=500)
            .map(|trial| Cell {
                task_id: format!("t__{trial}"),
                trial,
                state: "passed",
                ..Cell::default()
            })
            .collect();
        let grid = assemble(finished, None);
        assert_eq!(grid.pass_at_k.len(), MAX_K);
    }
}
