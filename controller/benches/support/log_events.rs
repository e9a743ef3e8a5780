//! A finished log's events (the benches and the integration tests both read them).

use std::path::Path;

/// The events of the log folder `dir`, every line of its `events.jsonl` parsed.
pub(crate) fn events(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}
