//! The batch report as a table and as one self-contained HTML page.

use harness_log::text::plural;
use std::fmt::Display;
use std::io::Write;
use std::path::Path;

use super::{BatchReport, TaskRow};
use crate::folder::Folder;
use crate::text_table::{Column, write_line};
use crate::{ReplayError, render};
use harness_log::text::escape;

fn cost(row: &TaskRow) -> String {
    if row.cost_known {
        format!("{:.4}", row.cost)
    } else {
        format!(">={:.4}", row.cost)
    }
}

/// A task's cells, as the text table shows them: task, outcome, failure class (`-` for none),
/// attempts, turns, tool calls, tokens in and out, cost, and time in seconds.
fn row_cells(row: &TaskRow) -> [String; 10] {
    [
        row.task.clone(),
        row.outcome.as_str().to_owned(),
        row.failure.map_or("-", |f| f.as_str()).to_owned(),
        row.attempts.to_string(),
        row.turns.to_string(),
        row.tool_calls.to_string(),
        row.input_tokens.to_string(),
        row.output_tokens.to_string(),
        cost(row),
        format!("{:.1}", row.duration_ms as f64 / 1000.0),
    ]
}

/// The columns of the task table, one a cell of [`row_cells`].
const TASK_COLUMNS: [Column; 10] = [
    Column::Left(24),
    Column::Left(13),
    Column::Left(15),
    Column::Right(4),
    Column::Right(6),
    Column::Right(6),
    Column::Right(10),
    Column::Right(9),
    Column::Right(10),
    Column::Right(8),
];

/// The columns of the tool latency table: tool, calls, and the p50, p95 and most milliseconds.
const LATENCY_COLUMNS: [Column; 5] = [
    Column::Left(20),
    Column::Right(7),
    Column::Right(9),
    Column::Right(9),
    Column::Right(9),
];

/// The report as a table.
pub fn write_text(report: &BatchReport, out: &mut dyn Write) -> std::io::Result<()> {
    let interrupted = if report.interrupted {
        " (interrupted)"
    } else {
        ""
    };
    writeln!(out, "batch {}{interrupted}", report.batch_id)?;
    let heads: [&dyn Display; 10] = [
        &"task", &"outcome", &"failure", &"try", &"turns", &"tools", &"in tok", &"out tok",
        &"cost $", &"time s",
    ];
    write_line(out, &TASK_COLUMNS, &heads, None)?;
    for row in &report.tasks {
        let cells = row_cells(row);
        let cells: Vec<&dyn Display> = cells.iter().map(|cell| cell as &dyn Display).collect();
        write_line(out, &TASK_COLUMNS, &cells, None)?;
        if let Some(reason) = &row.reason {
            writeln!(out, "  {reason}")?;
        }
    }
    write_text_totals(report, out)?;
    // Last, after every figure: whether the benchmark went as expected.
    if let Some(summary) = &report.benchmark {
        writeln!(out, "\n{}", super::verdict::line(summary))?;
    }
    Ok(())
}

/// `2 failed (1 as expected), 1 not runnable, 1 interrupted`: the failures a task's author
/// expects, the tasks that could not run here and those a Ctrl-C stopped, when there are any.
fn failed_and_not_runnable(t: &super::Totals) -> String {
    let mut text = format!("{} failed", t.failed);
    if t.failed_as_expected > 0 {
        text.push_str(&format!(" ({} as expected)", t.failed_as_expected));
    }
    if t.not_runnable > 0 {
        text.push_str(&format!(", {} not runnable", t.not_runnable));
    }
    if t.interrupted > 0 {
        text.push_str(&format!(", {} interrupted", t.interrupted));
    }
    text
}

/// `3 tasks`, or with trials `1 task × 3 trials`.
fn tasks_and_trials(report: &BatchReport) -> String {
    match &report.trials {
        Some(trials) => format!(
            "{} × {} trials",
            plural(trials.tasks.len(), "task"),
            trials.k
        ),
        None => plural(report.totals.tasks, "task"),
    }
}

fn write_text_totals(report: &BatchReport, out: &mut dyn Write) -> std::io::Result<()> {
    let t = &report.totals;
    writeln!(
        out,
        "\n{}: {} passed, {}, {} not run; pass rate {:.1}% of those run; {}",
        tasks_and_trials(report),
        t.passed,
        failed_and_not_runnable(t),
        t.not_run,
        100.0 * t.pass_rate,
        match t.retries {
            1 => "1 retry".to_owned(),
            n => format!("{n} retries"),
        }
    )?;
    if !t.failures.is_empty() {
        let classes: Vec<String> = t
            .failures
            .iter()
            .map(|(class, n)| format!("{} {n}", class.as_str()))
            .collect();
        writeln!(out, "failures: {}", classes.join(", "))?;
    }
    writeln!(
        out,
        "cost ${:.4}; tokens {} in, {} out; {}{}; task time {:.1} s; wall time {:.1} s",
        t.cost,
        t.input_tokens,
        t.output_tokens,
        plural(t.tool_calls, "tool call"),
        match t.refused {
            0 => String::new(),
            n => format!(" ({n} refused by the policy)"),
        },
        t.task_time_ms as f64 / 1000.0,
        t.wall_ms as f64 / 1000.0
    )?;
    if !t.tool_latency_ms.is_empty() {
        writeln!(out)?;
        let heads: [&dyn Display; 5] = [&"tool", &"calls", &"p50 ms", &"p95 ms", &"max ms"];
        write_line(out, &LATENCY_COLUMNS, &heads, None)?;
        for (tool, l) in &t.tool_latency_ms {
            let latency = &l.latency;
            let cells: [&dyn Display; 5] =
                [tool, &l.calls, &latency.p50, &latency.p95, &latency.max];
            write_line(out, &LATENCY_COLUMNS, &cells, None)?;
        }
    }
    if let Some(summary) = &report.trials {
        super::trials::write_text(summary, out)?;
    }
    if let Some(summary) = &report.benchmark {
        super::bench::write_text(summary, out)?;
    }
    if let Some(pool) = &report.warm_pool {
        writeln!(
            out,
            "warm pool (--pool-size {}): {} of {} sandboxes leased ready, {} started on demand",
            pool.size,
            pool.leased_ready,
            pool.leased_ready + pool.started_on_demand,
            pool.started_on_demand
        )?;
    }
    for gate in &report.rate_limits {
        writeln!(
            out,
            "model endpoint {}: {} requests, {} rate-limited (429), {:.1} s waited at the gate",
            gate.endpoint,
            gate.requests,
            gate.throttled,
            gate.waited_ms as f64 / 1000.0
        )?;
    }
    Ok(())
}

/// Writes `transcripts/<task>.html` for every task that ran, then `report.html` linking them;
/// returns the report's path. The batch folder may be shared: each file replaces what is at
/// its name (a planted link is replaced, not written through), and a `transcripts` that is not
/// a real folder is refused ([`crate::folder`]).
pub fn write_html(dir: &Path, report: &BatchReport) -> Result<std::path::PathBuf, ReplayError> {
    let io = |err: std::io::Error| {
        ReplayError::Io(format!("writing the report in {}: {err}", dir.display()))
    };
    let folder = Folder::open(dir).map_err(io)?;
    let transcripts = folder.subfolder("transcripts").map_err(io)?;
    for row in &report.tasks {
        if let Some(log) = &row.log {
            let mut file = transcripts
                .create(&format!("{}.html", row.task))
                .map_err(io)?;
            let mut out = std::io::BufWriter::new(&mut file);
            render::render(&dir.join(log), render::Format::Html, &mut out)?;
            out.flush().map_err(io)?;
            drop(out);
            file.finish().map_err(io)?;
        }
    }
    let mut page = html_head(report);
    for row in &report.tasks {
        page.push_str(&html_row(row));
    }
    page.push_str(&html_foot(report));
    folder.write("report.html", page.as_bytes()).map_err(io)?;
    Ok(dir.join("report.html"))
}

fn html_head(report: &BatchReport) -> String {
    let t = &report.totals;
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Batch {id}</title>\n\
         <style>body{{font:14px system-ui,sans-serif;margin:2em}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:first-child,th:first-child,\
         td:nth-child(2),td:nth-child(3){{text-align:left}}tr.pass td:nth-child(2){{color:#060}}\
         tr.fail td:nth-child(2){{color:#a00}}tfoot td{{font-weight:bold}}\
         .charts{{display:flex;flex-wrap:wrap;gap:1em;margin:1em 0}}figure.chart{{margin:0;border:1px solid #e3e3e8}}</style></head><body>\n\
         <h1>Batch {id}{interrupted}</h1>\n<p>{tasks} tasks: {passed} passed, {failed}, \
         {not_run} not run; pass rate {rate:.1}% of those run; {retries} retries. Cost ${cost:.4}; \
         task time {task_s:.1} s; wall time {wall_s:.1} s.</p>\n{charts}<table id=\"tasks\"><thead><tr><th>task</th>\
         <th>outcome</th><th>failure</th><th>attempts</th><th>turns</th><th>tool calls</th>\
         <th>tokens in</th><th>tokens out</th><th>cost $</th><th>time s</th></tr></thead><tbody>\n",
        id = escape(&report.batch_id),
        interrupted = if report.interrupted {
            " (interrupted)"
        } else {
            ""
        },
        tasks = t.tasks,
        passed = t.passed,
        failed = failed_and_not_runnable(t),
        not_run = t.not_run,
        rate = 100.0 * t.pass_rate,
        retries = t.retries,
        cost = t.cost,
        task_s = t.task_time_ms as f64 / 1000.0,
        wall_s = t.wall_ms as f64 / 1000.0,
        charts = super::pictures::html(report),
    )
}

fn html_row(row: &TaskRow) -> String {
    let mut cells = row_cells(row);
    cells[0] = match &row.log {
        Some(_) => format!(
            "<a href=\"transcripts/{0}.html\">{0}</a>",
            escape(&row.task)
        ),
        None => escape(&row.task),
    };
    // Why it could not start, under its failure class.
    cells[2] = match (&row.failure, &row.reason) {
        (Some(class), Some(reason)) => {
            format!("{}<br><small>{}</small>", class.as_str(), escape(reason))
        }
        (Some(class), None) => class.as_str().to_owned(),
        (None, _) => String::new(),
    };
    let cells: String = cells
        .iter()
        .map(|cell| format!("<td>{cell}</td>"))
        .collect();
    let class = if row.passed { "pass" } else { "fail" };
    format!("<tr class=\"{class}\">{cells}</tr>\n")
}

fn html_foot(report: &BatchReport) -> String {
    let t = &report.totals;
    let mut page = format!(
        "</tbody><tfoot><tr><td>total</td><td>{} passed</td><td></td><td>{}</td><td>{}</td><td>{}</td>\
         <td>{}</td><td>{}</td><td>{:.4}</td><td>{:.1}</td></tr></tfoot></table>\n",
        t.passed,
        report.tasks.iter().map(|r| r.attempts).sum::<u32>(),
        report.tasks.iter().map(|r| u64::from(r.turns)).sum::<u64>(),
        t.tool_calls,
        t.input_tokens,
        t.output_tokens,
        t.cost,
        t.task_time_ms as f64 / 1000.0
    );
    if let Some(summary) = &report.benchmark {
        page.push_str(&super::bench::html(summary));
    }
    page.push_str(&super::trials::html(report));
    if !t.tool_latency_ms.is_empty() {
        page.push_str("<h2>Tool latency</h2>\n<table><tr><th>tool</th><th>calls</th><th>p50 ms</th><th>p95 ms</th><th>max ms</th></tr>\n");
        for (tool, l) in &t.tool_latency_ms {
            page.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                escape(tool),
                l.calls,
                l.latency.p50,
                l.latency.p95,
                l.latency.max
            ));
        }
        page.push_str("</table>\n");
    }
    if let Some(summary) = &report.benchmark {
        page.push_str(&super::verdict::html(summary));
    }
    page.push_str("</body></html>\n");
    page
}
