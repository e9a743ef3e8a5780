//! Before the agent starts: the workspace seeded, the setup commands run, the tools chosen and
//! the system prompt built from AGENTS.md and skills, all through the sandbox API.

use sandbox_protocol::{BashArgs, ToolSpec};

use crate::config::RunConfig;
use crate::prompt::{self, SystemPrompt};
use crate::run_loop::Observer;
use crate::sandbox::{SandboxClient, seed};
use crate::step::{Step, StepError};
use crate::subagent::{self, AGENT_TOOL, is_agent_tool};
use harness_models::Model;

/// What the agent starts with.
pub(super) struct Prepared {
    pub system: SystemPrompt,
    pub tools: Vec<ToolSpec>,
    /// The workspace root inside the sandbox.
    pub workspace_root: String,
}

pub(super) async fn prepare(
    config: &RunConfig,
    model: &dyn Model,
    client: &SandboxClient,
    observer: &dyn Observer,
) -> Result<Prepared, StepError> {
    if let Some(source) = &config.workspace {
        let seeded = seed::seed(client, source)
            .await
            .step("seeding the workspace")?;
        observer.note(&format!(
            "seeded the workspace: {} files, {} bytes",
            seeded.n_files, seeded.n_bytes
        ));
        for skipped in &seeded.skipped {
            observer.note(&format!("  skipped {skipped}"));
        }
    }
    for command in &config.setup {
        observer.note(&format!("setup: {command}"));
        let result = client
            .bash(&command_args(command, config.check_timeout))
            .await
            .step("running a setup command")?;
        if result.exit_code != 0 {
            observer.note(&result.output);
            return Err(StepError::harness(format!(
                "setup command failed: {command}"
            )));
        }
    }
    let info = client
        .info()
        .await
        .step("asking the sandbox for its info")?;
    let tools = choose_tools(config, client).await?;
    let system = prompt::build(client, &info.workspace_root)
        .await
        .step("reading AGENTS.md and skills")?;
    for warning in &system.warnings {
        observer.note(&format!("warning: {warning}"));
    }
    if !model.has_price() {
        observer.note(&format!(
            "warning: no price is known for this model, so its cost is unknown and --max-cost ({:.2}) cannot stop the run; give one with --price INPUT,OUTPUT",
            config.limits.max_cost
        ));
    }
    Ok(Prepared {
        system,
        tools,
        workspace_root: info.workspace_root,
    })
}

/// The tools the config names (every one must be offered), or all the sandbox offers; and
/// the harness's own `agent` tool last, when the config names it.
async fn choose_tools(
    config: &RunConfig,
    client: &SandboxClient,
) -> Result<Vec<ToolSpec>, StepError> {
    let offered = client.tools().await.step("listing the sandbox's tools")?;
    if config.subagents.is_some() && offered.iter().any(|t| is_agent_tool(&t.name)) {
        return Err(StepError::harness(format!(
            "the sandbox offers a tool named `{AGENT_TOOL}`, which is the harness's own subagent tool: rename the plugin or leave `{AGENT_TOOL}` out of the tools"
        )));
    }
    let Some(wanted) = &config.tools else {
        return Ok(offered);
    };
    if let Some(missing) = wanted
        .iter()
        .filter(|name| !is_agent_tool(name))
        .find(|name| !offered.iter().any(|tool| &tool.name == *name))
    {
        let names: Vec<&str> = offered.iter().map(|tool| tool.name.as_str()).collect();
        return Err(StepError::harness(format!(
            "tool `{missing}` is not offered by the sandbox (it has: {})",
            names.join(", ")
        )));
    }
    let mut tools: Vec<ToolSpec> = offered
        .into_iter()
        .filter(|tool| wanted.contains(&tool.name))
        .collect();
    if let Some(limits) = &config.subagents {
        tools.push(subagent::tool_spec(limits));
    }
    Ok(tools)
}

/// A setup or check command's `bash` arguments.
pub(super) fn command_args(cmd: &str, timeout: u32) -> BashArgs {
    BashArgs {
        cmd: cmd.to_owned(),
        timeout: Some(timeout.clamp(1, 3600)),
    }
}
