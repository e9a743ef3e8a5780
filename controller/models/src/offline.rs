//! The requests of models that answer without a network (scripted, replayed, the benchmark's
//! agents). Their bodies are only what the log records: just enough for a reader to tell the
//! kinds of question apart. What such a model answers it decides from the request's [`Ask`],
//! never from its body.

use sandbox_protocol::ToolSpec;
use serde_json::json;

#[cfg(doc)]
use super::Ask;
use super::{Message, Request};

/// A turn or summary request; `source` names the model (`scripted`, `replay`).
pub fn request(source: &str, messages: &[Message], tools: &[ToolSpec]) -> Request {
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
    let body = json!({source: true, "n_messages": messages.len(), "tools": names});
    Request::reply(body, messages, tools)
}

/// A structured question named `name`.
pub fn structured(source: &str, name: &str) -> Request {
    Request::structured(json!({source: true, "structured": name}), name)
}
