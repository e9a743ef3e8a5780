//! The verifier, run after the agent (or its timeout) as the task's author wrote it, outside
//! the agent's sandbox and policy.
//!
//! Harbor: `tests/` to `/tests`, `(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1`; the
//! reward is `/logs/verifier/reward.json` (named numbers; it wins) or `reward.txt` (one number).
//! The exit code is not the verdict. TB1: `run-tests.sh` and `tests/` to `/tests`, run as root
//! with `TEST_DIR=/tests`; the output judged by the task's parser gives a reward of 1 or 0.
//! Each format's own rules say what a run means: a Harbor verifier that times out or writes no
//! reward has failed (never a pass); TB1 tests that ran but printed no result the parser can
//! read (tests that do not build) are an unresolved task, reward 0, with the reason kept.
//!
//! It runs after [`super::isolate`]: no process of the agent's is left, and `/tests` and
//! `/logs/verifier` are as the task's image had them.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::host::TaskHost;
use super::{BenchTask, Phase, Verifier};
use crate::error::Failed;
use harness_log::VerifierFailure;

/// At most this much of `/logs/verifier` is copied out.
const VERIFIER_LOGS_CAP: u64 = 64 << 20;

/// What the verifier found.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The named rewards; `None` when the verifier failed.
    pub rewards: Option<BTreeMap<String, f64>>,
    pub failure: Option<(VerifierFailure, String)>,
    pub exit_code: Option<i64>,
    pub duration: Duration,
    /// The test output.
    pub output: String,
    /// `ctrf.json`, when the tests wrote one.
    pub ctrf: Option<Vec<u8>>,
    /// How the reward was reached when the output alone does not show it.
    pub note: Option<String>,
}

impl Verdict {
    /// The one number a pass is judged by: `reward` when named, else the mean of all.
    pub fn reward(&self) -> Option<f64> {
        let rewards = self.rewards.as_ref()?;
        if let Some(reward) = rewards.get("reward") {
            return Some(*reward);
        }
        (!rewards.is_empty()).then(|| rewards.values().sum::<f64>() / rewards.len() as f64)
    }

    pub fn passed(&self, threshold: f64) -> bool {
        self.reward().is_some_and(|r| r >= threshold)
    }
}

/// Runs the verifier of `phase` (the task, or one of its steps) on the network it asks for;
/// `logs` receives `/logs/verifier` (Harbor's `verifier/` folder).
pub async fn run(
    environment: &dyn TaskHost,
    task: &BenchTask,
    phase: &Phase<'_>,
    logs: &Path,
) -> Failed<Verdict> {
    environment.set_network(phase.verifier_network).await?;
    let env = &phase.verifier_env;
    match &task.verifier {
        Verifier::Harbor { .. } => harbor(environment, phase, env, logs).await,
        Verifier::TerminalBench1 {
            run_tests,
            tests,
            parser,
        } => {
            environment
                .upload(
                    run_tests.parent().unwrap_or(Path::new(".")),
                    Some("run-tests.sh"),
                    "/tests",
                )
                .await?;
            if let Some(tests) = tests {
                environment.upload(tests, None, "/tests").await?;
            }
            let script = "mkdir -p /logs/verifier && bash /tests/run-tests.sh > /logs/verifier/test-stdout.txt 2>&1";
            let (exec, mut verdict) = run_script(environment, phase, script, env, logs).await?;
            if exec.timed_out {
                verdict.failure = Some((VerifierFailure::Timeout, timeout_message(phase)));
                return Ok(verdict);
            }
            let judged = parser.judge(&verdict.output);
            // Terminal-Bench's rule: tests that ran and gave no result the parser can read
            // leave the task unresolved; they are not the verifier's failure.
            if let Some(why) = judged.parse_error {
                verdict.note = Some(format!("unresolved (reward 0): {why}"));
            }
            let reward = if judged.resolved { 1.0 } else { 0.0 };
            std::fs::create_dir_all(logs)?;
            std::fs::write(logs.join("reward.txt"), format!("{reward}\n"))?;
            verdict.rewards = Some(BTreeMap::from([("reward".to_owned(), reward)]));
            Ok(verdict)
        }
    }
}

/// Runs a verifier script (its output in `/logs/verifier/test-stdout.txt`) and copies
/// `/logs/verifier` into `logs`; the verdict so far has no rewards.
async fn run_script(
    environment: &dyn TaskHost,
    phase: &Phase<'_>,
    script: &str,
    env: &BTreeMap<String, String>,
    logs: &Path,
) -> Failed<(super::container::Exec, Verdict)> {
    let exec = environment
        .exec(script, env, phase.verifier_user, phase.verifier_timeout)
        .await?;
    let _ = environment
        .download("/logs/verifier", logs, VERIFIER_LOGS_CAP)
        .await;
    let verdict = Verdict {
        rewards: None,
        failure: None,
        exit_code: exec.exit_code,
        duration: exec.duration,
        output: std::fs::read_to_string(logs.join("test-stdout.txt")).unwrap_or_default(),
        ctrf: None,
        note: None,
    };
    Ok((exec, verdict))
}

fn timeout_message(phase: &Phase<'_>) -> String {
    format!(
        "the verifier ran past its timeout ({} s)",
        phase.verifier_timeout.as_secs()
    )
}

/// Harbor's verifier: the tests folders (a step's over the task's shared ones) to `/tests`,
/// then `test.sh`, whose reward file is the verdict.
async fn harbor(
    environment: &dyn TaskHost,
    phase: &Phase<'_>,
    env: &BTreeMap<String, String>,
    logs: &Path,
) -> Failed<Verdict> {
    for tests in &phase.tests {
        environment.upload(tests, None, "/tests").await?;
    }
    let script = "mkdir -p /logs/verifier && chmod +x /tests/test.sh; (/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1";
    let (exec, mut verdict) = run_script(environment, phase, script, env, logs).await?;
    verdict.ctrf = std::fs::read(logs.join("ctrf.json")).ok();
    if exec.timed_out {
        verdict.failure = Some((VerifierFailure::Timeout, timeout_message(phase)));
        return Ok(verdict);
    }
    match read_rewards(logs) {
        Ok(rewards) => verdict.rewards = Some(rewards),
        Err(failure) => verdict.failure = Some(failure),
    }
    Ok(verdict)
}

/// `reward.json` (a flat object of finite numbers, or one number) wins over `reward.txt` (one
/// number), as Harbor reads them.
pub fn read_rewards(dir: &Path) -> Result<BTreeMap<String, f64>, (VerifierFailure, String)> {
    let bad = |why: String| (VerifierFailure::BadReward, why);
    if let Ok(text) = std::fs::read_to_string(dir.join("reward.json")) {
        if text.trim().is_empty() {
            return Err((
                VerifierFailure::EmptyReward,
                "reward.json is empty".to_owned(),
            ));
        }
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|err| bad(format!("reward.json is not JSON: {err}")))?;
        let rewards = match value {
            serde_json::Value::Number(n) => {
                BTreeMap::from([("reward".to_owned(), n.as_f64().unwrap_or(f64::NAN))])
            }
            serde_json::Value::Object(map) => map
                .into_iter()
                .map(|(k, v)| {
                    v.as_f64()
                        .map(|n| (k.clone(), n))
                        .ok_or_else(|| bad(format!("reward.json: `{k}` is not a number")))
                })
                .collect::<Result<_, _>>()?,
            other => {
                return Err(bad(format!(
                    "reward.json must be an object of numbers, not {other}"
                )));
            }
        };
        if let Some((key, _)) = rewards.iter().find(|(_, v)| !v.is_finite()) {
            return Err(bad(format!("reward.json: `{key}` is not a finite number")));
        }
        return Ok(rewards);
    }
    match std::fs::read_to_string(dir.join("reward.txt")) {
        Ok(text) if text.trim().is_empty() => Err((
            VerifierFailure::EmptyReward,
            "reward.txt is empty".to_owned(),
        )),
        Ok(text) => match text.trim().parse::<f64>() {
            Ok(value) if value.is_finite() => Ok(BTreeMap::from([("reward".to_owned(), value)])),
            _ => Err(bad(format!(
                "reward.txt holds `{}`, not a number",
                text.trim()
            ))),
        },
        Err(_) => Err((
            VerifierFailure::NoReward,
            "the verifier wrote no /logs/verifier/reward.txt or reward.json".to_owned(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewards_are_read_as_harbor_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            read_rewards(dir.path()).unwrap_err().0,
            VerifierFailure::NoReward
        );
        std::fs::write(dir.path().join("reward.txt"), "1\n").unwrap();
        assert_eq!(read_rewards(dir.path()).unwrap()["reward"], 1.0);
        std::fs::write(
            dir.path().join("reward.json"),
            r#"{"correctness": 1, "style": 0.5}"#,
        )
        .unwrap();
        let both = read_rewards(dir.path()).unwrap();
        assert_eq!((both.len(), both["style"]), (2, 0.5), "reward.json wins");
        std::fs::write(dir.path().join("reward.json"), "").unwrap();
        assert_eq!(
            read_rewards(dir.path()).unwrap_err().0,
            VerifierFailure::EmptyReward
        );
        std::fs::write(dir.path().join("reward.json"), r#"{"a": "x"}"#).unwrap();
        assert_eq!(
            read_rewards(dir.path()).unwrap_err().0,
            VerifierFailure::BadReward
        );
        let verdict = Verdict {
            rewards: Some(BTreeMap::from([
                ("correctness".to_owned(), 1.0),
                ("style".to_owned(), 0.5),
            ])),
            failure: None,
            exit_code: Some(0),
            duration: Duration::ZERO,
            output: String::new(),
            ctrf: None,
            note: None,
        };
        assert_eq!(verdict.reward(), Some(0.75));
        assert!(!verdict.passed(1.0) && verdict.passed(0.7));
    }
}
