//! A comparison as a table and as one self-contained HTML page.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::io::Write;

use super::{Change, Comparison, Side, TaskDelta, delta};
use crate::charts::number;
use crate::text_table::{Column, write_line};
use harness_log::text::escape;

fn signed(value: i64) -> String {
    format!("{value:+}")
}

fn seconds(ms: u64) -> String {
    format!("{:.1}", ms as f64 / 1000.0)
}

fn signed_seconds(ms: i64) -> String {
    format!("{:+.1}", ms as f64 / 1000.0)
}

/// `1 -> 0.5 (-0.5)`, or `-` when neither side has a reward.
fn reward(task: &TaskDelta) -> String {
    let shown = |r: Option<f64>| r.map_or_else(|| "-".to_owned(), number);
    match (task.a.reward, task.b.reward, task.reward_delta) {
        (None, None, _) => "-".to_owned(),
        (a, b, Some(d)) => format!("{} -> {} ({}{})", shown(a), shown(b), sign(d), number(d)),
        (a, b, None) => format!("{} -> {}", shown(a), shown(b)),
    }
}

/// Each named reward of either side, `correctness 1 -> 0.5`; empty when neither has several.
fn named_rewards(task: &TaskDelta) -> String {
    let keys: BTreeSet<&String> = task.a.rewards.keys().chain(task.b.rewards.keys()).collect();
    let shown = |r: Option<&f64>| r.map_or_else(|| "-".to_owned(), |r| number(*r));
    keys.into_iter()
        .map(|key| {
            let (a, b) = (task.a.rewards.get(key), task.b.rewards.get(key));
            format!("{key} {} -> {}", shown(a), shown(b))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn sign(value: f64) -> &'static str {
    if value > 0.0 { "+" } else { "" }
}

/// `+2 (bash +1, write_file +1)`, or the plain difference when no tool's count changed.
fn tools(total: i64, per_tool: &BTreeMap<String, i64>) -> String {
    if per_tool.is_empty() {
        return signed(total);
    }
    let each: Vec<String> = per_tool
        .iter()
        .map(|(tool, d)| format!("{tool} {}", signed(*d)))
        .collect();
    format!("{} ({})", signed(total), each.join(", "))
}

fn side_line(name: &str, side: &Side) -> String {
    format!(
        "{name}: {} (batch {}): {}, {} passed ({:.1}%), cost ${:.4}, task time {} s, {} tool calls",
        side.path.display(),
        side.batch_id,
        harness_log::text::plural(side.tasks, "task"),
        side.passed,
        100.0 * side.pass_rate,
        side.cost,
        seconds(side.task_time_ms),
        side.tool_calls
    )
}

/// The one-line verdict: flips, then how the totals moved.
fn summary(c: &Comparison) -> String {
    format!(
        "{} fixed (fail -> pass), {} broke (pass -> fail), {} unchanged, of {} tasks in both; \
         pass rate {:.1}% -> {:.1}%; cost ${:.4} -> ${:.4} ({:+.4}); task time {} s -> {} s ({} s)",
        c.fixed,
        c.broke,
        c.tasks.len() - c.fixed - c.broke,
        c.tasks.len(),
        100.0 * c.a.pass_rate,
        100.0 * c.b.pass_rate,
        c.a.cost,
        c.b.cost,
        c.b.cost - c.a.cost,
        seconds(c.a.task_time_ms),
        seconds(c.b.task_time_ms),
        signed_seconds(delta(c.a.task_time_ms, c.b.task_time_ms))
    )
}

/// The columns of the task table: task, change, each side's status, reward, and the changes
/// in cost, time and turns (the tool calls follow as the free last column).
const TASK_COLUMNS: [Column; 8] = [
    Column::Left(24),
    Column::Left(14),
    Column::Left(14),
    Column::Left(14),
    Column::Left(18),
    Column::Right(9),
    Column::Right(8),
    Column::Right(6),
];

/// The columns of the tool table: tool, calls on each side, and the change.
const TOOL_COLUMNS: [Column; 4] = [
    Column::Left(20),
    Column::Right(8),
    Column::Right(8),
    Column::Right(8),
];

/// The comparison as a table: the sides, a row per task in both, the tasks on one side only,
/// calls per tool, and a summary.
pub fn write_text(c: &Comparison, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "{}", side_line("A", &c.a))?;
    writeln!(out, "{}\n", side_line("B", &c.b))?;
    let heads: [&dyn Display; 8] = [
        &"task", &"change", &"A", &"B", &"reward", &"cost $", &"time s", &"turns",
    ];
    write_line(out, &TASK_COLUMNS, &heads, Some("tool calls"))?;
    for task in &c.tasks {
        let cells: [&dyn Display; 8] = [
            &task.task,
            &task.change.words(),
            &task.a.status,
            &task.b.status,
            &reward(task),
            &format!("{:+.4}", task.cost_delta),
            &signed_seconds(task.duration_delta_ms),
            &signed(task.turns_delta),
        ];
        let calls = tools(task.tool_calls_delta, &task.tools_delta);
        write_line(out, &TASK_COLUMNS, &cells, Some(calls.as_str()))?;
        let named = named_rewards(task);
        if !named.is_empty() {
            writeln!(out, "{:<24} rewards: {named}", "")?;
        }
    }
    if !c.only_in_a.is_empty() {
        writeln!(out, "\nonly in A: {}", c.only_in_a.join(", "))?;
    }
    if !c.only_in_b.is_empty() {
        writeln!(
            out,
            "{}only in B: {}",
            if c.only_in_a.is_empty() { "\n" } else { "" },
            c.only_in_b.join(", ")
        )?;
    }
    if !c.tools.is_empty() {
        writeln!(out)?;
        let heads: [&dyn Display; 4] = [&"tool", &"A calls", &"B calls", &"B-A"];
        write_line(out, &TOOL_COLUMNS, &heads, None)?;
        for tool in &c.tools {
            let cells: [&dyn Display; 4] = [&tool.tool, &tool.a, &tool.b, &signed(tool.delta)];
            write_line(out, &TOOL_COLUMNS, &cells, None)?;
        }
    }
    writeln!(out, "\n{}", summary(c))
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:2em;color:#1d1d1f}\
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:4px 8px;\
text-align:right}td:first-child,th:first-child,td.status,td.change{text-align:left}\
tr.broke{background:#fde2df}tr.fixed{background:#e1f3e5}tr.broke td.change{color:#b3261e;\
font-weight:600}tr.fixed td.change{color:#0a7a35;font-weight:600}.up{color:#b3261e}.down{color:#0a7a35}";

/// The comparison as one self-contained page.
pub fn write_html(c: &Comparison, out: &mut dyn Write) -> std::io::Result<()> {
    let (a, b) = (&c.a, &c.b);
    write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Compare {ia} with {ib}</title>\
         <style>{STYLE}</style></head><body>\n<h1>Batch {ia} (A) against {ib} (B)</h1>\n\
         <p>A: {pa}<br>B: {pb}</p>\n<p id=\"summary\">{summary}</p>\n\
         <table id=\"sides\"><tr><th></th><th>A</th><th>B</th><th>B-A</th></tr>\n",
        ia = escape(&a.batch_id),
        ib = escape(&b.batch_id),
        pa = escape(&a.path.display().to_string()),
        pb = escape(&b.path.display().to_string()),
        summary = escape(&summary(c)),
    )?;
    write_html_sides(a, b, out)?;
    writeln!(
        out,
        "</table>\n<h2>Tasks in both</h2>\n<table id=\"tasks\"><tr><th>task</th><th>change</th><th>A</th>\
         <th>B</th><th>reward</th><th>cost $ B-A</th><th>time s B-A</th><th>turns B-A</th>\
         <th>tool calls B-A</th></tr>"
    )?;
    for task in &c.tasks {
        write_html_row(task, out)?;
    }
    writeln!(out, "</table>")?;
    for (id, name, tasks) in [
        ("only-in-a", "A", &c.only_in_a),
        ("only-in-b", "B", &c.only_in_b),
    ] {
        let items: Vec<String> = tasks
            .iter()
            .map(|t| format!("<li>{}</li>", escape(t)))
            .collect();
        let list = if items.is_empty() {
            "<li>none</li>".to_owned()
        } else {
            items.concat()
        };
        writeln!(out, "<h2>Only in {name}</h2><ul id=\"{id}\">{list}</ul>")?;
    }
    writeln!(
        out,
        "<h2>Calls per tool</h2>\n<table id=\"tools\"><tr><th>tool</th><th>A</th><th>B</th><th>B-A</th></tr>"
    )?;
    for tool in &c.tools {
        writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&tool.tool),
            tool.a,
            tool.b,
            signed(tool.delta)
        )?;
    }
    writeln!(out, "</table>\n</body></html>")
}

/// A row per total: A, B and the difference.
fn write_html_sides(a: &Side, b: &Side, out: &mut dyn Write) -> std::io::Result<()> {
    let counts = |x: u64, y: u64| (x.to_string(), y.to_string(), signed(delta(x, y)));
    let rows = [
        ("tasks", counts(a.tasks as u64, b.tasks as u64)),
        ("passed", counts(a.passed as u64, b.passed as u64)),
        (
            "cost $",
            (
                format!("{:.4}", a.cost),
                format!("{:.4}", b.cost),
                format!("{:+.4}", b.cost - a.cost),
            ),
        ),
        (
            "task time s",
            (
                seconds(a.task_time_ms),
                seconds(b.task_time_ms),
                signed_seconds(delta(a.task_time_ms, b.task_time_ms)),
            ),
        ),
        ("tool calls", counts(a.tool_calls, b.tool_calls)),
    ];
    for (name, (x, y, d)) in rows {
        writeln!(
            out,
            "<tr><td>{name}</td><td>{x}</td><td>{y}</td><td>{d}</td></tr>"
        )?;
    }
    Ok(())
}

fn write_html_row(task: &TaskDelta, out: &mut dyn Write) -> std::io::Result<()> {
    let class = match task.change {
        Change::Broke => "broke",
        Change::Fixed => "fixed",
        Change::StillFailing | Change::StillPassing => "same",
    };
    // Slower or dearer is marked up, faster or cheaper down.
    let trend = |d: f64| {
        if d > 0.0 {
            " class=\"up\""
        } else if d < 0.0 {
            " class=\"down\""
        } else {
            ""
        }
    };
    writeln!(
        out,
        "<tr class=\"{class}\"><td>{}</td><td class=\"change\">{}</td><td class=\"status\">{}</td>\
         <td class=\"status\">{}</td><td>{}</td><td{}>{:+.4}</td><td{}>{}</td><td>{}</td><td>{}</td></tr>",
        escape(&task.task),
        task.change.words(),
        escape(&task.a.status),
        escape(&task.b.status),
        escape([reward(task), named_rewards(task)].join(" ").trim_end()),
        trend(task.cost_delta),
        task.cost_delta,
        trend(task.duration_delta_ms as f64),
        signed_seconds(task.duration_delta_ms),
        signed(task.turns_delta),
        escape(&tools(task.tool_calls_delta, &task.tools_delta))
    )
}
