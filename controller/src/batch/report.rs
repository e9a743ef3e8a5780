//! A batch's report: one row per task and the totals, as text, JSON or one self-contained HTML
//! page whose rows link to each task's transcript. Every figure comes from the logs: the task
//! rows from each task's session log, the attempts and wall time from the batch's own log.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::Serialize;

use super::super::replay::metrics::{self, Latency};
use super::super::replay::{ReplayError, events, render};
use crate::event_log::{Event, GateRecord};
use crate::prompt::escape;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskRow {
    pub task: String,
    /// The session's outcome; `not_run` for a task never started, `incomplete` for a log that
    /// did not end (a killed harness).
    pub outcome: String,
    /// Why it did not pass: `check`, `limit`, `model`, `infrastructure`, `interrupted`, `error`.
    pub failure: Option<String>,
    pub passed: bool,
    /// Attempts recorded in the batch log (retries and resumed runs add to it).
    pub attempts: u32,
    /// Model turns: the loop's steps.
    pub steps: u32,
    pub tool_calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost: f64,
    pub cost_known: bool,
    pub duration_ms: u64,
    /// The task's session folder, relative to the batch folder.
    pub log: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Totals {
    pub tasks: usize,
    pub run: usize,
    pub passed: usize,
    pub failed: usize,
    pub not_run: usize,
    /// Passed over run.
    pub pass_rate: f64,
    pub retries: u32,
    /// Tasks by failure class.
    pub failures: BTreeMap<String, usize>,
    pub cost: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub tool_calls: u64,
    /// The tasks' durations added up.
    pub task_time_ms: u64,
    /// The batch's own running time (every run of it, when resumed).
    pub wall_ms: u64,
    /// Over every tool call of every task.
    pub tool_latency_ms: BTreeMap<String, ToolLatency>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ToolLatency {
    pub calls: u64,
    #[serde(flatten)]
    pub latency: Latency,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchReport {
    pub batch_id: String,
    pub interrupted: bool,
    pub tasks: Vec<TaskRow>,
    pub totals: Totals,
    /// Per model endpoint, over every run of the batch.
    pub rate_limits: Vec<GateRecord>,
}

/// Whether `dir` is a batch folder: its log starts with `batch_started`.
pub fn is_batch(dir: &Path) -> bool {
    let Ok(file) = std::fs::File::open(dir.join("events.jsonl")) else {
        return false;
    };
    let mut first = String::new();
    let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(file), &mut first);
    first.contains("\"type\":\"batch_started\"")
}

/// Reads a batch folder.
pub fn load(dir: &Path) -> Result<BatchReport, ReplayError> {
    let mut batch_id = String::new();
    let mut task_ids: Vec<String> = Vec::new();
    let mut attempts: BTreeMap<String, u32> = BTreeMap::new();
    let mut retries = 0;
    let mut wall_ms = 0;
    let mut interrupted = false;
    let mut gates: BTreeMap<String, GateRecord> = BTreeMap::new();
    for envelope in events(dir, |_| {})? {
        match envelope?.event {
            Event::BatchStarted(started) => {
                batch_id = started.batch_id;
                task_ids = started.tasks.into_iter().map(|t| t.id).collect();
                interrupted = false;
            }
            Event::TaskStarted(started) => *attempts.entry(started.task).or_default() += 1,
            Event::TaskRetried(_) => retries += 1,
            Event::BatchFinished(finished) => {
                wall_ms += finished.duration_ms;
                interrupted = finished.interrupted;
                for gate in finished.rate_limits {
                    let entry = gates
                        .entry(gate.endpoint.clone())
                        .or_insert_with(|| GateRecord {
                            endpoint: gate.endpoint.clone(),
                            requests: 0,
                            throttled: 0,
                            waited_ms: 0,
                        });
                    entry.requests += gate.requests;
                    entry.throttled += gate.throttled;
                    entry.waited_ms += gate.waited_ms;
                }
            }
            _ => {}
        }
    }
    let mut rows = Vec::new();
    let mut samples: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for id in &task_ids {
        let folder = dir.join(id);
        let row = if folder.join("events.jsonl").is_file() {
            let m = metrics::measure(&folder)?;
            for (tool, values) in &m.tool_samples_ms {
                samples.entry(tool.clone()).or_default().extend(values);
            }
            TaskRow {
                task: id.clone(),
                passed: m.outcome == "completed" && m.failure.is_none(),
                failure: m
                    .failure
                    .clone()
                    .or_else(|| (m.outcome == "incomplete").then(|| "infrastructure".to_owned())),
                outcome: m.outcome.clone(),
                attempts: attempts.get(id).copied().unwrap_or(1),
                steps: m.turns,
                tool_calls: m.tool_calls.values().sum(),
                input_tokens: m.input_tokens + m.cached_input_tokens,
                output_tokens: m.output_tokens,
                cost: m.cost,
                cost_known: m.cost_known,
                duration_ms: m.total_ms,
                log: Some(id.clone()),
            }
        } else {
            TaskRow {
                task: id.clone(),
                outcome: "not_run".to_owned(),
                failure: None,
                passed: false,
                attempts: attempts.get(id).copied().unwrap_or(0),
                steps: 0,
                tool_calls: 0,
                input_tokens: 0,
                output_tokens: 0,
                cost: 0.0,
                cost_known: true,
                duration_ms: 0,
                log: None,
            }
        };
        rows.push(row);
    }
    let run = rows.iter().filter(|r| r.outcome != "not_run").count();
    let passed = rows.iter().filter(|r| r.passed).count();
    let mut failures = BTreeMap::new();
    for row in &rows {
        if let Some(failure) = &row.failure {
            *failures.entry(failure.clone()).or_default() += 1;
        }
    }
    let tool_latency_ms = samples
        .into_iter()
        .map(|(tool, values)| {
            (
                tool,
                ToolLatency {
                    calls: values.len() as u64,
                    latency: metrics::latency(values),
                },
            )
        })
        .collect();
    let totals = Totals {
        tasks: rows.len(),
        run,
        passed,
        failed: run - passed,
        not_run: rows.len() - run,
        pass_rate: if run == 0 {
            0.0
        } else {
            passed as f64 / run as f64
        },
        retries,
        failures,
        cost: rows.iter().map(|r| r.cost).sum(),
        input_tokens: rows.iter().map(|r| r.input_tokens).sum(),
        output_tokens: rows.iter().map(|r| r.output_tokens).sum(),
        tool_calls: rows.iter().map(|r| r.tool_calls).sum(),
        task_time_ms: rows.iter().map(|r| r.duration_ms).sum(),
        wall_ms,
        tool_latency_ms,
    };
    Ok(BatchReport {
        batch_id,
        interrupted,
        tasks: rows,
        totals,
        rate_limits: gates.into_values().collect(),
    })
}

fn cost(row: &TaskRow) -> String {
    if row.cost_known {
        format!("{:.4}", row.cost)
    } else {
        format!(">={:.4}", row.cost)
    }
}

/// The report as a table.
pub fn write_text(report: &BatchReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "batch {}{}",
        report.batch_id,
        if report.interrupted {
            " (interrupted)"
        } else {
            ""
        }
    )?;
    writeln!(
        out,
        "{:<24} {:<13} {:<15} {:>4} {:>6} {:>6} {:>10} {:>9} {:>10} {:>8}",
        "task",
        "outcome",
        "failure",
        "try",
        "steps",
        "tools",
        "in tok",
        "out tok",
        "cost $",
        "time s"
    )?;
    for row in &report.tasks {
        writeln!(
            out,
            "{:<24} {:<13} {:<15} {:>4} {:>6} {:>6} {:>10} {:>9} {:>10} {:>8.1}",
            row.task,
            row.outcome,
            row.failure.as_deref().unwrap_or("-"),
            row.attempts,
            row.steps,
            row.tool_calls,
            row.input_tokens,
            row.output_tokens,
            cost(row),
            row.duration_ms as f64 / 1000.0
        )?;
    }
    let t = &report.totals;
    writeln!(
        out,
        "\n{} tasks: {} passed, {} failed, {} not run; pass rate {:.1}% of those run; {} retries",
        t.tasks,
        t.passed,
        t.failed,
        t.not_run,
        100.0 * t.pass_rate,
        t.retries
    )?;
    if !t.failures.is_empty() {
        let classes: Vec<String> = t
            .failures
            .iter()
            .map(|(class, n)| format!("{class} {n}"))
            .collect();
        writeln!(out, "failures: {}", classes.join(", "))?;
    }
    writeln!(
        out,
        "cost ${:.4}; tokens {} in, {} out; {} tool calls; task time {:.1} s; wall time {:.1} s",
        t.cost,
        t.input_tokens,
        t.output_tokens,
        t.tool_calls,
        t.task_time_ms as f64 / 1000.0,
        t.wall_ms as f64 / 1000.0
    )?;
    if !t.tool_latency_ms.is_empty() {
        writeln!(
            out,
            "\n{:<20} {:>7} {:>9} {:>9} {:>9}",
            "tool", "calls", "p50 ms", "p95 ms", "max ms"
        )?;
        for (tool, l) in &t.tool_latency_ms {
            writeln!(
                out,
                "{tool:<20} {:>7} {:>9} {:>9} {:>9}",
                l.calls, l.latency.p50, l.latency.p95, l.latency.max
            )?;
        }
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
/// returns the report's path.
pub fn write_html(dir: &Path, report: &BatchReport) -> Result<std::path::PathBuf, ReplayError> {
    let io = |err: std::io::Error| ReplayError::Io(format!("writing the report: {err}"));
    let transcripts = dir.join("transcripts");
    std::fs::create_dir_all(&transcripts).map_err(io)?;
    for row in &report.tasks {
        if let Some(log) = &row.log {
            let file = std::fs::File::create(transcripts.join(format!("{}.html", row.task)))
                .map_err(io)?;
            let mut out = std::io::BufWriter::new(file);
            render::render(&dir.join(log), render::Format::Html, &mut out)?;
            out.flush().map_err(io)?;
        }
    }
    let mut page = String::new();
    let t = &report.totals;
    page.push_str(&format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Batch {id}</title>\n\
         <style>body{{font:14px system-ui,sans-serif;margin:2em}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:first-child,th:first-child,\
         td:nth-child(2),td:nth-child(3){{text-align:left}}tr.pass td:nth-child(2){{color:#060}}\
         tr.fail td:nth-child(2){{color:#a00}}tfoot td{{font-weight:bold}}</style></head><body>\n\
         <h1>Batch {id}{interrupted}</h1>\n<p>{tasks} tasks: {passed} passed, {failed} failed, \
         {not_run} not run; pass rate {rate:.1}% of those run; {retries} retries. Cost ${cost:.4}; \
         task time {task_s:.1} s; wall time {wall_s:.1} s.</p>\n<table id=\"tasks\"><thead><tr><th>task</th>\
         <th>outcome</th><th>failure</th><th>attempts</th><th>steps</th><th>tool calls</th>\
         <th>tokens in</th><th>tokens out</th><th>cost $</th><th>time s</th></tr></thead><tbody>\n",
        id = escape(&report.batch_id),
        interrupted = if report.interrupted { " (interrupted)" } else { "" },
        tasks = t.tasks,
        passed = t.passed,
        failed = t.failed,
        not_run = t.not_run,
        rate = 100.0 * t.pass_rate,
        retries = t.retries,
        cost = t.cost,
        task_s = t.task_time_ms as f64 / 1000.0,
        wall_s = t.wall_ms as f64 / 1000.0,
    ));
    for row in &report.tasks {
        let name = match &row.log {
            Some(_) => format!(
                "<a href=\"transcripts/{0}.html\">{0}</a>",
                escape(&row.task)
            ),
            None => escape(&row.task),
        };
        page.push_str(&format!(
            "<tr class=\"{}\"><td>{name}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td></tr>\n",
            if row.passed { "pass" } else { "fail" },
            escape(&row.outcome),
            escape(row.failure.as_deref().unwrap_or("")),
            row.attempts,
            row.steps,
            row.tool_calls,
            row.input_tokens,
            row.output_tokens,
            cost(row),
            row.duration_ms as f64 / 1000.0
        ));
    }
    page.push_str(&format!(
        "</tbody><tfoot><tr><td>total</td><td>{} passed</td><td></td><td>{}</td><td>{}</td><td>{}</td>\
         <td>{}</td><td>{}</td><td>{:.4}</td><td>{:.1}</td></tr></tfoot></table>\n",
        t.passed,
        report.tasks.iter().map(|r| r.attempts).sum::<u32>(),
        report.tasks.iter().map(|r| u64::from(r.steps)).sum::<u64>(),
        t.tool_calls,
        t.input_tokens,
        t.output_tokens,
        t.cost,
        t.task_time_ms as f64 / 1000.0
    ));
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
    page.push_str("</body></html>\n");
    let path = dir.join("report.html");
    std::fs::write(&path, page).map_err(io)?;
    Ok(path)
}
