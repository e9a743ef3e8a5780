//! Text replay: a session as a readable transcript, in Markdown or one self-contained HTML
//! page with a timeline, each step's time drawn as a bar and the slowest steps listed first.
//! Events stream through one at a time (the HTML page reads the log twice: its step times
//! first).

use std::io::Write;
use std::path::{Path, PathBuf};

mod bench;
mod blocks;
mod hooks;
mod steps;
mod subagents;
mod write;

use super::{ReplayError, events, text};
use harness_log::text::escape;
use harness_log::{BlobRef, Event, Text};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// Renders the session in `dir` to `out`. Returns the number of events rendered. Markdown is
/// text to read on a terminal (or in a file shown on one later): the log's control characters
/// are shown as `\u001b` there, never written raw ([`harness_log::text::terminal_safe`]); the
/// HTML page escapes what it shows as HTML.
pub fn render(dir: &Path, format: Format, out: &mut dyn Write) -> Result<u64, ReplayError> {
    match format {
        Format::Md => {
            let mut safe = harness_log::text::TerminalSafe::new(out);
            let n = render_into(dir, format, &mut safe)?;
            safe.flush()
                .map_err(|err| ReplayError::Io(format!("writing the transcript: {err}")))?;
            Ok(n)
        }
        Format::Html => render_into(dir, format, out),
    }
}

fn render_into(dir: &Path, format: Format, out: &mut dyn Write) -> Result<u64, ReplayError> {
    let io = |err: std::io::Error| ReplayError::Io(format!("writing the transcript: {err}"));
    let mut torn = Vec::new();
    let mut n_events = 0;
    let mut title = String::from("Session");
    let mut started = false;
    // The HTML page draws each step's time and lists the slowest first: a pass ahead for them.
    let times = match format {
        Format::Html => steps::measure(dir)?,
        Format::Md => steps::StepTimes::default(),
    };
    for envelope in events(dir, |error| torn.push(error.to_string()))? {
        let envelope = envelope?;
        n_events += 1;
        if let Event::SessionStarted(header) = &envelope.event {
            title = format!("Session {}", header.session_id);
        }
        if !started {
            // The outcome first, so a reader need not scroll to the end for it.
            let outcome = outcome_line(dir);
            let forks: Vec<String> = super::fork::forks_of(dir)
                .iter()
                .map(|(folder, summary)| super::fork::line(summary, folder))
                .collect();
            match format {
                Format::Md => {
                    writeln!(out, "# {title}\n").map_err(io)?;
                    writeln!(out, "**{outcome}**\n").map_err(io)?;
                    for fork in &forks {
                        writeln!(out, "- {fork}").map_err(io)?;
                    }
                    if !forks.is_empty() {
                        writeln!(out).map_err(io)?;
                    }
                }
                Format::Html => {
                    write!(out, "{}", write::html_head(&title, &times)).map_err(io)?;
                    writeln!(out, "<p class=\"outcome\">{}</p>", escape(&outcome)).map_err(io)?;
                    for fork in &forks {
                        writeln!(out, "<p class=\"fork\">{}</p>", escape(fork)).map_err(io)?;
                    }
                }
            }
            started = true;
        }
        let Some(block) = blocks::block(dir, envelope.seq, envelope.ts, &envelope.event)? else {
            continue;
        };
        match format {
            Format::Md => write::write_md(out, &block).map_err(io)?,
            Format::Html => write::write_html(out, &block, times.bar(block.seq)).map_err(io)?,
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

/// The session's end in one line, from its `session_finished` (or that it has none yet).
fn outcome_line(dir: &Path) -> String {
    let finished = events(dir, |_| {}).ok().and_then(|all| {
        all.filter_map(Result::ok).find_map(|e| match e.event {
            Event::SessionFinished(finished) => Some(finished),
            _ => None,
        })
    });
    let Some(f) = finished else {
        return "Outcome: not finished (still running, or the harness was killed)".to_owned();
    };
    let failure = f
        .failure
        .map(|class| format!(" ({})", class.as_str()))
        .unwrap_or_default();
    let cost = if f.cost_known {
        format!("${:.4}", f.cost)
    } else {
        format!("at least ${:.4}", f.cost)
    };
    format!(
        "Outcome: {}{failure} · {} · {} · {cost} · {:.1} s",
        f.outcome.as_str(),
        harness_log::text::plural(f.turns, "turn"),
        harness_log::text::plural(f.tool_calls, "tool call"),
        f.duration_ms as f64 / 1000.0
    )
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
