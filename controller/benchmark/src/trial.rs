//! A benchmark task's session once its containers are up: the images in the log, the agent
//! under the task's timeout, the agent's processes ended and the verifier's folders put back
//! as the image had them ([`crate::isolate`]), the agent's logs copied out, then the
//! verifier, whose reward is the verdict. The verifier runs after any end of the agent (its
//! timeout, a limit, a model failure) but an interruption, as Harbor grades it.

use std::collections::BTreeMap;
use std::time::Duration;

use super::run::BenchRun;
use crate::Phase;
use crate::agents::quote;
use crate::container::TaskEnvironment;
use crate::error::{Failed, Failure};
use crate::flags::Agent as Acting;
use crate::host::{self, TaskHost};
use crate::isolate::{self, Baseline};
use crate::verify::{self, Verdict};
use harness_log::{
    ErrorClass, ErrorEvent, Event, EventLog, ImageBuilt, VerifierFailure, VerifierFinished,
    VerifierIsolated,
};
use harness_runtime::run_loop::{Agent, Totals};
use harness_runtime::session::provider::Grading;
use harness_runtime::session::{SessionOutcome, Stop};
use harness_runtime::step::{Step, describe};

mod steps;

/// At most this much of the container's `/logs/agent` and `/logs/artifacts` is copied out.
const AGENT_LOGS_CAP: u64 = 256 << 20;

/// An `image_built` event per image the task's containers run.
pub(super) async fn record_images(
    log: &EventLog,
    environment: &TaskEnvironment,
) -> Result<(), harness_log::EventLogError> {
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

/// A trial's rounds: the session's grading, the task's containers, the task.
pub(super) struct Rounds<'a> {
    pub g: Grading<'a>,
    pub host: &'a dyn TaskHost,
    pub run: &'a BenchRun,
}

/// What every round of a trial shares: the task's containers, the agent, the task, the
/// verifier's folders as the image had them, the session's totals.
#[derive(Clone, Copy)]
struct Trial<'a> {
    environment: &'a dyn TaskHost,
    agent: &'a Agent<'a>,
    system_prompt: &'a str,
    run: &'a BenchRun,
    baseline: &'a Baseline,
    totals: &'a std::sync::Mutex<Totals>,
}

/// The oracle's solution into the container, open to the agent's user (not always root):
/// readable by all, the script runnable.
async fn upload_solution(environment: &dyn TaskHost, solution: &crate::Solution) -> Failed<()> {
    environment
        .upload(&solution.dir, solution.only.as_deref(), &solution.mount)
        .await?;
    let open = format!(
        "chmod -R a+rX {mount} && chmod a+rx {script}",
        mount = quote(&solution.mount),
        script = quote(&solution.script)
    );
    environment
        .exec(&open, &BTreeMap::new(), Some("0"), Duration::from_secs(60))
        .await?;
    Ok(())
}

/// Before the agent of a phase runs: the phase's network set, and for the oracle its
/// solution uploaded. Either failing is the infrastructure's fault.
async fn prepare_phase(
    environment: &dyn TaskHost,
    run: &BenchRun,
    phase: &Phase<'_>,
) -> Result<(), Stop> {
    let infrastructure = |what: &str, err: Failure| {
        Stop::new(
            ErrorClass::Infrastructure,
            format!("{what}: {}", describe(&err)),
        )
    };
    // Fail closed: the agent never runs on a network its phase did not ask for.
    environment
        .set_network(phase.agent_network)
        .await
        .map_err(|err| infrastructure("setting the agent's network", err))?;
    if run.agent == Acting::Oracle
        && let Some(solution) = phase.solution
    {
        upload_solution(environment, solution)
            .await
            .map_err(|err| infrastructure("uploading the solution", err))?;
    }
    Ok(())
}

/// One round's end: the verdict, the agent's answer, and how the agent ended.
struct Round {
    verdict: Verdict,
    answer: String,
    /// The loop failed (a model error, a limit): the session ends after this round.
    failed: Option<Stop>,
    timed_out: bool,
}

impl Rounds<'_> {
    /// The agent, then the verifier, for the task or each of its steps; the outcome is the
    /// verdict unless the agent failed.
    pub(super) async fn run_bench(&self) -> Result<(SessionOutcome, String), Stop> {
        let (environment, run) = (self.host, self.run);
        let (agent, system_prompt, totals) = (self.g.agent, self.g.system_prompt, self.g.totals);
        let infrastructure = |what: &str, err: Failure| {
            Stop::new(
                ErrorClass::Infrastructure,
                format!("{what}: {}", describe(&err)),
            )
        };
        // The verifier's folders as the image has them, before anything of the agent's runs.
        let baseline = Baseline::take(environment).await;
        if let Some(check) = &run.task.healthcheck {
            host::healthcheck(environment, check, &run.task.env, None)
                .await
                .map_err(|err| infrastructure("the task's healthcheck (HealthcheckError)", err))?;
        }
        let trial = Trial {
            environment,
            agent,
            system_prompt,
            run,
            baseline: &baseline,
            totals,
        };
        if !run.task.steps.is_empty() {
            return self.run_steps(&trial).await;
        }
        let round = self.round(&trial, &run.task.phases()[0]).await?;
        if let Some(stop) = round.failed {
            return Err(stop);
        }
        Ok((self.outcome_of(&round.verdict, run), round.answer))
    }

    /// A single-step task's outcome from its verdict.
    fn outcome_of(&self, verdict: &Verdict, run: &BenchRun) -> SessionOutcome {
        match (&verdict.failure, verdict.passed(run.pass_threshold)) {
            // Judged, and failed: the agent's doing, not the verifier's.
            (Some((VerifierFailure::Tampered, _)), _) => SessionOutcome::CheckFailed,
            (Some(_), _) => SessionOutcome::NoVerdict,
            (None, true) => SessionOutcome::Completed,
            (None, false) => SessionOutcome::CheckFailed,
        }
    }

    /// One round: the agent on its network under its timeout, its processes ended and the
    /// verifier's folders put back, the collect hooks, the logs copied out, the verifier.
    async fn round(&self, trial: &Trial<'_>, phase: &Phase<'_>) -> Result<Round, Stop> {
        let Trial {
            environment,
            run,
            baseline,
            ..
        } = *trial;
        prepare_phase(environment, run, phase).await?;
        let (failed, answer, timed_out) = self.run_agent(trial, phase).await?;
        // The state the agent left, processes included, before they are ended.
        self.g
            .recorder
            .fingerprint(None)
            .await
            .step("recording the state fingerprint")
            .map_err(|err| Stop::preparing(&err))?;
        let isolated = self.isolate(environment, baseline, phase.step).await?;
        self.run_collect_hooks(environment, run).await;
        let folder = match phase.step {
            Some(step) => self.g.log_dir.join("steps").join(step),
            None => self.g.log_dir.to_owned(),
        };
        self.collect_logs(environment, &folder).await;
        let verdict = if isolated.restored {
            self.verify(environment, run, phase, &folder, timed_out)
                .await?
        } else {
            self.tampered(run, timed_out, phase.step).await?
        };
        Ok(Round {
            verdict,
            answer,
            failed,
            timed_out,
        })
    }

    /// The agent on the phase's prompt under its timeout. Returns how its loop failed (if it
    /// did), its answer, and whether it timed out; a timeout is noted and logged as the
    /// `Limit` error it is. Its own step: the rest of the round runs however the agent ended.
    async fn run_agent(
        &self,
        trial: &Trial<'_>,
        phase: &Phase<'_>,
    ) -> Result<(Option<Stop>, String, bool), Stop> {
        let Trial {
            agent,
            system_prompt,
            totals,
            ..
        } = *trial;
        let log = &self.g.recorder.log;
        let observer = self.g.observer;
        let timeout = phase.agent_timeout;
        let ran =
            tokio::time::timeout(timeout, agent.run(system_prompt, phase.instruction, totals))
                .await;
        Ok(match ran {
            Ok(Ok(report)) => (None, report.answer, false),
            Ok(Err(err)) => (Some(Stop::of_loop(&err)), String::new(), false),
            Err(_) => {
                let message = format!(
                    "the agent ran past the {}'s timeout ({})",
                    if phase.step.is_some() { "step" } else { "task" },
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
        })
    }

    /// `[[verifier.collect]]`: each command, best effort (a failure is noted, not fatal).
    async fn run_collect_hooks(&self, environment: &dyn TaskHost, run: &BenchRun) {
        for hook in &run.task.collect {
            if hook.service != "main" {
                self.g.observer.note(&format!(
                    "warning: a collect hook of service {} did not run: only the main service's run here",
                    hook.service
                ));
                continue;
            }
            let ran = environment
                .exec(
                    &hook.command,
                    &run.task.env,
                    hook.user.as_deref(),
                    hook.timeout,
                )
                .await;
            let failed = match &ran {
                Ok(exec) if exec.exit_code == Some(0) => None,
                Ok(exec) => Some(
                    exec.exit_code
                        .map_or_else(|| "timed out".to_owned(), |c| format!("exit {c}")),
                ),
                Err(err) => Some(describe(err)),
            };
            if let Some(why) = failed {
                self.g.observer.note(&format!(
                    "warning: the collect hook `{}` failed ({why})",
                    hook.command
                ));
            }
        }
    }

    /// The container's `/logs/agent` and `/logs/artifacts` into `dir` (the trial's folder, or
    /// its step's).
    async fn collect_logs(&self, environment: &dyn TaskHost, dir: &std::path::Path) {
        let (agent, artifacts) = (dir.join("agent"), dir.join("artifacts/logs/artifacts"));
        // Two copies at once: each is a round trip to the engine.
        let copies = futures::future::join(
            environment.download("/logs/agent", &agent, AGENT_LOGS_CAP),
            environment.download("/logs/artifacts", &artifacts, AGENT_LOGS_CAP),
        )
        .await;
        for (from, copied) in [("/logs/agent", copies.0), ("/logs/artifacts", copies.1)] {
            if let Err(err) = copied {
                self.g.observer.note(&format!(
                    "warning: copying {from} out of the container: {}",
                    describe(&err)
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
        let _ = crate::results::write_json(&dir.join("artifacts/manifest.json"), &manifest);
    }

    /// Ends the agent's processes and puts the verifier's folders back; records
    /// `verifier_isolated` with what the agent had done to them.
    async fn isolate(
        &self,
        environment: &dyn TaskHost,
        baseline: &Baseline,
        step: Option<&str>,
    ) -> Result<VerifierIsolated, Stop> {
        let isolated = isolate::isolate(environment, baseline, self.g.log_dir, step)
            .await
            .map_err(|err| {
                Stop::new(
                    ErrorClass::Infrastructure,
                    format!("isolating the verifier from the agent: {}", describe(&err)),
                )
            })?;
        let observer = self.g.observer;
        if !isolated.processes_ended.is_empty() {
            observer.note(&format!(
                "verifier: ended {} processes the agent left running",
                isolated.processes_ended.len()
            ));
        }
        if !isolated.runtime.is_empty() {
            let paths: Vec<&str> = isolated.runtime.iter().map(|c| c.path.as_str()).collect();
            observer.note(&format!(
                "warning: the agent changed what runs the tests ({}): the verifier runs over them, and the trial is marked tampered",
                paths.join(", ")
            ));
        }
        if isolated.tampered && (!isolated.changes.is_empty() || isolated.runtime.is_empty()) {
            let paths: Vec<&str> = isolated.changes.iter().map(|c| c.path.as_str()).collect();
            observer.note(&format!(
                "warning: the agent tampered with the verifier's folders ({}): put back as the image had them",
                if paths.is_empty() {
                    "a write call".to_owned()
                } else {
                    paths.join(", ")
                }
            ));
        }
        self.g
            .recorder
            .log
            .record(Event::VerifierIsolated(isolated.clone()))
            .await
            .map_err(|err| Stop::preparing(&err.into()))?;
        Ok(isolated)
    }

    /// The verdict when the agent's changes resisted the reset: the tests do not run, 0.
    async fn tampered(
        &self,
        run: &BenchRun,
        timed_out: bool,
        step: Option<&str>,
    ) -> Result<Verdict, Stop> {
        let message = "the agent's changes to the verifier's folders resisted their reset: the tests did not run";
        let verdict = Verdict {
            rewards: Some(std::collections::BTreeMap::from([(
                "reward".to_owned(),
                0.0,
            )])),
            failure: Some((VerifierFailure::Tampered, message.to_owned())),
            exit_code: None,
            duration: Duration::ZERO,
            output: String::new(),
            ctrf: None,
            note: None,
        };
        self.record_verdict(&verdict, run, timed_out, step).await?;
        Ok(verdict)
    }

    /// Runs the verifier and records `verifier_finished`.
    async fn verify(
        &self,
        environment: &dyn TaskHost,
        run: &BenchRun,
        phase: &Phase<'_>,
        folder: &std::path::Path,
        timed_out: bool,
    ) -> Result<Verdict, Stop> {
        let observer = self.g.observer;
        observer.note(&format!(
            "verifier: running the {}'s tests (timeout {}, network {})",
            if phase.step.is_some() { "step" } else { "task" },
            seconds(phase.verifier_timeout),
            phase.verifier_network.describe()
        ));
        let verdict = verify::run(environment, &run.task, phase, &folder.join("verifier"))
            .await
            .map_err(|err| {
                Stop::new(
                    ErrorClass::Infrastructure,
                    format!("running the verifier: {}", describe(&err)),
                )
            })?;
        self.record_verdict(&verdict, run, timed_out, phase.step)
            .await?;
        Ok(verdict)
    }

    /// Records `verifier_finished` and says the verdict.
    async fn record_verdict(
        &self,
        verdict: &Verdict,
        run: &BenchRun,
        timed_out: bool,
        step: Option<&str>,
    ) -> Result<(), Stop> {
        let observer = self.g.observer;
        let log = &self.g.recorder.log;
        let record = |err: harness_log::EventLogError| Stop::preparing(&err.into());
        let ctrf = match &verdict.ctrf {
            Some(bytes) => Some(log.blob(bytes).map_err(record)?),
            None => None,
        };
        let event = VerifierFinished {
            step: step.map(str::to_owned),
            rewards: verdict.rewards.clone(),
            reward: verdict.reward(),
            passed: verdict.passed(run.pass_threshold),
            pass_threshold: run.pass_threshold,
            agent_timed_out: timed_out,
            failure: verdict.failure.as_ref().map(|(kind, _)| *kind),
            message: verdict.failure.as_ref().map(|(_, message)| message.clone()),
            note: verdict.note.clone(),
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
        if let Some(note) = &verdict.note {
            observer.note(&format!("verifier: {note}"));
        }
        Ok(())
    }
}

fn seconds(duration: Duration) -> String {
    format!("{} s", duration.as_secs())
}
