//! `replay:RUN`: the recorded model replies of a session, fed into a live loop in order. No
//! language model is called; the tools run for real, so a changed environment shows.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Mutex;

use futures::future::BoxFuture;
use sandbox_protocol::ToolSpec;
use serde_json::{Value, json};

use super::{AssistantMessage, Message, Model, ModelError, ModelReply, ToolCall, Usage};
use crate::event_log::Event;

pub struct ReplayModel {
    path: String,
    turns: Mutex<VecDeque<ModelReply>>,
    summaries: Mutex<VecDeque<ModelReply>>,
    /// The classifier's recorded scores, in order, so a replayed run is judged as the original.
    verdicts: Mutex<VecDeque<Value>>,
}

impl ReplayModel {
    pub fn load(dir: &Path) -> Result<ReplayModel, ModelError> {
        let fail = |err: crate::replay::ReplayError| {
            ModelError::Script(format!("replay:{}: {err}", dir.display()))
        };
        let mut turns = VecDeque::new();
        let mut summaries = VecDeque::new();
        let mut verdicts = VecDeque::new();
        for envelope in crate::replay::events(dir, |_| {}).map_err(fail)? {
            let envelope = envelope.map_err(fail)?;
            let response = match envelope.event {
                Event::ModelResponse(response) => response,
                Event::PolicyDecision(decision) => {
                    if let (Some(risk), Some(authorized)) = (decision.risk, decision.authorized) {
                        verdicts.push_back(json!({"risk": risk, "authorized": authorized, "rationale": "replayed"}));
                    }
                    continue;
                }
                _ => continue,
            };
            let content = crate::replay::text(dir, &response.text).map_err(fail)?;
            let tool_calls = response
                .tool_calls
                .iter()
                .map(|call| ToolCall {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                })
                .collect();
            let usage = Usage {
                input_tokens: response.usage.input_tokens,
                cached_input_tokens: response.usage.cached_input_tokens,
                cache_write_tokens: response.usage.cache_write_tokens,
                output_tokens: response.usage.output_tokens,
            };
            let reply = ModelReply {
                message: AssistantMessage {
                    content,
                    tool_calls,
                    provider_items: None,
                },
                usage,
                cost: response.cost,
                raw: json!({"replayed_from_seq": envelope.seq}),
            };
            if response.purpose == "summary" {
                summaries.push_back(reply);
            } else {
                turns.push_back(reply);
            }
        }
        Ok(ReplayModel {
            path: dir.display().to_string(),
            turns: Mutex::new(turns),
            summaries: Mutex::new(summaries),
            verdicts: Mutex::new(verdicts),
        })
    }
}

impl Model for ReplayModel {
    fn describe(&self) -> String {
        format!(
            "replay:{} (the recorded replies of a session, no language model is called)",
            self.path
        )
    }

    fn has_price(&self) -> bool {
        true
    }

    fn build_request(&self, messages: &[Message], tools: &[ToolSpec]) -> Value {
        let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
        json!({"replay": true, "n_messages": messages.len(), "tools": names})
    }

    fn structured_request(
        &self,
        _instructions: &str,
        _input: &str,
        name: &str,
        _schema: &Value,
    ) -> Value {
        json!({"replay": true, "structured": name})
    }

    fn send<'a>(&'a self, body: &'a Value) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            if body.get("structured").is_some() {
                let verdict = self
                    .verdicts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .pop_front();
                let verdict = verdict.ok_or_else(|| {
                    ModelError::Script(format!(
                        "replay:{} has no more recorded classifier answers",
                        self.path
                    ))
                })?;
                let raw = json!({"replayed_verdict": verdict});
                return Ok(ModelReply::free_text(verdict.to_string(), raw));
            }
            let summary = body["tools"].as_array().is_none_or(Vec::is_empty);
            let queue = if summary {
                &self.summaries
            } else {
                &self.turns
            };
            queue
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front()
                .ok_or_else(|| {
                    ModelError::Script(format!(
                        "replay:{}: the recording has no more {} replies",
                        self.path,
                        if summary { "summary" } else { "turn" }
                    ))
                })
        })
    }
}
