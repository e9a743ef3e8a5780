//! A trial's per-step files: Harbor's `step_results` in its `result.json`, and each step's
//! ATIF trajectory (`steps/<name>/agent/trajectory.json`).

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Read, shifted, write_json};
use crate::atif;
use harness_log::StepsFinished;

/// `step_results`: each step that ran, as Harbor's `StepResult`.
pub(super) fn step_results(read: &Read, steps: &StepsFinished, finished_ts: &str) -> Vec<Value> {
    steps
        .steps
        .iter()
        .map(|score| {
            let ran = read.steps.iter().find(|s| s.name == score.name);
            let verifier = ran.and_then(|s| s.verifier.as_ref());
            let started = ran.map_or(finished_ts, |s| s.started.as_str());
            let agent_end = ran
                .and_then(|s| s.isolated.as_deref())
                .unwrap_or(finished_ts);
            let usage = ran.map(|s| s.usage).unwrap_or_default();
            json!({
                "step_name": score.name,
                "agent_result": {
                    "n_input_tokens": usage.input_tokens + usage.cached_input_tokens + usage.cache_write_tokens,
                    "n_cache_tokens": usage.cached_input_tokens,
                    "n_output_tokens": usage.output_tokens,
                    "cost_usd": ran.map_or(0.0, |s| s.cost),
                },
                "verifier_result": score.rewards.as_ref().map(|r| json!({"rewards": r})),
                "exception_info": score.error.as_ref().map(|error| json!({
                    "exception_type": error,
                    "exception_message": score.message.clone().unwrap_or_default(),
                    "exception_traceback": "",
                    "occurred_at": verifier.map_or(agent_end, |(ts, _)| ts.as_str()),
                })),
                "agent_execution": {"started_at": started, "finished_at": agent_end},
                "verifier": verifier.map(|(ts, v)| json!({
                    "started_at": shifted(ts, Duration::from_millis(v.duration_ms)),
                    "finished_at": ts,
                })),
            })
        })
        .collect()
}

/// `agent/trajectory.json` (a multi-step trial's: `steps/<name>/agent/trajectory.json`, one
/// per step, as Harbor writes them), and the oracle's `exit-code.txt` when its script failed.
pub(super) fn write_agent_files(dir: &Path, read: &Read) -> Result<(), super::ResultsError> {
    if !read.steps.is_empty() {
        for step in &read.steps {
            let agent = dir.join("steps").join(&step.name).join("agent");
            super::files::create_dir_all(&agent)?;
            let trajectory = atif::from_log_step(dir, Some(&step.name))?;
            write_json(&agent.join("trajectory.json"), &trajectory)?;
        }
        return Ok(());
    }
    let agent = dir.join("agent");
    super::files::create_dir_all(&agent)?;
    let trajectory = atif::from_log(dir)?;
    write_json(&agent.join("trajectory.json"), &trajectory)?;
    if let Some(code) = read.oracle_exit.filter(|c| *c != 0) {
        super::files::write(&agent.join("exit-code.txt"), format!("{code}\n"))?;
    }
    Ok(())
}
