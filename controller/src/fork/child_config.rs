//! The children's run config: the flags given, and where they say nothing, the parent's.

use event_log::SandboxKind;
use replay::fork::ForkPoint;
use runtime::config::{RunConfig, SessionFlags};

use super::{ForkDisplay, benchmark};

/// The children's run config: the flags given, and where they say nothing, the parent's model,
/// tools, check and what was left of its limits.
pub(super) fn child_config(
    point: &ForkPoint,
    flags: &SessionFlags,
    display: &dyn ForkDisplay,
) -> anyhow::Result<RunConfig> {
    let parent = &point.header.config;
    let mcp_tools: Vec<&String> = parent
        .tool_names
        .iter()
        .filter(|name| name.starts_with(runtime::mcp::PREFIX))
        .collect();
    if !mcp_tools.is_empty() && flags.mcp.is_none() {
        anyhow::bail!(
            "the session had MCP servers' tools ({}): give the children the same servers with --mcp FILE",
            mcp_tools
                .iter()
                .map(|name| name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if point.hooks_ran && flags.hooks.is_none() {
        display.note(
            "warning: hooks ran in the session before the fork; the children run none unless --hooks FILE names them",
        );
    }
    // The turns the parent itself took (a parent that is a fork numbers its turns after its
    // own parent's, and its limit is its own).
    let own_turns = point.turns.saturating_sub(
        point
            .header
            .forked_from
            .as_ref()
            .map_or(0, |from| from.turns),
    );
    let mut flags = flags.clone();
    // A parent that ran unchecked has unchecked children; any other policy is the flags' (a
    // rules file is not in the log: give it with --policy again).
    if flags.policy.is_none() && parent.policy == event_log::DecisionSource::AllowAll.as_str() {
        flags.policy = Some("allow-all".to_owned());
    }
    flags.model = flags.model.or_else(|| Some(parent.model.clone()));
    flags.reasoning_effort = flags
        .reasoning_effort
        .or_else(|| parent.reasoning_effort.clone());
    flags.web_search |= parent.web_search;
    flags.max_turns = Some(
        flags
            .max_turns
            .unwrap_or_else(|| parent.max_turns.saturating_sub(own_turns).max(1)),
    );
    flags.max_cost = Some(
        flags
            .max_cost
            .unwrap_or_else(|| (parent.max_cost - point.cost).max(0.0)),
    );
    flags.compact_at = flags.compact_at.or(Some(parent.compact_at as usize));
    flags.tools = flags.tools.or_else(|| {
        Some(
            parent
                .tool_names
                .iter()
                .filter(|name| !name.starts_with(runtime::mcp::PREFIX))
                .cloned()
                .collect(),
        )
    });
    // The `agent` tool keeps the limits it had (a flag given for the fork wins).
    if let Some(limits) = parent.subagents
        && flags.agents == runtime::subagent::AgentFlags::default()
    {
        flags.agents = runtime::subagent::AgentFlags {
            max_depth: Some(limits.max_depth),
            max_parallel: Some(limits.max_parallel),
            max_total: Some(limits.max_total),
            workspace: Some(limits.workspace.as_str().to_owned()),
        };
    }
    let sandbox = flags
        .sandbox
        .clone()
        .unwrap_or_else(|| match parent.sandbox {
            SandboxKind::Docker => "docker".to_owned(),
            SandboxKind::Local | SandboxKind::Remote => "local".to_owned(),
        });
    if sandbox != "local" && sandbox != "docker" {
        anyhow::bail!(
            "--sandbox {sandbox}: a fork's children run in `local` or `docker` sandboxes"
        );
    }
    flags.sandbox = Some(sandbox);
    if let Some(task) = &parent.benchmark {
        return benchmark::config(task, parent, &flags);
    }
    let mut config = RunConfig::for_run(std::slice::from_ref(&point.header.task), None, &flags)?;
    config.setup.clear();
    config.check = parent.check.clone();
    config.workspace = None;
    config.working_dir = None;
    Ok(config)
}
