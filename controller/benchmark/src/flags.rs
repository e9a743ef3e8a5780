//! What a run says about a benchmark task beyond a session's flags: who acts (the model, the
//! task's oracle, nobody) and the flags only benchmark tasks take. The binary fills them from
//! its command line; [`crate::run::run_config`] makes a task's run from them.

use std::path::PathBuf;
use std::time::Duration;

use harness_runtime::input::InputError;

/// Who acts on a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Agent {
    /// The model loop.
    #[default]
    Model,
    /// The task's own solution script, run through the `bash` tool.
    Oracle,
    /// Nothing: the verifier judges the task as it was built.
    Nop,
}

sandbox_protocol::serde_names!(Agent);

/// The flags only benchmark tasks take.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TrialFlags {
    /// `--agent`: who acts (`model`, `oracle`, `nop`).
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

impl TrialFlags {
    pub fn agent(&self) -> Result<Agent, InputError> {
        self.agent.as_deref().map_or(Ok(Agent::Model), |a| {
            a.parse()
                .map_err(|err| InputError::new(format!("--agent {a}: {err}")))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_is_named_as_serde_names_it() {
        for agent in [Agent::Model, Agent::Oracle, Agent::Nop] {
            assert_eq!(agent.as_str().parse::<Agent>(), Ok(agent));
        }
        assert_eq!(Agent::Oracle.as_str(), "oracle");
        let flags = TrialFlags {
            agent: Some("robot".to_owned()),
            ..TrialFlags::default()
        };
        let err = flags.agent().unwrap_err().to_string();
        assert!(
            err.contains("--agent robot: expected `model`, `oracle` or `nop`, got `robot`"),
            "{err}"
        );
    }
}
