//! Tool latency over a batch's finished trials, the report's "Tool latency" chart: each
//! trial's `tool_result` durations read once from its log (only lines that hold a
//! `"tool_result"` are parsed) and kept by its length, so a batch that grows reads only its
//! newly finished trials.

use std::collections::{BTreeMap, HashMap};
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use replay::charts::Spread;
use serde_json::Value;

/// Calls per log kept at most (a longer log's first ones count).
const MAX_CALLS: usize = 100_000;

/// A log's calls: each tool's name and how long the call took, in ms.
type Calls = Arc<Vec<(Arc<str>, u64)>>;
/// Each log's calls, by the log's length when they were read.
type Logs = HashMap<PathBuf, (u64, Calls)>;

/// Each log's calls, by its length when read.
#[derive(Debug, Default)]
pub(crate) struct Latencies {
    logs: Mutex<Logs>,
}

impl Latencies {
    /// One row per tool over the logs in `dirs`, the slowest (p95) first. Blocking.
    pub(crate) fn spreads(&self, dirs: &[PathBuf]) -> Vec<Spread> {
        let mut samples: BTreeMap<Arc<str>, Vec<u64>> = BTreeMap::new();
        for dir in dirs {
            for (tool, ms) in self.calls(dir).iter() {
                samples.entry(tool.clone()).or_default().push(*ms);
            }
        }
        let mut rows: Vec<Spread> = samples
            .into_iter()
            .map(|(tool, samples)| {
                let n = samples.len() as u64;
                let l = replay::metrics::latency(samples);
                Spread {
                    label: tool.to_string(),
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
        let calls = Arc::new(read(dir));
        self.lock().insert(dir.to_owned(), (len, calls.clone()));
        calls
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Logs> {
        self.logs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A log's tool calls: the tool's name and how long the call took.
fn read(dir: &Path) -> Vec<(Arc<str>, u64)> {
    let Ok(file) = std::fs::File::open(dir.join("events.jsonl")) else {
        return Vec::new();
    };
    let mut names: HashMap<String, Arc<str>> = HashMap::new();
    let mut calls = Vec::new();
    let mut reader = BufReader::with_capacity(256 * 1024, file);
    let mut line = Vec::new();
    while calls.len() < MAX_CALLS {
        match crate::pages::read_line(&mut reader, &mut line, crate::pages::MAX_LINE) {
            Ok((n, _)) if n > 0 => {}
            _ => break,
        }
        if memchr::memmem::find(&line, b"\"tool_result\"").is_none() {
            continue;
        }
        let Ok(event) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        let data = &event["data"];
        if let (Some("tool_result"), Some(name), Some(ms)) = (
            event["type"].as_str(),
            data["name"].as_str(),
            data["duration_ms"].as_u64(),
        ) {
            let name = names
                .entry(name.to_owned())
                .or_insert_with(|| Arc::from(name))
                .clone();
            calls.push((name, ms));
        }
    }
    calls
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
