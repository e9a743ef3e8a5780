//! A benchmark task's session once its containers are up: the images in the log, the agent
//! under the task's timeout, the agent's logs copied out, then the verifier, whose reward is
//! the verdict. The verifier runs after any end of the agent (its timeout, a limit, a model
//! failure) but an interruption, as Harbor grades it.

use std::sync::Mutex;
use std::time::Duration;

use super::{Session, SessionOutcome, Stop};
use crate::bench::container::TaskEnvironment;
use crate::bench::host::TaskHost;
use crate::bench::verify::{self, Verdict};
use crate::config::{AgentKind, BenchRun};
use crate::event_log::{ErrorClass, ErrorEvent, Event, EventLog, ImageBuilt, VerifierFinished};
use crate::run_loop::{Agent, Totals};

/// At most this much of the container's `/logs/agent` and `/logs/artifacts` is copied out.
const AGENT_LOGS_CAP: u64 = 256 << 20;

/// An `image_built` event per image the task's containers run.
pub(super) async fn record_images(
    log: &EventLog,
    environment: &TaskEnvironment,
) -> anyhow::Result<()> {
    for (service, built) in &environment.built {
        let output = if built.output.is_empty() {
            None
        } else {
            Some(log.text(&built.output)?)
        };
        let event = ImageBuilt {
            service: service.clone(),
            tag: built.tag.clone(),
            cached: built.cached,
            duration_ms: built.duration.as_millis() as u64,
            output,
        };
        log.record(Event::ImageBuilt(event)).await?;
    }
    Ok(())
}

impl Session<'_> {
    /// The agent, then the verifier; the outcome is the verdict unless the agent failed.
    pub(super) async fn run_bench(
        &self,
        agent: &Agent<'_>,
        system_prompt: &str,
        run: &BenchRun,
        totals: &Mutex<Totals>,
    ) -> Result<(SessionOutcome, String), Stop> {
        let environment = self.sandbox.task_host().ok_or_else(|| {
            Stop::new(
                ErrorClass::Internal,
                "a benchmark task without its container",
            )
        })?;
        let log = &self.recorder.log;
        let observer = self.audience.observer;
        if self.options.config.agent == AgentKind::Oracle
            && let Some(solution) = &run.task.solution
        {
            environment
                .upload(&solution.dir, solution.only.as_deref(), &solution.mount)
                .await
                .map_err(|err| {
                    Stop::new(
                        ErrorClass::Infrastructure,
                        format!("uploading the solution: {err:#}"),
                    )
                })?;
        }
        let timeout = run.task.agent_timeout;
        let ran = tokio::time::timeout(
            timeout,
            agent.run(system_prompt, &self.options.config.prompt, totals),
        )
        .await;
        let (failed, answer, timed_out) = match ran {
            Ok(Ok(report)) => (None, report.answer, false),
            Ok(Err(err)) => (Some(Stop::of_loop(&err)), String::new(), false),
            Err(_) => {
                let message = format!(
                    "the agent ran past the task's timeout ({})",
                    seconds(timeout)
                );
                observer.note(&message);
                let event = ErrorEvent {
                    class: ErrorClass::Limit,
                    message: message.clone(),
                    call_id: None,
                };
                log.record(Event::Error(event))
                    .await
                    .map_err(|err| Stop::preparing(&err.into()))?;
                (None, format!("Stopped: {message}."), true)
            }
        };
        self.collect_logs(environment).await;
        self.recorder.fingerprint(None).await.map_err(|err| {
            Stop::preparing(&anyhow::Error::new(err).context("recording the state fingerprint"))
        })?;
        let verdict = self.verify(environment, run, timed_out).await?;
        if let Some(stop) = failed {
            return Err(stop);
        }
        let outcome = match (&verdict.failure, verdict.passed(run.pass_threshold)) {
            (Some(_), _) => SessionOutcome::VerifierFailed,
            (None, true) => SessionOutcome::Completed,
            (None, false) => SessionOutcome::CheckFailed,
        };
        Ok((outcome, answer))
    }

    /// The container's `/logs/agent` and `/logs/artifacts` into the trial folder.
    async fn collect_logs(&self, environment: &dyn TaskHost) {
        let dir = &self.options.log_dir;
        let (agent, artifacts) = (dir.join("agent"), dir.join("artifacts/logs/artifacts"));
        // Two copies at once: each is a round trip to the engine.
        let copies = futures::future::join(
            environment.download("/logs/agent", &agent, AGENT_LOGS_CAP),
            environment.download("/logs/artifacts", &artifacts, AGENT_LOGS_CAP),
        )
        .await;
        for (from, copied) in [("/logs/agent", copies.0), ("/logs/artifacts", copies.1)] {
            if let Err(err) = copied {
                self.audience.observer.note(&format!(
                    "warning: copying {from} out of the container: {err:#}"
                ));
            }
        }
        let manifest = serde_json::json!([{
            "source": "/logs/artifacts",
            "destination": "artifacts/logs/artifacts",
            "type": "directory",
            "status": "ok",
            "service": null,
            "exclude": [],
        }]);
        let _ = crate::bench::results::write_json(&dir.join("artifacts/manifest.json"), &manifest);
    }

    /// Runs the verifier and records `verifier_finished`.
    async fn verify(
        &self,
        environment: &dyn TaskHost,
        run: &BenchRun,
        timed_out: bool,
    ) -> Result<Verdict, Stop> {
        let observer = self.audience.observer;
        observer.note(&format!(
            "verifier: running the task's tests (timeout {})",
            seconds(run.task.verifier_timeout)
        ));
        let verdict = verify::run(
            environment,
            &run.task,
            &self.options.log_dir.join("verifier"),
        )
        .await
        .map_err(|err| {
            Stop::new(
                ErrorClass::Infrastructure,
                format!("running the verifier: {err:#}"),
            )
        })?;
        let log = &self.recorder.log;
        let record = |err: crate::event_log::EventLogError| Stop::preparing(&err.into());
        let ctrf = match &verdict.ctrf {
            Some(bytes) => Some(log.blob(bytes).map_err(record)?),
            None => None,
        };
        let event = VerifierFinished {
            rewards: verdict.rewards.clone(),
            reward: verdict.reward(),
            passed: verdict.passed(run.pass_threshold),
            pass_threshold: run.pass_threshold,
            agent_timed_out: timed_out,
            failure: verdict.failure.as_ref().map(|(kind, _)| *kind),
            message: verdict.failure.as_ref().map(|(_, message)| message.clone()),
            exit_code: verdict.exit_code,
            duration_ms: verdict.duration.as_millis() as u64,
            output: log.text(&verdict.output).map_err(record)?,
            ctrf,
        };
        log.record(Event::VerifierFinished(event))
            .await
            .map_err(record)?;
        observer.note(&match (&verdict.failure, verdict.reward()) {
            (Some((_, message)), _) => format!("verifier: failed: {message}"),
            (None, Some(reward)) => format!(
                "verifier: reward {reward} ({})",
                if verdict.passed(run.pass_threshold) {
                    "pass"
                } else {
                    "fail"
                }
            ),
            (None, None) => "verifier: no reward".to_owned(),
        });
        Ok(verdict)
    }
}

fn seconds(duration: Duration) -> String {
    format!("{} s", duration.as_secs())
}
