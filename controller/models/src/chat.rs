//! Chat Completions against any OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio):
//! `tool_calls` on assistant messages and `role: tool` results.

use futures::future::BoxFuture;
use sandbox_protocol::ToolSpec;
use serde_json::{Value, json};

use super::retry::{RetryPolicy, post_json};
use super::{AssistantMessage, Message, Model, ModelError, ModelReply, Price, ToolCall, Usage};

const PROVIDER: &str = "Chat Completions API";

pub struct ChatModel {
    pub(super) client: reqwest::Client,
    pub(super) base_url: String,
    /// Optional: local servers usually need none.
    pub(super) key: Option<String>,
    pub(super) name: String,
    pub(super) price: Option<Price>,
    pub(super) retry: RetryPolicy,
    /// Shared with every session on this endpoint (`harness batch`).
    pub(super) gate: Option<std::sync::Arc<super::gate::RateGate>>,
}

impl ChatModel {
    fn request(&self, messages: &[Message], tools: &[ToolSpec]) -> Value {
        let messages: Vec<Value> =
            messages
                .iter()
                .map(|message| match message {
                    Message::System { content } => json!({"role": "system", "content": content}),
                    Message::User { content } => json!({"role": "user", "content": content}),
                    Message::Tool {
                        tool_call_id,
                        content,
                    } => {
                        json!({"role": "tool", "tool_call_id": tool_call_id, "content": content})
                    }
                    Message::Assistant(reply) => {
                        let mut message = json!({"role": "assistant", "content": reply.content});
                        if !reply.tool_calls.is_empty() {
                            message["tool_calls"] = reply
                            .tool_calls
                            .iter()
                            .map(|call| json!({
                                "id": call.id,
                                "type": "function",
                                "function": {"name": call.name, "arguments": call.arguments},
                            }))
                            .collect();
                        }
                        message
                    }
                })
                .collect();
        let mut body = json!({"model": self.name, "messages": messages});
        if !tools.is_empty() {
            body["tools"] = tools
                .iter()
                .map(|tool| json!({
                    "type": "function",
                    "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
                }))
                .collect();
        }
        body
    }
}

pub(crate) fn parse(raw: Value, price: Option<Price>) -> Result<ModelReply, ModelError> {
    let bad = |message: &str| ModelError::BadResponse {
        provider: PROVIDER,
        message: message.to_owned(),
    };
    let message = &raw["choices"][0]["message"];
    if !message.is_object() {
        return Err(bad("no choices[0].message"));
    }
    let mut tool_calls = Vec::new();
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        tool_calls.push(ToolCall {
            id: call["id"]
                .as_str()
                .ok_or_else(|| bad("a tool call without id"))?
                .to_owned(),
            name: call["function"]["name"].as_str().unwrap_or("").to_owned(),
            arguments: call["function"]["arguments"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
        });
    }
    let usage = &raw["usage"];
    let cached = usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    let usage = Usage {
        input_tokens: usage["prompt_tokens"]
            .as_u64()
            .unwrap_or(0)
            .saturating_sub(cached),
        cached_input_tokens: cached,
        cache_write_tokens: 0,
        output_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
    };
    Ok(ModelReply {
        message: AssistantMessage {
            content: message["content"].as_str().unwrap_or("").to_owned(),
            tool_calls,
            provider_items: None,
        },
        usage,
        cost: price.map(|price| price.cost(&usage)),
        raw,
    })
}

impl Model for ChatModel {
    fn describe(&self) -> String {
        format!(
            "openai-compat/{} (Chat Completions at {})",
            self.name, self.base_url
        )
    }

    fn has_price(&self) -> bool {
        self.price.is_some()
    }

    fn build_request(&self, messages: &[Message], tools: &[ToolSpec]) -> Value {
        self.request(messages, tools)
    }

    fn structured_request(
        &self,
        instructions: &str,
        input: &str,
        name: &str,
        schema: &Value,
    ) -> Value {
        json!({
            "model": self.name,
            "messages": [{"role": "system", "content": instructions}, {"role": "user", "content": input}],
            "response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": true}},
        })
    }

    fn send<'a>(&'a self, body: &'a Value) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            let url = format!("{}/chat/completions", self.base_url.trim_end_matches('/'));
            let auth = self.key.as_ref().map(|key| format!("Bearer {key}"));
            let headers: Vec<(&str, &str)> = auth
                .iter()
                .map(|value| ("authorization", value.as_str()))
                .collect();
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
