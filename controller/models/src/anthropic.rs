//! Anthropic's Messages API: the system prompt as a top-level field, `tool_use` and
//! `tool_result` blocks, and thinking blocks sent back exactly as received.

use sandbox_protocol::ToolSpec;
use serde::Deserialize;
use serde_json::{Value, json};

use super::adapter::{Adapter, Question};
use super::{AssistantMessage, Message, ModelError, ToolCall, Usage};

pub(crate) const API_VERSION: &str = "2023-06-01";

/// The Messages API's settings of one model.
pub(crate) struct Anthropic {
    pub(crate) max_tokens: u32,
    pub(crate) thinking_budget: Option<u32>,
}

/// A Messages API answer, as far as the adapter reads it; its `content` blocks are also kept
/// as they came, to be sent back verbatim.
#[derive(Deserialize)]
pub(crate) struct Answer {
    content: Option<Vec<Block>>,
    #[serde(default)]
    usage: Option<AnswerUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        name: String,
        #[serde(default)]
        input: Value,
    },
    /// Thinking, redacted thinking, server tools' blocks: sent back, not read.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct AnswerUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

impl Adapter for Anthropic {
    type Answer = Answer;
    const PROVIDER: &'static str = "Anthropic Messages API";
    const FAMILY: &'static str = "anthropic";
    const API: &'static str = "Messages API";
    const PATH: &'static str = "/v1/messages";

    fn body(&self, model: &str, messages: &[Message], tools: &[ToolSpec]) -> Value {
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
        let mut body = json!({"model": model, "max_tokens": self.max_tokens, "messages": messages});
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

    /// A forced tool: the verdict is the tool call's input. (Extended thinking cannot be
    /// combined with a forced tool, so it is left out here.)
    fn structured_body(&self, model: &str, question: &Question<'_>) -> Value {
        json!({
            "model": model,
            "max_tokens": 1024,
            "system": question.instructions,
            "messages": [{"role": "user", "content": [{"type": "text", "text": question.input}]}],
            "tools": [{"type": "custom", "name": question.name, "description": "Record the answer.", "input_schema": question.schema}],
            "tool_choice": {"type": "tool", "name": question.name},
        })
    }

    /// The reply in a decoded answer.
    fn read(&self, answer: Answer, raw: &Value) -> Result<(AssistantMessage, Usage), ModelError> {
        let blocks = answer
            .content
            .ok_or_else(|| Self::bad("no `content` array"))?;
        let mut content = String::new();
        let mut tool_calls = Vec::new();
        for block in blocks {
            match block {
                Block::Text { text } => content.push_str(&text),
                Block::ToolUse { id, name, input } => tool_calls.push(ToolCall {
                    id: id.ok_or_else(|| Self::bad("a tool_use block without id"))?,
                    name,
                    arguments: input.to_string(),
                }),
                Block::Other => {}
            }
        }
        let usage = answer.usage.map_or_else(Usage::default, |usage| Usage {
            input_tokens: usage.input_tokens,
            cached_input_tokens: usage.cache_read_input_tokens.unwrap_or(0),
            cache_write_tokens: usage.cache_creation_input_tokens.unwrap_or(0),
            output_tokens: usage.output_tokens,
        });
        let message = AssistantMessage {
            content,
            tool_calls,
            provider_items: Some(raw["content"].clone()),
        };
        Ok((message, usage))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::ModelReply;

    fn decode(raw: Value) -> Result<ModelReply, ModelError> {
        let settings = Anthropic {
            max_tokens: 1,
            thinking_budget: None,
        };
        crate::adapter::decode(settings, raw)
    }

    #[test]
    fn blocks_it_does_not_read_are_kept_to_be_sent_back() {
        let content = json!([
            {"type": "thinking", "thinking": "hm", "signature": "s"},
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "t1", "name": "bash", "input": {"cmd": "ls"}},
        ]);
        let reply = decode(json!({
            "content": content,
            "usage": {"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 7, "cache_creation_input_tokens": null},
        }))
        .unwrap();
        assert_eq!(reply.message.content, "Looking.");
        assert_eq!(reply.message.tool_calls[0].arguments, r#"{"cmd":"ls"}"#);
        assert_eq!(reply.message.provider_items, Some(content));
        assert_eq!(
            (
                reply.usage.cached_input_tokens,
                reply.usage.cache_write_tokens
            ),
            (7, 0)
        );
    }

    #[test]
    fn what_cannot_be_used_is_named() {
        let message = |raw| decode(raw).unwrap_err().to_string();
        assert!(message(json!({"usage": {}})).contains("no `content` array"));
        let no_id = json!({"content": [{"type": "tool_use", "name": "bash", "input": {}}]});
        assert!(message(no_id).contains("a tool_use block without id"));
    }
}
