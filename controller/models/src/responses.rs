//! OpenAI's Responses API: output items are kept and sent back verbatim, function tools are
//! not strict, and a response that is not `completed` is an error.

use futures::future::BoxFuture;
use sandbox_protocol::ToolSpec;
use serde_json::{Value, json};

use super::retry::{RetryPolicy, post_json};
use super::{AssistantMessage, Message, Model, ModelError, ModelReply, Price, ToolCall, Usage};

const PROVIDER: &str = "OpenAI Responses API";

pub struct ResponsesModel {
    pub(super) client: reqwest::Client,
    pub(super) base_url: String,
    pub(super) key: String,
    pub(super) name: String,
    pub(super) price: Option<Price>,
    pub(super) reasoning_effort: Option<String>,
    pub(super) web_search: bool,
    pub(super) retry: RetryPolicy,
    /// Shared with every session on this endpoint (`harness batch`).
    pub(super) gate: Option<std::sync::Arc<super::gate::RateGate>>,
}

impl ResponsesModel {
    fn request(&self, messages: &[Message], tools: &[ToolSpec]) -> Value {
        let mut input = Vec::new();
        for message in messages {
            match message {
                Message::System { content } => {
                    input.push(json!({"role": "system", "content": content}))
                }
                Message::User { content } => {
                    input.push(json!({"role": "user", "content": content}))
                }
                Message::Tool {
                    tool_call_id,
                    content,
                } => input.push(json!({
                    "type": "function_call_output", "call_id": tool_call_id, "output": content,
                })),
                Message::Assistant(AssistantMessage {
                    provider_items: Some(Value::Array(items)),
                    ..
                }) => {
                    input.extend(items.iter().cloned());
                }
                Message::Assistant(reply) => {
                    input.push(json!({"role": "assistant", "content": reply.content}))
                }
            }
        }
        let mut tool_list: Vec<Value> = tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                    // The tools have optional arguments, which strict mode would make required.
                    "strict": false,
                })
            })
            .collect();
        if self.web_search && !tools.is_empty() {
            tool_list.push(json!({"type": "web_search"}));
        }
        let mut body = json!({"model": self.name, "input": input, "tools": tool_list});
        if let Some(effort) = &self.reasoning_effort {
            body["reasoning"] = json!({"effort": effort});
        }
        body
    }
}

/// Parses a Responses API answer into a reply.
pub(crate) fn parse(raw: Value, price: Option<Price>) -> Result<ModelReply, ModelError> {
    let bad = |message: String| ModelError::BadResponse {
        provider: PROVIDER,
        message,
    };
    let status = raw["status"].as_str().unwrap_or("missing");
    if status != "completed" {
        let detail = raw["incomplete_details"]["reason"]
            .as_str()
            .or_else(|| raw["error"]["message"].as_str())
            .unwrap_or("");
        return Err(bad(format!("model response was {status} {detail}")
            .trim_end()
            .to_owned()));
    }
    let items = raw["output"]
        .as_array()
        .ok_or_else(|| bad("no `output` array".to_owned()))?;
    let mut content = String::new();
    let mut tool_calls = Vec::new();
    for item in items {
        match item["type"].as_str() {
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    if part["type"] == "output_text" {
                        content.push_str(part["text"].as_str().unwrap_or(""));
                    }
                }
            }
            Some("function_call") => tool_calls.push(ToolCall {
                id: item["call_id"]
                    .as_str()
                    .ok_or_else(|| bad("a function_call without call_id".to_owned()))?
                    .to_owned(),
                name: item["name"].as_str().unwrap_or("").to_owned(),
                arguments: item["arguments"].as_str().unwrap_or("").to_owned(),
            }),
            _ => {}
        }
    }
    let usage = &raw["usage"];
    let cached = usage["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    let usage = Usage {
        input_tokens: usage["input_tokens"]
            .as_u64()
            .unwrap_or(0)
            .saturating_sub(cached),
        cached_input_tokens: cached,
        cache_write_tokens: 0,
        output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
    };
    Ok(ModelReply {
        message: AssistantMessage {
            content,
            tool_calls,
            provider_items: Some(Value::Array(items.clone())),
        },
        usage,
        cost: price.map(|price| price.cost(&usage)),
        raw,
    })
}

impl Model for ResponsesModel {
    fn describe(&self) -> String {
        format!("openai/{} (Responses API at {})", self.name, self.base_url)
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
        let mut body = json!({
            "model": self.name,
            "input": [{"role": "system", "content": instructions}, {"role": "user", "content": input}],
            "text": {"format": {"type": "json_schema", "name": name, "schema": schema, "strict": true}},
        });
        if let Some(effort) = &self.reasoning_effort {
            body["reasoning"] = json!({"effort": effort});
        }
        body
    }

    fn send<'a>(&'a self, body: &'a Value) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            let url = format!("{}/responses", self.base_url.trim_end_matches('/'));
            let auth = format!("Bearer {}", self.key);
            let raw = post_json(
                &self.client,
                PROVIDER,
                &url,
                &[("authorization", &auth)],
                body,
                self.retry,
                self.gate.as_deref(),
            )
            .await?;
            parse(raw, self.price)
        })
    }
}
