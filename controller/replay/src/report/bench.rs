//! A batch's benchmark trials by task: trials run and passed, pass@1, pass@k (the unbiased
//! estimator, k the trials per task), the mean reward, and for the oracle and nop agents the
//! task's health (an oracle that fails, or a task that passes with nothing done, is broken).
//!
//! Every trial that ran to an end counts: one that errored (Harbor's `n_errors`: an agent
//! timeout, a verifier that gave no reward, the sandbox failing) counts as a fail in pass@k and
//! as 0 in the mean reward, as the Terminal-Bench leaderboards count it. Beside it stand the
//! mean over the scored trials alone (Harbor's job mean, in its `result.json`) and the errored
//! trials by class, so a reader sees both. The trial figures come from each trial's
//! `result.json`, the file Harbor reads, so the report and the job agree.

use std::collections::BTreeMap;
use std::fmt::Display;

use serde::Serialize;

use super::TaskRow;
use crate::metrics::RunOutcome;
use crate::text_table::{Column, write_line};
use harness_log::{FailureClass, Outcome};

/// The unbiased pass@k estimator for `n` trials of which `c` passed: `1 - C(n-c, k) / C(n, k)`.
pub fn pass_at_k(n: usize, c: usize, k: usize) -> f64 {
    if n == 0 || k == 0 || k > n {
        return f64::NAN;
    }
    if n - c < k {
        return 1.0;
    }
    1.0 - (0..k)
        .map(|i| (n - c - i) as f64 / (n - i) as f64)
        .product::<f64>()
}

/// What a task's row and the whole benchmark both give: trials and passes, pass@1 and pass@k,
/// the mean rewards. Its fields stand in the row's and the summary's JSON as their own.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchScores {
    /// Trials that ran to an end, errored ones included (not those never run or cut short).
    pub trials: usize,
    pub passed: usize,
    /// Every trial counted; an errored one is a fail. The summary's is the mean over the tasks
    /// that ran.
    pub pass_at_1: Option<f64>,
    /// At k = the trials per task, when the task ran that many. The summary's is the mean over
    /// the tasks that ran k trials.
    pub pass_at_k: Option<f64>,
    /// Over every trial, one without a reward as 0.
    pub mean_reward: Option<f64>,
    /// Over the trials whose reward Harbor counts (its job mean).
    pub mean_scored: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchTaskRow {
    pub task: String,
    #[serde(flatten)]
    pub scores: BenchScores,
    /// Trials with an error, by its class (Harbor's exception names).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, usize>,
    /// Named rewards (a `reward.json` with several keys): each key's mean over the trials that
    /// gave rewards, a key a trial lacks as 0.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub rewards: BTreeMap<String, f64>,
    /// Trials whose agent tampered with the verifier's folders.
    pub tampered: usize,
    /// Terminal-Bench 1 trials whose tests ran and gave no result: unresolved, 0.
    pub unresolved: usize,
    /// For the oracle and nop agents: `ok`, or why the task is broken.
    pub health: Option<String>,
}

/// A task of the dataset the harness could not run, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotRunnable {
    pub task: String,
    pub reason: String,
    /// Its author says it cannot run here (`[metadata] expected_not_runnable`), and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchSummary {
    /// Trials per task.
    pub k: u32,
    pub agent: String,
    pub tasks: Vec<BenchTaskRow>,
    /// Over every trial that ran to an end.
    #[serde(flatten)]
    pub scores: BenchScores,
    /// How many trials Harbor counts the reward of.
    pub scored: usize,
    /// Trials with an error, by class.
    pub errors: BTreeMap<String, usize>,
    /// Each named reward's mean over the trials that gave rewards.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub rewards: BTreeMap<String, f64>,
    pub tampered: usize,
    pub unresolved: usize,
    /// Tasks the oracle or nop agent found broken.
    pub broken: usize,
    /// Of those, the tasks their author marks broken on purpose.
    pub expected_broken: Vec<String>,
    /// Tasks of the dataset that could not be run, with why.
    pub not_runnable: Vec<NotRunnable>,
    /// What went as expected, a few words a part: the tasks that passed (under nop: failed),
    /// those broken on purpose, those not runnable here as their author says.
    pub as_expected: Vec<String>,
    /// What did not, a task a part; empty when everything went as expected. A task that
    /// failed and is not broken on purpose under the oracle, one that passed under nop, one
    /// not runnable here that its author does not say is.
    pub unexpected: Vec<String>,
}

/// A trial ran to an end: it has a score, a fail or an error.
fn ended(row: &TaskRow) -> bool {
    matches!(row.outcome, RunOutcome::Finished(o) if o != Outcome::Interrupted)
}

/// A trial's error class: its `result.json`'s, else (no result written) its failure's.
fn error_of(row: &TaskRow) -> Option<String> {
    row.error.clone().or_else(|| {
        (row.reward.is_none())
            .then(|| row.failure.map(|f| format!("{f:?}")))
            .flatten()
            .filter(|_| row.failure != Some(FailureClass::Check))
    })
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Each key's mean over `maps`, a key one lacks as 0.
fn key_means(maps: &[&BTreeMap<String, f64>]) -> BTreeMap<String, f64> {
    let mut sums: BTreeMap<String, f64> = BTreeMap::new();
    for map in maps {
        for (key, value) in *map {
            *sums.entry(key.clone()).or_default() += value;
        }
    }
    sums.into_iter()
        .map(|(key, sum)| (key, sum / maps.len().max(1) as f64))
        .collect()
}

/// What a set of trials that ran to an end adds up to.
struct Tally {
    trials: usize,
    passed: usize,
    mean_reward: Option<f64>,
    mean_scored: Option<f64>,
    scored: usize,
    errors: BTreeMap<String, usize>,
    rewards: BTreeMap<String, f64>,
    tampered: usize,
    unresolved: usize,
}

fn tally(rows: &[&TaskRow]) -> Tally {
    let done: Vec<&TaskRow> = rows.iter().copied().filter(|r| ended(r)).collect();
    let scored: Vec<f64> = done
        .iter()
        .filter(|r| r.reward_valid)
        .filter_map(|r| r.reward)
        .collect();
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for row in &done {
        if let Some(class) = error_of(row) {
            *errors.entry(class).or_default() += 1;
        }
    }
    let named: Vec<&BTreeMap<String, f64>> = done
        .iter()
        .map(|r| &r.rewards)
        .filter(|r| !r.is_empty())
        .collect();
    Tally {
        trials: done.len(),
        passed: done.iter().filter(|r| r.passed).count(),
        mean_reward: mean(
            &done
                .iter()
                .map(|r| r.reward.unwrap_or(0.0))
                .collect::<Vec<_>>(),
        ),
        mean_scored: mean(&scored),
        scored: scored.len(),
        errors,
        rewards: key_means(&named),
        tampered: done.iter().filter(|r| r.tampered).count(),
        unresolved: done.iter().filter(|r| r.note.is_some()).count(),
    }
}

/// The summary of the benchmark rows, if any.
pub(super) fn summarise(
    rows: &[TaskRow],
    k: u32,
    not_runnable: Vec<NotRunnable>,
) -> Option<BenchSummary> {
    let bench: Vec<&TaskRow> = rows.iter().filter(|r| r.benchmark).collect();
    if bench.is_empty() && not_runnable.is_empty() {
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
    let all = tally(&bench);
    let verdict = super::verdict::verdict(&agent, &tasks, &bench, &not_runnable);
    let task_means = |f: fn(&BenchScores) -> Option<f64>| -> Option<f64> {
        mean(
            &tasks
                .iter()
                .filter_map(|t| f(&t.scores))
                .collect::<Vec<_>>(),
        )
    };
    Some(BenchSummary {
        k,
        scores: BenchScores {
            trials: all.trials,
            passed: all.passed,
            pass_at_1: task_means(|s| s.pass_at_1),
            pass_at_k: task_means(|s| s.pass_at_k),
            mean_reward: all.mean_reward,
            mean_scored: all.mean_scored,
        },
        scored: all.scored,
        errors: all.errors,
        rewards: all.rewards,
        tampered: all.tampered,
        unresolved: all.unresolved,
        broken: tasks
            .iter()
            .filter(|t| t.health.as_deref().is_some_and(|h| h != "ok"))
            .count(),
        expected_broken: tasks
            .iter()
            .filter(|t| t.health.as_deref().is_some_and(|h| h.contains(EXPECTED)))
            .map(|t| t.task.clone())
            .collect(),
        agent,
        tasks,
        not_runnable,
        as_expected: verdict.as_expected,
        unexpected: verdict.unexpected,
    })
}

/// How a health column marks a task broken on purpose.
const EXPECTED: &str = "expected";

fn task_row(name: &str, trials: &[&TaskRow], k: u32, agent: &str) -> BenchTaskRow {
    let t = tally(trials);
    let (n, c) = (t.trials, t.passed);
    // A verifier that gave no reward (a reward file missing, empty or unreadable, a timeout).
    let no_reward = trials
        .iter()
        .any(|r| ended(r) && r.reward.is_none() && r.failure == Some(FailureClass::NoVerdict));
    let health = match agent {
        _ if n == 0 => None,
        "oracle" if c == n => Some("ok".to_owned()),
        "oracle" if no_reward => Some("broken: its verifier gave no reward".to_owned()),
        "oracle" => Some(
            match trials.iter().find_map(|r| r.expected_broken.as_deref()) {
                Some(why) => format!("broken: its oracle does not pass ({EXPECTED}: {why})"),
                None => "broken: its oracle does not pass".to_owned(),
            },
        ),
        "nop" if c > 0 => Some("broken: passes with nothing done".to_owned()),
        "nop" if no_reward => Some("broken: its verifier gave no reward".to_owned()),
        "nop" => Some("ok".to_owned()),
        _ => None,
    };
    BenchTaskRow {
        task: name.to_owned(),
        scores: BenchScores {
            trials: n,
            passed: c,
            pass_at_1: (n > 0).then(|| c as f64 / n as f64),
            pass_at_k: (k > 1 && n >= k as usize).then(|| pass_at_k(n, c, k as usize)),
            mean_reward: t.mean_reward,
            mean_scored: t.mean_scored,
        },
        errors: t.errors,
        rewards: t.rewards,
        tampered: t.tampered,
        unresolved: t.unresolved,
        health,
    }
}

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{:.1}%", 100.0 * v))
}

fn number(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"))
}

/// `3 (AgentTimeoutError 2, RewardFileNotFoundError 1)`, or `0`.
fn errors_text(errors: &BTreeMap<String, usize>) -> String {
    let total: usize = errors.values().sum();
    if total == 0 {
        return "0".to_owned();
    }
    let classes: Vec<String> = errors.iter().map(|(c, n)| format!("{c} {n}")).collect();
    format!("{total} ({})", classes.join(", "))
}

/// The key means, `correctness 0.750, style 0.500`.
fn rewards_text(rewards: &BTreeMap<String, f64>) -> String {
    let keys: Vec<String> = rewards.iter().map(|(k, v)| format!("{k} {v:.3}")).collect();
    keys.join(", ")
}

/// The benchmark section of the text report.
pub(super) fn write_text(
    summary: &BenchSummary,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    write_task_table(summary, out)?;
    write_overall(summary, out)?;
    write_notes(summary, out)
}

/// The section's heading and one row per task (with its named rewards below it).
fn write_task_table(summary: &BenchSummary, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let k = summary.k;
    let trials = if k == 1 {
        "1 trial".to_owned()
    } else {
        format!("{k} trials")
    };
    writeln!(
        out,
        "\nbenchmark tasks (agent {}, {trials} per task; an errored trial counts as a fail, reward 0):",
        summary.agent
    )?;
    let pass_at_k = format!("pass@{k}");
    let heads: [&dyn Display; 9] = [
        &"task",
        &"trials",
        &"passed",
        &"pass@1",
        &pass_at_k,
        &"reward",
        &"scored",
        &"errors",
        &"tampered",
    ];
    write_task_line(out, k, &heads, "health")?;
    for task in &summary.tasks {
        let scores = &task.scores;
        let errors: usize = task.errors.values().sum();
        let cells: [&dyn Display; 9] = [
            &task.task,
            &scores.trials,
            &scores.passed,
            &percent(scores.pass_at_1),
            &percent(scores.pass_at_k),
            &number(scores.mean_reward),
            &number(scores.mean_scored),
            &errors,
            &task.tampered,
        ];
        let health = task.health.as_deref().unwrap_or("-");
        write_task_line(out, k, &cells, health)?;
        if !task.rewards.is_empty() {
            writeln!(out, "{:<32} rewards: {}", "", rewards_text(&task.rewards))?;
        }
    }
    Ok(())
}

/// The columns of the task table: task, trials, passed, pass@1, pass@k, the mean reward over
/// every trial and over the scored ones, errors and tampered (the health follows as the free
/// last column).
const TASK_COLUMNS: [Column; 9] = [
    Column::Left(32),
    Column::Right(6),
    Column::Right(6),
    Column::Right(8),
    Column::Right(8),
    Column::Right(8),
    Column::Right(8),
    Column::Right(6),
    Column::Right(8),
];

/// Where pass@k stands in the task table.
const PASS_AT_K: usize = 4;

/// Writes a line of the task table, `tail` as its last column; its pass@k cell only when
/// trials are more than one a task (pass@k is pass@1 again with one).
fn write_task_line(
    out: &mut dyn std::io::Write,
    k: u32,
    cells: &[&dyn Display],
    tail: &str,
) -> std::io::Result<()> {
    let (mut columns, mut cells) = (TASK_COLUMNS.to_vec(), cells.to_vec());
    if k <= 1 {
        columns.remove(PASS_AT_K);
        cells.remove(PASS_AT_K);
    }
    write_line(out, &columns, &cells, Some(tail))
}

/// The line over every task: passes, pass@1 (and pass@k), the mean rewards, and for the
/// oracle and nop agents the broken tasks.
fn write_overall(summary: &BenchSummary, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let (k, scores) = (summary.k, &summary.scores);
    let overall_k = beyond_one(k, || format!(", pass@{k} {}", percent(scores.pass_at_k)));
    writeln!(
        out,
        "overall: {} of {} trials passed, pass@1 {}{overall_k}; mean reward {} over every trial, {} over the {} scored{}",
        scores.passed,
        scores.trials,
        percent(scores.pass_at_1),
        number(scores.mean_reward),
        number(scores.mean_scored),
        summary.scored,
        match summary.agent.as_str() {
            "oracle" | "nop" => format!(
                "; {} of {} tasks broken{}",
                summary.broken,
                summary.tasks.len(),
                match summary.expected_broken.len() {
                    0 => String::new(),
                    n => format!(" ({n} as expected: {})", summary.expected_broken.join(", ")),
                }
            ),
            _ => String::new(),
        }
    )?;
    Ok(())
}

/// The lines a reader must not miss: errored, unresolved and tampered trials, the named
/// rewards, and the tasks that could not run.
fn write_notes(summary: &BenchSummary, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(out, "errored trials: {}", errors_text(&summary.errors))?;
    if summary.unresolved > 0 {
        writeln!(
            out,
            "unresolved trials (tests ran, no result to read: reward 0): {}",
            summary.unresolved
        )?;
    }
    if summary.tampered > 0 {
        writeln!(
            out,
            "TAMPERING in {} trials: the agent wrote to the verifier's folders (put back before the verifier) or changed what runs the tests (programs, Python's start-up files, libraries: their rewards may be forged); see verifier_isolated in their logs",
            summary.tampered
        )?;
    }
    if !summary.rewards.is_empty() {
        writeln!(out, "named rewards: {}", rewards_text(&summary.rewards))?;
    }
    if !summary.not_runnable.is_empty() {
        let n = summary.not_runnable.len();
        writeln!(
            out,
            "not runnable ({n} {}, not run):",
            if n == 1 { "task" } else { "tasks" }
        )?;
        for task in &summary.not_runnable {
            writeln!(out, "  {}: {}{}", task.task, task.reason, expected(task))?;
        }
    }
    Ok(())
}

/// The benchmark section of the HTML report.
pub(super) fn html(summary: &BenchSummary) -> String {
    let escape = harness_log::text::escape;
    let (k, scores) = (summary.k, &summary.scores);
    let mut page = format!(
        "<h2>Benchmark tasks</h2>\n<p>Agent {}, {}: {} of {} trials passed, pass@1 {}{}; mean reward {} over every trial (an errored one as 0), {} over the {} scored. Errored trials: {}.{}</p>\n\
         <table><tr><th>task</th><th>trials</th><th>passed</th><th>pass@1</th>{}<th>mean reward</th><th>scored mean</th><th>errors</th><th>tampered</th><th>named rewards</th><th>health</th></tr>\n",
        escape(&summary.agent),
        harness_log::text::plural(k, "trial") + " per task",
        scores.passed,
        scores.trials,
        percent(scores.pass_at_1),
        // pass@k is pass@1 again with one trial: shown only for k > 1.
        beyond_one(k, || format!(", pass@{k} {}", percent(scores.pass_at_k))),
        number(scores.mean_reward),
        number(scores.mean_scored),
        summary.scored,
        escape(&errors_text(&summary.errors)),
        if summary.tampered > 0 {
            format!(
                " <strong>Tampering: the agent wrote to the verifier's folders in {} trials.</strong>",
                summary.tampered
            )
        } else {
            String::new()
        },
        beyond_one(k, || format!("<th>pass@{k}</th>")),
    );
    for task in &summary.tasks {
        page.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td>{}<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            escape(&task.task),
            task.scores.trials,
            task.scores.passed,
            percent(task.scores.pass_at_1),
            beyond_one(k, || format!("<td>{}</td>", percent(task.scores.pass_at_k))),
            number(task.scores.mean_reward),
            number(task.scores.mean_scored),
            escape(&errors_text(&task.errors)),
            task.tampered,
            escape(&rewards_text(&task.rewards)),
            escape(task.health.as_deref().unwrap_or("-")),
        ));
    }
    page.push_str("</table>\n");
    if !summary.not_runnable.is_empty() {
        page.push_str("<h3>Not runnable</h3>\n<table><tr><th>task</th><th>why</th></tr>\n");
        for task in &summary.not_runnable {
            page.push_str(&format!(
                "<tr><td>{}</td><td>{}</td></tr>\n",
                escape(&task.task),
                escape(&format!("{}{}", task.reason, expected(task)))
            ));
        }
        page.push_str("</table>\n");
    }
    page
}

/// ` (expected: why)` when its author says the task cannot run here.
fn expected(task: &NotRunnable) -> String {
    task.expected
        .as_ref()
        .map(|why| format!(" ({EXPECTED}: {why})"))
        .unwrap_or_default()
}

/// `text()` when trials are more than one a task (pass@k is pass@1 again with one), else nothing.
fn beyond_one(k: u32, text: impl FnOnce() -> String) -> String {
    if k > 1 { text() } else { String::new() }
}
