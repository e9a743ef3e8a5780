//! The grader of a session that has no provider: the agent on the task's prompt, then the
//! task's check command, run in the sandbox and logged.

use std::time::Instant;

use futures::future::BoxFuture;

use super::prepare::command_args;
use super::provider::{Grader, Grading};
use super::{SessionOutcome, Stop};
use crate::config::RunConfig;
use crate::recording::Recorder;
use crate::run_loop::Observer;
use crate::sandbox::SandboxClient;
use crate::step::{Step, StepError};
use harness_log::{CheckResult, ErrorClass, ErrorEvent, Event};

/// The agent once on the task's prompt; then the state fingerprint and the check, whose
/// failure fails a completed session.
pub struct CheckGrader;

impl Grader for CheckGrader {
    fn run<'a>(
        &'a self,
        grading: Grading<'a>,
    ) -> BoxFuture<'a, Result<(SessionOutcome, String), Stop>> {
        Box::pin(async move {
            let report = grading
                .agent
                .run(
                    grading.system_prompt,
                    &grading.config.prompt,
                    grading.totals,
                )
                .await
                .map_err(|err| Stop::of_loop(&err))?;
            let checked = after(&grading).await.map_err(|err| Stop::preparing(&err))?;
            let outcome = match (SessionOutcome::of_loop(report.end), checked) {
                (SessionOutcome::Completed, Some(false)) => SessionOutcome::CheckFailed,
                (outcome, _) => outcome,
            };
            Ok((outcome, report.answer))
        })
    }
}

/// The fingerprint after the agent, then the check; whether the check passed.
async fn after(grading: &Grading<'_>) -> Result<Option<bool>, StepError> {
    grading
        .recorder
        .fingerprint(None)
        .await
        .step("recording the state fingerprint")?;
    run_check(
        grading.config,
        grading.client,
        grading.recorder,
        grading.observer,
    )
    .await
}

/// Runs the check, when the task has one; whether it passed.
async fn run_check(
    config: &RunConfig,
    client: &SandboxClient,
    recorder: &Recorder,
    observer: &dyn Observer,
) -> Result<Option<bool>, StepError> {
    let Some(check) = &config.check else {
        return Ok(None);
    };
    end_agent_processes(client, recorder, observer).await?;
    let started = Instant::now();
    let result = client
        .bash(&command_args(check, config.check_timeout))
        .await
        .step("running the check")?;
    let passed = result.exit_code == 0;
    observer.note(&format!(
        "check: {} ({check})",
        if passed { "passed" } else { "failed" }
    ));
    let event = CheckResult {
        command: check.clone(),
        passed,
        exit_code: result.exit_code,
        output: recorder.log.text(&result.output)?,
        duration_ms: started.elapsed().as_millis() as u64,
    };
    recorder.log.record(Event::CheckResult(event)).await?;
    if !passed {
        observer.note(&result.output);
    }
    Ok(Some(passed))
}

/// Ends what the agent left running (every process a client started, a call still running
/// too, but an image's own entrypoint) before the check, as a provider's grader does too: a
/// background process could change the check's files while it runs. The state fingerprint
/// recorded just before lists them. When the sandbox cannot end them, that is recorded as an
/// error, and the check runs anyway (its result is still worth having).
async fn end_agent_processes(
    client: &SandboxClient,
    recorder: &Recorder,
    observer: &dyn Observer,
) -> Result<(), StepError> {
    match client.end_processes().await {
        Ok(ended) => {
            if !ended.killed.is_empty() {
                observer.note(&format!(
                    "ended {} processes the agent left before the check",
                    ended.killed.len()
                ));
            }
            Ok(())
        }
        Err(err) => {
            let message = format!(
                "ending the agent's processes before the check failed: {err}; the check runs with them alive"
            );
            observer.note(&message);
            let event = ErrorEvent {
                class: ErrorClass::Sandbox,
                message,
                call_id: None,
            };
            recorder.log.record(Event::Error(event)).await?;
            Ok(())
        }
    }
}
