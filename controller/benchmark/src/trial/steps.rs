//! A multi-step task (Harbor's `[[steps]]`): each step prepared, then a round (agent,
//! isolation, verifier); a step that cannot start, fails or falls short of its `min_reward`
//! stops the task, and the steps' rewards make the task's (`mean` or `final`).

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Round, Rounds, Trial};
use crate::error::Failure;
use crate::{Phase, RewardStrategy, host, isolate};
use harness_log::{Event, EventLogError, StepScore, StepStarted, StepsFinished};
use harness_runtime::session::{SessionOutcome, Stop};
use harness_runtime::step::describe;

/// The steps so far.
#[derive(Default)]
struct Steps {
    scores: Vec<StepScore>,
    /// Why the steps after the last one run did not run.
    stopped: Option<String>,
    /// The loop's failure in a step: the session's end.
    failed: Option<Stop>,
    answer: String,
}

fn record_error(err: EventLogError) -> Stop {
    Stop::preparing(&err.into())
}

impl Rounds<'_> {
    /// Every step in order until one stops the task; then the steps' score.
    pub(super) async fn run_steps(
        &self,
        trial: &Trial<'_>,
    ) -> Result<(SessionOutcome, String), Stop> {
        let phases = trial.run.task.phases();
        let mut steps = Steps::default();
        for (index, phase) in phases.iter().enumerate() {
            if !self
                .step(trial, phase, index, phases.len(), &mut steps)
                .await?
            {
                break;
            }
        }
        self.finish_steps(trial, phases.len(), steps).await
    }

    /// One step: its `step_started`, its preparation, its round, its score; whether the next
    /// step runs.
    async fn step(
        &self,
        trial: &Trial<'_>,
        phase: &Phase<'_>,
        index: usize,
        count: usize,
        steps: &mut Steps,
    ) -> Result<bool, Stop> {
        let log = &self.g.recorder.log;
        let name = phase.step.unwrap_or_default();
        self.g
            .observer
            .note(&format!("step {}/{count}: {name}", index + 1));
        log.record(Event::StepStarted(StepStarted {
            index: index as u32 + 1,
            name: name.to_owned(),
            instruction: log.text(phase.instruction).map_err(record_error)?,
            agent_timeout_ms: phase.agent_timeout.as_millis() as u64,
        }))
        .await
        .map_err(record_error)?;
        if let Err((error, why)) = self.prepare_step(trial, phase, index).await {
            self.g.observer.note(&format!("step {name}: {why}"));
            steps.scores.push(StepScore {
                name: name.to_owned(),
                rewards: None,
                reward: None,
                error: Some(error.to_owned()),
                message: Some(why.clone()),
            });
            steps.stopped = Some(format!("step {name} could not start: {why}"));
            return Ok(false);
        }
        let round = self.round(trial, phase).await?;
        steps.answer = round.answer.clone();
        let mut step_score = score(name, &round);
        if let Some(stop) = &round.failed
            && step_score.error.is_none()
        {
            // The loop's failure is the step's, as Harbor files an agent's exception.
            step_score.error = Some(crate::exceptions::of_stop(stop.class).to_owned());
            step_score.message = Some(stop.message.clone());
        }
        let judged = step_score.rewards.is_some();
        steps.scores.push(step_score);
        steps.stopped = if let Some(stop) = round.failed {
            steps.failed = Some(stop);
            Some(format!("the agent failed in step {name}"))
        } else if !judged {
            Some(format!("step {name}'s verifier gave no reward"))
        } else if let Some(min) = phase.min_reward
            && !meets(min, round.verdict.rewards.as_ref())
        {
            let wanted: Vec<String> = min.iter().map(|(k, v)| format!("{k} {v}")).collect();
            Some(format!(
                "step {name} fell short of its min_reward ({})",
                wanted.join(", ")
            ))
        } else {
            None
        };
        Ok(steps.stopped.is_none())
    }

    /// The steps' score in the log (`steps_finished`) and the session's outcome from it.
    async fn finish_steps(
        &self,
        trial: &Trial<'_>,
        count: usize,
        steps: Steps,
    ) -> Result<(SessionOutcome, String), Stop> {
        let run = trial.run;
        let observer = self.g.observer;
        if let Some(why) = &steps.stopped
            && steps.scores.len() < count
        {
            observer.note(&format!(
                "steps: stopped after {} of {count}: {why}",
                steps.scores.len()
            ));
        }
        let rewards = aggregate(run.task.reward_strategy, &steps.scores);
        let reward = rewards.as_ref().and_then(headline);
        let passed = reward.is_some_and(|r| r >= run.pass_threshold);
        self.g
            .recorder
            .log
            .record(Event::StepsFinished(StepsFinished {
                strategy: run.task.reward_strategy.as_str().to_owned(),
                steps: steps.scores,
                rewards: rewards.clone(),
                reward,
                passed,
                pass_threshold: run.pass_threshold,
                stopped: steps.stopped,
            }))
            .await
            .map_err(record_error)?;
        observer.note(&match reward {
            Some(reward) => format!(
                "steps: reward {reward} ({}, {})",
                run.task.reward_strategy.as_str(),
                if passed { "pass" } else { "fail" }
            ),
            None => "steps: no step gave a reward".to_owned(),
        });
        if let Some(stop) = steps.failed {
            return Err(stop);
        }
        let outcome = match (rewards, passed) {
            (None, _) => SessionOutcome::NoVerdict,
            (Some(_), true) => SessionOutcome::Completed,
            (Some(_), false) => SessionOutcome::CheckFailed,
        };
        Ok((outcome, steps.answer))
    }

    /// Before a step's agent: the verifier's folders put back and `/logs/agent` emptied (after
    /// the first step), the step's
    /// `workdir/` copied into the working folder and its `setup.sh` run as the agent's user,
    /// then its healthcheck. An error is the step's, by Harbor's class, with why.
    async fn prepare_step(
        &self,
        trial: &Trial<'_>,
        phase: &Phase<'_>,
        index: usize,
    ) -> Result<(), (&'static str, String)> {
        let Trial {
            environment,
            run,
            baseline,
            ..
        } = *trial;
        let runtime = |err: Failure| ("RuntimeError", describe(&err));
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
                .map_err(|err| ("HealthcheckError", describe(&err)))?;
        }
        Ok(())
    }
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
            Some(crate::exceptions::of_failure(*failure).to_owned()),
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
