//! Text replay: a session as a readable transcript, in Markdown or one self-contained HTML
//! page with a timeline. Events stream through one at a time.

use std::io::Write;
use std::path::{Path, PathBuf};

use sandbox_protocol::EntryKind;

use super::{ReplayError, blob, events, text};
use crate::event_log::{BlobRef, ChangeRecord, Event, Text};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Md,
    Html,
}

/// Outputs longer than this many lines are folded.
const FOLD_LINES: usize = 60;
const FOLD_HEAD: usize = 30;
const FOLD_TAIL: usize = 10;
/// Files larger than this are not diffed.
const DIFF_MAX_BYTES: u64 = 512 * 1024;

/// One rendered piece of the transcript.
struct Block {
    seq: u64,
    ts: String,
    kind: &'static str,
    title: String,
    /// Preformatted sections: (label, text, folded-from blob path).
    sections: Vec<Section>,
    /// Plain lines of detail.
    notes: Vec<String>,
}

struct Section {
    label: String,
    body: String,
    /// `diff`, `json` or `text`.
    lang: &'static str,
    full: Option<PathBuf>,
}

/// Renders the session in `dir` to `out`. Returns the number of events rendered.
pub fn render(dir: &Path, format: Format, out: &mut dyn Write) -> Result<u64, ReplayError> {
    let io = |err: std::io::Error| ReplayError::Io(format!("writing the transcript: {err}"));
    let mut torn = Vec::new();
    let mut n_events = 0;
    let mut title = String::from("Session");
    let mut started = false;
    for envelope in events(dir, |error| torn.push(error.to_string()))? {
        let envelope = envelope?;
        n_events += 1;
        if let Event::SessionStarted(header) = &envelope.event {
            title = format!("Session {}", header.session_id);
        }
        if !started {
            match format {
                Format::Md => writeln!(out, "# {title}\n").map_err(io)?,
                Format::Html => write!(out, "{}", html_head(&title)).map_err(io)?,
            }
            started = true;
        }
        let Some(block) = block(dir, envelope.seq, envelope.ts, &envelope.event)? else {
            continue;
        };
        match format {
            Format::Md => write_md(out, &block).map_err(io)?,
            Format::Html => write_html(out, &block).map_err(io)?,
        }
    }
    for problem in &torn {
        match format {
            Format::Md => writeln!(out, "> **log:** {problem}\n").map_err(io)?,
            Format::Html => {
                writeln!(out, "<p class=\"warn\">log: {}</p>", escape(problem)).map_err(io)?
            }
        }
    }
    if format == Format::Html {
        writeln!(out, "</ol></main></body></html>").map_err(io)?;
    }
    Ok(n_events)
}

fn block(dir: &Path, seq: u64, ts: String, event: &Event) -> Result<Option<Block>, ReplayError> {
    let mut block = Block {
        seq,
        ts,
        kind: event.kind(),
        title: String::new(),
        sections: Vec::new(),
        notes: Vec::new(),
    };
    match event {
        Event::BatchStarted(batch) => {
            block.title = format!(
                "Batch started: {} tasks, {} at once, sandbox {}",
                batch.tasks.len(),
                batch.parallel,
                batch.sandbox
            );
            block.notes.push(batch.parallel_reason.clone());
        }
        Event::TaskStarted(task) => {
            block.title = format!("Task {} started (attempt {})", task.task, task.attempt);
            block.notes.push(format!("log: {}", task.log_dir));
        }
        Event::TaskFinished(task) => {
            block.title = format!(
                "Task {} {} ({}{})",
                task.task,
                if task.passed { "passed" } else { "failed" },
                task.outcome,
                task.failure
                    .as_ref()
                    .map(|f| format!(", {f}"))
                    .unwrap_or_default()
            );
        }
        Event::TaskRetried(task) => {
            block.title = format!("Task {} retried: attempt {}", task.task, task.attempt);
            block.notes.push(task.reason.clone());
        }
        Event::TaskSkipped(task) => {
            block.title = format!("Task {} skipped", task.task);
            block.notes.push(task.reason.clone());
        }
        Event::BatchFinished(batch) => {
            block.title = format!(
                "Batch finished{}: {} passed, {} failed, {} not run, {} retries",
                if batch.interrupted {
                    " (interrupted)"
                } else {
                    ""
                },
                batch.n_passed,
                batch.n_failed,
                batch.n_not_run,
                batch.n_retries
            );
        }
        Event::SessionStarted(header) => {
            let config = &header.config;
            block.title = "Session started".to_owned();
            block
                .notes
                .push(format!("model: {}", config.model_description));
            block.notes.push(format!(
                "limits: {} turns, ${:.2}, compact at {} tokens; tools: {}; policy: {}; sandbox: {} ({})",
                config.max_turns,
                config.max_cost,
                config.compact_at,
                config.tool_names.join(", "),
                config.policy,
                config.sandbox,
                config.sandbox_url
            ));
            block.sections.push(plain("task", &header.task));
            if let Some(prompt) = &header.system_prompt {
                block.sections.push(folded(dir, "system prompt", prompt)?);
            }
        }
        Event::WorkspaceSnapshot(snapshot) => {
            block.title = format!(
                "Workspace: {} files, {} bytes",
                snapshot.n_files, snapshot.n_bytes
            );
        }
        Event::ModelRequest(request) => {
            block.title = format!(
                "Model request (turn {}, {}): {} messages, ~{} tokens",
                request.turn, request.purpose, request.n_messages, request.estimated_tokens
            );
        }
        Event::ModelResponse(response) => {
            let cost = response
                .cost
                .map(|c| format!("${c:.4}"))
                .unwrap_or_else(|| "cost unknown".to_owned());
            block.title = format!(
                "Model (turn {}{})",
                response.turn,
                if response.purpose == "summary" {
                    ", summary"
                } else {
                    ""
                }
            );
            block.notes.push(format!(
                "{} in ({} cached) / {} out tokens, {cost}, {} ms",
                response.usage.input_tokens + response.usage.cached_input_tokens,
                response.usage.cached_input_tokens,
                response.usage.output_tokens,
                response.latency_ms
            ));
            let said = text(dir, &response.text)?;
            if !said.is_empty() {
                block.sections.push(plain("said", &said));
            }
            for call in &response.tool_calls {
                block
                    .notes
                    .push(format!("asks for `{}` ({})", call.name, call.id));
            }
        }
        Event::ToolCall(call) => {
            block.title = format!("Tool call `{}` ({})", call.name, call.call_id);
            let pretty = serde_json::from_str::<serde_json::Value>(&call.arguments)
                .ok()
                .and_then(|value| serde_json::to_string_pretty(&value).ok())
                .unwrap_or_else(|| call.arguments.clone());
            block.sections.push(Section {
                label: "arguments".to_owned(),
                body: pretty,
                lang: "json",
                full: None,
            });
        }
        Event::PolicyDecision(decision) => {
            block.title = format!(
                "Policy: {} `{}` ({})",
                if decision.allowed {
                    "allowed"
                } else {
                    "refused"
                },
                decision.tool,
                decision.source
            );
            if !decision.reason.is_empty() {
                block
                    .notes
                    .push(format!("{}: {}", decision.decision, decision.reason));
            }
        }
        Event::ToolResult(result) => {
            let exit = result
                .exit_code
                .map(|code| format!(", exit {code}"))
                .unwrap_or_default();
            let timed_out = if result.timed_out == Some(true) {
                ", timed out"
            } else {
                ""
            };
            block.title = format!(
                "Result of `{}`: {}{exit}{timed_out}, {} ms",
                result.name, result.status, result.duration_ms
            );
            block
                .sections
                .push(folded(dir, "the model saw", &result.output)?);
            for output in &result.outputs {
                if let Some(reference) = &output.blob {
                    block.notes.push(format!(
                        "full {}: {} bytes, {}",
                        output.stream,
                        output.total_bytes,
                        blob_path(dir, reference).display()
                    ));
                }
            }
        }
        Event::WorkspaceChanged(changed) => {
            block.title = format!(
                "Workspace changed after {}: {} paths",
                changed.call_id,
                changed.changes.len()
            );
            for change in &changed.changes {
                block.sections.push(change_section(dir, change));
            }
        }
        Event::StateFingerprint(fingerprint) => {
            block.title = format!(
                "State: {} processes, {} listening sockets, {} watched paths",
                fingerprint.processes.len(),
                fingerprint.listening.len(),
                fingerprint.watched.len()
            );
            for process in &fingerprint.processes {
                block
                    .notes
                    .push(format!("process {}: {}", process.pid, process.command));
            }
            for socket in &fingerprint.listening {
                block.notes.push(format!(
                    "listening {} {}:{}",
                    socket.protocol.as_str(),
                    socket.address,
                    socket.port
                ));
            }
        }
        Event::Compaction(compaction) => {
            block.title = format!(
                "Compaction: {} messages replaced ({} -> {})",
                compaction.n_replaced, compaction.n_before, compaction.n_after
            );
            block
                .sections
                .push(folded(dir, "summary", &compaction.summary)?);
        }
        Event::Error(error) => {
            block.title = format!("Error ({})", error.class);
            block.sections.push(plain("message", &error.message));
        }
        Event::CheckResult(check) => {
            block.title = format!(
                "Check {}: `{}` (exit {})",
                if check.passed { "passed" } else { "failed" },
                check.command,
                check.exit_code
            );
            block.sections.push(folded(dir, "output", &check.output)?);
        }
        Event::SessionFinished(finished) => {
            let cost = if finished.cost_known {
                format!("${:.4}", finished.cost)
            } else {
                format!("at least ${:.4} (unknown price)", finished.cost)
            };
            block.title = match &finished.failure {
                Some(failure) => format!("Session finished: {} ({failure})", finished.outcome),
                None => format!("Session finished: {}", finished.outcome),
            };
            block.notes.push(format!(
                "{} turns, {} model calls, {} tool calls, {} in / {} out tokens, {cost}, {:.1} s",
                finished.turns,
                finished.model_calls,
                finished.tool_calls,
                finished.usage.input_tokens + finished.usage.cached_input_tokens,
                finished.usage.output_tokens,
                finished.duration_ms as f64 / 1000.0
            ));
            let answer = text(dir, &finished.answer)?;
            if !answer.is_empty() {
                block.sections.push(plain("answer", &answer));
            }
        }
    }
    Ok(Some(block))
}

fn plain(label: &str, body: &str) -> Section {
    Section {
        label: label.to_owned(),
        body: body.to_owned(),
        lang: "text",
        full: None,
    }
}

fn blob_path(dir: &Path, reference: &BlobRef) -> PathBuf {
    dir.join("blobs").join(&reference.sha256)
}

/// A text, folded to its head and tail when long; the full text stays in its blob.
fn folded(dir: &Path, label: &str, value: &Text) -> Result<Section, ReplayError> {
    let body = text(dir, value)?;
    let lines: Vec<&str> = body.lines().collect();
    let full = value
        .blob
        .as_ref()
        .map(|reference| blob_path(dir, reference));
    if lines.len() <= FOLD_LINES {
        return Ok(Section {
            label: label.to_owned(),
            body,
            lang: "text",
            full,
        });
    }
    let folded = format!(
        "{}\n… {} lines folded …\n{}",
        lines[..FOLD_HEAD].join("\n"),
        lines.len() - FOLD_HEAD - FOLD_TAIL,
        lines[lines.len() - FOLD_TAIL..].join("\n")
    );
    Ok(Section {
        label: label.to_owned(),
        body: folded,
        lang: "text",
        full: full.or_else(|| Some(PathBuf::from("(inline)"))),
    })
}

/// A unified diff of a changed text file, or a line saying what changed.
fn change_section(dir: &Path, change: &ChangeRecord) -> Section {
    let label = format!("{} {}", change.change.as_str(), change.path);
    let content = |version: &Option<crate::event_log::VersionRecord>| -> Option<String> {
        let version = version.as_ref()?;
        if version.kind != EntryKind::File || version.size > DIFF_MAX_BYTES {
            return None;
        }
        let bytes = blob(
            dir,
            &BlobRef {
                sha256: version.sha256.clone()?,
                size: version.size,
            },
        )
        .ok()?;
        if bytes.contains(&0) {
            return None;
        }
        Some(String::from_utf8_lossy(&bytes).into_owned())
    };
    let is_text = |version: &Option<crate::event_log::VersionRecord>| {
        version.as_ref().is_none_or(|v| v.kind == EntryKind::File)
    };
    let (before, after) = (content(&change.before), content(&change.after));
    let diffable = (before.is_some() || change.before.is_none())
        && (after.is_some() || change.after.is_none());
    if diffable && is_text(&change.before) && is_text(&change.after) {
        let (old, new) = (before.unwrap_or_default(), after.unwrap_or_default());
        let diff = similar::TextDiff::from_lines(&old, &new)
            .unified_diff()
            .context_radius(3)
            .header(&format!("a/{}", change.path), &format!("b/{}", change.path))
            .to_string();
        return Section {
            label,
            body: diff,
            lang: "diff",
            full: None,
        };
    }
    let describe = |version: &Option<crate::event_log::VersionRecord>| match version {
        Some(v) => format!(
            "{} {} bytes mode {:o}{}",
            v.kind.as_str(),
            v.size,
            v.mode,
            v.target
                .as_ref()
                .map(|t| format!(" -> {t}"))
                .unwrap_or_default()
        ),
        None => "nothing".to_owned(),
    };
    Section {
        label,
        body: format!(
            "{} => {}",
            describe(&change.before),
            describe(&change.after)
        ),
        lang: "text",
        full: None,
    }
}

fn write_md(out: &mut dyn Write, block: &Block) -> std::io::Result<()> {
    writeln!(out, "### {} · {}\n", block.title, block.seq)?;
    writeln!(out, "<sub>{} · `{}`</sub>\n", block.ts, block.kind)?;
    for note in &block.notes {
        writeln!(out, "- {note}")?;
    }
    if !block.notes.is_empty() {
        writeln!(out)?;
    }
    for section in &block.sections {
        let fence = if section.body.contains("```") {
            "````"
        } else {
            "```"
        };
        writeln!(
            out,
            "**{}**\n\n{fence}{}\n{}\n{fence}\n",
            section.label,
            section.lang,
            section.body.trim_end_matches('\n')
        )?;
        if let Some(full) = &section.full {
            writeln!(out, "(full text: `{}`)\n", full.display())?;
        }
    }
    Ok(())
}

fn write_html(out: &mut dyn Write, block: &Block) -> std::io::Result<()> {
    writeln!(
        out,
        "<li class=\"event {}\" id=\"e{}\">",
        block.kind, block.seq
    )?;
    writeln!(
        out,
        "<div class=\"head\"><a class=\"seq\" href=\"#e{0}\">{0}</a> <span class=\"title\">{1}</span> <time>{2}</time></div>",
        block.seq,
        escape(&block.title),
        escape(&block.ts)
    )?;
    for note in &block.notes {
        writeln!(out, "<div class=\"note\">{}</div>", escape(note))?;
    }
    for section in &block.sections {
        let body = if section.lang == "diff" {
            diff_html(&section.body)
        } else {
            escape(&section.body)
        };
        let full = section
            .full
            .as_ref()
            .map(|path| {
                format!(
                    " <span class=\"full\">full: {}</span>",
                    escape(&path.display().to_string())
                )
            })
            .unwrap_or_default();
        let open = if section.body.lines().count() <= 12 {
            " open"
        } else {
            ""
        };
        writeln!(
            out,
            "<details{open}><summary>{}{full}</summary><pre class=\"{}\">{body}</pre></details>",
            escape(&section.label),
            section.lang
        )?;
    }
    writeln!(out, "</li>")
}

fn diff_html(diff: &str) -> String {
    diff.lines()
        .map(|line| {
            let class = match line.chars().next() {
                Some('+') if !line.starts_with("+++") => "add",
                Some('-') if !line.starts_with("---") => "del",
                Some('@') => "hunk",
                _ => "ctx",
            };
            format!("<span class=\"{class}\">{}</span>", escape(line))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn html_head(title: &str) -> String {
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{0}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1d1d1f; }}
main {{ max-width: 64rem; margin: 0 auto; padding: 1rem 1.5rem; }}
h1 {{ font-size: 1.3rem; }}
ol.timeline {{ list-style: none; padding-left: 1.2rem; border-left: 3px solid #d0d0d6; }}
li.event {{ margin: 0 0 .9rem; position: relative; }}
li.event::before {{ content: ""; position: absolute; left: -1.72rem; top: .35rem; width: .7rem; height: .7rem; border-radius: 50%; background: #8e8e93; }}
li.model_response::before {{ background: #0b6bcb; }} li.tool_call::before, li.tool_result::before {{ background: #0a7a35; }}
li.workspace_changed::before {{ background: #8a5a00; }} li.error::before {{ background: #b3261e; }}
li.policy_decision::before {{ background: #6e3fb3; }} li.session_finished::before, li.session_started::before {{ background: #1d1d1f; }}
.head {{ font-weight: 600; }} .seq {{ color: #6e6e73; text-decoration: none; font-family: ui-monospace, monospace; margin-right: .4rem; }}
time {{ color: #6e6e73; font-weight: 400; font-size: .85em; margin-left: .5rem; }}
.note {{ color: #3a3a3c; }} .warn {{ color: #b3261e; }} .full {{ color: #6e6e73; font-size: .85em; }}
pre {{ background: #f5f5f7; padding: .6rem; overflow: auto; max-height: 32rem; font-size: 12.5px; white-space: pre-wrap; }}
.add {{ color: #0a7a35; }} .del {{ color: #b3261e; }} .hunk {{ color: #6e3fb3; }}
</style></head>
<body><main><h1>{0}</h1><ol class="timeline">
"#,
        escape(title)
    )
}

fn escape(text: &str) -> String {
    crate::prompt::escape(text)
}
