//! Models that answer without a network (scripted, replayed, the benchmark's agents): an
//! [`Offline`] model is a [`Model`] that answers what a request's [`Ask`] asks, never reading
//! its body. Their bodies are only what the log records: just enough for a reader to tell the
//! kinds of question apart.

use std::sync::Arc;

use futures::future::BoxFuture;
use sandbox_protocol::ToolSpec;
use serde_json::{Value, json};

use super::{Ask, Message, Model, ModelError, ModelReply, Request};

/// A model that answers without a network; it is a [`Model`] whose requests are what the
/// log records, free (its price is known: nothing).
pub trait Offline: Send + Sync {
    /// How its requests name it in the log: `scripted`, `replay`, `nop`, `oracle`.
    const SOURCE: &'static str;
    /// As [`Model::describe`].
    fn describe(&self) -> String;
    /// Its reply to what `ask` asks.
    fn answer(&self, ask: &Ask) -> Result<ModelReply, ModelError>;
    /// As [`Model::build_request`]: by default the number of messages and the tools' names.
    fn request(&self, messages: &[Message], tools: &[ToolSpec]) -> Request {
        request(Self::SOURCE, messages, tools)
    }
    /// As [`Model::subagent`]: by default this same model.
    fn subagent(&self, call_id: &str) -> Result<Option<Arc<dyn Model>>, ModelError> {
        let _ = call_id;
        Ok(None)
    }
}

impl<T: Offline> Model for T {
    fn describe(&self) -> String {
        Offline::describe(self)
    }

    fn has_price(&self) -> bool {
        true
    }

    fn build_request(&self, messages: &[Message], tools: &[ToolSpec]) -> Request {
        self.request(messages, tools)
    }

    fn structured_request(&self, _: &str, _: &str, name: &str, _: &Value) -> Request {
        structured(Self::SOURCE, name)
    }

    fn send<'a>(&'a self, request: &'a Request) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(std::future::ready(self.answer(&request.ask)))
    }

    fn subagent(&self, call_id: &str) -> Result<Option<Arc<dyn Model>>, ModelError> {
        Offline::subagent(self, call_id)
    }
}

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
