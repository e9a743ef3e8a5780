//! A trial's own summary files made from its read log: `result.json` in Harbor's shape, and
//! the short `trial.log`.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Read, ResultsError, TrialLink, shifted, steps, uuid_of};
use crate::atif::AGENT_NAME;
use harness_log::StepsFinished;

/// `result.json`: Harbor's `TrialResult`, from the read log and the trial's config.
pub(super) fn result_json(
    read: &Read,
    trial_name: &str,
    dir: &Path,
    link: &TrialLink,
    config: &Value,
    exception: Option<&(String, String)>,
    (provider, model_name): (&str, &str),
) -> Result<Value, ResultsError> {
    let header = read
        .header
        .as_ref()
        .ok_or(ResultsError::Incomplete("no header"))?;
    let bench =
        (header.config.benchmark.as_ref()).ok_or(ResultsError::Incomplete("no benchmark"))?;
    let (finished_ts, finished) =
        (read.finished.as_ref()).ok_or(ResultsError::Incomplete("the log did not finish"))?;
    let started = shifted(finished_ts, Duration::from_millis(finished.duration_ms));
    let usage = finished.usage;
    let verifier_timing = read.verifier.as_ref().map(|(ts, v)| {
        json!({"started_at": shifted(ts, Duration::from_millis(v.duration_ms)), "finished_at": ts})
    });
    let agent_end = verifier_timing
        .as_ref()
        .map_or_else(|| json!(finished_ts), |v| v["started_at"].clone());
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_owned());
    let mut result = json!({
        "schema_version": 1,
        "id": uuid_of(&header.session_id),
        "task_name": bench.name,
        "trial_name": trial_name,
        "trial_uri": format!("file://{}", absolute.display()),
        "task_id": {"path": bench.dir},
        "source": link.source,
        "task_checksum": bench.digest.trim_start_matches("sha256:"),
        "config": config,
        "agent_info": {
            "name": AGENT_NAME,
            "version": header.harness_version,
            "model_info": {"name": model_name, "provider": provider},
        },
        "agent_result": {
            "n_input_tokens": usage.input_tokens + usage.cached_input_tokens + usage.cache_write_tokens,
            "n_cache_tokens": usage.cached_input_tokens,
            "n_output_tokens": usage.output_tokens,
            "cost_usd": finished.cost,
            "metadata": {"outcome": finished.outcome.as_str(), "turns": finished.turns, "tool_calls": finished.tool_calls, "session_id": header.session_id},
        },
        "verifier_result": read.verifier.as_ref().and_then(|(_, v)| v.rewards.as_ref()).map(|r| json!({"rewards": r})),
        "exception_info": exception.map(|(name, message)| json!({
            "exception_type": name,
            "exception_message": message,
            "exception_traceback": "",
            "occurred_at": read.errors.last().map_or(finished_ts.as_str(), |(ts, _, _)| ts.as_str()),
        })),
        "started_at": started,
        "finished_at": finished_ts,
        "environment_setup": {"started_at": started, "finished_at": read.header_ts},
        "agent_execution": {"started_at": read.header_ts, "finished_at": agent_end},
        "verifier": verifier_timing,
        "verifier_environment_mode": "shared",
        "tampering": tampering(read),
        "verifier_note": read.verifier.as_ref().and_then(|(_, v)| v.note.clone()),
    });
    if let Some(steps) = &read.steps_finished {
        as_multi_step(&mut result, read, steps, finished_ts);
    }
    Ok(result)
}

/// Harbor's multi-step shape: the agent and verifier per step, the task's rewards from
/// theirs; no trial-level agent result, timings or verifier mode.
fn as_multi_step(result: &mut Value, read: &Read, steps: &StepsFinished, finished_ts: &str) {
    result["agent_result"] = Value::Null;
    result["agent_execution"] = Value::Null;
    result["verifier"] = Value::Null;
    result["verifier_environment_mode"] = Value::Null;
    result["verifier_result"] = steps
        .rewards
        .as_ref()
        .map_or(Value::Null, |r| json!({"rewards": r}));
    result["step_results"] = Value::Array(steps::step_results(read, steps, finished_ts));
    result["multi_step"] = json!({"strategy": steps.strategy, "stopped": steps.stopped});
}

/// `result.json`'s `tampering`: what stood between the agent and the verifier, and what the
/// agent had done to the verifier's folders (not one of Harbor's fields; its readers skip it).
fn tampering(read: &Read) -> Value {
    if read.isolated.is_empty() {
        return Value::Null;
    }
    let ended: usize = read.isolated.iter().map(|i| i.processes_ended.len()).sum();
    json!({
        "tampered": read.isolated.iter().any(|i| i.tampered),
        "restored": read.isolated.iter().all(|i| i.restored),
        "processes_ended": ended,
        "changes": read.isolated.iter().flat_map(|i| i.changes.iter()).collect::<Vec<_>>(),
        "calls": read.isolated.iter().flat_map(|i| i.calls.iter()).collect::<Vec<_>>(),
    })
}

/// `trial.log`: a short account in lines; the log itself is the full record.
pub(super) fn trial_log(read: &Read, trial_name: &str) -> String {
    let mut lines = vec![format!(
        "trial {trial_name}: the full record is events.jsonl (harness replay show .)"
    )];
    for (ts, class, message) in &read.errors {
        lines.push(format!("{ts} error ({}): {message}", class.as_str()));
    }
    if let Some((ts, verifier)) = &read.verifier {
        lines.push(format!(
            "{ts} verifier: rewards {:?}, failure {:?}, exit {:?}",
            verifier.rewards, verifier.failure, verifier.exit_code
        ));
    }
    for step in &read.steps {
        if let Some((ts, verifier)) = &step.verifier {
            lines.push(format!(
                "{ts} step {} verifier: rewards {:?}, failure {:?}, exit {:?}",
                step.name, verifier.rewards, verifier.failure, verifier.exit_code
            ));
        }
    }
    if let Some(steps) = &read.steps_finished {
        lines.push(format!(
            "steps ({}): rewards {:?}{}",
            steps.strategy,
            steps.rewards,
            steps
                .stopped
                .as_ref()
                .map_or_else(String::new, |why| format!("; stopped: {why}"))
        ));
    }
    for isolated in read.isolated.iter().filter(|i| i.tampered) {
        lines.push(format!(
            "tampering{}: {} paths changed, {} calls named the verifier's folders, {} changes to what runs the tests{}",
            isolated
                .step
                .as_ref()
                .map_or_else(String::new, |s| format!(" (step {s})")),
            isolated.changes.len(),
            isolated.calls.len(),
            isolated.runtime.len(),
            if isolated.runtime.is_empty() {
                String::new()
            } else {
                let paths: Vec<&str> = isolated.runtime.iter().take(5).map(|c| c.path.as_str()).collect();
                format!(" ({})", paths.join(", "))
            }
        ));
    }
    if let Some((ts, finished)) = &read.finished {
        lines.push(format!("{ts} finished: {}", finished.outcome.as_str()));
    }
    lines.join("\n") + "\n"
}
