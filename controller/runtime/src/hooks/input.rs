//! What a hook is given: one JSON document an event, typed here; `proto-docs/hooks.schema.json`
//! is generated from these types (and from [`HookAnswer`](super::HookAnswer), what it may say
//! back), and a test fails when the committed copy is stale.

use sandbox_protocol::ToolInput;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::HookEvent;

/// The document a hook gets on its stdin (or as the POST body): the session, then the event's
/// own fields, `event` naming which.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct HookInput {
    /// The session's id (its log's `session_started`).
    pub session_id: String,
    #[serde(flatten)]
    pub about: About,
}

/// The event, and what it is about.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum About {
    /// Before the first model call.
    SessionStart {
        /// The model, as the harness describes it (its adapter, name and endpoint).
        model: String,
        /// The tools offered to the model, by name.
        tools: Vec<String>,
    },
    /// The task, before the model sees it.
    UserPrompt { prompt: String },
    /// A tool call, before the policy judges it.
    PreToolUse {
        call_id: String,
        tool: String,
        /// The call's arguments, as parsed.
        #[schemars(with = "Value")]
        tool_input: ToolInput,
    },
    /// A tool call, after its result.
    PostToolUse {
        call_id: String,
        tool: String,
        /// The call's arguments as the model wrote them (`null` when they did not parse).
        #[schemars(with = "Value")]
        tool_input: Option<ToolInput>,
        tool_result: ToolOutcome,
    },
    /// Before the history is compacted.
    PreCompact {
        turn: u32,
        messages: usize,
        estimated_tokens: usize,
    },
    /// A reply that called no tool: the loop would stop with this answer.
    Stop { turn: u32, answer: String },
    /// After the loop, however it ended.
    SessionEnd {
        end: Ended,
        /// The final answer (absent when the session failed).
        #[serde(skip_serializing_if = "Option::is_none")]
        answer: Option<String>,
        /// Why the session failed (absent otherwise).
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

/// How the session ended, as `session_end` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Ended {
    /// A reply called no tool.
    Completed,
    TurnLimit,
    CostLimit,
    /// The session failed; `error` says why.
    Error,
}

impl From<crate::run_loop::LoopEnd> for Ended {
    fn from(end: crate::run_loop::LoopEnd) -> Ended {
        use crate::run_loop::LoopEnd;
        match end {
            LoopEnd::Completed => Ended::Completed,
            LoopEnd::TurnLimit => Ended::TurnLimit,
            LoopEnd::CostLimit => Ended::CostLimit,
        }
    }
}

/// A call's result, as a `post_tool_use` hook sees it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ToolOutcome {
    /// `ok`, `error` or `blocked` (never `interrupted`: an interrupted call runs no hook).
    pub status: harness_log::ToolStatus,
    /// The text the model gets.
    pub output: String,
    /// A command's exit code (`bash`, `shell`); null for other tools.
    pub exit_code: Option<i32>,
    /// Whether a command's timeout fired; null for other tools.
    pub timed_out: Option<bool>,
}

impl About {
    pub fn event(&self) -> HookEvent {
        match self {
            About::SessionStart { .. } => HookEvent::SessionStart,
            About::UserPrompt { .. } => HookEvent::UserPrompt,
            About::PreToolUse { .. } => HookEvent::PreToolUse,
            About::PostToolUse { .. } => HookEvent::PostToolUse,
            About::PreCompact { .. } => HookEvent::PreCompact,
            About::Stop { .. } => HookEvent::Stop,
            About::SessionEnd { .. } => HookEvent::SessionEnd,
        }
    }

    /// The call a tool event is about: its id and its tool's name.
    pub fn call(&self) -> Option<(&str, &str)> {
        match self {
            About::PreToolUse { call_id, tool, .. } | About::PostToolUse { call_id, tool, .. } => {
                Some((call_id, tool))
            }
            _ => None,
        }
    }
}

/// The JSON Schema of what hooks get and answer (`proto-docs/hooks.schema.json`).
pub fn schema() -> Value {
    #[derive(JsonSchema)]
    #[allow(dead_code)] // only described
    struct Hooks {
        /// What a hook gets.
        input: HookInput,
        /// What it may answer (every field optional; nothing at all has no opinion).
        answer: super::HookAnswer,
    }
    serde_json::to_value(schemars::schema_for!(Hooks)).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_tool_event_names_its_event_and_call() {
        let input = HookInput {
            session_id: "s-1".to_owned(),
            about: About::PreToolUse {
                call_id: "c-1".to_owned(),
                tool: "bash".to_owned(),
                tool_input: ToolInput::parse("bash", json!({"cmd": "ls"})).unwrap(),
            },
        };
        assert_eq!(
            serde_json::to_value(&input).unwrap(),
            json!({"session_id": "s-1", "event": "pre_tool_use", "call_id": "c-1",
                   "tool": "bash", "tool_input": {"cmd": "ls"}})
        );
        assert_eq!(input.about.event(), HookEvent::PreToolUse);
        assert_eq!(input.about.call(), Some(("c-1", "bash")));
    }

    #[test]
    fn the_schema_describes_every_event() {
        let text = schema().to_string();
        for event in [
            "session_start",
            "user_prompt",
            "pre_tool_use",
            "post_tool_use",
            "pre_compact",
            "stop",
            "session_end",
        ] {
            assert!(text.contains(event), "{event} missing from the schema");
        }
    }
}
