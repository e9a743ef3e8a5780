//! The batch's tasks checked before anything starts: every task's settings resolve, its
//! model and policy build, and a benchmark task this harness cannot run is left out.

use harness_log::TaskNotRunnable;
use harness_runtime::config::{ConfigError, RunConfig};

use super::{BatchConfig, BatchObserver, SandboxSource};

/// What checking the tasks found before anything started.
pub(super) struct Checked {
    /// The benchmark tasks' warnings (keys this harness does not use), once per task.
    warnings: Vec<String>,
    /// Tasks the harness cannot run, and why.
    pub(super) not_runnable: Vec<TaskNotRunnable>,
    /// Their trials, left out of the batch.
    pub(super) trials_not_runnable: usize,
}

impl Checked {
    /// Says what the check found: the warnings, and each task that cannot run and why.
    pub(super) fn note(&self, observer: &dyn BatchObserver) {
        for warning in &self.warnings {
            observer.note(warning);
        }
        for task in &self.not_runnable {
            observer.note(&format!(
                "not runnable: {} ({}): {}",
                task.task, task.file, task.reason
            ));
        }
    }
}

/// Every task's settings resolve before anything starts: bad input (a flag, a missing
/// credential, a task file of the operator's that does not parse) stops the batch here. A
/// benchmark task the harness cannot run is reported and left out; the others run.
pub(super) fn check_tasks(config: &BatchConfig) -> anyhow::Result<Checked> {
    let leased = matches!(config.sandbox, SandboxSource::Pool(_));
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let mut not_runnable = Vec::new();
    for task in config.tasks.iter().filter(|t| t.trial == 1) {
        match crate::launch::run_config(
            &task.source,
            &task.task,
            &config.flags,
            &config.trial,
            None,
            leased,
        ) {
            Err(ConfigError::NotRunnable(reason)) => {
                not_runnable.push(TaskNotRunnable {
                    task: task.task.clone(),
                    file: task.source.path().display().to_string(),
                    reason: reason.to_string(),
                });
            }
            // The model and the policy's classifier build now, so a missing API key stops the
            // batch before any task starts rather than failing each task.
            Ok(run) if let Err(err) = credentials(&run) => {
                problems.push(format!("{}: {err:#}", task.source.path().display()));
            }
            Ok(run) => {
                let provider = run.sandbox.provider();
                if config.pool_size > 0 && provider.is_some() {
                    warnings.push(format!(
                        "warning: {}: --pool-size does not apply to a benchmark task, which runs in its own image",
                        task.task
                    ));
                }
                let bench = provider.map(|p| p.warnings()).unwrap_or_default();
                warnings.extend(
                    bench
                        .into_iter()
                        .map(|w| format!("warning: {}: {w}", task.task)),
                );
            }
            Err(ConfigError::Input(err)) => {
                problems.push(format!("{}: {err}", task.source.path().display()));
            }
        }
    }
    if !problems.is_empty() {
        anyhow::bail!("the batch did not start:\n  {}", problems.join("\n  "));
    }
    let trials_not_runnable = config
        .tasks
        .iter()
        .filter(|t| not_runnable.iter().any(|n| n.task == t.task))
        .count();
    if trials_not_runnable == config.tasks.len() {
        let why: Vec<String> = not_runnable
            .iter()
            .map(|n| format!("{}: {}", n.file, n.reason))
            .collect();
        anyhow::bail!(
            "the batch did not start: none of its tasks can run here:\n  {}",
            why.join("\n  ")
        );
    }
    Ok(Checked {
        warnings,
        not_runnable,
        trials_not_runnable,
    })
}

/// Builds a task's model and policy as its session will (without starting anything): what a
/// missing credential or an unknown provider fails.
fn credentials(run: &RunConfig) -> anyhow::Result<()> {
    let model = crate::launch::build_model(run, None)?;
    harness_judge::build_policy(&run.policy, &run.model, &model, None)?;
    Ok(())
}
