//! The settings of one run, resolved from flags, a task file and defaults (flags win).

use std::path::PathBuf;

use anyhow::{Context, bail};

use crate::cli::{RunArgs, SessionArgs};
use crate::docker_sandbox::{self, DockerSpec};
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
    /// A fresh container per session.
    Docker(DockerSpec),
}

impl SandboxTarget {
    /// `local`, `docker` or `remote`, as the log names it.
    pub fn kind(&self) -> &'static str {
        match self {
            SandboxTarget::Local => "local",
            SandboxTarget::Remote { .. } => "remote",
            SandboxTarget::Docker(_) => "docker",
        }
    }
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
    /// The longest the session may run.
    pub lifetime: Option<std::time::Duration>,
}

impl RunConfig {
    pub fn resolve(args: &RunArgs) -> anyhow::Result<RunConfig> {
        Self::build(&args.words, args.task.as_deref(), &args.session)
    }

    /// One run from its words (`[WORKING_DIR] TASK…`), task file and flags.
    pub fn build(
        words: &[String],
        task_file: Option<&std::path::Path>,
        args: &SessionArgs,
    ) -> anyhow::Result<RunConfig> {
        let task = task_file.map(TaskFile::load).transpose()?;
        let (working_dir, prompt) = match &task {
            Some(task) => {
                if words.len() > 1 {
                    bail!(
                        "with --task, give at most a working directory, not a task text ({} words given)",
                        words.len()
                    );
                }
                (words.first().map(PathBuf::from), task.prompt.clone())
            }
            None => match words {
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
        let section = task
            .as_ref()
            .and_then(|t| t.sandbox.clone())
            .unwrap_or_default();
        let kind = match args.sandbox.as_deref() {
            Some(flag) => flag.to_owned(),
            None => match (&section.provider, &section.url) {
                (Some(provider), _) => provider.clone(),
                (None, Some(_)) => "remote".to_owned(),
                (None, None) => "local".to_owned(),
            },
        };
        let docker_only = [
            ("memory", args.memory.is_some() || section.memory.is_some()),
            ("cpus", args.cpus.is_some() || section.cpus.is_some()),
            ("pids", args.pids.is_some() || section.pids.is_some()),
            ("image", args.image.is_some() || section.image.is_some()),
        ];
        if kind != "docker"
            && let Some((name, _)) = docker_only.iter().find(|(_, given)| *given)
        {
            bail!(
                "{name}: a container limit, for `--sandbox docker` only (this run's sandbox is {kind}); \
                 a local sandbox takes its limits from the machine"
            );
        }
        let lifetime: Option<std::time::Duration> = match (args.lifetime, &section.lifetime) {
            (Some(flag), _) => Some(flag.into()),
            (None, Some(text)) => Some(
                humantime::parse_duration(text)
                    .map_err(|err| anyhow::anyhow!("sandbox.lifetime `{text}`: {err}"))?,
            ),
            (None, None) => None,
        };
        if lifetime.is_some_and(|l| l.is_zero()) {
            bail!("lifetime: must be longer than zero");
        }
        let sandbox = match kind.as_str() {
            "local" => SandboxTarget::Local,
            "remote" if args.sandbox.is_none() => SandboxTarget::Remote {
                url: section
                    .url
                    .clone()
                    .context("sandbox: `provider: remote` needs a `url`")?,
                token_file: section.token_file,
            },
            "docker" => {
                let memory = match args.memory.as_ref().or(section.memory.as_ref()) {
                    Some(text) => Some(
                        docker_sandbox::parse_bytes(text)
                            .map_err(|why| anyhow::anyhow!("memory: {why}"))?,
                    ),
                    None => None,
                };
                let cpus = args.cpus.or(section.cpus);
                if let Some(cpus) = cpus
                    && !(cpus.is_finite() && cpus > 0.0)
                {
                    bail!("cpus: expected a positive number, got {cpus}");
                }
                let pids = args.pids.or(section.pids);
                if let Some(pids) = pids
                    && pids < 8
                {
                    bail!("pids: {pids} is too few for a shell and the server (at least 8)");
                }
                SandboxTarget::Docker(DockerSpec {
                    image: args
                        .image
                        .clone()
                        .or(section.image)
                        .or_else(|| std::env::var("HARNESS_SANDBOX_IMAGE").ok())
                        .unwrap_or_else(|| docker_sandbox::DEFAULT_IMAGE.to_owned()),
                    memory,
                    cpus,
                    pids,
                    lifetime,
                    network: String::new(),
                    tools: None,
                })
            }
            url if url.starts_with("http://") || url.starts_with("https://") => {
                SandboxTarget::Remote {
                    url: url.to_owned(),
                    token_file: args.sandbox_token_file.clone(),
                }
            }
            other => bail!("sandbox `{other}`: expected `local`, `docker` or an http(s) URL"),
        };
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
        let tools = args.tools.clone().or(task.tools.clone());
        let sandbox = match sandbox {
            SandboxTarget::Docker(spec) => SandboxTarget::Docker(DockerSpec {
                network: network.clone(),
                tools: tools.clone(),
                ..spec
            }),
            other => other,
        };
        Ok(RunConfig {
            lifetime,
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
            tools,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    /// Resolves `harness run ARGS` with a task file holding `task`.
    fn resolve(task: &str, args: &[&str]) -> anyhow::Result<RunConfig> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("task.yaml");
        std::fs::write(&path, task).unwrap();
        let mut argv = vec!["harness", "run", "--task", path.to_str().unwrap()];
        argv.extend_from_slice(args);
        let Command::Run(run) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("not run")
        };
        RunConfig::resolve(&run)
    }

    #[test]
    fn a_docker_sandbox_takes_its_limits_from_the_task_and_the_flags() {
        let config = resolve(
            "prompt: p\nnetwork: host\nsandbox: {provider: docker, memory: 2g, cpus: 1.5, lifetime: 30m}\n",
            &["--pids", "256"],
        )
        .unwrap();
        let SandboxTarget::Docker(spec) = config.sandbox else {
            panic!("{:?}", config.sandbox)
        };
        assert_eq!(spec.memory, Some(2 << 30));
        assert_eq!(spec.cpus, Some(1.5));
        assert_eq!(spec.pids, Some(256));
        assert_eq!(spec.network, "host");
        assert_eq!(spec.lifetime, Some(std::time::Duration::from_secs(1800)));
        assert_eq!(config.lifetime, spec.lifetime);
        // The flag wins over the task's provider.
        let config = resolve(
            "prompt: p\nsandbox: {provider: docker}\n",
            &["--sandbox", "local"],
        );
        assert_eq!(config.unwrap().sandbox, SandboxTarget::Local);
    }

    #[test]
    fn container_limits_outside_docker_and_bad_values_are_named() {
        let err = resolve("prompt: p\n", &["--memory", "1g"]).unwrap_err();
        assert!(
            err.to_string().contains("memory") && err.to_string().contains("--sandbox docker"),
            "{err}"
        );
        let err = resolve(
            "prompt: p\nsandbox: {provider: docker, memory: lots}\n",
            &[],
        );
        assert!(err.unwrap_err().to_string().contains("`lots`"));
        let err = resolve("prompt: p\nsandbox: {lifetime: soon}\n", &[]);
        assert!(
            err.unwrap_err()
                .to_string()
                .contains("sandbox.lifetime `soon`")
        );
        let err = resolve("prompt: p\nsandbox: {provider: docker}\n", &["--pids", "2"]);
        assert!(err.unwrap_err().to_string().contains("pids: 2"));
        let err = resolve("prompt: p\nsandbox: {provider: vm}\n", &[]);
        assert!(
            err.unwrap_err()
                .to_string()
                .contains("sandbox.provider: expected")
        );
    }
}
