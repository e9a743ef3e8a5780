//! The opt-in `agent` tool: the model starts a child session on a sub-task, with its own
//! context and log, in its workspace (shared) or a copy of it (fork). The child's final reply
//! is the call's result.
//!
//! - this module: the tool's name, spec and arguments; its settings from flags and task files.
//! - [`tree`]: the limits of a session tree (depth, children at once, total, the root's
//!   budget), enforced here and never in a prompt.
//! - [`spawn`]: a child session made from its parent's: what it inherits, where it logs.
//! - [`fork`]: a forked child's workspace: copied out, its changes diffed and merged back.
//!
//! A child inherits its parent's policy settings, hooks, MCP servers (the parent's effective
//! list: a child never reads the workspace's `.mcp.json`), approval and tools, and the
//! classifier judges its calls against the root user's task, never the model-written sub-task.

pub mod fork;
pub mod spawn;
pub mod tree;

use sandbox_protocol::ToolSpec;
use serde::Deserialize;
use serde_json::json;

use crate::input::InputError;
pub use harness_log::{SubagentLimits, WorkspaceMode};

/// The tool's name; spelled only here.
pub const AGENT_TOOL: &str = "agent";

/// Whether `name` is the `agent` tool.
pub fn is_agent_tool(name: &str) -> bool {
    name == AGENT_TOOL
}

/// The arguments of an `agent` call.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentArgs {
    /// The sub-task, complete: the child sees none of its parent's conversation.
    pub task: String,
    /// A few words naming it.
    #[serde(default)]
    pub description: Option<String>,
    /// Where the child works; the session's default when absent.
    #[serde(default)]
    pub workspace: Option<WorkspaceMode>,
}

impl AgentArgs {
    /// Parses a call's arguments; the error is worded as the sandbox words a bad argument.
    pub fn parse(args: &serde_json::Value) -> Result<AgentArgs, String> {
        let parsed: AgentArgs = sandbox_protocol::call::typed(args.clone())?;
        if parsed.task.trim().is_empty() {
            return Err(sandbox_protocol::call::field_error(
                "task",
                "the sub-task is empty",
            ));
        }
        Ok(parsed)
    }
}

/// The tool as the model sees it.
pub fn tool_spec(limits: &SubagentLimits) -> ToolSpec {
    ToolSpec {
        name: AGENT_TOOL.to_owned(),
        description: format!(
            "Start a subagent on a sub-task: a new session of the same model with its own context and the same tools. It sees none of this conversation, so say everything it needs. Its final reply is this call's result. Several agent calls in one reply run at once (at most {} at a time).",
            limits.max_parallel
        ),
        parameters: json!({
            "type": "object",
            "properties": {
                "task": {"type": "string", "description": "The sub-task, complete and self-contained"},
                "description": {"type": "string", "description": "A few words naming the sub-task"},
                "workspace": {
                    "type": "string",
                    "enum": ["shared", "fork"],
                    "description": format!("shared: it works in your workspace (its calls and yours never overlap); fork: it works in a copy, and its changes come back to you as a diff, applied when they do not clash with yours. Default: {}", limits.workspace.as_str()),
                },
            },
            "required": ["task"],
            "additionalProperties": false,
        }),
    }
}

/// The tools a sandbox is asked to serve: the run's, without the harness's own `agent`.
pub fn server_tools(tools: Option<&[String]>) -> Option<Vec<String>> {
    tools.map(|tools| {
        tools
            .iter()
            .filter(|name| !is_agent_tool(name))
            .cloned()
            .collect()
    })
}

/// The `agent` tool's settings as flags give them (`--agent-*`), each optional.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentFlags {
    pub max_depth: Option<u32>,
    pub max_parallel: Option<u32>,
    pub max_total: Option<u32>,
    /// `shared` or `fork`.
    pub workspace: Option<String>,
}

impl AgentFlags {
    fn any(&self) -> bool {
        *self != AgentFlags::default()
    }
}

/// A task file's `agents:` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsSection {
    pub max_depth: Option<u32>,
    pub max_parallel: Option<u32>,
    pub max_total: Option<u32>,
    pub workspace: Option<WorkspaceMode>,
}

/// The limits when the run's tools name `agent` (the flags over the task file's `agents:`
/// over the defaults: depth 1, 4 at once, 10 in all, shared); `None` without it. Settings
/// given for a run without the tool are an error, never ignored.
pub fn settings(
    tools: Option<&[String]>,
    section: Option<&AgentsSection>,
    flags: &AgentFlags,
) -> Result<Option<SubagentLimits>, InputError> {
    let offered = tools.is_some_and(|tools| tools.iter().any(|t| is_agent_tool(t)));
    if !offered {
        if flags.any() {
            return Err(InputError::new(
                "--agent-* settings are for the `agent` tool: add it with --tools …,agent",
            ));
        }
        if section.is_some() {
            return Err(InputError::new(
                "the task's `agents:` settings are for the `agent` tool: add `agent` to its `tools:`",
            ));
        }
        return Ok(None);
    }
    let workspace = match &flags.workspace {
        Some(text) => match text.as_str() {
            "shared" => WorkspaceMode::Shared,
            "fork" => WorkspaceMode::Fork,
            other => {
                return Err(InputError(format!(
                    "--agent-workspace {other}: expected shared or fork"
                )));
            }
        },
        None => section
            .and_then(|s| s.workspace)
            .unwrap_or(WorkspaceMode::Shared),
    };
    let pick = |flag: Option<u32>, task: Option<u32>, default: u32, name: &str| {
        let value = flag.or(task).unwrap_or(default);
        match value {
            0 => Err(InputError(format!("{name} must be at least 1"))),
            value => Ok(value),
        }
    };
    Ok(Some(SubagentLimits {
        max_depth: pick(
            flags.max_depth,
            section.and_then(|s| s.max_depth),
            1,
            "--agent-depth",
        )?,
        max_parallel: pick(
            flags.max_parallel,
            section.and_then(|s| s.max_parallel),
            4,
            "--agent-parallel",
        )?,
        max_total: pick(
            flags.max_total,
            section.and_then(|s| s.max_total),
            10,
            "--agent-max",
        )?,
        workspace,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn settings_need_the_tool_and_reject_zero() {
        let flags = AgentFlags {
            max_depth: Some(2),
            ..AgentFlags::default()
        };
        let err = settings(Some(&tools(&["bash"])), None, &flags).unwrap_err();
        assert!(err.0.contains("--tools"), "{err}");
        assert_eq!(settings(None, None, &AgentFlags::default()).unwrap(), None);
        let limits = settings(Some(&tools(&["bash", "agent"])), None, &flags)
            .unwrap()
            .unwrap();
        assert_eq!(
            (limits.max_depth, limits.max_parallel, limits.max_total),
            (2, 4, 10)
        );
        assert_eq!(limits.workspace, WorkspaceMode::Shared);
        let zero = AgentFlags {
            max_total: Some(0),
            ..AgentFlags::default()
        };
        let err = settings(Some(&tools(&["agent"])), None, &zero).unwrap_err();
        assert!(err.0.contains("--agent-max"), "{err}");
    }

    #[test]
    fn arguments_are_checked_and_the_server_never_gets_the_tool() {
        let parsed = AgentArgs::parse(&json!({"task": "t", "workspace": "fork"})).unwrap();
        assert_eq!(parsed.workspace, Some(WorkspaceMode::Fork));
        assert!(AgentArgs::parse(&json!({"task": " "})).is_err());
        let err = AgentArgs::parse(&json!({"task": "t", "depth": 3})).unwrap_err();
        assert!(err.contains("depth"), "{err}");
        assert_eq!(
            server_tools(Some(&tools(&["bash", "agent"]))),
            Some(tools(&["bash"]))
        );
    }
}
