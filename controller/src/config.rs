//! The settings of one run, resolved from flags, a task file and defaults (flags win).

use std::path::PathBuf;

use anyhow::{Context, bail};

use crate::cli::RunArgs;
use crate::llm::{ModelSpec, Price};
use crate::run_loop::Limits;
use crate::task::{TaskFile, WorkspaceSource};

pub const DEFAULT_MODEL: &str = "openai/gpt-6-luna";
pub const DEFAULT_WORKING_DIR: &str = "agent-harness-working";

/// Where the sandbox is.
#[derive(Debug, Clone, PartialEq)]
pub enum SandboxTarget {
    /// A sandbox-server child over `working_dir`.
    Local,
    Remote {
        url: String,
        token_file: Option<PathBuf>,
    },
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
    /// A local sandbox's `--network`: `none` or `host`.
    pub network: String,
    /// More paths a local sandbox's commands may write beneath.
    pub writable: Vec<PathBuf>,
}

impl RunConfig {
    pub fn resolve(args: &RunArgs) -> anyhow::Result<RunConfig> {
        let task = args.task.as_deref().map(TaskFile::load).transpose()?;
        let (working_dir, prompt) = match &task {
            Some(task) => {
                if args.words.len() > 1 {
                    bail!(
                        "with --task, give at most a working directory, not a task text ({} words given)",
                        args.words.len()
                    );
                }
                (args.words.first().map(PathBuf::from), task.prompt.clone())
            }
            None => match args.words.as_slice() {
                [] => bail!(
                    "usage: harness run [--web-search] [WORKING_DIR] \"TASK\" (or --task FILE)"
                ),
                [task] => (Some(PathBuf::from(DEFAULT_WORKING_DIR)), task.clone()),
                [dir, rest @ ..] => (Some(PathBuf::from(dir)), rest.join(" ")),
            },
        };
        if prompt.trim().is_empty() {
            bail!("the task is empty");
        }
        let section = task.as_ref().and_then(|t| t.model.clone());
        let price = match &args.price {
            Some(text) => Some(Price::parse(text).map_err(|why| anyhow::anyhow!("--price {why}"))?),
            None => section.as_ref().and_then(|m| m.price).map(|p| Price {
                input: p.input,
                output: p.output,
                cached_input: p.cached_input,
            }),
        };
        let name = args
            .model
            .clone()
            .or_else(|| section.as_ref().map(|m| m.name.clone()))
            .unwrap_or_else(|| DEFAULT_MODEL.to_owned());
        let model = ModelSpec {
            reasoning_effort: args
                .reasoning_effort
                .clone()
                .or_else(|| section.as_ref().and_then(|m| m.reasoning_effort.clone()))
                .or_else(|| name.starts_with("openai/").then(|| "low".to_owned())),
            name,
            base_url: args
                .base_url
                .clone()
                .or_else(|| section.as_ref().and_then(|m| m.base_url.clone())),
            web_search: args.web_search
                || task.as_ref().and_then(|t| t.web_search).unwrap_or(false),
            price,
            max_tokens: args
                .max_tokens
                .or_else(|| section.as_ref().and_then(|m| m.max_tokens))
                .unwrap_or(8192),
            thinking_budget: args
                .thinking_budget
                .or_else(|| section.as_ref().and_then(|m| m.thinking_budget)),
        };
        let task_limits = task.as_ref().and_then(|t| t.limits);
        let limits = Limits {
            max_turns: args
                .max_turns
                .or_else(|| task_limits.and_then(|l| l.max_turns))
                .unwrap_or(30),
            max_cost: args
                .max_cost
                .or_else(|| task_limits.and_then(|l| l.max_cost))
                .unwrap_or(1.00),
            compact_at: args
                .compact_at
                .or_else(|| task_limits.and_then(|l| l.compact_at))
                .unwrap_or(100_000),
        };
        if limits.max_turns == 0 {
            bail!("--max-turns must be at least 1");
        }
        if !(limits.max_cost.is_finite() && limits.max_cost >= 0.0) {
            bail!("--max-cost must be a non-negative number of USD");
        }
        let sandbox = match args.sandbox.as_deref() {
            None | Some("local") => match task.as_ref().and_then(|t| t.sandbox.clone()) {
                Some(remote) if args.sandbox.is_none() => SandboxTarget::Remote {
                    url: remote.url,
                    token_file: remote.token_file,
                },
                _ => SandboxTarget::Local,
            },
            Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                SandboxTarget::Remote {
                    url: url.to_owned(),
                    token_file: args.sandbox_token_file.clone(),
                }
            }
            Some(other) => bail!("--sandbox {other}: expected `local` or an http(s) URL"),
        };
        if let SandboxTarget::Remote {
            token_file: Some(file),
            ..
        } = &sandbox
        {
            std::fs::metadata(file)
                .with_context(|| format!("--sandbox-token-file {}", file.display()))?;
        }
        let task = task.unwrap_or(TaskFile {
            prompt: prompt.clone(),
            workspace: None,
            setup: Vec::new(),
            check: None,
            check_timeout: None,
            model: None,
            limits: None,
            sandbox: None,
            tools: None,
            network: None,
            web_search: None,
        });
        let network = args
            .network
            .clone()
            .or_else(|| task.network.clone())
            .unwrap_or_else(|| "none".to_owned());
        if network != "none" && network != "host" {
            bail!("network: expected `none` or `host`, got `{network}`");
        }
        Ok(RunConfig {
            network,
            writable: args.writable.clone(),
            prompt,
            working_dir,
            workspace: task.workspace_source().map_err(anyhow::Error::msg)?,
            setup: task.setup,
            check: task.check,
            check_timeout: task.check_timeout.unwrap_or(600),
            model,
            limits,
            sandbox,
            tools: args.tools.clone().or(task.tools),
        })
    }
}
