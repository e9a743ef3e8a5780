//! A benchmark task's run (Harbor or Terminal-Bench 1): the task file decides the prompt, the
//! image, the timeouts, the resources and the network; flags override.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};

use super::{RunConfig, SandboxTarget, SessionFlags};
use crate::bench::image::{BuildSettings, parse_mapping};
use crate::bench::{self, BenchTask};
use crate::policy::Approve;
use crate::sandbox::NetworkMode;
use crate::task::TaskFile;

/// Who acts on a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AgentKind {
    /// The model loop.
    #[default]
    Model,
    /// The task's own solution script, run through the `bash` tool.
    Oracle,
    /// Nothing: the verifier judges the task as it was built.
    Nop,
}

impl AgentKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::Model => "model",
            AgentKind::Oracle => "oracle",
            AgentKind::Nop => "nop",
        }
    }
}

impl std::str::FromStr for AgentKind {
    type Err = String;

    fn from_str(text: &str) -> Result<AgentKind, String> {
        match text {
            "model" => Ok(AgentKind::Model),
            "oracle" => Ok(AgentKind::Oracle),
            "nop" => Ok(AgentKind::Nop),
            other => Err(format!("--agent {other}: expected model, oracle or nop")),
        }
    }
}

/// The flags only benchmark tasks take.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BenchFlags {
    pub agent: Option<String>,
    /// The reward at or above which a trial passes; 1 when absent.
    pub pass_threshold: Option<f64>,
    /// `FROM=TO`, each.
    pub image_map: Vec<String>,
    pub image_map_file: Option<PathBuf>,
    /// A CA bundle for every image build.
    pub build_ca: Option<PathBuf>,
    pub agent_timeout: Option<Duration>,
    pub verifier_timeout: Option<Duration>,
    /// Host variables a task may read (`${VAR}` in its compose file and env tables), by name;
    /// none when empty: a task folder is someone else's.
    pub task_env: Vec<String>,
    /// The Docker network that is the task's internet (`bridge` when absent).
    pub task_internet: Option<String>,
}

impl BenchFlags {
    pub fn agent(&self) -> anyhow::Result<AgentKind> {
        self.agent.as_deref().map_or(Ok(AgentKind::Model), |a| {
            a.parse().map_err(anyhow::Error::msg)
        })
    }

    /// The image map and the CA bundle, read and checked.
    pub fn build_settings(&self) -> anyhow::Result<BuildSettings> {
        let mut settings = BuildSettings::default();
        for text in &self.image_map {
            settings
                .image_map
                .push(parse_mapping(text).context("--image-map")?);
        }
        if let Some(file) = &self.image_map_file {
            settings.read_map_file(file).context("--image-map-file")?;
        }
        if let Some(file) = &self.build_ca {
            let bytes = std::fs::read(file)
                .with_context(|| format!("--build-ca: reading {}", file.display()))?;
            if !String::from_utf8_lossy(&bytes).contains("-----BEGIN CERTIFICATE-----") {
                bail!(
                    "--build-ca {}: not a PEM bundle (no BEGIN CERTIFICATE line)",
                    file.display()
                );
            }
            settings.ca_bundle = Some(bytes);
        }
        Ok(settings)
    }
}

/// A benchmark task's run: the task, where its container is, the pass threshold.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRun {
    /// The task, its timeouts and resources already overridden by flags.
    pub task: BenchTask,
    pub place: TaskPlace,
    pub pass_threshold: f64,
}

/// Where a benchmark task's container comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskPlace {
    /// Built and started here, with a static `sandbox-server` injected.
    Docker {
        build: BuildSettings,
        server: PathBuf,
        /// The Docker network that is the task's internet.
        internet: String,
    },
    /// Already running the server in the task's image (a Kubernetes pod): the verifier runs
    /// through its API.
    Remote {
        url: String,
        token_file: Option<PathBuf>,
    },
}

impl RunConfig {
    /// A benchmark task (a Harbor or Terminal-Bench 1 folder) under `flags`.
    /// A benchmark task's settings under the flags. A task the harness cannot run (its folder
    /// does not load, its compose file cannot run here, the oracle has no solution) fails with
    /// a [`NotRunnable`], which a batch reports and runs the rest without; other errors are the
    /// flags'.
    pub fn for_bench(dir: &Path, name: &str, flags: &SessionFlags) -> anyhow::Result<RunConfig> {
        let not_runnable = |err: anyhow::Error| anyhow::Error::new(NotRunnable(format!("{err:#}")));
        let mut task = bench::load(dir, name, &bench::HostVars::named(&flags.bench.task_env))
            .map_err(not_runnable)?;
        refuse_flags_of_other_sandboxes(flags)?;
        let agent = flags.bench.agent()?;
        if agent == AgentKind::Oracle && task.solution.is_none() {
            return Err(not_runnable(anyhow::anyhow!(
                "{}: --agent oracle needs the task's solution (solution/solve.sh or solution.sh), and it has none",
                dir.display()
            )));
        }
        override_task(&mut task, flags)?;
        if let bench::Environment::Compose { file, .. } = &task.environment {
            // A compose file that cannot run is refused now, not when its containers start.
            bench::compose::load(
                file,
                &bench::container::compose_vars(&task, "check"),
                &task.dir,
            )
            .map_err(not_runnable)?;
        }
        // --network sets the agent's network, over the task's (each step's too).
        let agent_network = match flags.network.as_deref() {
            None => None,
            Some("none") => Some(bench::NetworkPolicy::NoNetwork),
            Some("host") => Some(bench::NetworkPolicy::Public),
            Some(other) => bail!(
                "--network {other}: a benchmark task takes `none` (no internet for the agent) or `host` (internet)"
            ),
        };
        if let Some(policy) = agent_network {
            task.network.agent = policy.clone();
            for step in &mut task.steps {
                step.agent_network = policy.clone();
            }
        }
        let pass_threshold = flags.bench.pass_threshold.unwrap_or(1.0);
        if !pass_threshold.is_finite() {
            bail!("--pass-threshold: expected a number");
        }
        let mut as_task = TaskFile::from_prompt(&task.instruction);
        as_task.tools = flags.tools.clone();
        let mut flags = flags.clone();
        flags.max_turns = flags.max_turns.or(Some(100));
        flags.max_cost = flags.max_cost.or(Some(10.0));
        if agent != AgentKind::Model {
            // The task's own script (or nothing): the rules still judge it, no model is asked.
            flags.no_classifier = true;
            flags.approve = Approve::Auto;
        }
        let mut model = super::model_spec(&as_task, &flags)?;
        if agent != AgentKind::Model {
            model.name = agent.as_str().to_owned();
            model.reasoning_effort = None;
        }
        let place = place(&flags)?;
        let run = BenchRun {
            place,
            pass_threshold,
            task,
        };
        Ok(RunConfig {
            prompt: run.task.instruction.clone(),
            working_dir: None,
            workspace: None,
            setup: Vec::new(),
            check: None,
            check_timeout: 600,
            model,
            limits: super::limits(&as_task, &flags)?,
            network: if run.task.network.agent == bench::NetworkPolicy::Public {
                NetworkMode::Host
            } else {
                NetworkMode::None
            },
            writable: Vec::new(),
            run_as: crate::sandbox::local::RunAs::Own,
            keep_workspace: flags.keep_workspace,
            lifetime: flags.lifetime,
            tools: flags.tools.clone(),
            policy: super::policy_settings(&flags),
            hooks: super::hooks(None, &flags)?,
            mcp: super::mcp_servers(None, &flags)?,
            mcp_workspace: flags.mcp_workspace,
            agent,
            sandbox: SandboxTarget::Provided(std::sync::Arc::new(
                crate::bench::provider::TaskProvider {
                    run: std::sync::Arc::new(run),
                },
            )),
        })
    }
}

/// A server already in the task's image (a URL), else containers started here.
fn place(flags: &SessionFlags) -> anyhow::Result<TaskPlace> {
    Ok(match flags.sandbox.as_deref() {
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
            TaskPlace::Remote {
                url: url.to_owned(),
                token_file: flags.sandbox_token_file.clone(),
            }
        }
        _ => TaskPlace::Docker {
            build: flags.bench.build_settings()?,
            server: bench::container::static_server()?,
            internet: flags
                .bench
                .task_internet
                .clone()
                .unwrap_or_else(|| "bridge".to_owned()),
        },
    })
}

fn refuse_flags_of_other_sandboxes(flags: &SessionFlags) -> anyhow::Result<()> {
    if let Some(sandbox) = flags
        .sandbox
        .as_deref()
        .filter(|s| *s != "docker" && !s.starts_with("http://") && !s.starts_with("https://"))
    {
        bail!(
            "--sandbox {sandbox}: a benchmark task runs in its own image: `--sandbox docker` (the default for it), or the URL of a server already running in that image"
        );
    }
    if flags.image.is_some() {
        bail!("--image: a benchmark task brings its own image; --image-map FROM=TO replaces it");
    }
    if flags.pids.is_some() || !flags.writable.is_empty() {
        bail!("--pids and --writable do not apply to a benchmark task's container");
    }
    Ok(())
}

/// Flags win over the task's timeouts and resources.
fn override_task(task: &mut BenchTask, flags: &SessionFlags) -> anyhow::Result<()> {
    if let Some(timeout) = flags.bench.agent_timeout {
        task.agent_timeout = timeout;
        for step in &mut task.steps {
            step.agent_timeout = timeout;
        }
    }
    if let Some(timeout) = flags.bench.verifier_timeout {
        task.verifier_timeout = timeout;
        for step in &mut task.steps {
            step.verifier_timeout = timeout;
        }
    }
    if let Some(cpus) = flags.cpus {
        if !(cpus.is_finite() && cpus > 0.0) {
            bail!("--cpus: expected a positive number, got {cpus}");
        }
        task.resources.cpus = Some(cpus);
    }
    if let Some(text) = &flags.memory {
        let bytes =
            crate::text::parse_size(text).map_err(|why| anyhow::anyhow!("--memory: {why}"))?;
        task.resources.memory_mb = Some((bytes.max(0) as u64).div_ceil(1 << 20));
    }
    Ok(())
}

/// Why a benchmark task cannot be run by this harness (as opposed to a flag that is wrong for
/// every task): a batch reports the task and runs the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotRunnable(pub String);

impl std::fmt::Display for NotRunnable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotRunnable {}
