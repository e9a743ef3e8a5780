//! Chat Completions against any OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio):
//! `tool_calls` on assistant messages and `role: tool` results.

use sandbox_protocol::ToolSpec;
use serde::Deserialize;
use serde_json::{Value, json};

use super::adapter::{Adapter, Question};
use super::{AssistantMessage, Message, ModelError, ToolCall, Usage};

/// Chat Completions has no settings of its own.
pub(crate) struct Chat;

/// A Chat Completions answer, as far as the adapter reads it.
#[derive(Deserialize)]
pub(crate) struct Completion {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<CompletionUsage>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    message: Option<ChoiceMessage>,
}

#[derive(Deserialize)]
struct ChoiceMessage {
    #[serde(default, deserialize_with = "content")]
    content: String,
    #[serde(default)]
    tool_calls: Option<Vec<CompletionCall>>,
}

#[derive(Deserialize)]
struct CompletionCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: CompletionFunction,
}

#[derive(Deserialize, Default)]
struct CompletionFunction {
    #[serde(default)]
    name: String,
    #[serde(default, deserialize_with = "super::http::arguments")]
    arguments: String,
}

#[derive(Deserialize)]
struct CompletionUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: u64,
}

/// A message's text: a string, `null` (a reply of tool calls alone), or, from a server that
/// sends content parts where the API says a string, the text of its `text` parts in order.
fn content<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Content {
        Text(String),
        Parts(Vec<ContentPart>),
    }
    #[derive(Deserialize)]
    struct ContentPart {
        #[serde(default)]
        text: Option<String>,
    }
    Ok(match Option::<Content>::deserialize(deserializer)? {
        None => String::new(),
        Some(Content::Text(text)) => text,
        Some(Content::Parts(parts)) => parts.into_iter().filter_map(|part| part.text).collect(),
    })
}

impl Adapter for Chat {
    type Answer = Completion;
    const PROVIDER: &'static str = "Chat Completions API";
    const FAMILY: &'static str = "openai-compat";
    const API: &'static str = "Chat Completions";
    const PATH: &'static str = "/chat/completions";

    fn body(&self, model: &str, messages: &[Message], tools: &[ToolSpec]) -> Value {
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
        let mut body = json!({"model": model, "messages": messages});
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

    fn structured_body(&self, model: &str, question: &Question<'_>) -> Value {
        json!({
            "model": model,
            "messages": [{"role": "system", "content": question.instructions}, {"role": "user", "content": question.input}],
            "response_format": {"type": "json_schema", "json_schema": {"name": question.name, "schema": question.schema, "strict": true}},
        })
    }

    /// The reply in a decoded answer.
    fn read(
        &self,
        completion: Completion,
        _raw: &Value,
    ) -> Result<(AssistantMessage, Usage), ModelError> {
        let Some(message) = completion
            .choices
            .into_iter()
            .next()
            .and_then(|choice| choice.message)
        else {
            return Err(Self::bad("no choices[0].message"));
        };
        let tool_calls = message
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .map(|call| {
                Ok(ToolCall {
                    id: call.id.ok_or_else(|| Self::bad("a tool call without id"))?,
                    name: call.function.name,
                    arguments: call.function.arguments,
                })
            })
            .collect::<Result<_, ModelError>>()?;
        let usage = completion.usage.map_or_else(Usage::default, |usage| {
            let cached = usage.prompt_tokens_details.map_or(0, |d| d.cached_tokens);
            Usage {
                input_tokens: usage.prompt_tokens.saturating_sub(cached),
                cached_input_tokens: cached,
                cache_write_tokens: 0,
                output_tokens: usage.completion_tokens,
            }
        });
        let message = AssistantMessage {
            content: message.content,
            tool_calls,
            provider_items: None,
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
        crate::adapter::decode(Chat, raw)
    }

    #[test]
    fn a_reply_decodes_into_text_calls_and_usage() {
        let reply = decode(json!({
            "choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\":\"ls\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": {"path": "a"}}},
            ]}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}},
        }))
        .unwrap();
        assert_eq!(reply.message.content, "");
        let calls: Vec<_> = reply
            .message
            .tool_calls
            .iter()
            .map(|c| (&*c.id, &*c.name, &*c.arguments))
            .collect();
        // An object where the API says a string is taken as its JSON text.
        assert_eq!(
            calls,
            [
                ("c1", "bash", r#"{"cmd":"ls"}"#),
                ("c2", "read_file", r#"{"path":"a"}"#)
            ]
        );
        assert_eq!(
            (
                reply.usage.input_tokens,
                reply.usage.cached_input_tokens,
                reply.usage.output_tokens
            ),
            (6, 4, 3)
        );
    }

    #[test]
    fn content_sent_as_parts_is_its_text() {
        let parts =
            json!([{"type": "text", "text": "Hello, "}, {"type": "text", "text": "agent."}]);
        let reply = decode(json!({"choices": [{"message": {"content": parts}}]})).unwrap();
        assert_eq!(reply.message.content, "Hello, agent.");
        let wrong = decode(json!({"choices": [{"message": {"content": 7}}]})).unwrap_err();
        assert!(wrong.to_string().contains("unusable response"), "{wrong}");
    }

    #[test]
    fn what_cannot_be_used_is_named() {
        let message = |raw| decode(raw).unwrap_err().to_string();
        assert!(message(json!({"choices": []})).contains("no choices[0].message"));
        let no_id =
            json!({"choices": [{"message": {"tool_calls": [{"function": {"name": "bash"}}]}}]});
        assert!(message(no_id).contains("a tool call without id"));
        let wrong = message(json!({"choices": "none"}));
        assert!(
            wrong.contains("unusable response") && wrong.contains("invalid type"),
            "{wrong}"
        );
    }
}
