//! The children's run config: the flags given, and where they say nothing, the parent's (what
//! of it a log not trusted may give: [`from_log`]).

use harness_log::SandboxKind;
use harness_replay::fork::ForkPoint;
use harness_runtime::config::{RunConfig, SessionFlags};
use harness_runtime::task::TaskFile;

use super::{ForkDisplay, benchmark, from_log};

/// The children's run config: the flags given, and where they say nothing, the parent's model,
/// tools, check and what was left of its limits (all of them under `trust_log`; otherwise only
/// what [`from_log`] lets a log give).
pub(super) fn child_config(
    point: &ForkPoint,
    flags: &SessionFlags,
    trial: &harness_benchmark::flags::TrialFlags,
    trust_log: bool,
    display: &dyn ForkDisplay,
) -> anyhow::Result<RunConfig> {
    let parent = &point.header.config;
    let mcp_tools: Vec<&String> = parent
        .tool_names
        .iter()
        .filter(|name| name.starts_with(harness_runtime::mcp::PREFIX))
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
    let mut flags = flags.clone();
    from_log::settings(point, &mut flags, trust_log, display)?;
    flags.compact_at = flags.compact_at.or(Some(parent.compact_at as usize));
    flags.tools = flags.tools.or_else(|| {
        Some(
            parent
                .tool_names
                .iter()
                .filter(|name| !name.starts_with(harness_runtime::mcp::PREFIX))
                .cloned()
                .collect(),
        )
    });
    // The `agent` tool keeps the limits it had, within a run's unless trusted (a flag given
    // for the fork wins).
    if let Some(limits) = parent.subagents
        && flags.agents == harness_runtime::subagent::AgentFlags::default()
    {
        flags.agents = from_log::agent_limits(limits, trust_log, display);
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
        return benchmark::config(task, parent, &flags, trial, trust_log, display);
    }
    let mut config = RunConfig::new(TaskFile::from_prompt(&point.header.task), None, &flags)?;
    config.setup.clear();
    config.check = from_log::check(parent, trust_log, display);
    config.workspace = None;
    Ok(config)
}
