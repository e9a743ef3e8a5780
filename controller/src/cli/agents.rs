//! The `agent` tool's flags (`--tools …,agent`): its limits, enforced by the harness.

use harness_runtime::subagent::AgentFlags;

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Subagents (the `agent` tool, with --tools …,agent)")]
pub(crate) struct AgentArgs {
    /// How deep subagents may nest: 1 lets the session start children that cannot start
    /// their own [default: 1].
    #[arg(long, value_name = "N")]
    pub(crate) agent_depth: Option<u32>,
    /// Children of one session running at once [default: 4].
    #[arg(long, value_name = "N")]
    pub(crate) agent_parallel: Option<u32>,
    /// Children started in the whole session tree [default: 10].
    #[arg(long, value_name = "N")]
    pub(crate) agent_max: Option<u32>,
    /// Where a child works when its call does not say: `shared` (this workspace; the sessions
    /// take turns) or `fork` (a copy; its changes come back as a diff) [default: shared].
    #[arg(long, value_name = "shared|fork")]
    pub(crate) agent_workspace: Option<String>,
}

impl AgentArgs {
    pub(crate) fn flags(&self) -> AgentFlags {
        AgentFlags {
            max_depth: self.agent_depth,
            max_parallel: self.agent_parallel,
            max_total: self.agent_max,
            workspace: self.agent_workspace.clone(),
        }
    }
}
