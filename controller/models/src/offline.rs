//! The request bodies of models that answer without a network (scripted, replayed): they carry
//! just enough to tell the three kinds of question apart, and they are what the log records.

use sandbox_protocol::ToolSpec;
use serde_json::{Value, json};

use super::Message;

/// What an offline model is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OfflineAsk {
    /// A structured question (the risk classifier's).
    Verdict,
    /// A request without tools: a compaction's summary.
    Summary,
    /// A turn of the loop.
    Turn,
}

/// The body of a turn or summary request; `source` names the model (`scripted`, `replay`).
pub fn request(source: &str, messages: &[Message], tools: &[ToolSpec]) -> Value {
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
    json!({source: true, "n_messages": messages.len(), "tools": names})
}

/// The body of a structured question named `name`.
pub fn structured(source: &str, name: &str) -> Value {
    json!({source: true, "structured": name})
}

/// What a body built here asks.
pub fn ask(body: &Value) -> OfflineAsk {
    if body.get("structured").is_some() {
        return OfflineAsk::Verdict;
    }
    match body.get("tools").and_then(Value::as_array) {
        Some(tools) if !tools.is_empty() => OfflineAsk::Turn,
        _ => OfflineAsk::Summary,
    }
}
