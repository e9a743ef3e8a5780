//! What Harbor's tools read, written from the session logs (the logs stay the one record):
//! per trial `config.json`, `lock.json`, `result.json`, `trial.log`, `exception.txt` and
//! `agent/trajectory.json` (ATIF) beside the log, `verifier/` and `agent/` as the container
//! left them; per job (a batch folder) `config.json`, `lock.json`, `result.json` and
//! `job.log`, with Harbor's statistics ([`job`]).
//!
//! Failures are filed under Harbor's exception names, so Harbor computes `reward_valid`,
//! its mean and pass@k from our files as it would from its own.

mod files;
pub mod job;
mod steps;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::atif::AGENT_NAME;
use harness_log::{
    ErrorClass, Event, FailureClass, Outcome, SessionFinished, SessionStarted, StepsFinished,
    VerifierFinished, VerifierIsolated,
};
use harness_replay;

use files::write;
pub use files::{ResultsError, write_json};

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

/// What a trial's log says, gathered in one pass.
#[derive(Default)]
struct Read {
    header: Option<SessionStarted>,
    header_ts: String,
    verifier: Option<(String, VerifierFinished)>,
    isolated: Vec<VerifierIsolated>,
    finished: Option<(String, SessionFinished)>,
    errors: Vec<(String, ErrorClass, String)>,
    /// The oracle's exit code, when its call ran.
    oracle_exit: Option<i32>,
    /// A multi-step task's steps, as they ran.
    steps: Vec<StepRead>,
    steps_finished: Option<StepsFinished>,
}

/// One step of a multi-step trial, from its log.
#[derive(Default)]
struct StepRead {
    name: String,
    started: String,
    /// When its agent's phase ended (its verifier isolated).
    isolated: Option<String>,
    verifier: Option<(String, VerifierFinished)>,
    usage: harness_log::LoggedUsage,
    cost: f64,
}

fn read(dir: &Path) -> Result<Read, ResultsError> {
    let mut read = Read::default();
    for envelope in harness_replay::events(dir, |_| {})? {
        let envelope = envelope?;
        match envelope.event {
            Event::SessionStarted(header) => {
                read.header = Some(*header);
                read.header_ts = envelope.ts;
            }
            Event::StepStarted(step) => read.steps.push(StepRead {
                name: step.name,
                started: envelope.ts,
                ..StepRead::default()
            }),
            Event::ModelResponse(response) => {
                if let Some(step) = read.steps.last_mut() {
                    step.usage.input_tokens += response.usage.input_tokens;
                    step.usage.cached_input_tokens += response.usage.cached_input_tokens;
                    step.usage.cache_write_tokens += response.usage.cache_write_tokens;
                    step.usage.output_tokens += response.usage.output_tokens;
                    step.cost += response.cost.unwrap_or(0.0);
                }
            }
            Event::VerifierFinished(verifier) => match (&verifier.step, read.steps.last_mut()) {
                (Some(_), Some(step)) => step.verifier = Some((envelope.ts, verifier)),
                _ => read.verifier = Some((envelope.ts, verifier)),
            },
            Event::VerifierIsolated(isolated) => {
                if let (Some(_), Some(step)) = (&isolated.step, read.steps.last_mut()) {
                    step.isolated = Some(envelope.ts.clone());
                }
                read.isolated.push(isolated);
            }
            Event::StepsFinished(steps) => read.steps_finished = Some(steps),
            Event::SessionFinished(finished) => read.finished = Some((envelope.ts, finished)),
            Event::Error(error) => read.errors.push((envelope.ts, error.class, error.message)),
            Event::ToolResult(result) if result.call_id == "oracle_1" => {
                read.oracle_exit = result.exit_code;
            }
            _ => {}
        }
    }
    Ok(read)
}

/// Harbor's exception for how the trial ended, if it failed to be judged cleanly.
fn exception(read: &Read) -> Option<(String, String)> {
    let verifier = read.verifier.as_ref().map(|(_, v)| v);
    if let Some(failure) = verifier.and_then(|v| v.failure) {
        let message = verifier.and_then(|v| v.message.clone()).unwrap_or_default();
        return Some((crate::exceptions::of_failure(failure).to_owned(), message));
    }
    let (_, finished) = read.finished.as_ref()?;
    let message = read
        .errors
        .last()
        .map(|(_, _, m)| m.clone())
        .unwrap_or_default();
    let name = match (finished.outcome, finished.failure) {
        (Outcome::Interrupted, _) => "CancelledError",
        (Outcome::TimeLimit, _) => "AgentTimeoutError",
        (_, Some(FailureClass::Model)) => "ApiError",
        (_, Some(FailureClass::Infrastructure)) => "RuntimeRequestError",
        (_, Some(FailureClass::Error)) => "HarnessError",
        _ if verifier.is_some_and(|v| v.agent_timed_out) => "AgentTimeoutError",
        _ => return None,
    };
    Some((name.to_owned(), message))
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
    let exception = exception(&read);
    let rewards = match &read.steps_finished {
        Some(steps) => steps.rewards.clone(),
        None => read.verifier.as_ref().and_then(|(_, v)| v.rewards.clone()),
    };
    let exceptions: Vec<String> = exception
        .iter()
        .map(|(name, _)| name.clone())
        .chain(
            read.steps_finished
                .iter()
                .flat_map(|s| s.steps.iter())
                .filter_map(|s| s.error.clone()),
        )
        .collect();
    let result = result_json(
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
    write(&dir.join("trial.log"), trial_log(&read, &trial_name))?;
    let finished = read.finished.as_ref().map(|(_, f)| f);
    let usage = finished.map(|f| f.usage).unwrap_or_default();
    Ok(TrialRecord {
        trial_name,
        task_name: bench.name.clone(),
        evals_key: evals_key(&model_name, link.source.as_deref()),
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
    })
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

/// Harbor's files as the batch report reads them.
pub struct HarborFiles;

impl harness_replay::report::TrialFiles for HarborFiles {
    fn is_benchmark(&self, file: &Path) -> bool {
        super::detect(file).is_some()
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
    let result = files::read_json(&dir.join("result.json"))?;
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

/// Harbor's key for an agent and model on a dataset.
pub fn evals_key(model_name: &str, source: Option<&str>) -> String {
    format!("{AGENT_NAME}__{model_name}__{}", source.unwrap_or("adhoc"))
}

fn result_json(
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
        // Harbor's multi-step shape: the agent and verifier per step, the task's rewards from
        // theirs; no trial-level agent result, timings or verifier mode.
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
    Ok(result)
}

fn trial_log(read: &Read, trial_name: &str) -> String {
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
