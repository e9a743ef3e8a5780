//! The batch's tasks checked before anything starts: every task's settings resolve, its
//! model and policy build, and a benchmark task this harness cannot run is left out.

use std::collections::BTreeMap;

use harness_benchmark::flags::Agent;
use harness_log::TaskNotRunnable;
use harness_runtime::config::{ConfigError, NotRunnable, RunConfig};
use harness_runtime::task::TaskSource;

use super::{BatchConfig, BatchObserver, Plan, SandboxSource, TaskSpec};

/// What checking the tasks found before anything started.
#[derive(Default)]
pub(super) struct Checked {
    /// The benchmark tasks' warnings (keys this harness does not use), once per task.
    warnings: Vec<String>,
    /// Tasks the harness cannot run, and why.
    pub(super) not_runnable: Vec<TaskNotRunnable>,
    /// Their trials, left out of the batch.
    pub(super) trials_not_runnable: usize,
    /// Benchmark tasks the oracle plays whose author marks them broken on purpose
    /// (`[metadata] expected_broken`): why, by task name.
    expected_broken: BTreeMap<String, String>,
}

impl Checked {
    /// Says what the check found: the warnings, and each task that cannot run and why.
    pub(super) fn note(&self, observer: &dyn BatchObserver) {
        for warning in &self.warnings {
            observer.note(warning);
        }
        for task in &self.not_runnable {
            let expected = task
                .expected
                .as_ref()
                .map(|why| format!(" (expected: {why})"))
                .unwrap_or_default();
            observer.note(&format!(
                "not runnable: {} ({}): {}{expected}",
                task.task, task.file, task.reason
            ));
        }
    }

    /// What the batch runs, now that its tasks are checked: for the display's first line and
    /// its lines of the tasks expected to fail.
    pub(super) fn plan(&self, config: &BatchConfig) -> Plan {
        Plan {
            tasks: config.tasks.iter().filter(|t| t.trial == 1).count(),
            not_runnable: self.not_runnable.iter().map(|n| n.task.clone()).collect(),
            expected_broken: config
                .tasks
                .iter()
                .filter_map(|t| Some((t.id.clone(), self.expected_broken.get(&t.task)?.clone())))
                .collect(),
        }
    }

    /// A task that runs: its benchmark warnings, and whether its author marks it broken for
    /// the oracle that plays it.
    fn runnable(&mut self, config: &BatchConfig, task: &TaskSpec, run: &RunConfig) {
        let Some(provider) = run.sandbox.provider() else {
            return;
        };
        if config.pool_size > 0 {
            self.warnings.push(format!(
                "warning: {}: --pool-size does not apply to a benchmark task, which runs in its own image",
                task.task
            ));
        }
        self.warnings.extend(
            provider
                .warnings()
                .into_iter()
                .map(|w| format!("warning: {}: {w}", task.task)),
        );
        if provider.stand_in() == Some(Agent::Oracle.as_str())
            && let Some(why) = provider.record(None).and_then(|r| r.expected_broken)
        {
            self.expected_broken.insert(task.task.clone(), why);
        }
    }
}

/// A task the harness cannot run, with why, and whether its author says so
/// (`[metadata] expected_not_runnable`, read from the task's folder: the task does not load).
fn not_runnable(task: &TaskSpec, reason: &NotRunnable) -> TaskNotRunnable {
    let expected = match &task.source {
        TaskSource::Folder(dir) => harness_benchmark::provider::expected_not_runnable(dir),
        TaskSource::File(_) => None,
    };
    TaskNotRunnable {
        task: task.task.clone(),
        file: task.source.path().display().to_string(),
        reason: reason.to_string(),
        expected,
    }
}

/// Every task's settings resolve before anything starts: bad input (a flag, a missing
/// credential, a task file of the operator's that does not parse) stops the batch here. A
/// benchmark task the harness cannot run is reported and left out; the others run.
pub(super) fn check_tasks(config: &BatchConfig) -> anyhow::Result<Checked> {
    let leased = matches!(config.sandbox, SandboxSource::Pool(_));
    let mut problems = Vec::new();
    let mut checked = Checked::default();
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
                checked.not_runnable.push(not_runnable(task, &reason));
            }
            // The model and the policy's classifier build now, so a missing API key stops the
            // batch before any task starts rather than failing each task.
            Ok(run) if let Err(err) = credentials(&run) => {
                problems.push((task.source.path().display().to_string(), format!("{err:#}")));
            }
            Ok(run) => checked.runnable(config, task, &run),
            Err(ConfigError::Input(err)) => {
                problems.push((task.source.path().display().to_string(), err.to_string()));
            }
        }
    }
    if !problems.is_empty() {
        anyhow::bail!("the batch did not start:\n  {}", said_once(&problems));
    }
    checked.trials_not_runnable = config
        .tasks
        .iter()
        .filter(|t| checked.not_runnable.iter().any(|n| n.task == t.task))
        .count();
    if checked.trials_not_runnable == config.tasks.len() {
        let why: Vec<String> = checked
            .not_runnable
            .iter()
            .map(|n| format!("{}: {}", n.file, n.reason))
            .collect();
        anyhow::bail!(
            "the batch did not start: none of its tasks can run here:\n  {}",
            why.join("\n  ")
        );
    }
    Ok(checked)
}

/// Builds a task's model and policy as its session will (without starting anything): what a
/// missing credential or an unknown provider fails.
fn credentials(run: &RunConfig) -> anyhow::Result<()> {
    let model = crate::launch::build_model(run, None)?;
    harness_judge::build_policy(&run.policy, &run.model, &model, None)?;
    Ok(())
}

/// The problems of the tasks (`(task file, why)`), each said once: a reason several tasks
/// share (the static server missing for every benchmark task) is one line naming how many.
fn said_once(problems: &[(String, String)]) -> String {
    let mut reasons: Vec<(&str, Vec<&str>)> = Vec::new();
    for (file, why) in problems {
        // A task file's own error already starts with its name.
        let why = why
            .strip_prefix(file.as_str())
            .and_then(|rest| rest.strip_prefix(": "))
            .unwrap_or(why);
        match reasons.iter_mut().find(|(reason, _)| *reason == why) {
            Some((_, files)) => files.push(file),
            None => reasons.push((why, vec![file])),
        }
    }
    let lines: Vec<String> = reasons
        .into_iter()
        .map(|(why, files)| match files.as_slice() {
            [file] => format!("{file}: {why}"),
            [first, ..] => format!("{why}\n    ({} tasks: {first}, …)", files.len()),
            [] => why.to_owned(),
        })
        .collect();
    lines.join("\n  ")
}

#[cfg(test)]
mod tests {
    use super::said_once;

    /// Issue 57 §10: a reason every benchmark task shares is said once, with how many; a task
    /// file's own error is not prefixed with its name twice.
    #[test]
    fn a_reason_tasks_share_is_said_once() {
        let missing = "no statically linked sandbox-server to inject".to_owned();
        let problems = [
            ("a/task.toml".to_owned(), missing.clone()),
            (
                "b.yaml".to_owned(),
                "b.yaml: prompt: must not be empty".to_owned(),
            ),
            ("c/task.toml".to_owned(), missing.clone()),
        ];
        assert_eq!(
            said_once(&problems),
            format!(
                "{missing}\n    (2 tasks: a/task.toml, …)\n  b.yaml: prompt: must not be empty"
            )
        );
    }
}
