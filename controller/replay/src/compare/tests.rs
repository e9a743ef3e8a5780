use std::collections::BTreeMap;
use std::path::Path;

use super::*;
use crate::metrics::RunOutcome;
use crate::report::Totals;
use harness_log::{FailureClass, Outcome};

fn row(task: &str, passed: bool, ms: u64, tools: &[(&str, u64)]) -> TaskRow {
    let tools: BTreeMap<String, u64> = tools.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect();
    TaskRow {
        outcome: RunOutcome::Finished(if passed {
            Outcome::Completed
        } else {
            Outcome::CheckFailed
        }),
        failure: (!passed).then_some(FailureClass::Check),
        passed,
        attempts: 1,
        turns: 2,
        tool_calls: tools.values().sum(),
        tools,
        cost: 0.01,
        duration_ms: ms,
        log: Some(task.to_owned()),
        ..TaskRow::not_run(task, 1)
    }
}

fn batch(id: &str, tasks: Vec<TaskRow>) -> BatchReport {
    let passed = tasks.iter().filter(|r| r.passed).count();
    BatchReport {
        batch_id: id.to_owned(),
        interrupted: false,
        totals: Totals {
            tasks: tasks.len(),
            run: tasks.len(),
            passed,
            failed: tasks.len() - passed,
            failed_as_expected: 0,
            not_runnable: 0,
            interrupted: 0,
            not_run: 0,
            pass_rate: passed as f64 / tasks.len() as f64,
            retries: 0,
            failures: BTreeMap::new(),
            cost: tasks.iter().map(|r| r.cost).sum(),
            input_tokens: 0,
            output_tokens: 0,
            tool_calls: tasks.iter().map(|r| r.tool_calls).sum(),
            refused: 0,
            task_time_ms: tasks.iter().map(|r| r.duration_ms).sum(),
            wall_ms: 0,
            tool_latency_ms: BTreeMap::new(),
        },
        tasks,
        rate_limits: Vec::new(),
        warm_pool: None,
        benchmark: None,
        trials: None,
    }
}

fn planted() -> Comparison {
    let a = batch(
        "a1",
        vec![
            row("steady", true, 1000, &[("bash", 1)]),
            row("breaks", true, 1000, &[("bash", 1)]),
            row("mends", false, 2000, &[("bash", 2)]),
            row("gone", true, 500, &[]),
        ],
    );
    let mut mends = row("mends", true, 1500, &[("bash", 1), ("write_file", 1)]);
    mends.reward = Some(1.0);
    mends.rewards = BTreeMap::from([("correctness".to_owned(), 1.0), ("style".to_owned(), 0.5)]);
    let mut b_rows = vec![
        row("steady", true, 3000, &[("bash", 2)]),
        row("breaks", false, 900, &[("bash", 1)]),
        mends,
        row("new <one>", false, 100, &[]),
    ];
    b_rows[1].cost = 0.03;
    let mut a = a;
    a.tasks[2].reward = Some(0.0);
    a.tasks[2].rewards = BTreeMap::from([("correctness".to_owned(), 0.0)]);
    compare(
        (Path::new("runs/a"), &a),
        (Path::new("runs/b"), &batch("b1", b_rows)),
    )
}

#[test]
fn compare_finds_the_planted_flips_deltas_and_one_sided_tasks() {
    let c = planted();
    let order: Vec<(&str, Change)> = c
        .tasks
        .iter()
        .map(|t| (t.task.as_str(), t.change))
        .collect();
    assert_eq!(
        order,
        [
            ("breaks", Change::Broke),
            ("mends", Change::Fixed),
            ("steady", Change::StillPassing)
        ]
    );
    assert_eq!((c.fixed, c.broke), (1, 1));
    assert_eq!(c.only_in_a, ["gone"]);
    assert_eq!(c.only_in_b, ["new <one>"]);
    let (breaks, mends, steady) = (&c.tasks[0], &c.tasks[1], &c.tasks[2]);
    assert_eq!(breaks.b.status, "check");
    assert!((breaks.cost_delta - 0.02).abs() < 1e-9);
    assert_eq!(breaks.duration_delta_ms, -100);
    assert_eq!(mends.reward_delta, Some(1.0));
    assert_eq!(
        mends.tools_delta,
        BTreeMap::from([("bash".to_owned(), -1), ("write_file".to_owned(), 1)])
    );
    assert_eq!(mends.tool_calls_delta, 0);
    assert_eq!(steady.duration_delta_ms, 2000);
    assert_eq!(steady.reward_delta, None);
    let tools: Vec<(&str, u64, u64, i64)> = c
        .tools
        .iter()
        .map(|t| (t.tool.as_str(), t.a, t.b, t.delta))
        .collect();
    assert_eq!(tools, [("write_file", 0, 1, 1), ("bash", 4, 4, 0)]);
}

#[test]
fn the_table_and_the_page_show_the_flips_and_escape_names() {
    let c = planted();
    let mut text = Vec::new();
    write_text(&c, &mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("only in A: gone"), "{text}");
    assert!(text.contains("only in B: new <one>"), "{text}");
    assert!(text.contains("1 fixed (fail -> pass), 1 broke (pass -> fail), 1 unchanged"));
    let breaks = text.lines().find(|l| l.starts_with("breaks")).unwrap();
    assert!(breaks.contains("broke") && breaks.contains("passed") && breaks.contains("check"));
    let mends = text.lines().find(|l| l.starts_with("mends")).unwrap();
    assert!(
        mends.contains("0 -> 1 (+1)") && mends.contains("bash -1, write_file +1"),
        "{mends}"
    );
    // Named rewards, per key, on the line under the task's.
    assert!(
        text.contains("rewards: correctness 0 -> 1, style - -> 0.5"),
        "{text}"
    );
    let mut html = Vec::new();
    write_html(&c, &mut html).unwrap();
    let html = String::from_utf8(html).unwrap();
    assert!(html.contains("<tr class=\"broke\"><td>breaks</td>"));
    assert!(html.contains("<tr class=\"fixed\"><td>mends</td>"));
    assert!(
        html.contains("correctness 0 -&gt; 1, style - -&gt; 0.5"),
        "{html}"
    );
    assert!(html.contains("<ul id=\"only-in-b\"><li>new &lt;one&gt;</li></ul>"));
    assert!(!html.contains("<one>"));
}

#[test]
fn a_folder_that_is_not_a_batch_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let err = load(dir.path(), dir.path(), &crate::report::NoTrialFiles)
        .unwrap_err()
        .to_string();
    assert!(err.contains(&dir.path().display().to_string()), "{err}");
    assert!(err.contains("not a batch folder"), "{err}");
    let missing = dir.path().join("nothing");
    let err = load(&missing, dir.path(), &crate::report::NoTrialFiles)
        .unwrap_err()
        .to_string();
    assert!(err.contains("nothing: no such folder"), "{err}");
}
