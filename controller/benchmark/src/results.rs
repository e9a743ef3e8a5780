//! What Harbor's tools read, written from the session logs (the logs stay the one record):
//! per trial `config.json`, `lock.json`, `result.json`, `trial.log`, `exception.txt` and
//! `agent/trajectory.json` (ATIF) beside the log, `verifier/` and `agent/` as the container
//! left them; per job (a batch folder) `config.json`, `lock.json`, `result.json` and
//! `job.log`, with Harbor's statistics ([`job`]).
//!
//! Failures are filed under Harbor's exception names, so Harbor computes `reward_valid`,
//! its mean and pass@k from our files as it would from its own.

mod files;
mod from_log;
pub mod job;
mod record;
mod steps;
mod trial;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::atif::AGENT_NAME;
use harness_log::BenchmarkRecord;

use files::write;
pub use files::{ResultsError, write_json};
use from_log::{Read, exception, read};
pub use record::{HarborFiles, read_record};

/// Where a trial sits: its job (a batch) and dataset, when it has them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TrialLink {
    pub job_id: Option<String>,
    /// The dataset's name (Harbor's `source`); `adhoc` in its statistics when absent.
    pub source: Option<String>,
}

/// A trial as its result says it, for the job's statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialRecord {
    pub trial_name: String,
    pub task_name: String,
    /// `agent-harness__<model>__<dataset>`, Harbor's key for an agent on a dataset.
    pub evals_key: String,
    pub rewards: Option<BTreeMap<String, f64>>,
    /// Every exception it recorded, Harbor's way: the trial's own, then its steps'.
    pub exceptions: Vec<String>,
    pub reward_valid: bool,
    pub tokens: (u64, u64, u64),
    pub cost: f64,
    /// The agent tampered with the verifier's folders (`result.json`'s `tampering`).
    pub tampered: bool,
    /// How the reward was reached when the output alone does not show it (a Terminal-Bench 1
    /// run with no result: unresolved).
    pub note: Option<String>,
}

/// Whether Harbor counts the reward of a trial that recorded `exception`.
pub fn valid_reward(exception: Option<&str>) -> bool {
    !matches!(
        exception,
        Some(
            "VerifierTimeoutError"
                | "RewardFileNotFoundError"
                | "RewardFileEmptyError"
                | "VerifierOutputParseError"
                | "ApiError"
                | "RuntimeRequestError"
                | "CancelledError"
        )
    )
}

/// `provider/name` → (provider, name); `script:FILE` → (`script`, FILE); anything else is
/// the harness's own (the oracle, the nop agent, a replay).
pub fn model_info(model: &str) -> (String, String) {
    if let Some((provider, name)) = model.split_once('/').filter(|_| !model.contains(':')) {
        return (provider.to_owned(), name.to_owned());
    }
    match model.split_once(':') {
        Some((provider, name)) => (provider.to_owned(), name.to_owned()),
        None => (AGENT_NAME.to_owned(), model.to_owned()),
    }
}

fn shifted(ts: &str, back: Duration) -> String {
    humantime::parse_rfc3339(ts)
        .ok()
        .and_then(|t| t.checked_sub(back))
        .map_or_else(
            || ts.to_owned(),
            |t: SystemTime| humantime::format_rfc3339_millis(t).to_string(),
        )
}

/// Writes the trial files of the benchmark session logged in `dir` (its folder's name is the
/// trial's). Returns the record the job's statistics take.
pub fn write_trial(dir: &Path, link: &TrialLink) -> Result<TrialRecord, ResultsError> {
    let read = read(dir)?;
    let header = read
        .header
        .as_ref()
        .ok_or(ResultsError::Incomplete("the log has no session_started"))?;
    let bench = header
        .config
        .benchmark
        .as_ref()
        .ok_or(ResultsError::Incomplete(
            "the log is not a benchmark task's",
        ))?;
    let trial_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let model = &header.config.model;
    let (provider, model_name) = model_info(model);
    let (config, lock) = config_and_lock(dir, link, &trial_name, model, bench);
    let exception = exception(&read);
    let result = trial::result_json(
        &read,
        &trial_name,
        dir,
        link,
        &config,
        exception.as_ref(),
        (&provider, &model_name),
    )?;
    write_json(&dir.join("config.json"), &config)?;
    write_json(&dir.join("lock.json"), &lock)?;
    write_json(&dir.join("result.json"), &result)?;
    if let Some((name, message)) = &exception {
        write(&dir.join("exception.txt"), format!("{name}: {message}\n"))?;
    }
    steps::write_agent_files(dir, &read)?;
    write(&dir.join("trial.log"), trial::trial_log(&read, &trial_name))?;
    let task = TrialTask {
        trial_name,
        task_name: &bench.name,
        model_name: &model_name,
    };
    Ok(record(&read, task, link, exception.as_ref()))
}

/// The trial's `config.json` and `lock.json`: what ran, as Harbor records a trial's settings
/// and pins its task. Their own step: both are fixed shapes filled from the log's header.
fn config_and_lock(
    dir: &Path,
    link: &TrialLink,
    trial_name: &str,
    model: &str,
    bench: &BenchmarkRecord,
) -> (Value, Value) {
    let agent = json!({"name": AGENT_NAME, "model_name": model});
    let config = json!({
        "task": {"path": bench.dir, "source": link.source},
        "trial_name": trial_name,
        "trials_dir": dir.parent().map(|p| p.display().to_string()),
        "agent": agent,
        "environment": {"type": "docker"},
        "verifier": {},
        "job_id": link.job_id,
    });
    let lock = json!({
        "schema_version": 2,
        "task": {"name": bench.name, "type": "local", "digest": bench.digest, "source": link.source, "path": bench.dir},
        "agent": agent,
        "environment": {"type": "docker"},
        "verifier": {"environment_mode": "shared"},
    });
    (config, lock)
}

/// Which trial a [`TrialRecord`] is of: its name, its task's and its model's.
struct TrialTask<'a> {
    trial_name: String,
    task_name: &'a str,
    model_name: &'a str,
}

/// The record the job's statistics take, from the same read of the log: the rewards, every
/// exception (the trial's, then its steps'), and the session's totals.
fn record(
    read: &Read,
    task: TrialTask<'_>,
    link: &TrialLink,
    exception: Option<&(String, String)>,
) -> TrialRecord {
    let rewards = match &read.steps_finished {
        Some(steps) => steps.rewards.clone(),
        None => read.verifier.as_ref().and_then(|(_, v)| v.rewards.clone()),
    };
    let exceptions: Vec<String> = exception
        .into_iter()
        .map(|(name, _)| name.clone())
        .chain(
            read.steps_finished
                .iter()
                .flat_map(|s| s.steps.iter())
                .filter_map(|s| s.error.clone()),
        )
        .collect();
    let finished = read.finished.as_ref().map(|(_, f)| f);
    let usage = finished.map(|f| f.usage).unwrap_or_default();
    TrialRecord {
        trial_name: task.trial_name,
        task_name: task.task_name.to_owned(),
        evals_key: evals_key(task.model_name, link.source.as_deref()),
        reward_valid: rewards.as_ref().is_some_and(|r| !r.is_empty())
            && exceptions.iter().all(|e| valid_reward(Some(e))),
        rewards,
        exceptions,
        tokens: (
            usage.input_tokens + usage.cached_input_tokens + usage.cache_write_tokens,
            usage.cached_input_tokens,
            usage.output_tokens,
        ),
        cost: finished.map_or(0.0, |f| f.cost),
        tampered: read.isolated.iter().any(|i| i.tampered),
        note: read.verifier.as_ref().and_then(|(_, v)| v.note.clone()),
    }
}

impl TrialRecord {
    /// Whether the trial has its score: its verifier ran and gave a verdict (rewards, or a
    /// failure that is the verifier's own). A trial cut short, or failed on the sandbox or the
    /// harness before the verifier judged it, has none yet: `--resume` runs it again.
    pub fn scored(&self) -> bool {
        self.rewards.is_some()
            || self.exceptions.iter().any(|e| {
                matches!(
                    e.as_str(),
                    "VerifierTimeoutError"
                        | "RewardFileNotFoundError"
                        | "RewardFileEmptyError"
                        | "VerifierOutputParseError"
                )
            })
    }

    /// The first exception, by which the trial is counted errored.
    pub fn exception(&self) -> Option<&str> {
        self.exceptions.first().map(String::as_str)
    }
}

/// Harbor's key for an agent and model on a dataset.
pub fn evals_key(model_name: &str, source: Option<&str>) -> String {
    format!("{AGENT_NAME}__{model_name}__{}", source.unwrap_or("adhoc"))
}

/// A UUID (version 4 layout) derived from a session id, so a trial's id is stable.
pub fn uuid_of(text: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut bytes: [u8; 16] = Sha256::digest(text.as_bytes())[..16]
        .try_into()
        .unwrap_or_default();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = hex::encode(bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_split_into_provider_and_name() {
        assert_eq!(
            model_info("openai/gpt-5"),
            ("openai".into(), "gpt-5".into())
        );
        assert_eq!(
            model_info("script:/a/b.yaml"),
            ("script".into(), "/a/b.yaml".into())
        );
        assert_eq!(model_info("oracle"), (AGENT_NAME.into(), "oracle".into()));
        let id = uuid_of("x");
        assert_eq!((id.len(), &id[14..15]), (36, "4"));
    }
}
