//! Benchmark tasks in the formats people already have: Harbor's (`task.toml`, the harness
//! behind Terminal-Bench 2) and Terminal-Bench 1's (`task.yaml`), loaded into one
//! [`BenchTask`]: an instruction, an environment to build (a Dockerfile, a compose file or a
//! prebuilt image), timeouts and resources, a verifier and maybe a solution.
//!
//! - [`harbor`], [`tb1`]: the two formats.
//! - [`compose`]: the subset of `docker-compose.yaml` tasks use.
//! - [`image`]: building a task's images through the Engine API, cached, behind a proxy.
//! - [`container`]: a task's containers with `sandbox-server` injected; [`host`]: the
//!   author-side steps, there or through a server already in the task's image.
//! - [`isolate`]: between the agent and the verifier, its processes ended and the verifier's
//!   folders put back, with the evidence of tampering ([`runtime_changes`]: what the agent
//!   changed in what runs the tests); [`verify`]: the verifier, its reward
//!   files and Terminal-Bench 1's parsers.
//! - [`agents`]: the oracle and the nop agent, played as models.
//! - [`publish`]: `harness images build`: images ahead of a run, pushed, with a Kubernetes
//!   overlay per task; [`rerun`]: a benchmark session re-run in its task's containers.
//! - [`results`], [`atif`]: what Harbor's tools read.
//! - [`error`]: the task folder's refusals and the engine's failures, typed.
//! - [`paths`]: what the harness reads or uploads from a task folder stays inside it.
//! - [`provider`]: the task as a session's provider (its containers) and grader (its
//!   verifier, [`trial`]); [`run_session`]: a trial wraps a session, and writes Harbor's files
//!   from its log after it.
//!
//! A task folder is someone else's: its compose file reads only the task's own variables and
//! those the operator names, and no task process sees the server's token. The verifier and the
//! uploads of tests and solutions are the author's: they bypass the policy, and the tests reach
//! the container only after the agent ended. A verifier that times out or writes no reward is a
//! `verifier` failure, never a pass.
//!
//! # This crate (`harness-benchmark`)
//! Benchmark tasks on top of the runtime: a trial wraps a session, whose sandbox the task
//! provides and whose verifier grades ([`provider`]). It depends on the runtime, the log toolkit
//! (for ATIF and reruns), the log, models and policy; none depends on it but the `harness`
//! binary's crate. Its failures are typed ([`error`]: a task folder's refusal, the engine's
//! part, [`results::ResultsError`]); it does not use `anyhow`.

// A trial is one future of many nested steps (its rounds, their commands, the sandbox client
// under them): the compiler's default depth of 128 for its layout is just short.
#![recursion_limit = "256"]

// What a benchmark folder looks like, which discovering tasks needs too.

pub mod agents;
pub mod atif;
pub mod compose;
pub mod container;
pub mod error;
mod folder;
pub use folder::{Format, TASK_FOLDERS, detect, digest, load};
pub mod exceptions;
pub mod flags;
pub mod harbor;
pub mod host;
pub mod image;
pub mod isolate;
pub mod paths;
pub mod provider;
pub mod publish;
pub mod rerun;
pub mod results;
pub mod run;
pub mod runtime_changes;
pub mod tb1;
mod trial;
pub mod verify;

/// A session, and when it is a benchmark trial (`trial` names its job and dataset) the files
/// Harbor's tools read, written from its finished log.
pub async fn run_session(
    options: harness_runtime::session::SessionOptions,
    trial: Option<&results::TrialLink>,
    model: std::sync::Arc<dyn harness_models::Model>,
    audience: harness_runtime::session::Audience<'_>,
    totals: &std::sync::Mutex<harness_runtime::run_loop::Totals>,
    cancel: tokio_util::sync::CancellationToken,
) -> harness_runtime::session::SessionSummary {
    let summary =
        harness_runtime::session::run_session(options, model, audience, totals, cancel).await;
    if let Some(link) = trial
        && let Err(err) = results::write_trial(&summary.log_dir, link)
    {
        audience.observer.note(&format!(
            "warning: writing the trial's result files: {}",
            harness_runtime::step::describe(&err)
        ));
    }
    summary
}

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{TaskResult, bail};

/// The image of a task's main container.
#[derive(Debug, Clone, PartialEq)]
pub enum MainImage {
    /// Built from a Dockerfile with a context folder.
    Build {
        context: PathBuf,
        dockerfile: PathBuf,
    },
    /// A prebuilt image (`[environment] docker_image`), built from `fallback` when the engine
    /// does not have it.
    Prebuilt {
        name: String,
        fallback: Option<(PathBuf, PathBuf)>,
    },
}

/// Where the task's containers come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Environment {
    /// One container.
    Single(MainImage),
    /// A compose file: the main service (`main` in Harbor, `client` in TB1) and sidecars.
    /// Harbor's main service is its environment's image unless the file builds one itself.
    Compose {
        file: PathBuf,
        main: String,
        main_image: Option<MainImage>,
    },
}

/// The verifier.
#[derive(Debug, Clone, PartialEq)]
pub enum Verifier {
    /// Harbor: `tests/` to `/tests`, `/tests/test.sh` writes `/logs/verifier/reward.{txt,json}`.
    Harbor { tests: PathBuf },
    /// TB1: `run-tests.sh` and `tests/` to `/tests`, the output judged by a parser.
    TerminalBench1 {
        run_tests: PathBuf,
        tests: Option<PathBuf>,
        parser: tb1::Parser,
    },
}

/// The oracle's script.
#[derive(Debug, Clone, PartialEq)]
pub struct Solution {
    /// Uploaded, whole, to `mount` in the container.
    pub dir: PathBuf,
    /// Only this file of `dir` is uploaded (TB1's `solution.sh` sits among other files).
    pub only: Option<String>,
    pub mount: String,
    /// The script to run, inside the container.
    pub script: String,
    pub env: BTreeMap<String, String>,
}

/// Limits a task asks for.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Resources {
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
    pub storage_mb: Option<u64>,
    pub gpus: Option<u64>,
}

/// A task of a benchmark, whatever its format.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchTask {
    /// The folder's name (a dataset-relative path where names clash).
    pub name: String,
    pub dir: PathBuf,
    pub format: Format,
    pub instruction: String,
    pub environment: Environment,
    pub agent_timeout: Duration,
    pub verifier_timeout: Duration,
    pub build_timeout: Duration,
    pub resources: Resources,
    /// What the task's containers may reach, at start and in each phase.
    pub network: Networks,
    /// Where commands start (`[environment] workdir`); the image's WORKDIR when absent.
    pub workdir: Option<String>,
    /// `[environment.env]`: in every exec and the main container.
    pub env: BTreeMap<String, String>,
    /// `[verifier.env]` (TB1: `TEST_DIR=/tests`).
    pub verifier_env: BTreeMap<String, String>,
    /// `[agent] user`: who the agent's commands run as; the image's user when absent.
    pub agent_user: Option<String>,
    /// `[verifier] user`: who the tests run as; the image's user when absent.
    pub verifier_user: Option<String>,
    pub verifier: Verifier,
    pub solution: Option<Solution>,
    pub metadata: serde_json::Value,
    /// Keys this harness does not use, named for the user.
    pub warnings: Vec<String>,
    /// `sha256:…` of the task's files, as Harbor computes a task's content hash.
    pub digest: String,
    /// The host variables the operator let it read (`--task-env`).
    pub host_vars: HostVars,
    /// A multi-step task's steps (`[[steps]]`), in order; empty for a task of one step.
    pub steps: Vec<Step>,
    /// How a multi-step task's step rewards make its reward.
    pub reward_strategy: RewardStrategy,
    /// `[environment.healthcheck]`: run once the containers are up, before the agent.
    pub healthcheck: Option<Healthcheck>,
    /// `[[verifier.collect]]`: commands run after the agent, before its logs are copied out.
    pub collect: Vec<CollectHook>,
}

/// What a phase of a task may reach (Harbor's `network_mode`, with `allowed_hosts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkPolicy {
    /// The internet.
    Public,
    /// Nothing outside the task's own containers.
    NoNetwork,
    /// The listed hosts only (normalised entries of [`sandbox_protocol::egress::AllowedHost`]),
    /// through the task's egress proxy.
    Allowlist(Vec<String>),
}

impl NetworkPolicy {
    pub fn describe(&self) -> String {
        match self {
            NetworkPolicy::Public => "public".to_owned(),
            NetworkPolicy::NoNetwork => "no-network".to_owned(),
            NetworkPolicy::Allowlist(hosts) if hosts.is_empty() => {
                "allowlist (empty: nothing outside the task)".to_owned()
            }
            NetworkPolicy::Allowlist(hosts) => format!("allowlist {}", hosts.join(", ")),
        }
    }

    /// The egress proxy's policy for it.
    pub fn egress(&self, generation: u64) -> sandbox_protocol::egress::EgressPolicy {
        use sandbox_protocol::egress::{EgressMode, EgressPolicy};
        let (mode, allowed_hosts) = match self {
            NetworkPolicy::Public => (EgressMode::All, Vec::new()),
            NetworkPolicy::NoNetwork => (EgressMode::Nothing, Vec::new()),
            NetworkPolicy::Allowlist(hosts) => (EgressMode::Listed, hosts.clone()),
        };
        EgressPolicy {
            generation,
            mode,
            allowed_hosts,
        }
    }
}

/// A task's networks: the baseline (while its containers start and steps are prepared) and
/// each phase's (Harbor's `[agent]` and `[verifier]` overrides, else the baseline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Networks {
    pub baseline: NetworkPolicy,
    pub agent: NetworkPolicy,
    pub verifier: NetworkPolicy,
}

impl Networks {
    /// One policy for every phase.
    pub fn all(policy: NetworkPolicy) -> Networks {
        Networks {
            baseline: policy.clone(),
            agent: policy.clone(),
            verifier: policy,
        }
    }

    /// Whether some phase (a step's too) needs the egress proxy.
    pub fn any_allowlist<'a>(&'a self, steps: impl IntoIterator<Item = &'a Step>) -> bool {
        let is = |p: &NetworkPolicy| matches!(p, NetworkPolicy::Allowlist(_));
        is(&self.baseline)
            || is(&self.agent)
            || is(&self.verifier)
            || steps
                .into_iter()
                .any(|s| is(&s.agent_network) || is(&s.verifier_network))
    }
}

/// How a multi-step task's reward is made from its steps' (`multi_step_reward_strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RewardStrategy {
    /// Each key's mean over the steps whose verifier gave rewards (a missing key as 0).
    #[default]
    Mean,
    /// The last step run's rewards.
    Final,
}

sandbox_protocol::serde_names!(RewardStrategy);

/// A readiness check (`healthcheck`), with Docker's HEALTHCHECK semantics: failures during
/// the start period do not count; after it, `retries` failures in a row fail the check.
#[derive(Debug, Clone, PartialEq)]
pub struct Healthcheck {
    pub command: String,
    pub interval: Duration,
    pub timeout: Duration,
    pub start_period: Duration,
    pub start_interval: Duration,
    pub retries: u32,
}

/// `[[verifier.collect]]`: a command run after the agent (best effort: a failure is noted).
#[derive(Debug, Clone, PartialEq)]
pub struct CollectHook {
    pub command: String,
    /// The compose service it runs in (`main`, the agent's container, by default).
    pub service: String,
    pub timeout: Duration,
    pub user: Option<String>,
}

/// One step of a multi-step task: its own instruction, tests, files and limits, run in the
/// same containers after the steps before it.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Its folder's name under `steps/`.
    pub name: String,
    pub instruction: String,
    /// Uploaded to `/tests` in order: the task's shared `tests/`, then the step's own.
    pub tests: Vec<PathBuf>,
    /// `steps/<name>/workdir/`: copied into the working folder before the step; its
    /// `setup.sh` runs then.
    pub workdir: Option<PathBuf>,
    pub agent_timeout: Duration,
    pub verifier_timeout: Duration,
    pub agent_user: Option<String>,
    pub verifier_user: Option<String>,
    /// The task's `[verifier.env]` with the step's over it.
    pub verifier_env: BTreeMap<String, String>,
    /// Stop after this step unless every named reward reaches its threshold.
    pub min_reward: Option<BTreeMap<String, f64>>,
    /// The step's `solution/` (else the task's), uploaded to `/solution` for the oracle.
    pub solution: Option<Solution>,
    pub healthcheck: Option<Healthcheck>,
    pub agent_network: NetworkPolicy,
    pub verifier_network: NetworkPolicy,
}

/// One round of agent then verifier: the task itself, or one of its steps.
#[derive(Debug, Clone)]
pub struct Phase<'a> {
    /// The step's name; `None` for a task of one step.
    pub step: Option<&'a str>,
    pub instruction: &'a str,
    pub agent_timeout: Duration,
    pub verifier_timeout: Duration,
    pub verifier_user: Option<&'a str>,
    /// `[environment.env]` with the verifier's over it.
    pub verifier_env: BTreeMap<String, String>,
    /// A Harbor verifier's tests folders, uploaded to `/tests` in order.
    pub tests: Vec<&'a Path>,
    pub solution: Option<&'a Solution>,
    pub workdir: Option<&'a Path>,
    pub healthcheck: Option<&'a Healthcheck>,
    pub min_reward: Option<&'a BTreeMap<String, f64>>,
    pub agent_network: &'a NetworkPolicy,
    pub verifier_network: &'a NetworkPolicy,
}

impl BenchTask {
    /// The task's rounds: itself, or each of its steps.
    pub fn phases(&self) -> Vec<Phase<'_>> {
        let env = |verifier: &BTreeMap<String, String>| {
            let mut merged = self.env.clone();
            merged.extend(verifier.clone());
            merged
        };
        if self.steps.is_empty() {
            let tests = match &self.verifier {
                Verifier::Harbor { tests } => vec![tests.as_path()],
                Verifier::TerminalBench1 { .. } => Vec::new(),
            };
            return vec![Phase {
                step: None,
                instruction: &self.instruction,
                agent_timeout: self.agent_timeout,
                verifier_timeout: self.verifier_timeout,
                verifier_user: self.verifier_user.as_deref(),
                verifier_env: env(&self.verifier_env),
                tests,
                solution: self.solution.as_ref(),
                workdir: None,
                healthcheck: None,
                min_reward: None,
                agent_network: &self.network.agent,
                verifier_network: &self.network.verifier,
            }];
        }
        self.steps
            .iter()
            .map(|step| Phase {
                step: Some(&step.name),
                instruction: &step.instruction,
                agent_timeout: step.agent_timeout,
                verifier_timeout: step.verifier_timeout,
                verifier_user: step.verifier_user.as_deref(),
                verifier_env: env(&step.verifier_env),
                tests: step.tests.iter().map(PathBuf::as_path).collect(),
                solution: step.solution.as_ref(),
                workdir: step.workdir.as_deref(),
                healthcheck: step.healthcheck.as_ref(),
                min_reward: step.min_reward.as_ref(),
                agent_network: &step.agent_network,
                verifier_network: &step.verifier_network,
            })
            .collect()
    }
}

/// Harbor 0.1's defaults, applied when a task leaves them out (0.26 reads absence as "no
/// limit", which no real task relies on).
pub const DEFAULT_AGENT_TIMEOUT: Duration = Duration::from_secs(600);
pub const DEFAULT_VERIFIER_TIMEOUT: Duration = Duration::from_secs(600);
pub const DEFAULT_BUILD_TIMEOUT: Duration = Duration::from_secs(600);

/// The host variables a task may read: only those the operator named (`--task-env`). A task
/// folder is someone else's: `${OPENAI_API_KEY}` in it must not become the harness's key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostVars {
    values: BTreeMap<String, String>,
}

impl HostVars {
    /// None of the host's.
    pub fn none() -> HostVars {
        HostVars::default()
    }

    /// The named variables of this process's environment (unset ones are left out).
    pub fn named(names: &[String]) -> HostVars {
        HostVars {
            values: names
                .iter()
                .filter_map(|name| std::env::var(name).ok().map(|v| (name.clone(), v)))
                .collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// The named variables, for the task's compose file.
    pub fn values(&self) -> &BTreeMap<String, String> {
        &self.values
    }
}

/// `${VAR}` and `${VAR:-default}` in a task's env values, from the host variables the
/// operator named (as Harbor resolves them from the host's, but a task gets none unasked).
pub fn expand_host_vars(value: &str, host: &HostVars) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let Some(end) = rest[at..].find('}') else {
            out.push_str(&rest[at..]);
            return out;
        };
        let inner = &rest[at + 2..at + end];
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        match (host.get(name), default) {
            (Some(found), _) if !found.is_empty() => out.push_str(found),
            (_, Some(default)) => out.push_str(default),
            (Some(found), None) => out.push_str(found),
            (None, None) => {}
        }
        rest = &rest[at + end + 1..];
    }
    out.push_str(rest);
    out
}

pub fn seconds(value: f64, key: &str) -> TaskResult<Duration> {
    if !value.is_finite() || value < 0.0 {
        bail!("{key}: expected a number of seconds ≥ 0, got {value}");
    }
    Ok(Duration::from_secs_f64(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_variables_expand_only_when_named() {
        let none = HostVars::none();
        assert_eq!(
            expand_host_vars("a-${HARNESS_SURELY_UNSET_VAR:-dflt}-b", &none),
            "a-dflt-b"
        );
        assert_eq!(expand_host_vars("${HARNESS_SURELY_UNSET_VAR}", &none), "");
        assert_eq!(expand_host_vars("plain", &none), "plain");
        assert_eq!(
            expand_host_vars("x ${unterminated", &none),
            "x ${unterminated"
        );
        // Issue 24 §3: the host's PATH is there, but a task gets it only when it is named.
        assert_eq!(expand_host_vars("${PATH:-none}", &none), "none");
        let path = std::env::var("PATH").unwrap();
        let named = HostVars::named(&["PATH".to_owned()]);
        assert_eq!(expand_host_vars("${PATH:-none}", &named), path);
    }
}
