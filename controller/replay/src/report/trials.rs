//! A batch of task files run K times each (`--attempts K`): each task's trials, passes, pass@1
//! and pass@K, and the same over the tasks. (A benchmark's tasks have their own section, with
//! rewards and health: [`super::bench`].)

use std::collections::BTreeMap;
use std::fmt::Display;

use serde::Serialize;

use super::bench::pass_at_k;
use super::metrics::{RunOutcome, Unfinished};
use super::{BatchReport, TaskRow};
use crate::text_table::{Column, write_line};
use harness_log::Outcome;

/// Each task's trials when there were more than one a task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrialsSummary {
    /// Trials per task.
    pub k: u32,
    pub tasks: Vec<TaskTrials>,
    /// Means over the tasks (those with a finished trial).
    pub pass_at_1: Option<f64>,
    pub pass_at_k: Option<f64>,
}

/// One task's trials.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskTrials {
    pub task: String,
    /// Trials that ran to an end (not left unrun, not stopped by a Ctrl-C).
    pub trials: usize,
    pub passed: usize,
    pub pass_at_1: Option<f64>,
    pub pass_at_k: Option<f64>,
}

/// The summary of `rows` run `k` times each, when `k` is more than one and none is a
/// benchmark trial.
pub(super) fn summarise(rows: &[TaskRow], k: u32) -> Option<TrialsSummary> {
    if k <= 1 || rows.is_empty() || rows.iter().any(|r| r.benchmark) {
        return None;
    }
    let mut by_task: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for row in rows {
        let ended = !matches!(
            row.outcome,
            RunOutcome::Unfinished(Unfinished::NotRun) | RunOutcome::Finished(Outcome::Interrupted)
        );
        let (trials, passed) = by_task.entry(row.name.as_str()).or_default();
        *trials += usize::from(ended);
        *passed += usize::from(ended && row.passed);
    }
    let estimate =
        |n: usize, c: usize, at: usize| Some(pass_at_k(n, c, at)).filter(|p| !p.is_nan());
    let tasks: Vec<TaskTrials> = by_task
        .into_iter()
        .map(|(task, (trials, passed))| TaskTrials {
            task: task.to_owned(),
            trials,
            passed,
            pass_at_1: estimate(trials, passed, 1),
            pass_at_k: estimate(trials, passed, k as usize),
        })
        .collect();
    let mean = |pick: fn(&TaskTrials) -> Option<f64>| {
        let values: Vec<f64> = tasks.iter().filter_map(pick).collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    };
    Some(TrialsSummary {
        k,
        pass_at_1: mean(|t| t.pass_at_1),
        pass_at_k: mean(|t| t.pass_at_k),
        tasks,
    })
}

/// The columns of the trials table: task, trials, passed, pass@1, pass@k.
const COLUMNS: [Column; 5] = [
    Column::Left(32),
    Column::Right(6),
    Column::Right(6),
    Column::Right(8),
    Column::Right(8),
];

/// `66.7%`, or `-` where there is no figure.
fn percent(value: Option<f64>) -> String {
    value.map_or("-".to_owned(), |v| format!("{:.1}%", 100.0 * v))
}

/// The trials section of the text report.
pub(super) fn write_text(
    summary: &TrialsSummary,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let k = summary.k;
    writeln!(
        out,
        "\ntrials ({k} per task; pass@k: the chance one of k passes):"
    )?;
    let pass_at_k = format!("pass@{k}");
    let heads: [&dyn Display; 5] = [&"task", &"trials", &"passed", &"pass@1", &pass_at_k];
    write_line(out, &COLUMNS, &heads, None)?;
    for task in &summary.tasks {
        let (one, at_k) = (percent(task.pass_at_1), percent(task.pass_at_k));
        let cells: [&dyn Display; 5] = [&task.task, &task.trials, &task.passed, &one, &at_k];
        write_line(out, &COLUMNS, &cells, None)?;
    }
    writeln!(
        out,
        "over the tasks: pass@1 {}, pass@{k} {}",
        percent(summary.pass_at_1),
        percent(summary.pass_at_k)
    )
}

/// The trials section of the HTML report.
pub(super) fn html(report: &BatchReport) -> String {
    let Some(summary) = &report.trials else {
        return String::new();
    };
    let k = summary.k;
    let mut html = format!(
        "<h2>Trials ({k} per task)</h2>\n<table id=\"trials\"><thead><tr><th>task</th><th>trials</th>\
         <th>passed</th><th>pass@1</th><th>pass@{k}</th></tr></thead><tbody>\n"
    );
    for task in &summary.tasks {
        html.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            harness_log::text::escape(&task.task),
            task.trials,
            task.passed,
            percent(task.pass_at_1),
            percent(task.pass_at_k)
        ));
    }
    html.push_str(&format!(
        "</tbody></table>\n<p>Over the tasks: pass@1 {}, pass@{k} {}.</p>\n",
        percent(summary.pass_at_1),
        percent(summary.pass_at_k)
    ));
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, passed: bool) -> TaskRow {
        let mut row = TaskRow::not_run(name, 1);
        row.outcome = RunOutcome::Finished(if passed {
            Outcome::Completed
        } else {
            Outcome::CheckFailed
        });
        row.passed = passed;
        row
    }

    /// Issue 57 §4: one task file run three times, passing twice, has its pass@1 and pass@3.
    #[test]
    fn trials_of_a_task_file_give_pass_at_1_and_pass_at_k() {
        let rows = [row("hello", true), row("hello", false), row("hello", true)];
        let summary = summarise(&rows, 3).unwrap();
        let task = &summary.tasks[0];
        assert_eq!(
            (task.task.as_str(), task.trials, task.passed),
            ("hello", 3, 2)
        );
        assert!((task.pass_at_1.unwrap() - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(task.pass_at_k, Some(1.0));
        assert_eq!(summary.pass_at_k, Some(1.0));
        let mut text = Vec::new();
        write_text(&summary, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains("over the tasks: pass@1 66.7%, pass@3 100.0%"),
            "{text}"
        );
        assert_eq!(summarise(&rows, 1), None);
    }
}
