//! A benchmark task's session once its containers are up: the images in the log, the agent
//! under the task's timeout, the agent's processes ended and the verifier's folders put back
//! as the image had them ([`crate::bench::isolate`]), the agent's logs copied out, then the
//! verifier, whose reward is the verdict. The verifier runs after any end of the agent (its
//! timeout, a limit, a model failure) but an interruption, as Harbor grades it.

use std::sync::Mutex;
use std::time::Duration;

use super::{Session, SessionOutcome, Stop};
use crate::bench::container::TaskEnvironment;
use std::collections::BTreeMap;

use crate::bench::agents::quote;
use crate::bench::host::{self, TaskHost};
use crate::bench::isolate::{self, Baseline};
use crate::bench::verify::{self, Verdict};
use crate::bench::{Phase, RewardStrategy};
use crate::config::{AgentKind, BenchRun};
use crate::event_log::{
    ErrorClass, ErrorEvent, Event, EventLog, ImageBuilt, StepScore, StepStarted, StepsFinished,
    VerifierFailure, VerifierFinished, VerifierIsolated,
};
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

/// One round's end: the verdict, the agent's answer, and how the agent ended.
struct Round {
    verdict: Verdict,
    answer: String,
    /// The loop failed (a model error, a limit): the session ends after this round.
    failed: Option<Stop>,
    timed_out: bool,
}

/// Whether a step's rewards reach every threshold of its `min_reward` (a missing reward is
/// below any).
fn meets(min_reward: &BTreeMap<String, f64>, rewards: Option<&BTreeMap<String, f64>>) -> bool {
    min_reward.iter().all(|(key, threshold)| {
        rewards
            .and_then(|r| r.get(key))
            .is_some_and(|value| value >= threshold)
    })
}

/// A multi-step task's rewards from its steps', as Harbor makes them: `mean` takes each key's
/// mean over the steps whose verifier gave rewards (a key a step lacks as 0), `final` the last
/// step run's.
fn aggregate(strategy: RewardStrategy, scores: &[StepScore]) -> Option<BTreeMap<String, f64>> {
    match strategy {
        RewardStrategy::Final => scores.last().and_then(|s| s.rewards.clone()),
        RewardStrategy::Mean => {
            let judged: Vec<&BTreeMap<String, f64>> =
                scores.iter().filter_map(|s| s.rewards.as_ref()).collect();
            let keys: std::collections::BTreeSet<&String> =
                judged.iter().flat_map(|r| r.keys()).collect();
            (!keys.is_empty()).then(|| {
                keys.into_iter()
                    .map(|key| {
                        let sum: f64 = judged
                            .iter()
                            .map(|r| r.get(key).copied().unwrap_or(0.0))
                            .sum();
                        (key.clone(), sum / judged.len() as f64)
                    })
                    .collect()
            })
        }
    }
}

/// The reward a pass is judged by: `reward` when named, else the mean of all.
fn headline(rewards: &BTreeMap<String, f64>) -> Option<f64> {
    rewards.get("reward").copied().or_else(|| {
        (!rewards.is_empty()).then(|| rewards.values().sum::<f64>() / rewards.len() as f64)
    })
}

/// A step's score from its verdict, with its error by Harbor's class.
fn score(name: &str, round: &Round) -> StepScore {
    let (error, message) = match (&round.verdict.failure, round.timed_out) {
        (Some((failure, message)), _) => (
            Some(failure.harbor_exception().to_owned()),
            Some(message.clone()),
        ),
        (None, true) => (
            Some("AgentTimeoutError".to_owned()),
            Some("the agent ran past the step's timeout".to_owned()),
        ),
        (None, false) => (None, None),
    };
    StepScore {
        name: name.to_owned(),
        rewards: round.verdict.rewards.clone(),
        reward: round.verdict.reward(),
        error,
        message,
    }
}

impl Session<'_> {
    /// The agent, then the verifier, for the task or each of its steps; the outcome is the
    /// verdict unless the agent failed.
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
        let infrastructure = |what: &str, err: anyhow::Error| {
            Stop::new(ErrorClass::Infrastructure, format!("{what}: {err:#}"))
        };
        // The verifier's folders as the image has them, before anything of the agent's runs.
        let baseline = Baseline::take(environment).await;
        if let Some(check) = &run.task.healthcheck {
            host::healthcheck(environment, check, &run.task.env, None)
                .await
                .map_err(|err| infrastructure("the task's healthcheck (HealthcheckError)", err))?;
        }
        let phases = run.task.phases();
        if run.task.steps.is_empty() {
            let round = self
                .round(
                    environment,
                    agent,
                    system_prompt,
                    run,
                    &phases[0],
                    &baseline,
                    totals,
                )
                .await?;
            if let Some(stop) = round.failed {
                return Err(stop);
            }
            return Ok((self.outcome_of(&round.verdict, run), round.answer));
        }
        let log = &self.recorder.log;
        let record = |err: crate::event_log::EventLogError| Stop::preparing(&err.into());
        let mut scores: Vec<StepScore> = Vec::new();
        let mut stopped = None;
        let mut failed = None;
        let mut answer = String::new();
        for (index, phase) in phases.iter().enumerate() {
            let name = phase.step.unwrap_or_default();
            self.audience
                .observer
                .note(&format!("step {}/{}: {name}", index + 1, phases.len()));
            log.record(Event::StepStarted(StepStarted {
                index: index as u32 + 1,
                name: name.to_owned(),
                instruction: log.text(phase.instruction).map_err(record)?,
                agent_timeout_ms: phase.agent_timeout.as_millis() as u64,
            }))
            .await
            .map_err(record)?;
            if let Err((error, why)) = self
                .prepare_step(environment, run, phase, index, &baseline)
                .await
            {
                self.audience.observer.note(&format!("step {name}: {why}"));
                scores.push(StepScore {
                    name: name.to_owned(),
                    rewards: None,
                    reward: None,
                    error: Some(error.to_owned()),
                    message: Some(why.clone()),
                });
                stopped = Some(format!("step {name} could not start: {why}"));
                break;
            }
            let round = self
                .round(
                    environment,
                    agent,
                    system_prompt,
                    run,
                    phase,
                    &baseline,
                    totals,
                )
                .await?;
            answer = round.answer.clone();
            let mut step_score = score(name, &round);
            if let Some(stop) = &round.failed
                && step_score.error.is_none()
            {
                // The loop's failure is the step's, as Harbor files an agent's exception.
                step_score.error = Some(stop.harbor_exception().to_owned());
                step_score.message = Some(stop.message.clone());
            }
            let judged = step_score.rewards.is_some();
            scores.push(step_score);
            if let Some(stop) = round.failed {
                failed = Some(stop);
                stopped = Some(format!("the agent failed in step {name}"));
                break;
            }
            if !judged {
                stopped = Some(format!("step {name}'s verifier gave no reward"));
                break;
            }
            if let Some(min) = phase.min_reward
                && !meets(min, round.verdict.rewards.as_ref())
            {
                stopped = Some(format!(
                    "step {name} fell short of its min_reward ({})",
                    min.iter()
                        .map(|(k, v)| format!("{k} {v}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                break;
            }
        }
        if let Some(why) = &stopped
            && scores.len() < phases.len()
        {
            self.audience.observer.note(&format!(
                "steps: stopped after {} of {}: {why}",
                scores.len(),
                phases.len()
            ));
        }
        let rewards = aggregate(run.task.reward_strategy, &scores);
        let reward = rewards.as_ref().and_then(headline);
        let passed = reward.is_some_and(|r| r >= run.pass_threshold);
        log.record(Event::StepsFinished(StepsFinished {
            strategy: run.task.reward_strategy.as_str().to_owned(),
            steps: scores,
            rewards: rewards.clone(),
            reward,
            passed,
            pass_threshold: run.pass_threshold,
            stopped,
        }))
        .await
        .map_err(record)?;
        self.audience.observer.note(&match reward {
            Some(reward) => format!(
                "steps: reward {reward} ({}, {})",
                run.task.reward_strategy.as_str(),
                if passed { "pass" } else { "fail" }
            ),
            None => "steps: no step gave a reward".to_owned(),
        });
        if let Some(stop) = failed {
            return Err(stop);
        }
        let outcome = match (rewards, passed) {
            (None, _) => SessionOutcome::VerifierFailed,
            (Some(_), true) => SessionOutcome::Completed,
            (Some(_), false) => SessionOutcome::CheckFailed,
        };
        Ok((outcome, answer))
    }

    /// A single-step task's outcome from its verdict.
    fn outcome_of(&self, verdict: &Verdict, run: &BenchRun) -> SessionOutcome {
        match (&verdict.failure, verdict.passed(run.pass_threshold)) {
            // Judged, and failed: the agent's doing, not the verifier's.
            (Some((VerifierFailure::Tampered, _)), _) => SessionOutcome::CheckFailed,
            (Some(_), _) => SessionOutcome::VerifierFailed,
            (None, true) => SessionOutcome::Completed,
            (None, false) => SessionOutcome::CheckFailed,
        }
    }

    /// Before a step's agent: the verifier's folders put back and `/logs/agent` emptied (after
    /// the first step), the step's
    /// `workdir/` copied into the working folder and its `setup.sh` run as the agent's user,
    /// then its healthcheck. An error is the step's, by Harbor's class, with why.
    async fn prepare_step(
        &self,
        environment: &dyn TaskHost,
        run: &BenchRun,
        phase: &Phase<'_>,
        index: usize,
        baseline: &Baseline,
    ) -> Result<(), (&'static str, String)> {
        let runtime = |err: anyhow::Error| ("RuntimeError", format!("{err:#}"));
        let root = BTreeMap::new();
        if index > 0 {
            // The last step's tests and reward files go: this step is judged from the image's.
            isolate::restore(environment, baseline)
                .await
                .map_err(runtime)?;
            environment
                .exec(
                    "rm -rf /logs/agent && mkdir -p /logs/agent && chmod 777 /logs/agent",
                    &root,
                    Some("0"),
                    Duration::from_secs(60),
                )
                .await
                .map_err(runtime)?;
        }
        environment
            .set_network(&run.task.network.baseline)
            .await
            .map_err(runtime)?;
        let user = run.task.agent_user.as_deref();
        if let Some(files) = phase.workdir {
            let here = environment
                .exec("pwd", &root, user, Duration::from_secs(30))
                .await
                .map_err(runtime)?;
            let workdir = here.output.trim().to_owned();
            environment
                .upload(files, None, &workdir)
                .await
                .map_err(runtime)?;
            if files.join("setup.sh").is_file() {
                let setup = environment
                    .exec("bash ./setup.sh", &run.task.env, user, phase.agent_timeout)
                    .await
                    .map_err(runtime)?;
                if setup.exit_code != Some(0) {
                    return Err((
                        "RuntimeError",
                        format!(
                            "its setup.sh failed ({}): {}",
                            setup
                                .exit_code
                                .map_or_else(|| "timed out".to_owned(), |c| format!("exit {c}")),
                            setup.output.trim().chars().take(2000).collect::<String>()
                        ),
                    ));
                }
            }
        }
        if let Some(check) = phase.healthcheck {
            host::healthcheck(environment, check, &run.task.env, user)
                .await
                .map_err(|err| ("HealthcheckError", format!("{err:#}")))?;
        }
        Ok(())
    }

    /// One round: the agent on its network under its timeout, its processes ended and the
    /// verifier's folders put back, the collect hooks, the logs copied out, the verifier.
    #[allow(clippy::too_many_arguments)] // the session's round, named where it is taken
    async fn round(
        &self,
        environment: &dyn TaskHost,
        agent: &Agent<'_>,
        system_prompt: &str,
        run: &BenchRun,
        phase: &Phase<'_>,
        baseline: &Baseline,
        totals: &Mutex<Totals>,
    ) -> Result<Round, Stop> {
        let log = &self.recorder.log;
        let observer = self.audience.observer;
        let infrastructure = |what: &str, err: anyhow::Error| {
            Stop::new(ErrorClass::Infrastructure, format!("{what}: {err:#}"))
        };
        // Fail closed: the agent never runs on a network its phase did not ask for.
        environment
            .set_network(phase.agent_network)
            .await
            .map_err(|err| infrastructure("setting the agent's network", err))?;
        if self.options.config.agent == AgentKind::Oracle
            && let Some(solution) = phase.solution
        {
            environment
                .upload(&solution.dir, solution.only.as_deref(), &solution.mount)
                .await
                .map_err(|err| infrastructure("uploading the solution", err))?;
            // The agent's user (not always root) runs it: readable by all, the script runnable.
            let open = format!(
                "chmod -R a+rX {mount} && chmod a+rx {script}",
                mount = quote(&solution.mount),
                script = quote(&solution.script)
            );
            environment
                .exec(&open, &BTreeMap::new(), Some("0"), Duration::from_secs(60))
                .await
                .map_err(|err| infrastructure("opening the solution to the agent's user", err))?;
        }
        let timeout = phase.agent_timeout;
        let ran =
            tokio::time::timeout(timeout, agent.run(system_prompt, phase.instruction, totals))
                .await;
        let (failed, answer, timed_out) = match ran {
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
        };
        // The state the agent left, processes included, before they are ended.
        self.recorder.fingerprint(None).await.map_err(|err| {
            Stop::preparing(&anyhow::Error::new(err).context("recording the state fingerprint"))
        })?;
        let isolated = self.isolate(environment, baseline, phase.step).await?;
        self.run_collect_hooks(environment, run).await;
        let folder = match phase.step {
            Some(step) => self.options.log_dir.join("steps").join(step),
            None => self.options.log_dir.clone(),
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

    /// `[[verifier.collect]]`: each command, best effort (a failure is noted, not fatal).
    async fn run_collect_hooks(&self, environment: &dyn TaskHost, run: &BenchRun) {
        for hook in &run.task.collect {
            if hook.service != "main" {
                self.audience.observer.note(&format!(
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
                Err(err) => Some(format!("{err:#}")),
            };
            if let Some(why) = failed {
                self.audience.observer.note(&format!(
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

    /// Ends the agent's processes and puts the verifier's folders back; records
    /// `verifier_isolated` with what the agent had done to them.
    async fn isolate(
        &self,
        environment: &dyn TaskHost,
        baseline: &Baseline,
        step: Option<&str>,
    ) -> Result<VerifierIsolated, Stop> {
        let isolated = isolate::isolate(environment, baseline, &self.options.log_dir, step)
            .await
            .map_err(|err| {
                Stop::new(
                    ErrorClass::Infrastructure,
                    format!("isolating the verifier from the agent: {err:#}"),
                )
            })?;
        let observer = self.audience.observer;
        if !isolated.processes_ended.is_empty() {
            observer.note(&format!(
                "verifier: ended {} processes the agent left running",
                isolated.processes_ended.len()
            ));
        }
        if isolated.tampered {
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
        self.recorder
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
        let observer = self.audience.observer;
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
                    format!("running the verifier: {err:#}"),
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
        let observer = self.audience.observer;
        let log = &self.recorder.log;
        let record = |err: crate::event_log::EventLogError| Stop::preparing(&err.into());
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
