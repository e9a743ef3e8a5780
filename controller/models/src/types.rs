//! The provider-neutral conversation: messages, replies, tool calls and usage.

use sandbox_protocol::ToolSpec;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message of the conversation, as the seed harness shapes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    System {
        content: String,
    },
    User {
        content: String,
    },
    Assistant(AssistantMessage),
    Tool {
        tool_call_id: String,
        content: String,
    },
}

/// A model's reply as it is kept in the conversation.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AssistantMessage {
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The provider's own items (Responses output items, Anthropic content blocks), sent back
    /// verbatim on the next turn so reasoning and signatures survive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_items: Option<Value>,
}

/// A call the model asked for; `arguments` is the raw JSON text it produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Tokens of one reply, normalised across providers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens billed at the full price (cached ones excluded).
    pub input_tokens: u64,
    /// Input tokens read from the provider's prompt cache.
    pub cached_input_tokens: u64,
    /// Input tokens written to the cache (Anthropic bills them at 1.25× input).
    pub cache_write_tokens: u64,
    pub output_tokens: u64,
}

impl Usage {
    /// The counts by kind, as the metrics label them.
    pub fn by_kind(&self) -> [(&'static str, u64); 4] {
        [
            ("input", self.input_tokens),
            ("cached_input", self.cached_input_tokens),
            ("cache_write", self.cache_write_tokens),
            ("output", self.output_tokens),
        ]
    }
}

/// A request as a model is to send it: the body (exactly what goes out, and what the session
/// log records before it does) and what it asks, which is what a model that answers without a
/// network (scripted, replayed, the benchmark's agents) goes by.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub body: Value,
    pub ask: Ask,
}

/// What a request asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// A turn of the loop (tools are offered): how many tool results the conversation holds,
    /// and the last one.
    Turn {
        tool_results: usize,
        last_tool_result: Option<String>,
    },
    /// A request without tools: a compaction's summary.
    Summary,
    /// A structured question named `name` (the risk classifier's).
    Structured { name: String },
}

impl Request {
    /// The next reply to `messages`: a turn when tools are offered, else a summary.
    pub fn reply(body: Value, messages: &[Message], tools: &[ToolSpec]) -> Request {
        let ask = if tools.is_empty() {
            Ask::Summary
        } else {
            let mut results = messages.iter().filter_map(|message| match message {
                Message::Tool { content, .. } => Some(content),
                _ => None,
            });
            let last = results.next_back().cloned();
            Ask::Turn {
                tool_results: results.count() + usize::from(last.is_some()),
                last_tool_result: last,
            }
        };
        Request { body, ask }
    }

    /// A structured question named `name`.
    pub fn structured(body: Value, name: &str) -> Request {
        Request {
            body,
            ask: Ask::Structured {
                name: name.to_owned(),
            },
        }
    }
}

/// One model reply with what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelReply {
    pub message: AssistantMessage,
    pub usage: Usage,
    /// USD; `None` when the model has no known price.
    pub cost: Option<f64>,
    /// The provider's raw response body, for the session log.
    pub raw: Value,
}

impl ModelReply {
    /// A vendor's reply: what it said, the tokens it counted, what they cost at `price`.
    pub fn priced(
        message: AssistantMessage,
        usage: Usage,
        price: Option<crate::pricing::Price>,
        raw: Value,
    ) -> ModelReply {
        ModelReply {
            message,
            usage,
            cost: price.map(|price| price.cost(&usage)),
            raw,
        }
    }

    /// A reply of text alone that cost nothing (a scripted or replayed answer).
    pub fn free_text(content: String, raw: Value) -> ModelReply {
        ModelReply {
            message: AssistantMessage {
                content,
                ..AssistantMessage::default()
            },
            usage: Usage::default(),
            cost: Some(0.0),
            raw,
        }
    }
}

/// Tokens estimated as characters / 4 over the JSON of each message, provider items first,
/// as the seed does.
pub fn estimate_tokens(messages: &[Message]) -> usize {
    messages
        .iter()
        .map(|message| match message {
            Message::Assistant(AssistantMessage {
                provider_items: Some(items),
                ..
            }) => items.to_string().len(),
            other => serde_json::to_string(other)
                .map(|text| text.len())
                .unwrap_or(0),
        })
        .sum::<usize>()
        / 4
}
