//! The events of a benchmark task's session (Harbor, Terminal-Bench): its record in the
//! header, its images, its steps, the isolation between agent and verifier, the verifier.

use sandbox_protocol::ChangeKind;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{BlobRef, Text};

/// What a session's provider records in the log's header (`session_started.benchmark`): the
/// runtime's word for it, which knows no benchmark.
pub type ProviderRecord = BenchmarkRecord;

/// The benchmark task a session ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BenchmarkRecord {
    /// `harbor` or `terminal-bench-1`.
    pub format: String,
    pub name: String,
    pub dir: String,
    /// `sha256:…`, as Harbor hashes a task's files.
    pub digest: String,
    /// The image the main container ran.
    pub image: String,
    /// Whether the agent's commands could reach the internet.
    pub online: bool,
    /// Each phase's network (`public`, `no-network`, `allowlist HOST, …`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkRecord>,
    /// The task's `[metadata] expected_broken`: its author says its oracle does not pass, and
    /// why (a demonstration, a known-bad task kept in a dataset); reports label it expected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_broken: Option<String>,
}

/// A benchmark task's networks, as each phase had it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkRecord {
    /// While its containers started and its steps were prepared.
    pub baseline: String,
    pub agent: String,
    pub verifier: String,
}

/// An image a benchmark task's container (or one of its services) runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImageBuilt {
    /// `main`, or the compose service's name.
    pub service: String,
    /// The image's tag (a hash of its build context, Dockerfile and arguments).
    pub tag: String,
    /// Found on the engine: nothing was built.
    pub cached: bool,
    pub duration_ms: u64,
    /// The builder's output, when it built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Text>,
}

/// A step of a multi-step benchmark task begins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepStarted {
    /// From 1.
    pub index: u32,
    /// Its folder's name under `steps/`.
    pub name: String,
    /// The step's instruction: the prompt of this step's conversation.
    pub instruction: Text,
    pub agent_timeout_ms: u64,
}

/// A multi-step benchmark task's steps, scored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepsFinished {
    /// `mean` (each key over the steps whose verifier gave rewards) or `final` (the last step
    /// run's).
    pub strategy: String,
    /// The steps that ran, in order.
    pub steps: Vec<StepScore>,
    /// The task's rewards from its steps'; null when no step gave any.
    pub rewards: Option<std::collections::BTreeMap<String, f64>>,
    pub reward: Option<f64>,
    pub passed: bool,
    pub pass_threshold: f64,
    /// Why the steps after the last one run did not run (a `min_reward` not reached, a step
    /// that failed before its verifier judged it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// One step's score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepScore {
    pub name: String,
    pub rewards: Option<std::collections::BTreeMap<String, f64>>,
    pub reward: Option<f64>,
    /// Its error by Harbor's class (`AgentTimeoutError`, `RewardFileNotFoundError`,
    /// `RuntimeError` for a `setup.sh` that failed, `HealthcheckError`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What stood between a benchmark task's agent and its verifier. Nothing of the agent's phase
/// reaches the verifier: its processes are ended, and the paths the tests are judged by
/// (`/tests`, `/logs/verifier` and the test configuration files pytest reads above `/tests`)
/// are put back as the task's image had them before the agent ran. What the agent had done
/// to them is kept here as evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifierIsolated {
    /// The step of a multi-step task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Processes still running when the agent's phase ended (the image's own entrypoint and
    /// its children excepted), ended before the verifier.
    pub processes_ended: Vec<EndedProcess>,
    /// What the agent's phase changed in the guarded paths, against the image's state.
    pub changes: Vec<GuardedChange>,
    /// The agent's calls that named a guarded path.
    pub calls: Vec<GuardedCall>,
    /// Whether the agent changed a guarded path, or called a tool to write one: reward
    /// hacking, attempted.
    pub tampered: bool,
    /// Whether the guarded paths are as the image had them again. When not (the agent's
    /// changes resisted), the verifier did not run and the trial scores 0.
    pub restored: bool,
    /// Guarded paths this harness could not save before the agent ran, with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unguarded: Vec<String>,
    /// In an allow-list phase: the hosts the task's egress proxy let through and refused
    /// during the agent's phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<EgressRecord>,
    /// What the agent's phase changed, outside the guarded paths, in what runs the tests in
    /// this container (programs on `PATH`, Python's start-up files and installed modules, the
    /// dynamic linker's configuration, shared libraries), as the engine lists the container's
    /// changes. Not put back; any of them makes the trial `tampered`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime: Vec<GuardedChange>,
    pub duration_ms: u64,
}

/// Connections a task's egress proxy judged, by host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EgressRecord {
    pub host: String,
    pub allowed: bool,
    pub count: u64,
}

/// A process the agent's phase left running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EndedProcess {
    /// As the task's commands saw it.
    pub pid: u32,
    pub command: String,
}

/// A guarded path the agent's phase changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GuardedChange {
    pub path: String,
    pub change: ChangeKind,
    /// Its size after the change (absent when deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// An agent's call that named a guarded path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GuardedCall {
    pub call_id: String,
    pub tool: String,
    /// The guarded path it named.
    pub path: String,
    /// A file tool's write (`write_file`, `search_replace`); a command only names the path.
    pub write: bool,
}

/// A benchmark task's verifier, after the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifierFinished {
    /// The step of a multi-step task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Named rewards (`reward.txt` gives `reward`); null when the verifier failed.
    pub rewards: Option<std::collections::BTreeMap<String, f64>>,
    /// The reward the pass is judged by: `reward`, else the mean of all.
    pub reward: Option<f64>,
    pub passed: bool,
    pub pass_threshold: f64,
    /// The task's timeout stopped the agent before the verifier ran (it still judges).
    #[serde(default)]
    pub agent_timed_out: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<crate::VerifierFailure>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// How a reward was reached that the output alone does not show (a Terminal-Bench 1
    /// test run whose output held no result: unresolved, 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub exit_code: Option<i64>,
    pub duration_ms: u64,
    /// The test output.
    pub output: Text,
    /// `ctrf.json`, when the tests wrote one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ctrf: Option<BlobRef>,
}
