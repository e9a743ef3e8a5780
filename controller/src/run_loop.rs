//! The agent loop, as the seed's `run()`: a system prompt and the task, then turns of model
//! reply, tool calls and tool results until a reply calls no tool or a limit is hit. Every
//! frame goes to the session log before the loop moves on.

use std::time::Instant;

use sandbox_protocol::ToolSpec;
use serde_json::Value;

use crate::event_log::{
    self, Compaction, ErrorEvent, Event, LoggedCall, LoggedUsage, ModelRequest, ModelResponse,
    OutputRecord, PolicyDecision, ToolCallEvent, ToolResult,
};
use crate::llm::{Message, Model, ModelError, ModelReply, ToolCall, Usage, estimate_tokens};
use crate::policy::{self, Approve, Decision, Policy};
use crate::recording::{RecordError, Recorder};
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

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::TurnLimit => "turn_limit",
            Outcome::CostLimit => "cost_limit",
        }
    }
}

/// Running totals of a session.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Totals {
    /// USD of the replies whose cost is known.
    pub cost: f64,
    /// Whether every reply had a known cost.
    pub cost_known: bool,
    pub turns: u32,
    pub model_calls: u64,
    pub tool_calls: u64,
    pub n_compactions: u32,
    pub usage: LoggedUsage,
}

/// What a session produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub outcome: Outcome,
    /// The final answer, or the seed's "Stopped: …" line.
    pub answer: String,
    pub totals: Totals,
    pub messages: Vec<Message>,
}

/// Why a session could not go on. Each is also an `error` event in the log.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("model: {0}")]
    Model(#[from] ModelError),
    #[error("sandbox: {0}")]
    Sandbox(#[from] SandboxError),
    #[error("session log: {0}")]
    Log(#[from] RecordError),
}

impl SessionError {
    /// The error class of the log: model, sandbox or internal.
    pub fn class(&self) -> &'static str {
        match self {
            SessionError::Model(_) => "model",
            SessionError::Sandbox(_) | SessionError::Log(RecordError::Sandbox(_)) => "sandbox",
            SessionError::Log(RecordError::Log(_)) => "internal",
        }
    }
}

impl From<event_log::EventLogError> for SessionError {
    fn from(err: event_log::EventLogError) -> Self {
        SessionError::Log(RecordError::Log(err))
    }
}

/// Hooks for whoever shows the session to a person.
pub trait Observer: Send + Sync {
    /// A tool call is about to run.
    fn tool_call(&self, call: &ToolCall);
    /// The history was compacted from `before` to `after` messages.
    fn compacted(&self, before: usize, after: usize);
    /// A line of progress or a warning, for whoever shows the session.
    fn note(&self, _text: &str) {}
}

/// Everything one session needs.
pub struct Agent<'a> {
    pub model: &'a dyn Model,
    pub sandbox: &'a SandboxClient,
    pub policy: &'a dyn Policy,
    /// What happens to an `ask`.
    pub approve: Approve,
    pub tools: Vec<ToolSpec>,
    pub limits: Limits,
    pub observer: &'a dyn Observer,
    pub recorder: &'a Recorder,
}

impl Agent<'_> {
    /// Runs the loop. `totals` is updated as it goes, so a caller that abandons the future
    /// (Ctrl-C) still knows what was spent.
    pub async fn run(
        &self,
        system_prompt: &str,
        task: &str,
        totals: &std::sync::Mutex<Totals>,
    ) -> Result<Report, SessionError> {
        let result = self.run_inner(system_prompt, task, totals).await;
        if let Err(err) = &result {
            let event = ErrorEvent {
                class: err.class().to_owned(),
                message: err.to_string(),
                call_id: None,
            };
            // The session is failing already; a log that cannot take the error is reported by the caller.
            let _ = self.recorder.log.record(Event::Error(event)).await;
        }
        result
    }

    async fn run_inner(
        &self,
        system_prompt: &str,
        task: &str,
        totals: &std::sync::Mutex<Totals>,
    ) -> Result<Report, SessionError> {
        let mut messages = vec![
            Message::System {
                content: system_prompt.to_owned(),
            },
            Message::User {
                content: task.to_owned(),
            },
        ];
        let snapshot =
            |totals: &std::sync::Mutex<Totals>| *totals.lock().unwrap_or_else(|p| p.into_inner());
        totals.lock().unwrap_or_else(|p| p.into_inner()).cost_known = true;
        for turn in 1..=self.limits.max_turns {
            let current = snapshot(totals);
            if current.cost >= self.limits.max_cost {
                let answer = format!("Stopped: spent ${:.2}.", current.cost);
                return Ok(Report {
                    outcome: Outcome::CostLimit,
                    answer,
                    totals: current,
                    messages,
                });
            }
            if estimate_tokens(&messages) > self.limits.compact_at {
                messages = self.compact(messages, turn, totals).await?;
            }
            let reply = self
                .ask(&messages, &self.tools, turn, "turn", totals)
                .await?;
            totals.lock().unwrap_or_else(|p| p.into_inner()).turns = turn;
            let calls = reply.message.tool_calls.clone();
            let content = reply.message.content.clone();
            messages.push(Message::Assistant(reply.message));
            if calls.is_empty() {
                return Ok(Report {
                    outcome: Outcome::Completed,
                    answer: content,
                    totals: snapshot(totals),
                    messages,
                });
            }
            for call in &calls {
                self.observer.tool_call(call);
                totals.lock().unwrap_or_else(|p| p.into_inner()).tool_calls += 1;
                let result = self.run_tool(call, task).await?;
                messages.push(Message::Tool {
                    tool_call_id: call.id.clone(),
                    content: result,
                });
                self.recorder.after_tool_call(&call.id).await?;
                self.recorder.fingerprint(Some(&call.id)).await?;
            }
        }
        let answer = format!("Stopped: hit {} turns.", self.limits.max_turns);
        Ok(Report {
            outcome: Outcome::TurnLimit,
            answer,
            totals: snapshot(totals),
            messages,
        })
    }

    /// One model call, logged before it is sent and after it answers.
    async fn ask(
        &self,
        messages: &[Message],
        tools: &[ToolSpec],
        turn: u32,
        purpose: &str,
        totals: &std::sync::Mutex<Totals>,
    ) -> Result<ModelReply, SessionError> {
        let body = self.model.build_request(messages, tools);
        let request = ModelRequest {
            turn,
            purpose: purpose.to_owned(),
            n_messages: messages.len() as u64,
            estimated_tokens: estimate_tokens(messages) as u64,
            body: self.recorder.log.json_blob(&body)?,
        };
        self.recorder
            .log
            .record(Event::ModelRequest(request))
            .await?;
        let started = Instant::now();
        let reply = self.model.send(&body).await?;
        let latency_ms = started.elapsed().as_millis() as u64;
        {
            let mut totals = totals.lock().unwrap_or_else(|p| p.into_inner());
            totals.model_calls += 1;
            match reply.cost {
                Some(cost) => totals.cost += cost,
                None => totals.cost_known = false,
            }
            add_usage(&mut totals.usage, &reply.usage);
        }
        let response = ModelResponse {
            turn,
            purpose: purpose.to_owned(),
            text: self.recorder.log.text(&reply.message.content)?,
            tool_calls: reply
                .message
                .tool_calls
                .iter()
                .map(|call| LoggedCall {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                })
                .collect(),
            usage: logged_usage(&reply.usage),
            cost: reply.cost,
            latency_ms,
            raw: self.recorder.log.json_blob(&reply.raw)?,
        };
        self.recorder
            .log
            .record(Event::ModelResponse(response))
            .await?;
        Ok(reply)
    }

    /// One call's result text. Bad calls and failing tools come back as `ERROR: …` for the
    /// model; only a sandbox that stopped working ends the session.
    async fn run_tool(&self, call: &ToolCall, task: &str) -> Result<String, SessionError> {
        let log = &self.recorder.log;
        let call_event = ToolCallEvent {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        };
        log.record(Event::ToolCall(call_event)).await?;
        let started = Instant::now();
        let (status, text, raw) = self.tool_outcome(call, task).await?;
        let duration_ms = started.elapsed().as_millis() as u64;
        let mut outputs = Vec::new();
        if let Some(raw) = &raw {
            for stream in ["stdout", "stderr"] {
                let artifact = &raw[format!("{stream}_artifact")];
                let (Some(id), Some(sha256)) =
                    (artifact["id"].as_str(), artifact["sha256"].as_str())
                else {
                    continue;
                };
                let size = artifact["size"].as_u64().unwrap_or(0);
                let blob = if size > 0 {
                    match self.sandbox.artifact(id).await? {
                        Some(bytes) => Some(log.blob(&bytes)?),
                        None => None,
                    }
                } else {
                    None
                };
                outputs.push(OutputRecord {
                    stream: stream.to_owned(),
                    sha256: sha256.to_owned(),
                    size,
                    total_bytes: artifact["total_bytes"].as_u64().unwrap_or(size),
                    blob,
                });
            }
        }
        let result = ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            status: status.to_owned(),
            output: log.text(&text)?,
            exit_code: raw
                .as_ref()
                .and_then(|r| r["exit_code"].as_i64())
                .map(|code| code as i32),
            timed_out: raw.as_ref().and_then(|r| r["timed_out"].as_bool()),
            duration_ms,
            outputs,
        };
        log.record(Event::ToolResult(result)).await?;
        if status == "error" {
            // The model saw it as `ERROR: …`; the log also files it by class for metrics.
            let event = ErrorEvent {
                class: "tool".to_owned(),
                message: text.clone(),
                call_id: Some(call.id.clone()),
            };
            log.record(Event::Error(event)).await?;
        }
        Ok(text)
    }

    /// Decides and runs a call: (status, the text for the model, the sandbox's result).
    async fn tool_outcome(
        &self,
        call: &ToolCall,
        task: &str,
    ) -> Result<(&'static str, String, Option<Value>), SessionError> {
        let args = match parse_call(&self.tools, call) {
            Ok(args) => args,
            Err(text) => return Ok(("error", text, None)),
        };
        let judgement = self.policy.decide(task, &call.name, &args).await;
        let (name, reason) = match &judgement.decision {
            Decision::Allow => ("allow", String::new()),
            Decision::Deny(reason) => ("deny", reason.clone()),
            Decision::Ask(reason) => ("ask", reason.clone()),
        };
        let (allowed, settled_by) = match (&judgement.decision, self.approve) {
            (Decision::Allow, _) => (true, None),
            (Decision::Deny(_), _) => (false, None),
            (Decision::Ask(_), Approve::Never) => (false, Some("approve_never")),
            (Decision::Ask(_), Approve::Auto) => (true, Some("approve_auto")),
            (Decision::Ask(reason), Approve::Ask) => {
                let (tool, shown, why) = (call.name.clone(), args.clone(), reason.clone());
                let terminal = std::io::IsTerminal::is_terminal(&std::io::stdin());
                let yes =
                    tokio::task::spawn_blocking(move || policy::ask_user(&tool, &shown, &why))
                        .await
                        .unwrap_or(false);
                (yes, Some(if terminal { "person" } else { "no_terminal" }))
            }
        };
        let event = PolicyDecision {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            decision: name.to_owned(),
            allowed,
            reason: reason.clone(),
            source: judgement.source.clone(),
            rule: judgement.rule.clone(),
            risk: judgement.risk,
            authorized: judgement.authorized,
            classifier_model: judgement.classifier_model.clone(),
            settled_by: settled_by.map(str::to_owned),
        };
        self.recorder
            .log
            .record(Event::PolicyDecision(event))
            .await?;
        let reason = match settled_by {
            Some("no_terminal") => format!("{reason}; no one at a terminal to approve it"),
            Some("approve_never") => format!("{reason}; --approve never"),
            Some("person") if !allowed => format!("{reason}; the user said no"),
            _ => reason,
        };
        if !allowed {
            return Ok(("blocked", policy::blocked_message(&reason), None));
        }
        Ok(run_on_sandbox(self.sandbox, call, &args).await?)
    }

    /// The seed's compaction: keep the first two messages and the last few, replace the middle
    /// by the model's summary in `<summary_of_earlier_work>`. A tool result never leaves the
    /// call that asked for it; an empty summary leaves the history unchanged.
    async fn compact(
        &self,
        messages: Vec<Message>,
        turn: u32,
        totals: &std::sync::Mutex<Totals>,
    ) -> Result<Vec<Message>, SessionError> {
        let Some(split_at) = compaction_split(&messages) else {
            return Ok(messages);
        };
        let mut request: Vec<Message> = messages[..split_at].to_vec();
        request.push(Message::User {
            content: SUMMARY_REQUEST.to_owned(),
        });
        let summary = self.ask(&request, &[], turn, "summary", totals).await?;
        if summary.message.content.trim().is_empty() {
            return Ok(messages);
        }
        let mut compacted: Vec<Message> = messages[..2].to_vec();
        compacted.push(Message::User {
            content: format!(
                "<summary_of_earlier_work>\n{}\n</summary_of_earlier_work>",
                summary.message.content
            ),
        });
        compacted.extend(messages[split_at..].iter().cloned());
        let replaced = serde_json::to_value(&messages[2..split_at]).expect("messages serialize");
        let event = Compaction {
            summary: self.recorder.log.text(&summary.message.content)?,
            replaced: self.recorder.log.json_blob(&replaced)?,
            n_replaced: (split_at - 2) as u64,
            n_before: messages.len() as u64,
            n_after: compacted.len() as u64,
        };
        self.recorder.log.record(Event::Compaction(event)).await?;
        totals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .n_compactions += 1;
        self.observer.compacted(messages.len(), compacted.len());
        Ok(compacted)
    }
}

/// Checks a call before anything runs: a known tool and JSON arguments. The error is the text
/// the model gets.
pub fn parse_call(tools: &[ToolSpec], call: &ToolCall) -> Result<Value, String> {
    if !tools.iter().any(|tool| tool.name == call.name) {
        return Err(format!("ERROR: unknown tool {}", call.name));
    }
    if call.arguments.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(&call.arguments).map_err(|err| {
        format!(
            "ERROR: the arguments are not valid JSON ({err}): {}",
            call.arguments
        )
    })
}

/// Runs an allowed call: (status, the text for the model, the sandbox's result). A tool's own
/// failure is `ERROR: …` for the model; a sandbox that stopped working is an error.
pub async fn run_on_sandbox(
    sandbox: &SandboxClient,
    call: &ToolCall,
    args: &Value,
) -> Result<(&'static str, String, Option<Value>), SandboxError> {
    match sandbox.call_tool(&call.name, args).await {
        Ok(result) => {
            let text = match result["output"].as_str() {
                Some(output) => output.to_owned(),
                None => result.to_string(),
            };
            Ok(("ok", text, Some(result)))
        }
        Err(err) if err.is_infrastructure() => Err(err),
        Err(err) => Ok(("error", format!("ERROR: {err}"), None)),
    }
}

/// Where the middle ends: the last `KEEP_RECENT` messages stay, moved back past any tool
/// results so none is separated from its call. `None` when there is no middle.
pub fn compaction_split(messages: &[Message]) -> Option<usize> {
    let mut split_at = messages
        .len()
        .saturating_sub(KEEP_RECENT)
        .max(2)
        .min(messages.len());
    while split_at < messages.len() && matches!(messages[split_at], Message::Tool { .. }) {
        split_at += 1;
    }
    (split_at > 2).then_some(split_at)
}

fn logged_usage(usage: &Usage) -> LoggedUsage {
    LoggedUsage {
        input_tokens: usage.input_tokens,
        cached_input_tokens: usage.cached_input_tokens,
        cache_write_tokens: usage.cache_write_tokens,
        output_tokens: usage.output_tokens,
    }
}

fn add_usage(total: &mut LoggedUsage, usage: &Usage) {
    total.input_tokens += usage.input_tokens;
    total.cached_input_tokens += usage.cached_input_tokens;
    total.cache_write_tokens += usage.cache_write_tokens;
    total.output_tokens += usage.output_tokens;
}
