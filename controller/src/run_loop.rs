//! The agent loop, as the seed's `run()`: a system prompt and the task, then turns of model
//! reply, tool calls and tool results until a reply calls no tool or a limit is hit.

use sandbox_protocol::ToolSpec;
use serde_json::Value;

use crate::llm::{Message, Model, ModelError, ToolCall, estimate_tokens};
use crate::policy::{self, Decision, Policy};
use crate::sandbox_client::{SandboxClient, SandboxError};

/// Messages kept verbatim at the end when compacting, as the seed.
const KEEP_RECENT: usize = 6;
const SUMMARY_REQUEST: &str =
    "Summarise the work so far. Keep decisions, file names and anything unresolved.";

/// The loop's limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub max_turns: u32,
    /// USD; checked before each turn.
    pub max_cost: f64,
    /// Estimated tokens above which the history is compacted.
    pub compact_at: usize,
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A reply called no tool; its text is the answer.
    Completed,
    TurnLimit,
    CostLimit,
}

/// What a session produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub outcome: Outcome,
    /// The final answer, or the seed's "Stopped: …" line.
    pub answer: String,
    /// USD of the replies whose cost is known.
    pub cost: f64,
    /// Whether every reply had a known cost.
    pub cost_known: bool,
    pub turns: u32,
    pub n_compactions: u32,
    pub messages: Vec<Message>,
}

/// Why a session could not go on.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("model: {0}")]
    Model(#[from] ModelError),
    #[error("sandbox: {0}")]
    Sandbox(#[from] SandboxError),
}

/// Hooks for whoever shows the session to a person.
pub trait Observer: Send + Sync {
    /// A tool call is about to run.
    fn tool_call(&self, call: &ToolCall);
    /// The history was compacted from `before` to `after` messages.
    fn compacted(&self, before: usize, after: usize);
}

/// Everything one session needs.
pub struct Agent<'a> {
    pub model: &'a dyn Model,
    pub sandbox: &'a SandboxClient,
    pub policy: &'a dyn Policy,
    pub tools: Vec<ToolSpec>,
    pub limits: Limits,
    pub observer: &'a dyn Observer,
}

impl Agent<'_> {
    pub async fn run(&self, system_prompt: &str, task: &str) -> Result<Report, SessionError> {
        let mut messages = vec![
            Message::System {
                content: system_prompt.to_owned(),
            },
            Message::User {
                content: task.to_owned(),
            },
        ];
        let mut cost = 0.0;
        let mut cost_known = true;
        let mut n_compactions = 0;
        let report =
            |outcome, answer: String, turns, cost, cost_known, n_compactions, messages| Report {
                outcome,
                answer,
                cost,
                cost_known,
                turns,
                n_compactions,
                messages,
            };
        for turn in 0..self.limits.max_turns {
            if cost >= self.limits.max_cost {
                let answer = format!("Stopped: spent ${cost:.2}.");
                return Ok(report(
                    Outcome::CostLimit,
                    answer,
                    turn,
                    cost,
                    cost_known,
                    n_compactions,
                    messages,
                ));
            }
            if estimate_tokens(&messages) > self.limits.compact_at {
                let before = messages.len();
                let (compacted, summary_cost) = compact(messages, self.model).await?;
                messages = compacted;
                add_cost(&mut cost, &mut cost_known, summary_cost);
                if messages.len() < before {
                    n_compactions += 1;
                    self.observer.compacted(before, messages.len());
                }
            }
            let reply = self.model.complete(&messages, &self.tools).await?;
            add_cost(&mut cost, &mut cost_known, reply.cost);
            let calls = reply.message.tool_calls.clone();
            let content = reply.message.content.clone();
            messages.push(Message::Assistant(reply.message));
            if calls.is_empty() {
                return Ok(report(
                    Outcome::Completed,
                    content,
                    turn + 1,
                    cost,
                    cost_known,
                    n_compactions,
                    messages,
                ));
            }
            for call in &calls {
                self.observer.tool_call(call);
                let result = self.run_tool(call, task).await?;
                messages.push(Message::Tool {
                    tool_call_id: call.id.clone(),
                    content: result,
                });
            }
        }
        let answer = format!("Stopped: hit {} turns.", self.limits.max_turns);
        Ok(report(
            Outcome::TurnLimit,
            answer,
            self.limits.max_turns,
            cost,
            cost_known,
            n_compactions,
            messages,
        ))
    }

    /// One call's result text. Bad calls and failing tools come back as `ERROR: …` for the
    /// model; only a sandbox that stopped working ends the session.
    async fn run_tool(&self, call: &ToolCall, task: &str) -> Result<String, SessionError> {
        if !self.tools.iter().any(|tool| tool.name == call.name) {
            return Ok(format!("ERROR: unknown tool {}", call.name));
        }
        let args: Value = if call.arguments.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            match serde_json::from_str(&call.arguments) {
                Ok(args) => args,
                Err(err) => {
                    return Ok(format!(
                        "ERROR: the arguments are not valid JSON ({err}): {}",
                        call.arguments
                    ));
                }
            }
        };
        let allowed = match self.policy.decide(task, &call.name, &args).await {
            Decision::Allow => None,
            Decision::Deny(reason) => Some(reason),
            Decision::Ask(reason) => {
                let (tool, shown, why) = (call.name.clone(), args.clone(), reason.clone());
                let yes =
                    tokio::task::spawn_blocking(move || policy::ask_user(&tool, &shown, &why))
                        .await
                        .unwrap_or(false);
                (!yes).then_some(reason)
            }
        };
        if let Some(reason) = allowed {
            return Ok(policy::blocked_message(&reason));
        }
        match self.sandbox.call_tool(&call.name, &args).await {
            Ok(result) => Ok(match result["output"].as_str() {
                Some(output) => output.to_owned(),
                None => result.to_string(),
            }),
            Err(err) if err.is_infrastructure() => Err(err.into()),
            Err(err) => Ok(format!("ERROR: {err}")),
        }
    }
}

fn add_cost(total: &mut f64, known: &mut bool, cost: Option<f64>) {
    match cost {
        Some(cost) => *total += cost,
        None => *known = false,
    }
}

/// The seed's compaction: keep the first two messages and the last few, replace the middle by
/// the model's summary in `<summary_of_earlier_work>`. A tool result never leaves the call that
/// asked for it; an empty summary leaves the history unchanged. Returns the summary's cost.
pub async fn compact(
    messages: Vec<Message>,
    model: &dyn Model,
) -> Result<(Vec<Message>, Option<f64>), ModelError> {
    let split = messages
        .len()
        .saturating_sub(KEEP_RECENT)
        .max(2)
        .min(messages.len());
    let mut split_at = split;
    while split_at < messages.len() && matches!(messages[split_at], Message::Tool { .. }) {
        split_at += 1;
    }
    if split_at <= 2 {
        return Ok((messages, Some(0.0)));
    }
    let mut request: Vec<Message> = messages[..split_at].to_vec();
    request.push(Message::User {
        content: SUMMARY_REQUEST.to_owned(),
    });
    let summary = model.complete(&request, &[]).await?;
    if summary.message.content.trim().is_empty() {
        return Ok((messages, summary.cost));
    }
    let mut compacted: Vec<Message> = messages[..2].to_vec();
    compacted.push(Message::User {
        content: format!(
            "<summary_of_earlier_work>\n{}\n</summary_of_earlier_work>",
            summary.message.content
        ),
    });
    compacted.extend(messages[split_at..].iter().cloned());
    Ok((compacted, summary.cost))
}
