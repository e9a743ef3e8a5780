//! A trial's record read back from its `result.json`, for a job's statistics and the batch
//! report ([`HarborFiles`]).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::{ResultsError, TrialRecord, evals_key, valid_reward};

/// Harbor's files as the batch report reads them.
pub struct HarborFiles;

impl harness_replay::report::TrialFiles for HarborFiles {
    fn is_benchmark(&self, file: &Path) -> bool {
        crate::detect(file).is_some()
    }

    fn trial(&self, folder: &Path) -> Option<harness_replay::report::TrialFacts> {
        let record = read_record(folder).ok()?;
        Some(harness_replay::report::TrialFacts {
            error: record.exception().map(str::to_owned),
            rewards: record.rewards,
            reward_valid: record.reward_valid,
            tampered: record.tampered,
            note: record.note,
        })
    }
}

/// The record of a trial whose `result.json` was written.
pub fn read_record(dir: &Path) -> Result<TrialRecord, ResultsError> {
    let result = super::files::read_json(&dir.join("result.json"))?;
    let string = |pointer: &str| {
        result
            .pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let rewards: Option<BTreeMap<String, f64>> = result
        .pointer("/verifier_result/rewards")
        .and_then(Value::as_object)
        .map(|r| {
            r.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
                .collect()
        });
    let steps = result
        .get("step_results")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let exceptions: Vec<String> = string("/exception_info/exception_type")
        .into_iter()
        .chain(steps.iter().filter_map(|step| {
            step.pointer("/exception_info/exception_type")
                .and_then(Value::as_str)
                .map(str::to_owned)
        }))
        .collect();
    // A multi-step trial's agent results are its steps'.
    let sum = |pointer: &str| -> u64 {
        match result.pointer(pointer).and_then(Value::as_u64) {
            Some(n) => n,
            None => steps
                .iter()
                .filter_map(|s| s.pointer(pointer).and_then(Value::as_u64))
                .sum(),
        }
    };
    let number = |pointer: &str| sum(pointer);
    Ok(TrialRecord {
        trial_name: string("/trial_name").unwrap_or_default(),
        task_name: string("/task_name").unwrap_or_default(),
        evals_key: evals_key(
            &string("/agent_info/model_info/name").unwrap_or_default(),
            string("/source").as_deref(),
        ),
        reward_valid: rewards.as_ref().is_some_and(|r| !r.is_empty())
            && exceptions.iter().all(|e| valid_reward(Some(e))),
        rewards,
        exceptions,
        tokens: (
            number("/agent_result/n_input_tokens"),
            number("/agent_result/n_cache_tokens"),
            number("/agent_result/n_output_tokens"),
        ),
        cost: result
            .pointer("/agent_result/cost_usd")
            .and_then(Value::as_f64)
            .unwrap_or_else(|| {
                steps
                    .iter()
                    .filter_map(|s| s.pointer("/agent_result/cost_usd").and_then(Value::as_f64))
                    .sum()
            }),
        tampered: result
            .pointer("/tampering/tampered")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        note: string("/verifier_note"),
    })
}
