//! The batch report's charts, from the rows and totals [`load`](super::load) computed: outcomes,
//! pass rate or reward per task, cost and duration histograms, tool latency, turns per task.

use std::collections::BTreeMap;

use super::{BatchReport, TaskRow};
use crate::charts::{self, Bar, Chart, Spread, Tone};
use crate::metrics::{RunOutcome, Unfinished};

/// Every chart of the report, in a `<section class="charts">`.
pub(super) fn html(report: &BatchReport) -> String {
    let ran: Vec<&TaskRow> = report.tasks.iter().filter(|r| r.log.is_some()).collect();
    let costs: Vec<f64> = ran.iter().map(|r| r.cost).collect();
    let seconds: Vec<f64> = ran.iter().map(|r| r.duration_ms as f64 / 1000.0).collect();
    let unknown = ran.iter().any(|r| !r.cost_known);
    let cost_title = if unknown {
        "Cost per task (some prices unknown: at least)"
    } else {
        "Cost per task"
    };
    let (per_task, rewarded) = per_task(&report.tasks);
    let (title, unit) = if rewarded {
        ("Mean reward per task", "reward")
    } else {
        ("Pass rate per task", "trials passed (fraction)")
    };
    let charts = [
        charts::bars(
            &chart("outcomes", "Outcomes", "tasks"),
            &outcomes(&report.tasks),
            None,
        ),
        charts::bars(&chart("per-task", title, unit), &per_task, Some(1.0)),
        charts::histogram(&chart("cost", cost_title, "$ per task"), &costs),
        charts::histogram(
            &chart("duration", "Duration per task", "seconds per task"),
            &seconds,
        ),
        charts::spreads(
            &chart("tool-latency", "Tool latency", "ms"),
            &tool_latency(report),
        ),
        charts::bars(
            &chart("turns", "Turns per task", "model turns"),
            &turns(&ran),
            None,
        ),
    ];
    format!(
        "<section class=\"charts\">\n{}</section>\n",
        charts.concat()
    )
}

fn chart<'a>(id: &'a str, title: &'a str, unit: &'a str) -> Chart<'a> {
    Chart { id, title, unit }
}

/// Passed first, the failure classes by how many, then the tasks never run.
pub(super) fn outcomes(rows: &[TaskRow]) -> Vec<Bar> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut passed, mut not_run) = (0, 0);
    for row in rows {
        if row.passed {
            passed += 1;
        } else if row.outcome == RunOutcome::Unfinished(Unfinished::NotRun) {
            not_run += 1;
        } else {
            let class = row.failure.map_or(row.outcome.as_str(), |f| f.as_str());
            *counts.entry(class).or_default() += 1;
        }
    }
    let bar = |label: &str, n: usize, tone| Bar {
        label: label.to_owned(),
        value: n as f64,
        tip: format!("{label}: {n} of {} tasks", rows.len()),
        tone,
    };
    let mut failed: Vec<Bar> = counts
        .into_iter()
        .map(|(class, n)| bar(&format!("failed: {class}"), n, Tone::Bad))
        .collect();
    charts::sort_desc(&mut failed);
    let mut bars = vec![bar("passed", passed, Tone::Good)];
    bars.extend(failed);
    if not_run > 0 {
        bars.push(bar("not run", not_run, Tone::Muted));
    }
    bars
}

/// A bar per task name over its trials that ran: the mean reward when any trial has one, else
/// the fraction passed; best first. Also whether the bars are rewards.
pub(super) fn per_task(rows: &[TaskRow]) -> (Vec<Bar>, bool) {
    let mut trials: BTreeMap<&str, Vec<&TaskRow>> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.log.is_some()) {
        trials.entry(&row.name).or_default().push(row);
    }
    let rewarded = rows.iter().any(|r| r.reward.is_some());
    let mut bars: Vec<Bar> = trials
        .into_iter()
        .map(|(name, trials)| {
            let passed = trials.iter().filter(|r| r.passed).count();
            let rewards: Vec<f64> = trials.iter().filter_map(|r| r.reward).collect();
            let mean_reward =
                (!rewards.is_empty()).then(|| rewards.iter().sum::<f64>() / rewards.len() as f64);
            let value = match (rewarded, mean_reward) {
                (true, reward) => reward.unwrap_or(0.0),
                (false, _) => passed as f64 / trials.len() as f64,
            };
            let reward = mean_reward
                .map(|r| format!("; mean reward {}", charts::number(r)))
                .unwrap_or_default();
            Bar {
                label: name.to_owned(),
                value,
                tip: format!("{name}: {passed} of {} passed{reward}", trials.len()),
                tone: match passed {
                    0 => Tone::Bad,
                    n if n == trials.len() => Tone::Good,
                    _ => Tone::Neutral,
                },
            }
        })
        .collect();
    charts::sort_desc(&mut bars);
    (bars, rewarded)
}

/// Every tool's latency, the slowest (by p95) first.
fn tool_latency(report: &BatchReport) -> Vec<Spread> {
    let mut rows: Vec<Spread> = report
        .totals
        .tool_latency_ms
        .iter()
        .map(|(tool, l)| Spread {
            label: tool.clone(),
            n: l.calls,
            p50: l.latency.p50 as f64,
            p95: l.latency.p95 as f64,
            max: l.latency.max as f64,
        })
        .collect();
    rows.sort_by(|a, b| b.p95.total_cmp(&a.p95).then_with(|| a.label.cmp(&b.label)));
    rows
}

/// Model turns per task that ran, the most first.
fn turns(ran: &[&TaskRow]) -> Vec<Bar> {
    let mut bars: Vec<Bar> = ran
        .iter()
        .map(|row| Bar {
            label: row.task.clone(),
            value: f64::from(row.turns),
            tip: format!(
                "{}: {} turns, {} tool calls",
                row.task, row.turns, row.tool_calls
            ),
            tone: if row.passed { Tone::Good } else { Tone::Bad },
        })
        .collect();
    charts::sort_desc(&mut bars);
    bars
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness_log::{FailureClass, Outcome};

    fn row(task: &str, name: &str, passed: bool, failure: Option<FailureClass>) -> TaskRow {
        TaskRow {
            name: name.to_owned(),
            outcome: RunOutcome::Finished(if passed {
                Outcome::Completed
            } else {
                Outcome::CheckFailed
            }),
            failure,
            passed,
            attempts: 1,
            turns: 2,
            tool_calls: 1,
            duration_ms: 1500,
            log: Some(task.to_owned()),
            ..TaskRow::not_run(task, 1)
        }
    }

    #[test]
    fn outcomes_put_passed_first_and_failures_by_count() {
        let check = Some(FailureClass::Check);
        let mut never = row("n", "n", false, None);
        never.outcome = RunOutcome::Unfinished(Unfinished::NotRun);
        let rows = vec![
            row("a", "a", true, None),
            row("b", "b", false, Some(FailureClass::Limit)),
            row("c", "c", false, check),
            row("d", "d", false, check),
            never,
        ];
        let bars = outcomes(&rows);
        let labels: Vec<(&str, f64)> = bars.iter().map(|b| (b.label.as_str(), b.value)).collect();
        assert_eq!(
            labels,
            [
                ("passed", 1.0),
                ("failed: check", 2.0),
                ("failed: limit", 1.0),
                ("not run", 1.0)
            ]
        );
    }

    #[test]
    fn per_task_pools_trials_and_sorts_best_first() {
        let rows = vec![
            row("x", "x", false, Some(FailureClass::Check)),
            row("x__2", "x", true, None),
            row("y", "y", true, None),
        ];
        let (bars, rewarded) = per_task(&rows);
        assert!(!rewarded);
        assert_eq!(bars.len(), 2, "one bar per task, not per trial");
        assert_eq!((bars[0].label.as_str(), bars[0].value), ("y", 1.0));
        assert_eq!((bars[1].label.as_str(), bars[1].value), ("x", 0.5));
        assert_eq!(bars[1].tip, "x: 1 of 2 passed");
        let mut scored = rows;
        scored[0].reward = Some(0.25);
        scored[1].reward = Some(0.75);
        let (bars, rewarded) = per_task(&scored);
        assert!(rewarded);
        assert_eq!(bars[0].value, 0.5, "x's mean reward beats y's none");
    }
}
