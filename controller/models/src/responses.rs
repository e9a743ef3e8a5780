//! OpenAI's Responses API: output items are kept and sent back verbatim, function tools are
//! not strict, and a response that is not `completed` is an error.

use sandbox_protocol::ToolSpec;
use serde::Deserialize;
use serde_json::{Value, json};

use super::adapter::{Adapter, Question};
use super::{AssistantMessage, Message, ModelError, ToolCall, Usage};

/// The Responses API's settings of one model.
pub(crate) struct Responses {
    pub(crate) reasoning_effort: Option<String>,
    pub(crate) web_search: bool,
}

/// A Responses API answer, as far as the adapter reads it; its `output` items are also kept as
/// they came, to be sent back verbatim.
#[derive(Deserialize)]
pub(crate) struct Response {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    incomplete_details: Option<Reason>,
    #[serde(default)]
    error: Option<Failure>,
    #[serde(default)]
    output: Option<Vec<Item>>,
    #[serde(default)]
    usage: Option<ResponseUsage>,
}

#[derive(Deserialize)]
struct Reason {
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Deserialize)]
struct Failure {
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Item {
    Message {
        #[serde(default)]
        content: Vec<Part>,
    },
    FunctionCall {
        #[serde(default)]
        call_id: Option<String>,
        #[serde(default)]
        name: String,
        #[serde(default, deserialize_with = "super::http::arguments")]
        arguments: String,
    },
    /// Reasoning, web searches and the rest: sent back, not read.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part {
    OutputText {
        #[serde(default)]
        text: String,
    },
    /// A refusal and the rest.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct ResponseUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    input_tokens_details: Option<InputDetails>,
}

#[derive(Deserialize)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: u64,
}

impl Adapter for Responses {
    type Answer = Response;
    const PROVIDER: &'static str = "OpenAI Responses API";
    const FAMILY: &'static str = "openai";
    const API: &'static str = "Responses API";
    const PATH: &'static str = "/responses";

    fn body(&self, model: &str, messages: &[Message], tools: &[ToolSpec]) -> Value {
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
        let mut body = json!({"model": model, "input": input, "tools": tool_list});
        if let Some(effort) = &self.reasoning_effort {
            body["reasoning"] = json!({"effort": effort});
        }
        body
    }

    fn structured_body(&self, model: &str, question: &Question<'_>) -> Value {
        let mut body = json!({
            "model": model,
            "input": [{"role": "system", "content": question.instructions}, {"role": "user", "content": question.input}],
            "text": {"format": {"type": "json_schema", "name": question.name, "schema": question.schema, "strict": true}},
        });
        if let Some(effort) = &self.reasoning_effort {
            body["reasoning"] = json!({"effort": effort});
        }
        body
    }

    /// The reply in a decoded answer; a response that is not `completed` is an error.
    fn read(
        &self,
        response: Response,
        raw: &Value,
    ) -> Result<(AssistantMessage, Usage), ModelError> {
        let status = response.status.as_deref().unwrap_or("missing");
        if status != "completed" {
            let detail = response
                .incomplete_details
                .and_then(|details| details.reason)
                .or_else(|| response.error.and_then(|error| error.message))
                .unwrap_or_default();
            let message = format!("model response was {status} {detail}");
            return Err(Self::bad(message.trim_end()));
        }
        let items = response
            .output
            .ok_or_else(|| Self::bad("no `output` array"))?;
        let mut content = String::new();
        let mut tool_calls = Vec::new();
        for item in items {
            match item {
                Item::Message { content: parts } => {
                    for part in parts {
                        if let Part::OutputText { text } = part {
                            content.push_str(&text);
                        }
                    }
                }
                Item::FunctionCall {
                    call_id,
                    name,
                    arguments,
                } => tool_calls.push(ToolCall {
                    id: call_id.ok_or_else(|| Self::bad("a function_call without call_id"))?,
                    name,
                    arguments,
                }),
                Item::Other => {}
            }
        }
        let usage = response.usage.map_or_else(Usage::default, |usage| {
            let cached = usage.input_tokens_details.map_or(0, |d| d.cached_tokens);
            Usage {
                input_tokens: usage.input_tokens.saturating_sub(cached),
                cached_input_tokens: cached,
                cache_write_tokens: 0,
                output_tokens: usage.output_tokens,
            }
        });
        let message = AssistantMessage {
            content,
            tool_calls,
            provider_items: Some(raw["output"].clone()),
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
        let settings = Responses {
            reasoning_effort: None,
            web_search: false,
        };
        crate::adapter::decode(settings, raw)
    }

    #[test]
    fn items_it_does_not_read_are_kept_to_be_sent_back() {
        let output = json!([
            {"type": "reasoning", "id": "r1", "summary": []},
            {"type": "message", "content": [{"type": "refusal", "refusal": "no"}, {"type": "output_text", "text": "Done."}]},
            {"type": "function_call", "call_id": "f1", "name": "bash", "arguments": "{}"},
        ]);
        let reply = decode(json!({
            "status": "completed", "output": output,
            "usage": {"input_tokens": 9, "output_tokens": 1, "input_tokens_details": {"cached_tokens": 2}},
        }))
        .unwrap();
        assert_eq!(reply.message.content, "Done.");
        assert_eq!(reply.message.tool_calls[0].id, "f1");
        assert_eq!(reply.message.provider_items, Some(output));
        assert_eq!(
            (reply.usage.input_tokens, reply.usage.cached_input_tokens),
            (7, 2)
        );
    }

    #[test]
    fn what_cannot_be_used_is_named() {
        let message = |raw| decode(raw).unwrap_err().to_string();
        let cut =
            json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}});
        assert!(message(cut).contains("model response was incomplete max_output_tokens"));
        assert!(message(json!({"status": "completed"})).contains("no `output` array"));
        let no_id =
            json!({"status": "completed", "output": [{"type": "function_call", "name": "bash"}]});
        assert!(message(no_id).contains("a function_call without call_id"));
    }
}
