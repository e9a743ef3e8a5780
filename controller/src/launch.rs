//! What `harness run` and `harness batch` need to start a session of a task: its config,
//! whatever the task's kind, and the model it talks to (a provider's, a scripted one, the
//! recorded replies of an earlier session, or a benchmark task's oracle or nop agent).

use std::path::PathBuf;
use std::sync::Arc;

use harness_benchmark::flags::{Agent, TrialFlags};
use harness_log::reader;
use harness_models::{self, Model, RetryPolicy, gate::Gates};
use harness_replay::model::ReplayModel;
use harness_runtime::config::{ConfigError, RunConfig, SessionFlags};
use harness_runtime::input::InputError;
use harness_runtime::task::TaskSource;

/// Builds the model; its requests pass the gate of its endpoint from `gates`.
pub fn build_model(config: &RunConfig, gates: Option<&Gates>) -> anyhow::Result<Arc<dyn Model>> {
    if let Some(provider) = config.sandbox.provider()
        && provider.stand_in().is_some()
    {
        return Ok(provider.stand_in_model()?);
    }
    let spec = &config.model;
    if let Some(path) = spec.name.strip_prefix("replay:") {
        let dir = reader::session_dir(std::path::Path::new(path));
        return Ok(Arc::new(ReplayModel::load(&dir)?));
    }
    Ok(harness_models::build_gated(
        spec,
        RetryPolicy::default(),
        gates,
    )?)
}

/// A task of a dataset, whatever its kind: a YAML task file (with a working directory
/// when the session gets one, and whether its sandbox is a leased pool member) or a
/// benchmark task folder.
pub fn run_config(
    source: &TaskSource,
    name: &str,
    flags: &SessionFlags,
    trial: &TrialFlags,
    working_dir: Option<PathBuf>,
    leased: bool,
) -> Result<RunConfig, ConfigError> {
    match source {
        TaskSource::File(file) => {
            model_acts(trial)?;
            Ok(RunConfig::for_task(file, flags, working_dir, leased)?)
        }
        TaskSource::Folder(_) if leased => Err(InputError::new(
            "a benchmark task runs in its own image, not in a pool member: run it with --sandbox docker",
        )
        .into()),
        TaskSource::Folder(dir) => harness_benchmark::run::run_config(dir, name, flags, trial),
    }
}

/// A task that is no benchmark task is acted on by the model: `--agent oracle` or `nop` is
/// refused for it, by name.
pub fn model_acts(trial: &TrialFlags) -> Result<(), InputError> {
    let agent = trial.agent()?;
    if agent != Agent::Model {
        return Err(InputError(format!(
            "--agent {}: only a benchmark task (a Harbor or Terminal-Bench folder) has an oracle or a verifier",
            agent.as_str()
        )));
    }
    Ok(())
}
