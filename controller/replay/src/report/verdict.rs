//! Whether a benchmark batch went as expected, task by task. Under the oracle every task
//! passes but those their author marks broken on purpose (`[metadata] expected_broken`), which
//! fail their check; under the nop agent every task fails; under a model every task passes (a
//! failure is a finding, not an expectation). A task this harness cannot run here is expected
//! when its author says so (`[metadata] expected_not_runnable`). The text and HTML reports end
//! with the verdict, and `report.json` has it (`benchmark.unexpected`, empty when everything
//! went as expected) for a script to read.

use harness_log::FailureClass;
use harness_log::text::plural;

use super::TaskRow;
use super::bench::{BenchSummary, BenchTaskRow, NotRunnable};

/// What went as expected, a few words a part, and what did not, a task a part.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Verdict {
    pub(super) as_expected: Vec<String>,
    pub(super) unexpected: Vec<String>,
}

/// How one task went against what was expected of it.
enum Judged {
    /// As every task should: it passed (under nop: it failed).
    Fine,
    /// It failed its check under the oracle, as its author says it does.
    BrokenOnPurpose,
    /// Not as expected: what happened.
    Not(String),
}

/// The verdict over the benchmark's tasks (`trials`: the rows of their trials) and those
/// that could not run here.
pub(super) fn verdict(
    agent: &str,
    tasks: &[BenchTaskRow],
    trials: &[&TaskRow],
    not_runnable: &[NotRunnable],
) -> Verdict {
    let mut verdict = Verdict::default();
    let (mut fine, mut broken) = (0usize, Vec::new());
    for task in tasks {
        let its: Vec<&TaskRow> = trials
            .iter()
            .copied()
            .filter(|r| r.name == task.task)
            .collect();
        match judge(agent, task, &its) {
            Judged::Fine => fine += 1,
            Judged::BrokenOnPurpose => broken.push(format!("{} broken on purpose", task.task)),
            Judged::Not(what) => verdict.unexpected.push(format!("{} {what}", task.task)),
        }
    }
    if fine > 0 {
        let did = if agent == "nop" {
            "failed with nothing done"
        } else {
            "passed"
        };
        verdict
            .as_expected
            .push(format!("{} {did}", plural(fine, "task")));
    }
    verdict.as_expected.extend(broken);
    for task in not_runnable {
        match &task.expected {
            Some(_) => verdict
                .as_expected
                .push(format!("{} not runnable here", task.task)),
            None => verdict.unexpected.push(format!(
                "{} not runnable here: {}",
                task.task,
                short(&task.reason)
            )),
        }
    }
    verdict
}

/// One task against what its agent should do with it.
fn judge(agent: &str, task: &BenchTaskRow, trials: &[&TaskRow]) -> Judged {
    let (n, c) = (task.scores.trials, task.scores.passed);
    if n < trials.len() || n == 0 {
        return Judged::Not(match trials.len() {
            0 | 1 => "did not run to an end".to_owned(),
            all => format!("did not run to an end in {} of {all} trials", all - n),
        });
    }
    let expected = trials.iter().find_map(|r| r.expected_broken.as_deref());
    let failed: Vec<&TaskRow> = trials.iter().copied().filter(|r| !r.passed).collect();
    match agent {
        "nop" if c > 0 => Judged::Not(format!("passed with nothing done{}", of(c, n))),
        "nop" => match task.health.as_deref() {
            Some("ok") | None => Judged::Fine,
            Some(health) => Judged::Not(health.to_owned()),
        },
        "oracle" if c == n && expected.is_some() => Judged::Not(format!(
            "passed, though its author marks it broken ({})",
            expected.unwrap_or_default()
        )),
        _ if c == n => Judged::Fine,
        "oracle"
            if expected.is_some()
                && failed
                    .iter()
                    .all(|r| r.failure == Some(FailureClass::Check)) =>
        {
            Judged::BrokenOnPurpose
        }
        _ => Judged::Not(failure(&failed, n)),
    }
}

/// ` in 2 of 3 trials`, or nothing for a task of one trial.
fn of(some: usize, n: usize) -> String {
    if n > 1 {
        format!(" in {some} of {n} trials")
    } else {
        String::new()
    }
}

/// `failed (infrastructure: why)`, `failed in 2 of 3 trials (check)`: the first failed
/// trial's class and why.
fn failure(failed: &[&TaskRow], n: usize) -> String {
    let trials = of(failed.len(), n);
    let Some(first) = failed.first() else {
        return format!("failed{trials}");
    };
    let class = first.failure.map_or(first.outcome.as_str(), |f| f.as_str());
    let why = first
        .reason
        .as_deref()
        .and_then(|r| r.lines().next())
        .map(|r| format!(": {}", short(r)))
        .unwrap_or_default();
    format!("failed{trials} ({class}{why})")
}

/// At most a line's worth of `text`.
fn short(text: &str) -> String {
    const MOST: usize = 200;
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(MOST) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_owned(),
    }
}

/// The report's last line: `as expected: …`, or `NOT as expected: …`.
pub(super) fn line(summary: &BenchSummary) -> String {
    if summary.unexpected.is_empty() {
        format!("as expected: {}", summary.as_expected.join("; "))
    } else {
        format!("NOT as expected: {}", summary.unexpected.join("; "))
    }
}

/// The HTML report's last paragraph: [`line`].
pub(super) fn html(summary: &BenchSummary) -> String {
    let class = if summary.unexpected.is_empty() {
        "pass"
    } else {
        "fail"
    };
    format!(
        "<p id=\"verdict\" class=\"{class}\"><strong>{}</strong></p>\n",
        harness_log::text::escape(&line(summary))
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::batch_log::BatchLog;
    use super::super::{BatchReport, bench, totals, write_text};
    use super::*;
    use crate::metrics::RunOutcome;
    use harness_log::Outcome;

    /// A trial of benchmark task `name` under the oracle: passed, or failed `class`.
    fn trial(name: &str, failed: Option<FailureClass>, expected_broken: Option<&str>) -> TaskRow {
        let passed = failed.is_none();
        TaskRow {
            benchmark: true,
            agent: Some("oracle".to_owned()),
            outcome: RunOutcome::Finished(match failed {
                None => Outcome::Completed,
                Some(FailureClass::Check) => Outcome::CheckFailed,
                Some(_) => Outcome::Error,
            }),
            failure: failed,
            passed,
            reward: Some(if passed { 1.0 } else { 0.0 }),
            reward_valid: true,
            expected_broken: expected_broken.map(str::to_owned),
            reason: failed
                .filter(|c| *c == FailureClass::Infrastructure)
                .map(|_| "the sandbox died".to_owned()),
            log: Some(name.to_owned()),
            ..TaskRow::not_run(name, 1)
        }
    }

    fn windows_only(expected: Option<&str>) -> NotRunnable {
        NotRunnable {
            task: "windows-only".to_owned(),
            reason: "environment.os = windows: only Linux tasks run here".to_owned(),
            expected: expected.map(str::to_owned),
        }
    }

    /// The report of a batch of `rows` (one trial a task) with `not_runnable` left out, and
    /// its text.
    fn report(rows: Vec<TaskRow>, not_runnable: Vec<NotRunnable>) -> (BatchReport, String) {
        let mut log = BatchLog::default();
        log.not_runnable.clone_from(&not_runnable);
        log.trials = 1;
        let report = BatchReport {
            batch_id: "b".to_owned(),
            interrupted: false,
            totals: totals(&rows, &log, BTreeMap::new()),
            benchmark: bench::summarise(&rows, 1, not_runnable),
            trials: None,
            tasks: rows,
            rate_limits: Vec::new(),
            warm_pool: None,
        };
        let mut text = Vec::new();
        write_text(&report, &mut text).unwrap();
        (report, String::from_utf8(text).unwrap())
    }

    /// Issue 57 §2: the example dataset under the oracle, in small: a task broken on purpose
    /// fails, a Windows task its author marks not runnable is left out. The counts add up to
    /// the tasks, and the report ends saying it went as expected.
    #[test]
    fn an_expected_failure_and_an_expected_refusal_are_as_expected_and_counted() {
        let why = "its oracle is wrong on purpose";
        let rows = vec![
            trial("hello-file", None, None),
            trial("word-stats", None, None),
            trial("off-by-one", Some(FailureClass::Check), Some(why)),
        ];
        let (report, text) = report(rows, vec![windows_only(Some("a Windows task"))]);
        let summary = report.benchmark.as_ref().unwrap();
        assert_eq!(summary.unexpected, Vec::<String>::new());
        let t = &report.totals;
        assert_eq!(
            (t.tasks, t.passed, t.failed, t.not_runnable, t.not_run),
            (4, 2, 1, 1, 0)
        );
        assert_eq!(t.passed + t.failed + t.not_runnable + t.not_run, t.tasks);
        assert!(
            text.contains("4 tasks: 2 passed, 1 failed (1 as expected), 1 not runnable, 0 not run"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "as expected: 2 tasks passed; off-by-one broken on purpose; windows-only not runnable here\n"
            ),
            "{text}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["benchmark"]["unexpected"], serde_json::json!([]));
        assert_eq!(json["totals"]["not_runnable"], 1);
        assert_eq!(json["totals"]["failed_as_expected"], 1);
    }

    /// A failure nobody expected (the sandbox died under the oracle) and a task not runnable
    /// that its author did not mark: the report ends naming both.
    #[test]
    fn an_unexpected_failure_and_refusal_end_the_report_not_as_expected() {
        let rows = vec![
            trial("hello-file", None, None),
            trial("fizzbuzz", Some(FailureClass::Infrastructure), None),
        ];
        let (report, text) = report(rows, vec![windows_only(None)]);
        let summary = report.benchmark.as_ref().unwrap();
        assert_eq!(
            summary.unexpected,
            [
                "fizzbuzz failed (infrastructure: the sandbox died)",
                "windows-only not runnable here: environment.os = windows: only Linux tasks run here",
            ]
        );
        assert!(
            text.contains("3 tasks: 1 passed, 1 failed, 1 not runnable, 0 not run"),
            "{text}"
        );
        let last = text.lines().last().unwrap();
        assert!(
            last.starts_with("NOT as expected: fizzbuzz failed (infrastructure"),
            "{text}"
        );
        let html = super::html(summary);
        assert!(html.contains("NOT as expected"), "{html}");
    }
}
