//! A trial's session log, read once into what its Harbor files say ([`Read`]), and the
//! exception Harbor would file for how it ended.

use std::path::Path;

use harness_log::{
    ErrorClass, Event, FailureClass, Outcome, SessionFinished, SessionStarted, StepsFinished,
    VerifierFinished, VerifierIsolated,
};

use super::ResultsError;

/// What a trial's log says, gathered in one pass.
#[derive(Default)]
pub(super) struct Read {
    pub(super) header: Option<SessionStarted>,
    pub(super) header_ts: String,
    pub(super) verifier: Option<(String, VerifierFinished)>,
    pub(super) isolated: Vec<VerifierIsolated>,
    pub(super) finished: Option<(String, SessionFinished)>,
    pub(super) errors: Vec<(String, ErrorClass, String)>,
    /// The oracle's exit code, when its call ran.
    pub(super) oracle_exit: Option<i32>,
    /// A multi-step task's steps, as they ran.
    pub(super) steps: Vec<StepRead>,
    pub(super) steps_finished: Option<StepsFinished>,
}

/// One step of a multi-step trial, from its log.
#[derive(Default)]
pub(super) struct StepRead {
    pub(super) name: String,
    pub(super) started: String,
    /// When its agent's phase ended (its verifier isolated).
    pub(super) isolated: Option<String>,
    pub(super) verifier: Option<(String, VerifierFinished)>,
    pub(super) usage: harness_log::LoggedUsage,
    pub(super) cost: f64,
}

/// Reads the trial's log once, keeping what its files say.
pub(super) fn read(dir: &Path) -> Result<Read, ResultsError> {
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
pub(super) fn exception(read: &Read) -> Option<(String, String)> {
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
