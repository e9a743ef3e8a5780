//! `--model replay:RUN`: the recorded model replies of a session, fed into a live loop in order. No
//! language model is called; the tools run for real, so a changed environment shows.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Mutex;

use serde_json::{Value, json};

use super::ReplayError;
use harness_log::{Event, ModelResponse, Purpose};
use harness_models::offline::Offline;
use harness_models::{Ask, AssistantMessage, Model, ModelError, ModelReply, Usage};

pub struct ReplayModel {
    dir: std::path::PathBuf,
    turns: Mutex<VecDeque<ModelReply>>,
    summaries: Mutex<VecDeque<ModelReply>>,
    /// The classifier's recorded scores, in order, so a replayed run is judged as the original.
    verdicts: Mutex<VecDeque<Value>>,
    /// The log folder of each subagent, by the `agent` call that started it, as the log
    /// names it (checked when it is asked for).
    children: std::collections::BTreeMap<String, String>,
}

impl ReplayModel {
    /// Reads the recorded replies and classifier answers of the session in `dir`.
    pub fn load(dir: &Path) -> Result<ReplayModel, ModelError> {
        let fail =
            |err: ReplayError| ModelError::Script(format!("replay:{}: {err}", dir.display()));
        let mut turns = VecDeque::new();
        let mut summaries = VecDeque::new();
        let mut verdicts = VecDeque::new();
        let mut children = std::collections::BTreeMap::new();
        for envelope in super::events(dir, |_| {}).map_err(fail)? {
            let envelope = envelope.map_err(fail)?;
            match envelope.event {
                Event::ModelResponse(response) => {
                    let reply = recorded_reply(dir, &response, envelope.seq).map_err(fail)?;
                    match response.purpose {
                        Purpose::Summary => summaries.push_back(reply),
                        Purpose::Turn => turns.push_back(reply),
                    }
                }
                Event::PolicyDecision(decision) => {
                    if let (Some(risk), Some(authorized)) = (decision.risk, decision.authorized) {
                        verdicts.push_back(
                            json!({"risk": risk, "authorized": authorized, "rationale": "replayed"}),
                        );
                    }
                }
                Event::SubagentStarted(started) => {
                    children.insert(started.call_id, started.log_dir);
                }
                _ => {}
            }
        }
        Ok(ReplayModel {
            dir: dir.to_owned(),
            turns: Mutex::new(turns),
            summaries: Mutex::new(summaries),
            verdicts: Mutex::new(verdicts),
            children,
        })
    }
}

/// A recorded response as the reply the loop gets.
fn recorded_reply(
    dir: &Path,
    response: &ModelResponse,
    seq: u64,
) -> Result<ModelReply, ReplayError> {
    let content = super::text(dir, &response.text)?;
    let tool_calls = super::tool_calls(response);
    let usage = Usage {
        input_tokens: response.usage.input_tokens,
        cached_input_tokens: response.usage.cached_input_tokens,
        cache_write_tokens: response.usage.cache_write_tokens,
        output_tokens: response.usage.output_tokens,
    };
    Ok(ModelReply {
        message: AssistantMessage {
            content,
            tool_calls,
            provider_items: None,
        },
        usage,
        cost: response.cost,
        raw: json!({"replayed_from_seq": seq}),
    })
}

impl Offline for ReplayModel {
    const SOURCE: &'static str = "replay";

    /// A subagent replays its own log's replies: the folder the parent's log names for the
    /// call (beneath its `agents/`).
    fn subagent(&self, call_id: &str) -> Result<Option<std::sync::Arc<dyn Model>>, ModelError> {
        let missing = || {
            ModelError::Script(format!(
                "replay:{}: the recorded session started no subagent for the call {call_id}",
                self.dir.display()
            ))
        };
        let log_dir = self.children.get(call_id).ok_or_else(missing)?;
        let dir = super::subagent_dir(&self.dir, log_dir)
            .map_err(|err| ModelError::Script(format!("replay: {err}")))?;
        Ok(Some(std::sync::Arc::new(ReplayModel::load(&dir)?)))
    }

    fn describe(&self) -> String {
        format!(
            "replay:{} (the recorded replies of a session, no language model is called)",
            self.dir.display()
        )
    }

    fn answer(&self, ask: &Ask) -> Result<ModelReply, ModelError> {
        if let Ask::Structured { .. } = ask {
            let verdict = self
                .verdicts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front();
            let verdict = verdict.ok_or_else(|| {
                ModelError::Script(format!(
                    "replay:{} has no more recorded classifier answers",
                    self.dir.display()
                ))
            })?;
            let raw = json!({"replayed_verdict": verdict});
            return Ok(ModelReply::free_text(verdict.to_string(), raw));
        }
        let summary = *ask == Ask::Summary;
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
                    self.dir.display(),
                    if summary { "summary" } else { "turn" }
                ))
            })
    }
}
