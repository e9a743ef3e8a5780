//! A text search across runs: task names and prompts (from the index), and in the logs the
//! commands the agent ran (`tool_call` arguments), the files it touched (`workspace_changed`
//! paths) and error messages (`error`, a refused or failed call's output, a verifier's
//! message). Logs are streamed, newest run first, and a line is parsed only when its bytes
//! hold the query; the search stops at its hit limit or its time budget and says so.

use std::io::BufReader;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use harness_log::ToolStatus;
use harness_log::views::{Line, View};
use serde::Serialize;
use serde_json::Value;

/// Characters of context either side of a hit.
const AROUND: usize = 120;

#[derive(Debug, Serialize)]
pub struct Hit {
    pub run: String,
    pub name: String,
    /// `task`, `command`, `file` or `error`.
    pub what: &'static str,
    /// The log line it is on (absent for a hit in the index).
    pub line: Option<u64>,
    pub seq: Option<u64>,
    pub text: String,
}

#[derive(Debug, Serialize)]
pub struct Results {
    pub query: String,
    pub hits: Vec<Hit>,
    pub runs_searched: usize,
    /// Every run was searched (not stopped by the limit or the budget).
    pub complete: bool,
}

/// A run to search: its id, folder name, prompt and folder.
pub struct Target {
    pub id: String,
    pub name: String,
    pub task: String,
    pub dir: PathBuf,
    pub session: bool,
}

/// Searches `targets` for `query` (case-insensitive). Blocking.
pub fn search(targets: &[Target], query: &str, limit: usize, budget: Duration) -> Results {
    let started = Instant::now();
    let needle = query.to_lowercase();
    // A query with characters JSON escapes cannot be looked for in a line's bytes.
    let prefilter = (!query
        .chars()
        .any(|c| c == '"' || c == '\\' || c.is_control()))
    .then(|| {
        regex::bytes::RegexBuilder::new(&regex::escape(query))
            .case_insensitive(true)
            .build()
            .ok()
    })
    .flatten();
    let mut results = Results {
        query: query.to_owned(),
        hits: Vec::new(),
        runs_searched: 0,
        complete: true,
    };
    for target in targets {
        if results.hits.len() >= limit || started.elapsed() > budget {
            results.complete = false;
            break;
        }
        results.runs_searched += 1;
        for text in [&target.name, &target.task] {
            if let Some(snippet) = around(text, &needle) {
                results.hits.push(hit(target, "task", None, None, snippet));
                break;
            }
        }
        if target.session {
            let deadline = started + budget;
            in_log(
                target,
                &needle,
                prefilter.as_ref(),
                (limit, deadline),
                &mut results,
            );
        }
    }
    results.hits.truncate(limit);
    results
}

fn hit(
    target: &Target,
    what: &'static str,
    line: Option<u64>,
    seq: Option<u64>,
    text: String,
) -> Hit {
    Hit {
        run: target.id.clone(),
        name: target.name.clone(),
        what,
        line,
        seq,
        text,
    }
}

fn in_log(
    target: &Target,
    needle: &str,
    prefilter: Option<&regex::bytes::Regex>,
    (limit, deadline): (usize, Instant),
    results: &mut Results,
) {
    let Ok(file) =
        harness_log::reader::open_regular(&target.dir.join("events.jsonl")).map(|(file, _)| file)
    else {
        return;
    };
    let mut reader = BufReader::with_capacity(256 * 1024, file);
    let (mut bytes, mut number) = (Vec::new(), 0u64);
    while results.hits.len() < limit {
        match crate::pages::read_line(&mut reader, &mut bytes, crate::pages::MAX_LINE) {
            Ok((n, _)) if n > 0 => {}
            _ => return,
        }
        number += 1;
        // The budget holds inside one log too: a huge one is not read to its end.
        if number % 1024 == 0 && Instant::now() > deadline {
            results.complete = false;
            return;
        }
        if prefilter.is_some_and(|re| !re.is_match(&bytes)) {
            continue;
        }
        let Ok(event) = serde_json::from_slice::<Value>(&bytes) else {
            continue;
        };
        let line = Line::of(&event);
        for (what, text) in fields(&line.event) {
            if let Some(snippet) = around(text, needle) {
                results
                    .hits
                    .push(hit(target, what, Some(number - 1), line.seq, snippet));
                break;
            }
        }
    }
}

/// The searchable texts of an event.
fn fields<'a>(event: &View<'a>) -> Vec<(&'static str, &'a str)> {
    let text = |text: Option<&'a str>| text.unwrap_or_default();
    match event {
        View::SessionStarted(header) => vec![("task", text(header.task))],
        View::ToolCall { arguments } => vec![("command", text(*arguments))],
        View::WorkspaceChanged { paths } => paths.iter().map(|path| ("file", *path)).collect(),
        View::Error { message } => vec![("error", text(*message))],
        View::ToolResult(result) if result.status != Some(ToolStatus::Ok.as_str()) => {
            vec![("error", text(result.output))]
        }
        View::VerifierFinished { message, .. } => vec![("error", text(*message))],
        _ => Vec::new(),
    }
}

/// The text around the first case-insensitive occurrence of `needle` (already lowercase).
fn around(text: &str, needle: &str) -> Option<String> {
    let lower = text.to_lowercase();
    let at = lower.find(needle)?;
    // Lowercasing can change lengths: map back through characters.
    let chars_before = lower[..at].chars().count();
    let start = chars_before.saturating_sub(AROUND);
    let take = AROUND * 2 + needle.chars().count();
    let snippet: String = text.chars().skip(start).take(take).collect();
    let lead = if start > 0 { "…" } else { "" };
    Some(format!("{lead}{snippet}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_files_and_errors_are_found_case_insensitively() {
        let dir = tempfile::tempdir().unwrap();
        let lines = [
            r#"{"seq":0,"type":"session_started","data":{"task":"write the Parser"}}"#,
            r#"{"seq":1,"type":"tool_call","data":{"arguments":"{\"command\":\"make PARSER=1\"}"}}"#,
            r#"{"seq":2,"type":"workspace_changed","data":{"changes":[{"path":"src/parser.rs"}]}}"#,
            r#"{"seq":3,"type":"tool_result","data":{"status":"ok","output":{"text":"parser ok"}}}"#,
            r#"{"seq":4,"type":"error","data":{"message":"the Parser crashed"}}"#,
        ];
        std::fs::write(dir.path().join("events.jsonl"), lines.join("\n") + "\n").unwrap();
        let target = Target {
            id: "0".into(),
            name: "run".into(),
            task: "write the Parser".into(),
            dir: dir.path().to_owned(),
            session: true,
        };
        let results = search(&[target], "parser", 100, Duration::from_secs(10));
        let found: Vec<(&str, Option<u64>)> =
            results.hits.iter().map(|h| (h.what, h.line)).collect();
        // The index hit, then the log's: the ok output is not an error.
        assert_eq!(
            found,
            [
                ("task", None),
                ("task", Some(0)),
                ("command", Some(1)),
                ("file", Some(2)),
                ("error", Some(4))
            ]
        );
        assert!(results.complete);
        assert_eq!(around("ÅBC parser", "parser").unwrap(), "ÅBC parser");
    }

    /// The time budget holds inside one huge log: the search stops in it and says so.
    #[test]
    fn a_huge_log_is_not_read_past_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let line = r#"{"seq":1,"type":"tool_call","data":{"arguments":"needle"}}"#;
        let text = format!("{line}\n").repeat(50_000)
            + r#"{"seq":2,"type":"error","data":{"message":"the last needle"}}"#
            + "\n";
        std::fs::write(dir.path().join("events.jsonl"), text).unwrap();
        let target = Target {
            id: "0".into(),
            name: "run".into(),
            task: String::new(),
            dir: dir.path().to_owned(),
            session: true,
        };
        let mut results = Results {
            query: "the last".into(),
            hits: Vec::new(),
            runs_searched: 1,
            complete: true,
        };
        // The deadline has passed once the log is open: it is not read to its end.
        in_log(
            &target,
            "the last",
            None,
            (100, Instant::now()),
            &mut results,
        );
        assert!(!results.complete);
        assert!(results.hits.is_empty());
    }
}
