//! A batch of benchmark trials as Harbor's job folder: the job's files, from each trial's
//! `result.json` (written from its log when it ended).

use std::path::Path;

use super::BatchConfig;
use harness_benchmark::flags::Agent;
use harness_benchmark::results::job::{JobInfo, write_job};
use harness_benchmark::results::{TrialRecord, read_record, uuid_of};
use harness_runtime::task::TaskSource;

/// Whether a benchmark trial's folder holds a result with its score ([`TrialRecord::scored`]).
pub(super) fn scored(dir: &Path) -> bool {
    read_record(dir).is_ok_and(|record| record.scored())
}

/// The job's files, when the batch has benchmark trials (those of the tasks that could not be
/// run are not trials).
pub(super) fn write(
    config: &BatchConfig,
    started_at: &str,
    not_runnable: &[&str],
) -> anyhow::Result<()> {
    let bench: Vec<_> = config
        .tasks
        .iter()
        .filter(|t| matches!(t.source, TaskSource::Folder(_)))
        .filter(|t| !not_runnable.contains(&t.task.as_str()))
        .collect();
    if bench.is_empty() {
        return Ok(());
    }
    let trials: Vec<TrialRecord> = bench
        .iter()
        .filter_map(|t| read_record(&config.out.join(&t.id)).ok())
        .collect();
    let mut datasets: Vec<String> = bench
        .iter()
        .map(|t| {
            t.dataset
                .as_deref()
                .unwrap_or(t.source.path())
                .display()
                .to_string()
        })
        .collect();
    datasets.dedup();
    let model = match config.trial.agent() {
        Ok(Agent::Model) | Err(_) => config
            .flags
            .model
            .clone()
            .unwrap_or_else(|| harness_runtime::config::DEFAULT_MODEL.to_owned()),
        Ok(agent) => agent.as_str().to_owned(),
    };
    // Over every run of the batch, as its report counts them.
    let n_retries =
        harness_replay::report::load(&config.out, &harness_benchmark::results::HarborFiles)
            .map(|report| report.totals.retries)
            .unwrap_or(0);
    let info = JobInfo {
        n_retries,
        job_id: uuid_of(&config.batch_id),
        started_at: started_at.to_owned(),
        finished_at: Some(harness_log::now()),
        n_attempts: config.attempts,
        parallel: config.parallel,
        retries: config.retries,
        model,
        datasets,
        n_total_trials: bench.len(),
    };
    Ok(write_job(&config.out, &info, &trials)?)
}
