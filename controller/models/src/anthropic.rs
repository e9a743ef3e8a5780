//! Anthropic's Messages API: the system prompt as a top-level field, `tool_use` and
//! `tool_result` blocks, and thinking blocks sent back exactly as received.

use futures::future::BoxFuture;
use sandbox_protocol::ToolSpec;
use serde_json::{Value, json};

use super::retry::{RetryPolicy, post_json};
use super::{AssistantMessage, Message, Model, ModelError, ModelReply, Price, ToolCall, Usage};

const PROVIDER: &str = "Anthropic Messages API";
const API_VERSION: &str = "2023-06-01";

pub struct AnthropicModel {
    pub(super) client: reqwest::Client,
    pub(super) base_url: String,
    pub(super) key: String,
    pub(super) name: String,
    pub(super) price: Option<Price>,
    pub(super) max_tokens: u32,
    pub(super) thinking_budget: Option<u32>,
    pub(super) retry: RetryPolicy,
    /// Shared with every session on this endpoint (`harness batch`).
    pub(super) gate: Option<std::sync::Arc<super::gate::RateGate>>,
}

impl AnthropicModel {
    fn request(&self, messages: &[Message], tools: &[ToolSpec]) -> Value {
        let mut system = Vec::new();
        // (role, blocks); consecutive messages of one role are merged, as the API requires
        // alternating turns (tool results are user content).
        let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
        let mut push = |role: &'static str, blocks: Vec<Value>| match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        };
        for message in messages {
            match message {
                Message::System { content } => system.push(content.clone()),
                Message::User { content } => {
                    push("user", vec![json!({"type": "text", "text": content})])
                }
                Message::Tool {
                    tool_call_id,
                    content,
                } => push(
                    "user",
                    vec![
                        json!({"type": "tool_result", "tool_use_id": tool_call_id, "content": content}),
                    ],
                ),
                Message::Assistant(AssistantMessage {
                    provider_items: Some(Value::Array(blocks)),
                    ..
                }) => {
                    push("assistant", blocks.clone());
                }
                Message::Assistant(reply) => {
                    let mut blocks = Vec::new();
                    if !reply.content.is_empty() {
                        blocks.push(json!({"type": "text", "text": reply.content}));
                    }
                    for call in &reply.tool_calls {
                        let input: Value =
                            serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
                        blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
                    }
                    push("assistant", blocks);
                }
            }
        }
        let messages: Vec<Value> = turns
            .into_iter()
            .map(|(role, blocks)| json!({"role": role, "content": blocks}))
            .collect();
        let mut body =
            json!({"model": self.name, "max_tokens": self.max_tokens, "messages": messages});
        if !system.is_empty() {
            body["system"] = json!(system.join("\n\n"));
        }
        if !tools.is_empty() {
            body["tools"] = tools
                .iter()
                // `type: custom` is optional for client tools; naming it leaves no doubt which
                // kind of tool this is (an MCP or server tool has the same other fields).
                .map(|tool| {
                    json!({
                        "type": "custom",
                        "name": tool.name,
                        "description": tool.description,
                        "input_schema": tool.parameters,
                    })
                })
                .collect();
        }
        if let Some(budget) = self.thinking_budget {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        }
        body
    }
}

pub(crate) fn parse(raw: Value, price: Option<Price>) -> Result<ModelReply, ModelError> {
    let bad = |message: &str| ModelError::BadResponse {
        provider: PROVIDER,
        message: message.to_owned(),
    };
    let blocks = raw["content"]
        .as_array()
        .ok_or_else(|| bad("no `content` array"))?;
    let mut content = String::new();
    let mut tool_calls = Vec::new();
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => content.push_str(block["text"].as_str().unwrap_or("")),
            Some("tool_use") => tool_calls.push(ToolCall {
                id: block["id"]
                    .as_str()
                    .ok_or_else(|| bad("a tool_use block without id"))?
                    .to_owned(),
                name: block["name"].as_str().unwrap_or("").to_owned(),
                arguments: block["input"].to_string(),
            }),
            _ => {}
        }
    }
    let usage = &raw["usage"];
    let usage = Usage {
        input_tokens: usage["input_tokens"].as_u64().unwrap_or(0),
        cached_input_tokens: usage["cache_read_input_tokens"].as_u64().unwrap_or(0),
        cache_write_tokens: usage["cache_creation_input_tokens"].as_u64().unwrap_or(0),
        output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
    };
    Ok(ModelReply {
        message: AssistantMessage {
            content,
            tool_calls,
            provider_items: Some(Value::Array(blocks.clone())),
        },
        usage,
        cost: price.map(|price| price.cost(&usage)),
        raw,
    })
}

impl Model for AnthropicModel {
    fn describe(&self) -> String {
        format!(
            "anthropic/{} (Messages API at {})",
            self.name, self.base_url
        )
    }

    fn has_price(&self) -> bool {
        self.price.is_some()
    }

    fn build_request(&self, messages: &[Message], tools: &[ToolSpec]) -> Value {
        self.request(messages, tools)
    }

    /// A forced tool: the verdict is the tool call's input. (Extended thinking cannot be
    /// combined with a forced tool, so it is left out here.)
    fn structured_request(
        &self,
        instructions: &str,
        input: &str,
        name: &str,
        schema: &Value,
    ) -> Value {
        json!({
            "model": self.name,
            "max_tokens": 1024,
            "system": instructions,
            "messages": [{"role": "user", "content": [{"type": "text", "text": input}]}],
            "tools": [{"type": "custom", "name": name, "description": "Record the answer.", "input_schema": schema}],
            "tool_choice": {"type": "tool", "name": name},
        })
    }

    fn send<'a>(&'a self, body: &'a Value) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            let url = format!("{}/v1/messages", self.base_url.trim_end_matches('/'));
            let headers = [
                ("x-api-key", self.key.as_str()),
                ("anthropic-version", API_VERSION),
            ];
            let raw = post_json(
                &self.client,
                PROVIDER,
                &url,
                &headers,
                body,
                self.retry,
                self.gate.as_deref(),
            )
            .await?;
            parse(raw, self.price)
        })
    }
}
