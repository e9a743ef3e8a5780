//! A benchmark task's run (Harbor or Terminal-Bench 1): the task file decides the prompt, the
//! image, the timeouts, the resources and the network; flags override. The run is a session's
//! [`RunConfig`] whose sandbox the task provides ([`super::provider`]).

use std::path::{Path, PathBuf};

use super::BenchTask;
use super::image::{BuildSettings, parse_mapping};
use crate::flags::{Agent, TrialFlags};
use harness_policy::Approve;
use harness_runtime::config::{
    self, ConfigError, NotRunnable, RunConfig, SandboxTarget, SessionFlags,
};
use harness_runtime::input::InputError;
use harness_runtime::sandbox::NetworkMode;
use harness_runtime::task::TaskFile;

/// The turn and cost limits of a benchmark task's session whose flags set none.
pub const DEFAULT_MAX_TURNS: u32 = 100;
pub const DEFAULT_MAX_COST: f64 = 10.0;

/// A benchmark task's run: the task, where its container is, the pass threshold.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRun {
    /// The task, its timeouts and resources already overridden by flags.
    pub task: BenchTask,
    /// Who acts on it.
    pub agent: Agent,
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
        tls: harness_runtime::sandbox::ClientTls,
    },
}

/// A benchmark task's settings under the flags. A task the harness cannot run (its folder
/// does not load, its compose file cannot run here, the oracle has no solution) fails with
/// a [`NotRunnable`], which a batch reports and runs the rest without; other errors are the
/// flags'.
pub fn run_config(
    dir: &Path,
    name: &str,
    flags: &SessionFlags,
    trial: &TrialFlags,
) -> Result<RunConfig, ConfigError> {
    let (mut task, agent) = runnable_task(dir, name, flags, trial)?;
    override_agent_network(&mut task, flags)?;
    let pass_threshold = trial.pass_threshold.unwrap_or(1.0);
    if !pass_threshold.is_finite() {
        return Err(InputError::new("--pass-threshold: expected a number").into());
    }
    let mut as_task = TaskFile::from_prompt(&task.instruction);
    as_task.tools = flags.tools.clone();
    let flags = session_flags(flags, agent);
    let mut model = config::model_spec(&as_task, &flags)?;
    if agent != Agent::Model {
        model.name = agent.as_str().to_owned();
        model.reasoning_effort = None;
    }
    let place = place(&flags, trial)?;
    let run = BenchRun {
        agent,
        place,
        pass_threshold,
        task,
    };
    session_config(run, model, &as_task, &flags)
}

/// Loads the task and checks that this harness can run it for `trial`'s agent, with the
/// flags' overrides applied. Its own step: every refusal of the task itself is here, as a
/// [`NotRunnable`], before the session's settings are worked out.
fn runnable_task(
    dir: &Path,
    name: &str,
    flags: &SessionFlags,
    trial: &TrialFlags,
) -> Result<(BenchTask, Agent), ConfigError> {
    // The task folder's own refusals, said with their causes.
    let not_runnable = |err: InputError| NotRunnable(err.0);
    let mut task =
        super::load(dir, name, &super::HostVars::named(&trial.task_env)).map_err(not_runnable)?;
    refuse_flags_of_other_sandboxes(flags)?;
    let agent = trial.agent()?;
    if agent == Agent::Oracle && task.solution.is_none() {
        return Err(NotRunnable(format!(
            "{}: --agent oracle needs the task's solution (solution/solve.sh or solution.sh), and it has none",
            dir.display()
        ))
        .into());
    }
    override_task(&mut task, flags, trial)?;
    if let super::Environment::Compose { file, .. } = &task.environment {
        // A compose file that cannot run is refused now, not when its containers start.
        super::compose::load(
            file,
            &super::container::compose_vars(&task, "check"),
            &task.dir,
        )
        .map_err(not_runnable)?;
    }
    Ok((task, agent))
}

/// --network sets the agent's network, over the task's (each step's too).
fn override_agent_network(task: &mut BenchTask, flags: &SessionFlags) -> Result<(), ConfigError> {
    let agent_network = match flags.network.as_deref() {
        None => None,
        Some("none") => Some(super::NetworkPolicy::NoNetwork),
        Some("host") => Some(super::NetworkPolicy::Public),
        Some(other) => {
            return Err(InputError(format!(
                "--network {other}: a benchmark task takes `none` (no internet for the agent) or `host` (internet)"
            ))
            .into());
        }
    };
    if let Some(policy) = agent_network {
        task.network.agent = policy.clone();
        for step in &mut task.steps {
            step.agent_network = policy.clone();
        }
    }
    Ok(())
}

/// The session's flags with a benchmark's defaults: its turn and cost limits when the flags
/// set none, and no model asked when the agent is not a model.
fn session_flags(flags: &SessionFlags, agent: Agent) -> SessionFlags {
    let mut flags = flags.clone();
    flags.max_turns = flags.max_turns.or(Some(DEFAULT_MAX_TURNS));
    flags.max_cost = flags.max_cost.or(Some(DEFAULT_MAX_COST));
    if agent != Agent::Model {
        // The task's own script (or nothing): the rules still judge it, no model is asked.
        flags.no_classifier = true;
        flags.approve = Approve::Auto;
    }
    flags
}

/// The session's [`RunConfig`], whose sandbox is the task's [`super::provider`]. Its own
/// step: what is left here is the session's settings, read from the flags in this order.
fn session_config(
    run: BenchRun,
    model: harness_models::ModelSpec,
    as_task: &TaskFile,
    flags: &SessionFlags,
) -> Result<RunConfig, ConfigError> {
    Ok(RunConfig {
        prompt: run.task.instruction.clone(),
        working_dir: None,
        workspace: None,
        setup: Vec::new(),
        check: None,
        check_timeout: 600,
        model,
        limits: config::limits(as_task, flags)?,
        network: if run.task.network.agent == super::NetworkPolicy::Public {
            NetworkMode::Host
        } else {
            NetworkMode::None
        },
        writable: Vec::new(),
        run_as: harness_runtime::sandbox::local::RunAs::Own,
        known_files: None,
        keep_workspace: flags.keep_workspace,
        lifetime: flags.lifetime,
        tools: flags.tools.clone(),
        subagents: harness_runtime::subagent::settings(
            flags.tools.as_deref(),
            None,
            &flags.agents,
        )?,
        policy: config::policy_settings(flags),
        hooks: config::hooks(None, flags)?,
        mcp: config::mcp_servers(None, flags)?,
        mcp_workspace: flags.mcp_workspace,
        sandbox: SandboxTarget::Provided(std::sync::Arc::new(super::provider::TaskProvider {
            run: std::sync::Arc::new(run),
        })),
    })
}

/// A server already in the task's image (a URL), else containers started here.
fn place(flags: &SessionFlags, trial: &TrialFlags) -> Result<TaskPlace, InputError> {
    Ok(match flags.sandbox.as_deref() {
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
            TaskPlace::Remote {
                url: url.to_owned(),
                token_file: flags.sandbox_token_file.clone(),
                tls: flags.sandbox_tls.clone(),
            }
        }
        _ => TaskPlace::Docker {
            build: build_settings(trial)?,
            server: super::container::static_server()
                .map_err(|err| InputError(format!("{err}")))?,
            internet: trial
                .task_internet
                .clone()
                .unwrap_or_else(|| "bridge".to_owned()),
        },
    })
}

fn refuse_flags_of_other_sandboxes(flags: &SessionFlags) -> Result<(), InputError> {
    if let Some(sandbox) = flags
        .sandbox
        .as_deref()
        .filter(|s| *s != "docker" && !s.starts_with("http://") && !s.starts_with("https://"))
    {
        return Err(InputError(format!(
            "--sandbox {sandbox}: a benchmark task runs in its own image: `--sandbox docker` (the default for it), or the URL of a server already running in that image"
        )));
    }
    if flags.image.is_some() {
        return Err(InputError::new(
            "--image: a benchmark task brings its own image; --image-map FROM=TO replaces it",
        ));
    }
    if flags.pids.is_some() || !flags.writable.is_empty() {
        return Err(InputError::new(
            "--pids and --writable do not apply to a benchmark task's container",
        ));
    }
    Ok(())
}

/// Flags win over the task's timeouts and resources.
fn override_task(
    task: &mut BenchTask,
    flags: &SessionFlags,
    trial: &TrialFlags,
) -> Result<(), InputError> {
    if let Some(timeout) = trial.agent_timeout {
        task.agent_timeout = timeout;
        for step in &mut task.steps {
            step.agent_timeout = timeout;
        }
    }
    if let Some(timeout) = trial.verifier_timeout {
        task.verifier_timeout = timeout;
        for step in &mut task.steps {
            step.verifier_timeout = timeout;
        }
    }
    if let Some(cpus) = flags.cpus {
        if !(cpus.is_finite() && cpus > 0.0) {
            return Err(InputError(format!(
                "--cpus: expected a positive number, got {cpus}"
            )));
        }
        task.resources.cpus = Some(cpus);
    }
    if let Some(text) = &flags.memory {
        let bytes = harness_log::text::parse_size(text)
            .map_err(|why| InputError(format!("--memory: {why}")))?;
        task.resources.memory_mb = Some((bytes.max(0) as u64).div_ceil(1 << 20));
    }
    Ok(())
}

/// The image map and the CA bundle of `--image-map`, `--image-map-file` and `--build-ca`,
/// read and checked.
pub fn build_settings(flags: &TrialFlags) -> Result<BuildSettings, InputError> {
    let mut settings = BuildSettings::default();
    for text in &flags.image_map {
        let mapping =
            parse_mapping(text).map_err(|err| InputError(format!("--image-map: {err}")))?;
        settings.image_map.push(mapping);
    }
    if let Some(file) = &flags.image_map_file {
        settings
            .read_map_file(file)
            .map_err(|err| InputError(format!("--image-map-file: {err}")))?;
    }
    if let Some(file) = &flags.build_ca {
        let bytes = std::fs::read(file)
            .map_err(|err| InputError(format!("--build-ca: reading {}: {err}", file.display())))?;
        if !String::from_utf8_lossy(&bytes).contains("-----BEGIN CERTIFICATE-----") {
            return Err(InputError(format!(
                "--build-ca {}: not a PEM bundle (no BEGIN CERTIFICATE line)",
                file.display()
            )));
        }
        settings.ca_bundle = Some(bytes);
    }
    Ok(settings)
}
