//! Tool latency over a batch's finished trials, the report's "Tool latency" chart: each
//! trial's `tool_result` durations read once from its log (only lines that hold a
//! `"tool_result"` are parsed) and kept by its length, so a batch that grows reads only its
//! newly finished trials.

use std::collections::{BTreeMap, HashMap};
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use harness_log::EventKind;
use harness_log::views::{Line, ToolResult, View};
use harness_replay::charts::Spread;
use serde_json::Value;

/// Calls per log kept at most (a longer log's first ones count): with 8 bytes a call, ten
/// thousand hostile trials hold 80 MB at most.
const MAX_CALLS: usize = 1_000;
/// Tool names told apart at most (the rest count as one); characters of a name kept.
const MAX_TOOLS: usize = 1_000;
const NAME_CHARS: usize = 64;

/// A log's calls: each tool (its number among the names) and how long the call took, in ms.
type Calls = Arc<Vec<(u16, u32)>>;
/// Each log's calls, by the log's length when they were read.
type Logs = HashMap<PathBuf, (u64, Calls)>;

/// Each log's calls, by its length when read, and the tools' names.
#[derive(Debug, Default)]
pub(crate) struct Latencies {
    logs: Mutex<Logs>,
    names: Mutex<Vec<Arc<str>>>,
}

impl Latencies {
    /// One row per tool over the logs in `dirs`, the slowest (p95) first. Blocking.
    pub(crate) fn spreads(&self, dirs: &[PathBuf]) -> Vec<Spread> {
        let mut samples: BTreeMap<u16, Vec<u64>> = BTreeMap::new();
        for dir in dirs {
            for (tool, ms) in self.calls(dir).iter() {
                samples.entry(*tool).or_default().push(u64::from(*ms));
            }
        }
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut rows: Vec<Spread> = samples
            .into_iter()
            .map(|(tool, samples)| {
                let n = samples.len() as u64;
                let l = harness_replay::metrics::latency(samples);
                Spread {
                    label: names
                        .get(usize::from(tool))
                        .map_or_else(|| "(other tools)".to_owned(), |name| name.to_string()),
                    n,
                    p50: l.p50 as f64,
                    p95: l.p95 as f64,
                    max: l.max as f64,
                }
            })
            .collect();
        rows.sort_by(|a, b| b.p95.total_cmp(&a.p95).then_with(|| a.label.cmp(&b.label)));
        rows
    }

    fn calls(&self, dir: &Path) -> Calls {
        let len = std::fs::metadata(dir.join("events.jsonl")).map_or(0, |m| m.len());
        if let Some((read_at, calls)) = self.lock().get(dir)
            && *read_at == len
        {
            return calls.clone();
        }
        let calls = Arc::new(self.read(dir));
        self.lock().insert(dir.to_owned(), (len, calls.clone()));
        calls
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Logs> {
        self.logs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The number of the tool `name` (one past the names kept: the others).
    fn number(&self, name: &str) -> u16 {
        let name: String = name.chars().take(NAME_CHARS).collect();
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = names.iter().position(|known| **known == *name) {
            return at as u16;
        }
        if names.len() < MAX_TOOLS {
            names.push(Arc::from(name));
            return (names.len() - 1) as u16;
        }
        MAX_TOOLS as u16
    }

    /// A log's tool calls: each tool's number and how long the call took.
    fn read(&self, dir: &Path) -> Vec<(u16, u32)> {
        let Ok(file) =
            harness_log::reader::open_regular(&dir.join("events.jsonl")).map(|(file, _)| file)
        else {
            return Vec::new();
        };
        let mut calls = Vec::new();
        let mut reader = BufReader::with_capacity(256 * 1024, file);
        let mut line = Vec::new();
        let needle = EventKind::ToolResult.needle();
        while calls.len() < MAX_CALLS {
            match crate::pages::read_line(&mut reader, &mut line, crate::pages::MAX_LINE) {
                Ok((n, _)) if n > 0 => {}
                _ => break,
            }
            if memchr::memmem::find(&line, needle.as_bytes()).is_none() {
                continue;
            }
            let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            if let View::ToolResult(ToolResult {
                name: Some(name),
                duration_ms: Some(ms),
                ..
            }) = Line::of(&event).event
            {
                calls.push((self.number(name), u32::try_from(ms).unwrap_or(u32::MAX)));
            }
        }
        calls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tool_is_a_row_and_a_grown_log_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("events.jsonl");
        let line = |name: &str, ms: u64| {
            format!(
                "{{\"seq\":0,\"ts\":\"t\",\"type\":\"tool_result\",\"data\":{{\"name\":\"{name}\",\"duration_ms\":{ms}}}}}\n"
            )
        };
        std::fs::write(
            &log,
            line("bash", 10) + &line("bash", 30) + &line("read_file", 1),
        )
        .unwrap();
        let latencies = Latencies::default();
        let rows = latencies.spreads(&[dir.path().to_owned()]);
        let figures: Vec<(&str, u64, f64)> = rows
            .iter()
            .map(|r| (r.label.as_str(), r.n, r.max))
            .collect();
        assert_eq!(figures, [("bash", 2, 30.0), ("read_file", 1, 1.0)]);
        std::fs::write(
            &log,
            line("bash", 10) + &line("bash", 30) + &line("bash", 50),
        )
        .unwrap();
        let rows = latencies.spreads(&[dir.path().to_owned()]);
        assert_eq!((rows.len(), rows[0].n, rows[0].max), (1, 3, 50.0));
    }
}
