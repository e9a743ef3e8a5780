//! Subagents: a child session a model started with the `agent` tool, linked both ways. The
//! parent's log says when each child started and how it ended; the child's header says whose
//! call it answers. A child's own log is `agents/<n>-<call id>/` in its parent's folder.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ChangeRecord, LoggedUsage, Text};
use crate::kinds::{FailureClass, Outcome};

/// Where a subagent works.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceMode {
    /// In its parent's workspace; the sessions on it take turns.
    Shared,
    /// In a copy of its parent's workspace; its changes come back as a diff.
    Fork,
}

sandbox_protocol::serde_names!(WorkspaceMode);

/// A subagent's parent (`session_started.subagent_of`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubagentOf {
    /// The parent session's id.
    pub session_id: String,
    /// The parent's log folder.
    pub log_dir: String,
    /// The parent's `agent` call this session answers.
    pub call_id: String,
    /// 1 for a child of the user's session, 2 for a child of a child, …
    pub depth: u32,
    pub workspace: WorkspaceMode,
}

/// The limits on a session's subagents (`session_started.config.subagents`), enforced by the
/// harness: none is in the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubagentLimits {
    /// How deep children may nest (1: the user's session may start children, they may not).
    pub max_depth: u32,
    /// Children of one session running at once.
    pub max_parallel: u32,
    /// Children in the whole tree, the user's session's included.
    pub max_total: u32,
    /// Where a child works when its call does not say.
    pub workspace: WorkspaceMode,
}

/// A child session began (`subagent_started`), after its call was allowed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubagentStarted {
    /// The `agent` call it answers.
    pub call_id: String,
    /// The child's session id.
    pub session_id: String,
    /// The child's log folder, relative to this log's folder.
    pub log_dir: String,
    pub depth: u32,
    pub workspace: WorkspaceMode,
    /// The sub-task, as the model wrote it.
    pub task: Text,
}

/// A child session ended (`subagent_finished`); its result is the call's `tool_result`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubagentFinished {
    pub call_id: String,
    pub session_id: String,
    /// Relative to this log's folder.
    pub log_dir: String,
    /// The child's `session_finished.outcome`.
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureClass>,
    /// The child's own totals, and its children's (`subagents`) on top.
    pub turns: u32,
    pub model_calls: u64,
    pub tool_calls: u64,
    pub usage: LoggedUsage,
    pub cost: f64,
    pub cost_known: bool,
    pub duration_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagents: Option<SubagentTotals>,
    /// A forked child: what it changed in its copy, and whether that was applied here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<ForkMerge>,
}

/// A forked child's changes, against the parent's workspace when the child started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkMerge {
    /// The changes; every new version's bytes are a blob of this log.
    pub changes: Vec<ChangeRecord>,
    /// Whether they were applied to this session's workspace (all or none).
    pub applied: bool,
    /// Paths this session's workspace changed meanwhile, which kept the changes out; or paths
    /// that could not be applied.
    pub conflicts: Vec<String>,
}

/// What a session's subagents spent, their own subagents included
/// (`session_finished.subagents`); the session's own figures exclude it.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubagentTotals {
    /// Child sessions started.
    pub count: u32,
    pub turns: u64,
    pub model_calls: u64,
    pub tool_calls: u64,
    pub usage: LoggedUsage,
    pub cost: f64,
    /// Whether every child's cost was known.
    pub cost_known: bool,
}

impl SubagentTotals {
    /// Adds one child's own figures and its subagents'.
    pub fn add(&mut self, child: &SubagentFinished) {
        self.count += 1;
        self.turns += u64::from(child.turns);
        self.model_calls += child.model_calls;
        self.tool_calls += child.tool_calls;
        self.usage.add(&child.usage);
        self.cost += child.cost;
        self.cost_known = (self.count == 1 || self.cost_known) && child.cost_known;
        if let Some(theirs) = &child.subagents {
            self.count += theirs.count;
            self.turns += theirs.turns;
            self.model_calls += theirs.model_calls;
            self.tool_calls += theirs.tool_calls;
            self.usage.add(&theirs.usage);
            self.cost += theirs.cost;
            self.cost_known &= theirs.cost_known;
        }
    }
}
