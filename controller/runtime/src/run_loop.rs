//! The agent loop, as the seed's `run()`: a system prompt and the task, then turns of model
//! reply, tool calls and tool results until a reply calls no tool or a limit is hit. Every
//! frame goes to the session log before the loop moves on.
//!
//! Which file holds which step of a turn:
//!
//! | step | file |
//! |---|---|
//! | the turns, the limits, the opening hooks | this file |
//! | the history compacted | [`compact`] |
//! | one model call, logged before it is sent and after it answers | [`model_call`] |
//! | one tool call from end to end: begun, decided and run, finished | [`tool_call`] |
//! | a call parsed once: its typed input and its route | [`call`] |
//! | the `pre_tool_use` hooks and the policy: whether it runs | [`decide`] |
//! | an allowed call run where its route says (sandbox, MCP, `agent`) | [`dispatch`] |
//! | the log side of one call, `tool_call` to `tool_result` | [`crate::recording::CallRecord`] |
//! | a group of `agent` calls: children started together, results in call order | [`agents`] |
//! | the hooks run with the session's facts, each run logged | [`hooked`] |

mod agents;
mod call;
mod compact;
mod decide;
mod dispatch;
mod hooked;
mod model_call;
mod tool_call;

use std::sync::Mutex;

use sandbox_protocol::ToolSpec;
use tracing::Instrument as _;

pub use agents::{Child, ChildReport, Spawn};
pub use call::{Parsed, Route, offered, parse_call};
pub use compact::{compacted, compaction_split};
pub use dispatch::{CallOutcome, on_mcp, run_on_sandbox};

use crate::hooks::{About, Ended, HookDecision, Hooks};
use crate::recording::{RecordError, Recorder};
use crate::sandbox::{LiveOutput, SandboxClient, SandboxError};
use harness_log::{self, ErrorClass, ErrorEvent, Event, LoggedUsage, Purpose};
use harness_models::{Message, Model, ModelError, ToolCall, estimate_tokens};
use harness_policy::{Approval, Policy};
pub use hooked::with_context;

/// The loop's limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub max_turns: u32,
    /// USD; checked before each turn.
    pub max_cost: f64,
    /// Estimated tokens above which the history is compacted.
    pub compact_at: usize,
}

/// How the loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopEnd {
    /// A reply called no tool; its text is the answer.
    Completed,
    TurnLimit,
    CostLimit,
}

sandbox_protocol::serde_names!(LoopEnd);

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
    /// What the session's subagents spent (not in the figures above).
    pub subagents: harness_log::SubagentTotals,
}

impl Totals {
    /// USD spent by the session and its subagents.
    pub fn cost_with_subagents(&self) -> f64 {
        self.cost + self.subagents.cost
    }
}

/// What a session produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub end: LoopEnd,
    /// The final answer, or the seed's "Stopped: …" line.
    pub answer: String,
    pub totals: Totals,
    pub messages: Vec<Message>,
}

/// Where a forked session's loop begins: another session's conversation as the model had it
/// after one of its steps (`harness replay fork`). The opening hooks ran in that session; their
/// words are in these messages.
#[derive(Debug, Clone, PartialEq)]
pub struct Resume {
    pub messages: Vec<Message>,
    /// The turns taken before the fork: this session's turns are numbered after them, and its
    /// `--max-turns` counts its own.
    pub turns: u32,
    /// What the log's header says of the parent.
    pub forked_from: harness_log::ForkedFrom,
    /// The blobs of the workspace the session starts from that the caller puts into its log's
    /// `blobs/` itself, while the session runs (a fork links the parent's, after its children
    /// are started): the initial snapshot neither copies nor fetches them.
    pub provided_blobs: std::sync::Arc<std::collections::BTreeSet<String>>,
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
    /// A hook stopped the session (a `post_tool_use` stop, a `user_prompt` deny).
    #[error("{0}")]
    Hook(String),
}

impl SessionError {
    /// The class of its `error` event.
    pub fn class(&self) -> ErrorClass {
        match self {
            SessionError::Model(_) => ErrorClass::Model,
            SessionError::Sandbox(_) | SessionError::Log(RecordError::Sandbox(_)) => {
                ErrorClass::Sandbox
            }
            SessionError::Log(RecordError::Log(_)) => ErrorClass::Internal,
            SessionError::Hook(_) => ErrorClass::Policy,
        }
    }
}

impl From<harness_log::EventLogError> for SessionError {
    fn from(err: harness_log::EventLogError) -> Self {
        SessionError::Log(RecordError::Log(err))
    }
}

/// Hooks for whoever shows the session to a person.
pub trait Observer: Send + Sync {
    /// A tool call is about to run.
    fn tool_call(&self, call: &ToolCall);
    /// Whether to follow running `bash` calls, for [`tool_output`](Self::tool_output).
    fn live_output(&self) -> bool {
        false
    }
    /// A piece of a running `bash` call's output, as it comes (when `live_output`).
    fn tool_output(&self, _call: &ToolCall, _output: &LiveOutput) {}
    /// The call has its result (or was refused).
    fn tool_finished(&self, _call: &ToolCall) {}
    /// The policy (or a hook) refused the call, for `reason`; the model is told so.
    fn tool_refused(&self, _call: &ToolCall, _reason: &str) {}
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
    /// How an `ask` is settled.
    pub approval: Approval<'a>,
    pub tools: Vec<ToolSpec>,
    pub limits: Limits,
    pub observer: &'a dyn Observer,
    pub recorder: &'a Recorder,
    /// The user's hooks (`hooks::Hooks::none()` for none).
    pub hooks: &'a Hooks,
    /// The MCP servers' tools (none by default).
    pub mcp: &'a crate::mcp::McpTools,
    /// A forked session's conversation so far (a new session opens with the prompt and task).
    pub resume: Option<&'a Resume>,
    /// Who starts the children of `agent` calls, when the session has the tool; the tree's
    /// budget and the task its calls are judged against are then its.
    pub subagents: Option<&'a dyn Spawn>,
}

fn current(totals: &Mutex<Totals>) -> std::sync::MutexGuard<'_, Totals> {
    totals.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counts a tool call; its number in the session, from 1.
fn next_call(totals: &Mutex<Totals>) -> u64 {
    let mut totals = current(totals);
    totals.tool_calls += 1;
    totals.tool_calls
}

impl Agent<'_> {
    /// Runs the loop. `totals` is updated as it goes, so a caller that abandons the future
    /// (Ctrl-C) still knows what was spent. A failure is also an `error` event.
    pub async fn run(
        &self,
        system_prompt: &str,
        task: &str,
        totals: &Mutex<Totals>,
    ) -> Result<Report, SessionError> {
        let result = self.turns(system_prompt, task, totals).await;
        let end = match &result {
            Ok(report) => About::SessionEnd {
                end: report.end.into(),
                answer: Some(report.answer.clone()),
                error: None,
            },
            Err(err) => About::SessionEnd {
                end: Ended::Error,
                answer: None,
                error: Some(err.to_string()),
            },
        };
        // The session's own outcome stands whatever the hooks say.
        let ended = self.hook(end).await;
        let result = match (result, ended) {
            (Ok(_), Err(err)) => Err(err),
            (result, _) => result,
        };
        if let Err(err) = &result {
            let event = ErrorEvent {
                class: err.class(),
                message: err.to_string(),
                call_id: None,
            };
            // The session is failing already; a log that cannot take the error is reported by the caller.
            let _ = self.recorder.log.record(Event::Error(event)).await;
        }
        result
    }

    /// The seed's loop: check the cost, compact, ask the model, run the tools it calls.
    async fn turns(
        &self,
        system_prompt: &str,
        task: &str,
        totals: &Mutex<Totals>,
    ) -> Result<Report, SessionError> {
        let (mut messages, before) = match self.resume {
            Some(resume) => (resume.messages.clone(), resume.turns),
            None => (self.opening(system_prompt, task).await?, 0),
        };
        current(totals).cost_known = true;
        let last_turn = before.saturating_add(self.limits.max_turns);
        for turn in before + 1..=last_turn {
            // In a tree of subagents, the root's budget is the whole tree's.
            let spent = match self.subagents {
                Some(spawn) => spawn.spent(),
                None => current(totals).cost,
            };
            if spent >= self.limits.max_cost {
                let answer = format!("Stopped: spent ${spent:.2}.");
                return Ok(self.report(LoopEnd::CostLimit, answer, totals, messages));
            }
            let span = tracing::info_span!("turn", turn);
            messages = self.compact_if_due(messages, turn, totals, &span).await?;
            let reply = self
                .ask(&messages, &self.tools_now(), turn, Purpose::Turn, totals)
                .instrument(span.clone())
                .await?;
            current(totals).turns = turn - before;
            let calls = reply.message.tool_calls.clone();
            let content = reply.message.content.clone();
            messages.push(Message::Assistant(reply.message));
            if calls.is_empty() {
                let about = About::Stop {
                    turn,
                    answer: content.clone(),
                };
                let stop = self.hook(about).await?;
                if stop.decision == Some(HookDecision::Deny) && turn < last_turn {
                    // The hook wants more work: its reason is the next message.
                    messages.push(Message::User {
                        content: with_context(stop.reason, &stop.context),
                    });
                    continue;
                }
                return Ok(self.report(LoopEnd::Completed, content, totals, messages));
            }
            self.run_calls(&calls, task, totals, &mut messages)
                .instrument(span)
                .await?;
        }
        // The seed's words ("Stopped: hit N turns."), in the singular for one.
        let answer = format!(
            "Stopped: hit {}.",
            harness_log::text::plural(self.limits.max_turns, "turn")
        );
        Ok(self.report(LoopEnd::TurnLimit, answer, totals, messages))
    }

    /// The history compacted when it grew past the limit, after the `pre_compact` hooks.
    async fn compact_if_due(
        &self,
        messages: Vec<Message>,
        turn: u32,
        totals: &Mutex<Totals>,
        span: &tracing::Span,
    ) -> Result<Vec<Message>, SessionError> {
        if estimate_tokens(&messages) <= self.limits.compact_at {
            return Ok(messages);
        }
        let about = About::PreCompact {
            turn,
            messages: messages.len(),
            estimated_tokens: estimate_tokens(&messages),
        };
        self.hook(about).await?;
        self.compact(messages, turn, totals)
            .instrument(span.clone())
            .await
    }

    /// A reply's tool calls in order, their results pushed on `messages`; consecutive `agent`
    /// calls run as a group, their children at once.
    async fn run_calls(
        &self,
        calls: &[ToolCall],
        task: &str,
        totals: &Mutex<Totals>,
        messages: &mut Vec<Message>,
    ) -> Result<(), SessionError> {
        let mut rest = calls;
        while let Some(call) = rest.first() {
            let group = self.agent_group(rest);
            if !group.is_empty() {
                self.run_group(group, task, totals, messages).await?;
                rest = &rest[group.len()..];
                continue;
            }
            rest = &rest[1..];
            self.observer.tool_call(call);
            let number = next_call(totals);
            let name = self.recorder.call_name(number);
            let ran = self.run_tool(call, task, &name);
            let shown = self.shown_live(call, &name, ran).await;
            self.observer.tool_finished(call);
            let (result, step) = shown?;
            messages.push(Message::Tool {
                tool_call_id: call.id.clone(),
                content: result,
            });
            self.recorder.after_tool_call(&call.id, step).await?;
        }
        Ok(())
    }

    /// The tools the model has now: the session's, and those an MCP tool search loaded.
    fn tools_now(&self) -> Vec<ToolSpec> {
        let mut tools = self.tools.clone();
        tools.extend(self.mcp.loaded());
        tools
    }

    /// The system prompt and the task, with what the `session_start` and `user_prompt` hooks
    /// add; a `user_prompt` deny stops the session.
    async fn opening(&self, system_prompt: &str, task: &str) -> Result<Vec<Message>, SessionError> {
        let tools = self.tools.iter().map(|t| t.name.clone()).collect();
        let about = About::SessionStart {
            model: self.model.describe(),
            tools,
        };
        let started = self.hook(about).await?;
        let prompt = About::UserPrompt {
            prompt: task.to_owned(),
        };
        let prompt = self.hook(prompt).await?;
        if prompt.decision == Some(HookDecision::Deny) {
            return Err(SessionError::Hook(format!(
                "a user_prompt hook refused the task ({})",
                prompt.reason
            )));
        }
        Ok(vec![
            Message::System {
                content: with_context(system_prompt.to_owned(), &started.context),
            },
            Message::User {
                content: with_context(task.to_owned(), &prompt.context),
            },
        ])
    }

    fn report(
        &self,
        end: LoopEnd,
        answer: String,
        totals: &Mutex<Totals>,
        messages: Vec<Message>,
    ) -> Report {
        Report {
            end,
            answer,
            totals: *current(totals),
            messages,
        }
    }
}
