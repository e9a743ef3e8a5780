//! A batch's benchmark trials by task: trials run and passed, pass@1, pass@k (the unbiased
//! estimator, k the trials per task), the mean reward, and for the oracle and nop agents the
//! task's health (an oracle that fails, or a task that passes with nothing done, is broken).

use serde::Serialize;

use super::TaskRow;
use crate::bench::results::job::pass_at_k;
use crate::replay::metrics::RunOutcome;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchTaskRow {
    pub task: String,
    /// Trials that ran to an end (not those never run or cut short).
    pub trials: usize,
    pub passed: usize,
    pub pass_at_1: Option<f64>,
    /// At k = the trials per task, when the task ran that many.
    pub pass_at_k: Option<f64>,
    /// Over the trials with a reward.
    pub mean_reward: Option<f64>,
    /// For the oracle and nop agents: `ok`, or why the task is broken.
    pub health: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchSummary {
    /// Trials per task.
    pub k: u32,
    pub agent: String,
    pub tasks: Vec<BenchTaskRow>,
    /// Means over the tasks that ran (pass@k: that ran k trials).
    pub pass_at_1: Option<f64>,
    pub pass_at_k: Option<f64>,
    pub mean_reward: Option<f64>,
    /// Tasks the oracle or nop agent found broken.
    pub broken: usize,
}

/// The summary of the benchmark rows, if any.
pub(super) fn summarise(rows: &[TaskRow], k: u32) -> Option<BenchSummary> {
    let bench: Vec<&TaskRow> = rows.iter().filter(|r| r.benchmark).collect();
    if bench.is_empty() {
        return None;
    }
    let agent = bench
        .iter()
        .find_map(|r| r.agent.clone())
        .unwrap_or_else(|| "model".to_owned());
    let mut names: Vec<&str> = bench.iter().map(|r| r.name.as_str()).collect();
    names.dedup();
    let tasks: Vec<BenchTaskRow> = names
        .iter()
        .map(|name| {
            let trials: Vec<&TaskRow> = bench.iter().copied().filter(|r| r.name == *name).collect();
            task_row(name, &trials, k, &agent)
        })
        .collect();
    let mean = |values: Vec<f64>| {
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    };
    Some(BenchSummary {
        k,
        pass_at_1: mean(tasks.iter().filter_map(|t| t.pass_at_1).collect()),
        pass_at_k: mean(tasks.iter().filter_map(|t| t.pass_at_k).collect()),
        mean_reward: mean(bench.iter().filter_map(|r| r.reward).collect()),
        broken: tasks
            .iter()
            .filter(|t| t.health.as_deref().is_some_and(|h| h != "ok"))
            .count(),
        agent,
        tasks,
    })
}

fn task_row(name: &str, trials: &[&TaskRow], k: u32, agent: &str) -> BenchTaskRow {
    let ended: Vec<&&TaskRow> = trials
        .iter()
        .filter(|r| matches!(r.outcome, RunOutcome::Finished(o) if o != crate::event_log::Outcome::Interrupted))
        .collect();
    let (n, c) = (ended.len(), ended.iter().filter(|r| r.passed).count());
    let rewards: Vec<f64> = trials.iter().filter_map(|r| r.reward).collect();
    let verifier_failed = ended
        .iter()
        .any(|r| r.failure == Some(crate::event_log::FailureClass::Verifier));
    let health = match agent {
        _ if n == 0 => None,
        "oracle" if c == n => Some("ok".to_owned()),
        "oracle" if verifier_failed => Some("broken: its verifier gave no reward".to_owned()),
        "oracle" => Some("broken: its oracle does not pass".to_owned()),
        "nop" if c > 0 => Some("broken: passes with nothing done".to_owned()),
        "nop" if verifier_failed => Some("broken: its verifier gave no reward".to_owned()),
        "nop" => Some("ok".to_owned()),
        _ => None,
    };
    BenchTaskRow {
        task: name.to_owned(),
        trials: n,
        passed: c,
        pass_at_1: (n > 0).then(|| c as f64 / n as f64),
        pass_at_k: (k > 1 && n >= k as usize).then(|| pass_at_k(n, c, k as usize)),
        mean_reward: (!rewards.is_empty())
            .then(|| rewards.iter().sum::<f64>() / rewards.len() as f64),
        health,
    }
}

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{:.1}%", 100.0 * v))
}

fn number(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"))
}

/// The benchmark section of the text report.
pub(super) fn write_text(
    summary: &BenchSummary,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let k = summary.k;
    let trials = if k == 1 {
        "1 trial".to_owned()
    } else {
        format!("{k} trials")
    };
    writeln!(
        out,
        "\nbenchmark tasks (agent {}, {trials} per task):",
        summary.agent
    )?;
    let at_k = |value: Option<f64>| {
        if k > 1 {
            format!(" {:>8}", percent(value))
        } else {
            String::new()
        }
    };
    let k_header = if k > 1 {
        format!(" {:>8}", format!("pass@{k}"))
    } else {
        String::new()
    };
    writeln!(
        out,
        "{:<32} {:>6} {:>6} {:>8}{k_header} {:>8}  health",
        "task", "trials", "passed", "pass@1", "reward"
    )?;
    for task in &summary.tasks {
        writeln!(
            out,
            "{:<32} {:>6} {:>6} {:>8}{} {:>8}  {}",
            task.task,
            task.trials,
            task.passed,
            percent(task.pass_at_1),
            at_k(task.pass_at_k),
            number(task.mean_reward),
            task.health.as_deref().unwrap_or("-")
        )?;
    }
    let overall_k = if k > 1 {
        format!(", pass@{k} {}", percent(summary.pass_at_k))
    } else {
        String::new()
    };
    writeln!(
        out,
        "overall: pass@1 {}{overall_k}, mean reward {}{}",
        percent(summary.pass_at_1),
        number(summary.mean_reward),
        match summary.agent.as_str() {
            "oracle" | "nop" => format!(
                "; {} of {} tasks broken",
                summary.broken,
                summary.tasks.len()
            ),
            _ => String::new(),
        }
    )
}

/// The benchmark section of the HTML report.
pub(super) fn html(summary: &BenchSummary) -> String {
    let escape = crate::text::escape;
    let k = summary.k;
    let mut page = format!(
        "<h2>Benchmark tasks</h2>\n<p>Agent {}, {k} trials per task: pass@1 {}, pass@{k} {}, mean reward {}.</p>\n\
         <table><tr><th>task</th><th>trials</th><th>passed</th><th>pass@1</th><th>pass@{k}</th><th>mean reward</th><th>health</th></tr>\n",
        escape(&summary.agent),
        percent(summary.pass_at_1),
        percent(summary.pass_at_k),
        number(summary.mean_reward),
    );
    for task in &summary.tasks {
        page.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            escape(&task.task),
            task.trials,
            task.passed,
            percent(task.pass_at_1),
            percent(task.pass_at_k),
            number(task.mean_reward),
            escape(task.health.as_deref().unwrap_or("-")),
        ));
    }
    page.push_str("</table>\n");
    page
}
