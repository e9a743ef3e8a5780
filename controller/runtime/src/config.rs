//! The settings of one run, resolved from flags, a task file and defaults (flags win).
//!
//! The flags arrive as [`SessionFlags`]: plain values the binary's edge fills from its
//! command line, checked here as a task file's keys are. The library never sees a command
//! line. `harness run` builds one [`RunConfig`]; `harness batch` builds one per task with the
//! same function.

mod error;
mod sandbox;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use error::{ConfigError, NotRunnable};
pub use sandbox::SandboxTarget;

use crate::hooks::Hooks;
use crate::input::{InputError, invalid};
use crate::run_loop::Limits;
use crate::sandbox::NetworkMode;
use crate::task::{TaskFile, WorkspaceSource};
use harness_models::{ModelSpec, Price};
use harness_policy::{Approve, PolicySettings};

pub const DEFAULT_MODEL: &str = "openai/gpt-6-luna";
/// The turn and cost limits of a session whose flags and task file set none.
pub const DEFAULT_MAX_TURNS: u32 = 30;
pub const DEFAULT_MAX_COST: f64 = 1.00;

/// The flags every session takes, as given: values not yet checked against each other or a
/// task file.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionFlags {
    pub model: Option<String>,
    pub base_url: Option<String>,
    pub reasoning_effort: Option<String>,
    pub web_search: bool,
    /// `INPUT,OUTPUT[,CACHED_INPUT]` in USD per million tokens.
    pub price: Option<String>,
    pub max_turns: Option<u32>,
    pub max_cost: Option<f64>,
    pub compact_at: Option<usize>,
    /// `local`, `docker` or an http(s) URL (a batch reads `pool:…` itself).
    pub sandbox: Option<String>,
    pub image: Option<String>,
    /// A size such as `2g`.
    pub memory: Option<String>,
    pub cpus: Option<f64>,
    pub pids: Option<i64>,
    pub lifetime: Option<Duration>,
    pub sandbox_token_file: Option<PathBuf>,
    /// A --sandbox URL's TLS: a CA besides the system's, a client certificate.
    pub sandbox_tls: crate::sandbox::ClientTls,
    /// `none` or `host`.
    pub network: Option<String>,
    pub writable: Vec<PathBuf>,
    /// Who a local sandbox's commands run as: `root`, a user, `UID[:GID]`.
    pub run_as: Option<String>,
    /// Keep a temporary workspace folder after the session.
    pub keep_workspace: bool,
    pub tools: Option<Vec<String>>,
    /// A rules file, or `allow-all`.
    pub policy: Option<String>,
    /// A hooks file (`hooks::Hooks`).
    pub hooks: Option<PathBuf>,
    /// An MCP servers file (`mcp::McpConfig`).
    pub mcp: Option<PathBuf>,
    /// Also the workspace's own `.mcp.json`.
    pub mcp_workspace: bool,
    pub classifier_model: Option<String>,
    pub classifier_timeout: Duration,
    pub no_classifier: bool,
    pub approve: Approve,
    pub max_tokens: Option<u32>,
    pub thinking_budget: Option<u32>,
    /// The `agent` tool's settings (`--agent-*`).
    pub agents: crate::subagent::AgentFlags,
}

/// A resolved run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub prompt: String,
    pub working_dir: Option<PathBuf>,
    pub workspace: Option<WorkspaceSource>,
    pub setup: Vec<String>,
    pub check: Option<String>,
    pub check_timeout: u32,
    pub model: ModelSpec,
    pub limits: Limits,
    pub sandbox: SandboxTarget,
    pub tools: Option<Vec<String>>,
    /// The `agent` tool's limits, when `tools` names it.
    pub subagents: Option<crate::subagent::SubagentLimits>,
    /// A sandbox's network (a local server's `--network`, or a container's).
    pub network: NetworkMode,
    /// More paths a local sandbox's commands may write beneath.
    pub writable: Vec<PathBuf>,
    /// Who a local sandbox's commands run as.
    pub run_as: crate::sandbox::local::RunAs,
    /// A local sandbox's `--known-files`: files whose hashes its first snapshot takes unread
    /// (a fork's child, over the workspace just verified).
    pub known_files: Option<PathBuf>,
    /// Keep a temporary workspace folder after the session (`--keep-workspace`).
    pub keep_workspace: bool,
    /// The longest the session may run.
    pub lifetime: Option<Duration>,
    pub policy: PolicySettings,
    /// The hooks; their `pre_tool_use` runs before the rules for every tool.
    pub hooks: std::sync::Arc<Hooks>,
    /// The MCP servers whose tools the agent also gets.
    pub mcp: std::sync::Arc<crate::mcp::McpConfig>,
    /// Also the servers of the workspace's `.mcp.json` (read through the sandbox API).
    pub mcp_workspace: bool,
}

impl RunConfig {
    /// One session of `harness run` or a fork's child: its task, and the folder a local
    /// sandbox works in (`None`: a temporary one, or the sandbox's own workspace).
    pub fn new(
        task: TaskFile,
        working_dir: Option<PathBuf>,
        flags: &SessionFlags,
    ) -> Result<RunConfig, InputError> {
        RunConfig::build(task, working_dir, flags, false)
    }

    /// One task of a batch: its file, the batch's flags, a working directory when the
    /// session gets one, and whether its sandbox is a pool member the batch leases.
    pub fn for_task(
        task_file: &Path,
        flags: &SessionFlags,
        working_dir: Option<PathBuf>,
        leased: bool,
    ) -> Result<RunConfig, InputError> {
        RunConfig::build(TaskFile::load(task_file)?, working_dir, flags, leased)
    }

    fn build(
        task: TaskFile,
        working_dir: Option<PathBuf>,
        flags: &SessionFlags,
        leased: bool,
    ) -> Result<RunConfig, InputError> {
        if task.prompt.trim().is_empty() {
            invalid!("the task is empty");
        }
        let network = match flags.network.as_ref().or(task.network.as_ref()) {
            Some(text) => text
                .parse::<NetworkMode>()
                .map_err(|why| InputError(format!("network: {why}")))?,
            None => NetworkMode::None,
        };
        let tools = flags.tools.clone().or(task.tools.clone());
        let lifetime = sandbox::lifetime(&task, flags)?;
        let sandbox = if leased {
            sandbox::pool(&task, flags)?
        } else {
            sandbox::target(&task, flags, network, tools.as_deref(), lifetime)?
        };
        Ok(RunConfig {
            model: model_spec(&task, flags)?,
            limits: limits(&task, flags)?,
            lifetime,
            network,
            writable: flags.writable.clone(),
            run_as: run_as(flags)?,
            known_files: None,
            keep_workspace: flags.keep_workspace,
            working_dir,
            workspace: task.workspace_source().map_err(InputError::new)?,
            setup: task.setup,
            check: task.check,
            check_timeout: task.check_timeout.unwrap_or(600),
            prompt: task.prompt,
            subagents: crate::subagent::settings(
                tools.as_deref(),
                task.agents.as_ref(),
                &flags.agents,
            )?,
            sandbox,
            tools,
            policy: policy_settings(flags),
            hooks: hooks(task.hooks.as_deref(), flags)?,
            mcp: mcp_servers(task.mcp.as_deref(), flags)?,
            mcp_workspace: flags.mcp_workspace || task.mcp_workspace == Some(true),
        })
    }
}

/// Who a local sandbox's commands run as: `--run-as`, else the default (an unprivileged user
/// when the harness is root).
fn run_as(flags: &SessionFlags) -> Result<crate::sandbox::local::RunAs, InputError> {
    match &flags.run_as {
        Some(text) => crate::sandbox::local::RunAs::parse(text).map_err(InputError::new),
        None => Ok(crate::sandbox::local::RunAs::Default),
    }
}

/// The model: the flags, else the task's `model:`, else the default.
pub fn model_spec(task: &TaskFile, flags: &SessionFlags) -> Result<ModelSpec, InputError> {
    let section = task.model.as_ref();
    let price = match &flags.price {
        Some(text) => Some(Price::parse(text).map_err(|why| InputError(format!("--price {why}")))?),
        None => section.and_then(|m| m.price).map(|p| Price {
            input: p.input,
            output: p.output,
            cached_input: p.cached_input,
        }),
    };
    let name = flags
        .model
        .clone()
        .or_else(|| section.map(|m| m.name.clone()))
        .unwrap_or_else(|| DEFAULT_MODEL.to_owned());
    Ok(ModelSpec {
        reasoning_effort: flags
            .reasoning_effort
            .clone()
            .or_else(|| section.and_then(|m| m.reasoning_effort.clone()))
            .or_else(|| name.starts_with("openai/").then(|| "low".to_owned())),
        name,
        base_url: flags
            .base_url
            .clone()
            .or_else(|| section.and_then(|m| m.base_url.clone())),
        web_search: flags.web_search || task.web_search.unwrap_or(false),
        price,
        max_tokens: flags
            .max_tokens
            .or_else(|| section.and_then(|m| m.max_tokens))
            .unwrap_or(8192),
        thinking_budget: flags
            .thinking_budget
            .or_else(|| section.and_then(|m| m.thinking_budget)),
    })
}

pub fn limits(task: &TaskFile, flags: &SessionFlags) -> Result<Limits, InputError> {
    let task_limits = task.limits;
    let limits = Limits {
        max_turns: flags
            .max_turns
            .or_else(|| task_limits.and_then(|l| l.max_turns))
            .unwrap_or(DEFAULT_MAX_TURNS),
        max_cost: flags
            .max_cost
            .or_else(|| task_limits.and_then(|l| l.max_cost))
            .unwrap_or(DEFAULT_MAX_COST),
        compact_at: flags
            .compact_at
            .or_else(|| task_limits.and_then(|l| l.compact_at))
            .unwrap_or(100_000),
    };
    if limits.max_turns == 0 {
        invalid!("--max-turns must be at least 1");
    }
    if !(limits.max_cost.is_finite() && limits.max_cost >= 0.0) {
        invalid!("--max-cost must be a non-negative number of USD");
    }
    Ok(limits)
}

/// The hooks: `--hooks`, else the task's `hooks:`; none when neither names a file.
pub fn hooks(
    task: Option<&Path>,
    flags: &SessionFlags,
) -> Result<std::sync::Arc<Hooks>, InputError> {
    let hooks = match flags.hooks.as_deref().or(task) {
        Some(path) => Hooks::load(path)?,
        None => Hooks::none(),
    };
    Ok(std::sync::Arc::new(hooks))
}

/// The MCP servers: `--mcp`, else the task's `mcp:`; none when neither names a file.
pub fn mcp_servers(
    task: Option<&Path>,
    flags: &SessionFlags,
) -> Result<std::sync::Arc<crate::mcp::McpConfig>, InputError> {
    Ok(std::sync::Arc::new(match flags.mcp.as_deref().or(task) {
        Some(path) => crate::mcp::McpConfig::load(path)?,
        None => crate::mcp::McpConfig::default(),
    }))
}

pub fn policy_settings(flags: &SessionFlags) -> PolicySettings {
    let allow_all = flags.policy.as_deref() == Some("allow-all");
    PolicySettings {
        rules_file: flags
            .policy
            .as_ref()
            .filter(|_| !allow_all)
            .map(PathBuf::from),
        allow_all,
        classifier_model: flags.classifier_model.clone(),
        classifier_timeout: flags.classifier_timeout.max(Duration::from_secs(1)),
        no_classifier: flags.no_classifier,
        approve: flags.approve,
    }
}

#[cfg(test)]
mod tests;
