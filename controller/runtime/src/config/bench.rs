//! What a run says about benchmark tasks that the runtime needs: who acts (the model, the
//! task's oracle, nobody), the flags only benchmark tasks take, and why a task cannot be run.
//! The benchmark adapter makes a task's run from them (`harness_benchmark::run`).

use crate::input::InputError;
use std::path::PathBuf;
use std::time::Duration;

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
    pub fn agent(&self) -> Result<AgentKind, InputError> {
        self.agent
            .as_deref()
            .map_or(Ok(AgentKind::Model), |a| a.parse().map_err(InputError::new))
    }
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

/// Why a task's settings did not resolve: a task this harness cannot run (a batch reports it
/// and runs the rest), or input that is wrong for every task (a batch does not start).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    NotRunnable(#[from] NotRunnable),
    #[error(transparent)]
    Input(#[from] InputError),
}
