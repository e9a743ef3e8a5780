//! A job's files (a batch folder as Harbor's job folder): `config.json`, `lock.json`,
//! `result.json` with Harbor's statistics, computed as Harbor computes them: per agent, model
//! and dataset, the mean over trials whose reward is valid, pass@k when every valid reward is
//! a single 0 or 1, rewards and exceptions by trial.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value, json};

use super::{TrialRecord, write_json};
use crate::atif::AGENT_NAME;
use harness_replay::report::pass_at_k;

/// What the job was.
#[derive(Debug, Clone, PartialEq)]
pub struct JobInfo {
    pub job_id: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub n_attempts: u32,
    pub parallel: usize,
    pub retries: u32,
    pub model: String,
    /// The dataset folders (or task folders) given.
    pub datasets: Vec<String>,
    /// Trials the job has, run or not.
    pub n_total_trials: usize,
    /// Attempts run again after an infrastructure failure, over every run of the job.
    pub n_retries: u32,
}

/// Harbor's k values for a job whose tasks have at least `max_k` trials: 2, 4, 8, … and 5,
/// 10, 15, ….
pub fn k_values(max_k: usize) -> Vec<usize> {
    let mut ks: Vec<usize> = std::iter::successors(Some(2), |k| Some(k * 2))
        .take_while(|k| *k <= max_k)
        .chain((5..=max_k).step_by(5))
        .collect();
    ks.sort_unstable();
    ks.dedup();
    ks
}

/// Writes the job's files into `out`.
pub fn write_job(
    out: &Path,
    info: &JobInfo,
    trials: &[TrialRecord],
) -> Result<(), super::ResultsError> {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let agent = json!({"name": AGENT_NAME, "model_name": info.model});
    let config = json!({
        "job_name": name,
        "jobs_dir": out.parent().map(|p| p.display().to_string()),
        "n_attempts": info.n_attempts,
        "n_concurrent_trials": info.parallel,
        "timeout_multiplier": 1.0,
        "agents": [agent],
        "datasets": info.datasets.iter().map(|d| json!({"path": d})).collect::<Vec<_>>(),
        "environment": {"type": "docker"},
    });
    let lock = json!({
        "schema_version": 3,
        "n_concurrent_trials": info.parallel,
        "retry": {"max_retries": info.retries},
        "trials": [],
    });
    let result = json!({
        "schema_version": 1,
        "id": info.job_id,
        "started_at": info.started_at,
        "updated_at": info.finished_at.clone().unwrap_or_else(harness_log::now),
        "finished_at": info.finished_at,
        "n_total_trials": info.n_total_trials,
        "stats": stats(trials, info.n_total_trials, info.n_retries),
    });
    write_json(&out.join("config.json"), &config)?;
    write_json(&out.join("lock.json"), &lock)?;
    write_json(&out.join("result.json"), &result)?;
    let log: Vec<String> = trials
        .iter()
        .map(|t| {
            format!(
                "{}: rewards {:?}, exception {:?}",
                t.trial_name, t.rewards, t.exceptions
            )
        })
        .collect();
    super::files::write(&out.join("job.log"), log.join("\n") + "\n")?;
    Ok(())
}

fn stats(trials: &[TrialRecord], n_total: usize, n_retries: u32) -> Value {
    let errored = trials.iter().filter(|t| !t.exceptions.is_empty()).count();
    let mut groups: BTreeMap<&str, Vec<&TrialRecord>> = BTreeMap::new();
    for trial in trials {
        groups
            .entry(trial.evals_key.as_str())
            .or_default()
            .push(trial);
    }
    let evals: Map<String, Value> = groups
        .into_iter()
        .map(|(key, group)| (key.to_owned(), eval(&group)))
        .collect();
    let sum = |f: fn(&TrialRecord) -> u64| trials.iter().map(f).sum::<u64>();
    json!({
        "n_trials": trials.len(),
        "n_errors": errored,
        "n_completed_trials": trials.len(),
        "n_errored_trials": errored,
        "n_running_trials": 0,
        "n_pending_trials": n_total.saturating_sub(trials.len()),
        "n_cancelled_trials": trials.iter().filter(|t| t.exceptions.iter().any(|e| e == "CancelledError")).count(),
        "n_retries": n_retries,
        "evals": evals,
        "n_input_tokens": sum(|t| t.tokens.0),
        "n_cache_tokens": sum(|t| t.tokens.1),
        "n_output_tokens": sum(|t| t.tokens.2),
        "cost_usd": trials.iter().map(|t| t.cost).sum::<f64>(),
    })
}

fn eval(group: &[&TrialRecord]) -> Value {
    let valid: Vec<&TrialRecord> = group.iter().copied().filter(|t| t.reward_valid).collect();
    let mut reward_stats: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for trial in &valid {
        for (key, value) in trial.rewards.iter().flatten() {
            reward_stats
                .entry(key.clone())
                .or_default()
                .entry(format!("{value:?}"))
                .or_default()
                .push(trial.trial_name.clone());
        }
    }
    let mut exception_stats: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for trial in group {
        let distinct: std::collections::BTreeSet<&String> = trial.exceptions.iter().collect();
        for exception in distinct {
            exception_stats
                .entry(exception.clone())
                .or_default()
                .push(trial.trial_name.clone());
        }
    }
    let rewards: Vec<&BTreeMap<String, f64>> =
        valid.iter().filter_map(|t| t.rewards.as_ref()).collect();
    json!({
        "n_trials": valid.len(),
        "n_errors": group.iter().filter(|t| !t.exceptions.is_empty()).count(),
        "metrics": if rewards.is_empty() { json!([]) } else { json!([mean(&rewards)]) },
        "pass_at_k": harbor_pass_at_k(&valid),
        "reward_stats": reward_stats,
        "exception_stats": exception_stats,
    })
}

/// Harbor's `mean`: one key → `{"mean": …}`; several → the mean of each, a missing key as 0.
fn mean(rewards: &[&BTreeMap<String, f64>]) -> Value {
    let keys: std::collections::BTreeSet<&String> = rewards.iter().flat_map(|r| r.keys()).collect();
    let n = rewards.len() as f64;
    if keys.len() <= 1 {
        let total: f64 = rewards
            .iter()
            .map(|r| r.values().next().copied().unwrap_or(0.0))
            .sum();
        return json!({"mean": total / n});
    }
    let means: Map<String, Value> = keys
        .into_iter()
        .map(|k| {
            (
                k.clone(),
                json!(
                    rewards
                        .iter()
                        .map(|r| r.get(k).copied().unwrap_or(0.0))
                        .sum::<f64>()
                        / n
                ),
            )
        })
        .collect();
    Value::Object(means)
}

/// pass@k over tasks, only when every valid reward is one key worth 0 or 1.
fn harbor_pass_at_k(valid: &[&TrialRecord]) -> Value {
    let mut by_task: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for trial in valid {
        let Some(rewards) = &trial.rewards else {
            continue;
        };
        let value = match rewards.values().collect::<Vec<_>>()[..] {
            [value] if *value == 0.0 || *value == 1.0 => *value,
            _ => return json!({}),
        };
        let entry = by_task.entry(trial.task_name.as_str()).or_default();
        entry.0 += 1;
        entry.1 += usize::from(value == 1.0);
    }
    let Some(min) = by_task.values().map(|(n, _)| *n).min() else {
        return json!({});
    };
    let result: Map<String, Value> = k_values(min)
        .into_iter()
        .map(|k| {
            let total: f64 = by_task.values().map(|(n, c)| pass_at_k(*n, *c, k)).sum();
            (k.to_string(), json!(total / by_task.len() as f64))
        })
        .collect();
    Value::Object(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_at_k_is_the_unbiased_estimator() {
        // 4 trials, 2 passed: pass@2 = 1 - C(2,2)/C(4,2) = 1 - 1/6.
        assert!((pass_at_k(4, 2, 2) - 5.0 / 6.0).abs() < 1e-12);
        assert_eq!(pass_at_k(3, 0, 2), 0.0);
        assert_eq!(pass_at_k(3, 3, 3), 1.0);
        assert!((pass_at_k(5, 1, 1) - 0.2).abs() < 1e-12);
        assert_eq!(k_values(10), vec![2, 4, 5, 8, 10]);
        assert!(k_values(1).is_empty());
    }
}
