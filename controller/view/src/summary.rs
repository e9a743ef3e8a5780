//! One run in brief, from the ends of its log: the first line (`session_started` or
//! `batch_started`) and the last 64 KiB, where a finished session's `session_finished` and a
//! benchmark trial's `verifier_finished` are. A session's log is never read whole here, so the
//! index of ten thousand trials costs ten thousand small reads; a batch's own log (a few lines
//! per task) is folded whole, from where the last look stopped.
//!
//! Every field is read leniently from JSON values: a log is hostile input, and a line this
//! version does not know is skipped, never an error. Of a session's tail only the lines that
//! can matter are parsed (found by their bytes), and the last; `bad_lines` counts those of them
//! that are not JSON.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, SystemTime};

use harness_log::views::{self, Line, View};
use harness_log::{EventKind, Outcome};
use serde::Serialize;
use serde_json::Value;

/// How much of a session log's end is read for its summary.
const TAIL_BYTES: u64 = 64 * 1024;
/// The longest first line read (a header with a long inline prompt); longer ones are cut.
const HEAD_BYTES: u64 = 1024 * 1024;
/// A log without its last line that changed within this long is taken as still being written.
pub const RUNNING_WITHIN: Duration = Duration::from_secs(120);
/// The events of a session's tail that its summary reads.
const NEEDED: [EventKind; 3] = [
    EventKind::SessionFinished,
    EventKind::VerifierFinished,
    EventKind::ModelRequest,
];
/// Characters of any other string field kept in the index.
const FIELD_CHARS: usize = 120;
/// Characters of a task's prompt kept in the index.
const TASK_CHARS: usize = 240;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Session,
    Batch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// No last line yet, and the log changed lately.
    Running,
    /// Ended, and passed (a batch: ended without an interruption).
    Completed,
    /// Ended without passing.
    Failed,
    /// No last line, and the log has not changed for a while: its writer was killed.
    Unfinished,
}

/// What the runs list, a batch's grid and a compare show of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    pub kind: Option<Kind>,
    pub status: Option<Status>,
    /// The session's prompt (cut), or a batch's task count in words.
    pub task: String,
    pub session_id: Option<String>,
    pub model: Option<String>,
    /// A benchmark trial's agent (`oracle`, `nop`), when not the model.
    pub agent: Option<String>,
    pub started: Option<String>,
    pub last: Option<String>,
    pub outcome: Option<String>,
    pub failure: Option<String>,
    pub passed: Option<bool>,
    pub reward: Option<f64>,
    pub cost: Option<f64>,
    pub tokens: Option<u64>,
    pub turns: Option<u64>,
    pub tool_calls: Option<u64>,
    pub duration_ms: Option<u64>,
    /// A fork's parent session id and step.
    pub forked_from: Option<String>,
    /// A batch: its task count, and how many finished, passed, failed.
    pub batch_counts: Option<BatchCounts>,
    /// Lines that are not events (a torn last line, hostile junk).
    pub bad_lines: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BatchCounts {
    pub tasks: u64,
    pub started: u64,
    pub finished: u64,
    pub passed: u64,
    pub failed: u64,
    pub not_runnable: u64,
    pub retries: u64,
    pub interrupted: bool,
}

/// The summary of the session log in `dir`.
pub fn session(dir: &Path, modified: SystemTime) -> std::io::Result<Summary> {
    let path = dir.join("events.jsonl");
    let (mut file, _) = harness_log::reader::open_regular(&path)?;
    let len = file.metadata()?.len();
    let mut summary = Summary::default();
    if let Some(head) = first_line(&mut file)? {
        fold(&mut summary, &Line::of(&head));
    }
    let from = len.saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(from))?;
    let mut tail = Vec::with_capacity((len - from) as usize);
    file.take(TAIL_BYTES).read_to_end(&mut tail)?;
    let mut lines: Vec<&[u8]> = tail.split(|b| *b == b'\n').collect();
    if from > 0 && !lines.is_empty() {
        // The first piece is the end of a line that began before the tail.
        lines.remove(0);
    }
    // The last piece is empty after a whole last line, or a torn line (the writer's, not junk).
    lines.pop();
    let last = lines.len().saturating_sub(1);
    let needles = NEEDED.map(EventKind::needle);
    for (i, line) in lines.iter().enumerate() {
        // Only the events a summary reads are parsed (and the last line, for its time).
        if i != last
            && !needles
                .iter()
                .any(|needle| memchr::memmem::find(line, needle.as_bytes()).is_some())
        {
            continue;
        }
        match serde_json::from_slice::<Value>(line) {
            // The header was folded already.
            Ok(event) => {
                let line = Line::of(&event);
                if line.kind != EventKind::SessionStarted {
                    fold(&mut summary, &line);
                }
            }
            Err(_) => summary.bad_lines += 1,
        }
    }
    settle(&mut summary, modified);
    Ok(summary)
}

/// Folds the lines of a batch log from `offset` into `summary`; returns the offset after the
/// last whole line.
pub fn batch(dir: &Path, summary: &mut Summary, offset: u64) -> std::io::Result<u64> {
    let (mut file, _) = harness_log::reader::open_regular(&dir.join("events.jsonl"))?;
    file.seek(SeekFrom::Start(offset))?;
    let mut reader = BufReader::with_capacity(256 * 1024, file);
    let mut at = offset;
    let mut line = Vec::new();
    loop {
        let (n, whole) =
            crate::pages::read_line(&mut reader, &mut line, crate::pages::MAX_BATCH_LINE)?;
        if !whole {
            return Ok(at);
        }
        at += n;
        match serde_json::from_slice::<Value>(&line) {
            Ok(event) => fold(summary, &Line::of(&event)),
            Err(_) => summary.bad_lines += 1,
        }
    }
}

/// The status of a run from what was folded and when its log last changed.
pub fn settle(summary: &mut Summary, modified: SystemTime) {
    if summary.status.is_some() {
        return;
    }
    let lately = modified
        .elapsed()
        .map_or(true, |since| since <= RUNNING_WITHIN);
    summary.status = Some(if lately {
        Status::Running
    } else {
        Status::Unfinished
    });
}

fn first_line(file: &mut File) -> std::io::Result<Option<Value>> {
    let mut head = Vec::new();
    BufReader::new((&mut *file).take(HEAD_BYTES)).read_until(b'\n', &mut head)?;
    Ok(serde_json::from_slice(&head).ok())
}

/// One event into the summary.
fn fold(summary: &mut Summary, line: &Line<'_>) {
    if let Some(ts) = line.ts.map(short) {
        if summary.started.is_none() {
            summary.started = Some(ts.clone());
        }
        summary.last = Some(ts);
    }
    match &line.event {
        View::SessionStarted(header) => started(summary, header),
        View::ModelRequest { turn } => summary.turns = turn.or(summary.turns),
        View::VerifierFinished { reward, .. } => summary.reward = reward.or(summary.reward),
        View::SessionFinished(end) => finished(summary, end),
        View::BatchStarted(batch) => {
            summary.kind = Some(Kind::Batch);
            let tasks = batch.n_tasks() as u64;
            summary.task = harness_log::text::plural(tasks, "task");
            counts(summary).tasks = tasks;
        }
        View::TaskStarted(_) => counts(summary).started += 1,
        View::TaskFinished(task) => {
            let counts = counts(summary);
            counts.finished += 1;
            if task.passed == Some(true) {
                counts.passed += 1;
            } else {
                counts.failed += 1;
            }
            summary.cost = Some(summary.cost.unwrap_or(0.0) + task.cost.unwrap_or(0.0));
        }
        View::TaskRetried(_) => counts(summary).retries += 1,
        View::TaskNotRunnable(_) => counts(summary).not_runnable += 1,
        View::BatchFinished {
            interrupted,
            duration_ms,
        } => {
            let interrupted = *interrupted == Some(true);
            counts(summary).interrupted = interrupted;
            summary.duration_ms = *duration_ms;
            summary.status = Some(if interrupted {
                Status::Failed
            } else {
                Status::Completed
            });
        }
        _ => {}
    }
}

/// A string field as the index keeps it: at most [`FIELD_CHARS`] characters (a hostile log's
/// megabyte model name would otherwise sit in memory once per run).
fn short(text: &str) -> String {
    text.chars().take(FIELD_CHARS).collect()
}

fn counts(summary: &mut Summary) -> &mut BatchCounts {
    summary
        .batch_counts
        .get_or_insert_with(BatchCounts::default)
}

fn started(summary: &mut Summary, header: &views::SessionStarted<'_>) {
    summary.kind = Some(Kind::Session);
    summary.task = header
        .task
        .unwrap_or_default()
        .chars()
        .take(TASK_CHARS)
        .collect();
    summary.session_id = header.session_id.map(short);
    summary.model = header.model.map(short);
    summary.agent = header.agent.map(short);
    if let Some((parent, seq)) = header.forked_from {
        summary.forked_from = Some(format!("{} at seq {seq}", short(parent)));
    }
}

fn finished(summary: &mut Summary, end: &views::SessionFinished<'_>) {
    let outcome = end.outcome.map_or_else(|| "unknown".to_owned(), short);
    let passed = outcome == Outcome::Completed.as_str();
    summary.passed = Some(passed);
    summary.status = Some(if passed {
        Status::Completed
    } else {
        Status::Failed
    });
    summary.outcome = Some(outcome);
    summary.failure = end.failure.map(short);
    summary.cost = end.cost;
    summary.turns = end.turns;
    summary.tool_calls = end.tool_calls;
    summary.duration_ms = end.duration_ms;
    summary.tokens = Some(end.tokens);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, lines: &[Value]) {
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(dir.join("events.jsonl"), text).unwrap();
    }

    #[test]
    fn a_finished_session_is_read_from_its_ends() {
        let dir = tempfile::tempdir().unwrap();
        let mut lines = vec![
            serde_json::json!({"seq": 0, "ts": "t0", "type": "session_started",
            "data": {"task": "fix <b>it</b>", "session_id": "s1", "config": {"model": "m"}}}),
        ];
        // Enough events between for the tail not to reach the header.
        for seq in 1..2000 {
            lines.push(
                serde_json::json!({"seq": seq, "ts": "t", "type": "model_request",
                "data": {"turn": seq, "pad": "x".repeat(40)}}),
            );
        }
        lines.push(serde_json::json!({"seq": 2000, "ts": "t9", "type": "verifier_finished", "data": {"reward": 0.5}}));
        lines.push(serde_json::json!({"seq": 2001, "ts": "t9", "type": "session_finished", "data": {
            "outcome": "check_failed", "failure": "check", "cost": 0.25, "turns": 3, "tool_calls": 4,
            "duration_ms": 1200, "usage": {"input_tokens": 10, "output_tokens": 5}}}));
        write(dir.path(), &lines);
        let summary = session(dir.path(), SystemTime::now()).unwrap();
        assert_eq!(summary.kind, Some(Kind::Session));
        assert_eq!(summary.task, "fix <b>it</b>");
        assert_eq!(summary.status, Some(Status::Failed));
        assert_eq!(summary.failure.as_deref(), Some("check"));
        assert_eq!(summary.reward, Some(0.5));
        assert_eq!(summary.tokens, Some(15));
        assert_eq!(
            (summary.started.as_deref(), summary.last.as_deref()),
            (Some("t0"), Some("t9"))
        );
        assert_eq!(summary.bad_lines, 0);
    }

    #[test]
    fn a_log_without_its_last_line_is_running_until_it_goes_quiet() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &[serde_json::json!({"seq": 0, "ts": "t0", "type": "session_started", "data": {}})],
        );
        let summary = session(dir.path(), SystemTime::now()).unwrap();
        assert_eq!(summary.status, Some(Status::Running));
        let long_ago = SystemTime::now() - RUNNING_WITHIN * 2;
        let summary = session(dir.path(), long_ago).unwrap();
        assert_eq!(summary.status, Some(Status::Unfinished));
    }

    #[test]
    fn a_batch_log_is_folded_from_where_it_stopped() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &[
                serde_json::json!({"seq": 0, "ts": "t0", "type": "batch_started", "data": {"tasks": [{}, {}]}}),
                serde_json::json!({"seq": 1, "ts": "t1", "type": "task_finished", "data": {"passed": true, "cost": 0.5}}),
            ],
        );
        let mut summary = Summary::default();
        let offset = batch(dir.path(), &mut summary, 0).unwrap();
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("events.jsonl"))
            .unwrap();
        std::io::Write::write_all(&mut file, b"{\"seq\":2,\"ts\":\"t2\",\"type\":\"task_finished\",\"data\":{\"passed\":false}}\n{\"torn").unwrap();
        let offset2 = batch(dir.path(), &mut summary, offset).unwrap();
        assert!(offset2 > offset);
        let counts = summary.batch_counts.clone().unwrap();
        assert_eq!(
            (counts.tasks, counts.finished, counts.passed, counts.failed),
            (2, 2, 1, 1)
        );
        assert_eq!(summary.cost, Some(0.5));
        assert_eq!(summary.status, None);
    }
}
