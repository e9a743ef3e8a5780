//! After the agent: the task's check command, run in the sandbox and logged.

use std::time::Instant;

use anyhow::Context;

use super::prepare::command_args;
use crate::config::RunConfig;
use crate::event_log::{CheckResult, Event};
use crate::recording::Recorder;
use crate::run_loop::Observer;
use crate::sandbox::SandboxClient;

/// Runs the check, when the task has one; whether it passed.
pub(super) async fn run_check(
    config: &RunConfig,
    client: &SandboxClient,
    recorder: &Recorder,
    observer: &dyn Observer,
) -> anyhow::Result<Option<bool>> {
    let Some(check) = &config.check else {
        return Ok(None);
    };
    let started = Instant::now();
    let result = client
        .bash(&command_args(check, config.check_timeout))
        .await
        .context("running the check")?;
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
