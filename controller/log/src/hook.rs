//! `hook_run`: one hook's run.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::event::{BlobRef, Text};

/// When a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HookEvent {
    /// The session's sandbox is ready, before the first model call; may add context.
    SessionStart,
    /// The task is about to reach the model; may add context, or deny (the session stops).
    UserPrompt,
    /// A tool call is about to be judged and run; may allow, ask, deny, rewrite, add context.
    PreToolUse,
    /// A tool call has its result (or failed, or was refused); may add context or stop.
    PostToolUse,
    /// The history is about to be compacted.
    PreCompact,
    /// A reply called no tool: the agent is about to finish; may deny, with a reason that goes
    /// back to the model as the next message (the loop goes on, within its limits).
    Stop,
    /// The session ended.
    SessionEnd,
}

sandbox_protocol::serde_names!(HookEvent, HookDecision);

impl HookEvent {
    /// Whether a `matcher` on the tool's name applies.
    pub fn has_tool(self) -> bool {
        matches!(self, HookEvent::PreToolUse | HookEvent::PostToolUse)
    }
}

/// A hook's answer about a call (or a prompt, or a stop).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum HookDecision {
    Allow,
    Ask,
    Deny,
}

/// How a hook's run ended (`hook_run.outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HookOutcome {
    /// It answered (possibly with no opinion).
    Answered,
    /// A command exited 2: a deny.
    Blocked,
    /// It could not run, exited otherwise, gave no answer, or (HTTP) did not answer 2xx.
    Failed,
    TimedOut,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HookRunEvent {
    /// The hook's name (`<event>#<n>` unless the file names it).
    pub hook: String,
    pub event: HookEvent,
    /// `command: …` or `http: URL`.
    pub handler: String,
    /// The call it was about, for tool events.
    #[serde(default)]
    pub call_id: Option<String>,
    #[serde(default)]
    pub tool: Option<String>,
    pub outcome: HookOutcome,
    /// What it decided, a failure's `on_error` included.
    #[serde(default)]
    pub decision: Option<HookDecision>,
    #[serde(default)]
    pub reason: Option<String>,
    /// The arguments it asked to run instead (`pre_tool_use`); a rerun uses them.
    #[serde(default)]
    pub updated_input: Option<serde_json::Value>,
    #[serde(default)]
    pub additional_context: Option<String>,
    /// It asked to stop the session.
    #[serde(default)]
    pub stop: bool,
    pub duration_ms: u64,
    /// The JSON it was given.
    pub input: BlobRef,
    /// What it printed (or the HTTP body).
    pub output: Text,
}
