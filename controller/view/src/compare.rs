//! Runs side by side. Batches: a grid of tasks × batches from each batch's own grid, each
//! task's score in each over its finished trials (its mean reward, or its pass rate without
//! rewards), flips against the first batch, and paired statistics over the tasks both ran:
//! the mean difference with a bootstrap 95% interval, and an exact sign test on the flips. Two sessions: their tool calls aligned by
//! step, with the first step where they went different ways.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::ViewError;
use crate::index::Runs;

/// Resamples of the bootstrap (seeded: the same runs give the same interval).
const RESAMPLES: usize = 2000;
/// Calls of a session kept for its trajectory.
pub const MAX_STEPS: usize = 5_000;
/// Characters of a call's arguments and output kept per step.
const STEP_CHARS: usize = 4000;

#[derive(Debug, Serialize)]
pub struct Side {
    pub id: String,
    pub name: String,
    pub path: String,
    pub tasks: usize,
    pub passed: usize,
}

/// One task in one batch.
#[derive(Debug, Clone, Serialize)]
pub struct Score {
    pub trials: usize,
    pub passed: usize,
    /// Mean reward when its trials have rewards, else the fraction passed.
    pub score: f64,
    /// At least half of its finished trials passed.
    pub passes: bool,
    /// Its first trial's run, to open or to compare step by step.
    pub run: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct TaskLine {
    pub task: String,
    pub scores: Vec<Option<Score>>,
    /// Per batch after the first: `fixed` or `broke` against the first.
    pub flips: Vec<Option<&'static str>>,
}

/// A batch against the first, over the tasks both finished.
#[derive(Debug, Serialize)]
pub struct Paired {
    pub side: usize,
    pub n: usize,
    pub mean_difference: f64,
    pub interval: (f64, f64),
    pub fixed: usize,
    pub broke: usize,
    /// Two-sided exact sign test on the flips (McNemar's exact test).
    pub sign_test_p: f64,
}

#[derive(Debug, Serialize)]
pub struct Grid {
    pub sides: Vec<Side>,
    pub tasks: Vec<TaskLine>,
    pub paired: Vec<Paired>,
}

/// The compare grid of the batches `ids` (each with its folder): each side's tasks as its
/// batch grid has them ([`crate::batch::grid`]), so both pages agree on what a task is.
pub fn grid(runs: &Runs, ids: &[(String, std::path::PathBuf)]) -> Result<Grid, ViewError> {
    let mut sides = Vec::new();
    let mut by_task: BTreeMap<String, Vec<Option<Score>>> = BTreeMap::new();
    for (i, (id, dir)) in ids.iter().enumerate() {
        let run = runs
            .by_id
            .get(id)
            .ok_or_else(|| ViewError::NotFound(format!("no run `{}`", id.escape_debug())))?;
        let scores = scores(&crate::batch::grid(runs, id, dir)?);
        sides.push(Side {
            id: id.clone(),
            name: run.name.clone(),
            path: run.path.clone(),
            tasks: scores.len(),
            passed: scores.values().filter(|s| s.passes).count(),
        });
        for (task, score) in scores {
            let line = by_task.entry(task).or_insert_with(|| vec![None; ids.len()]);
            line[i] = Some(score);
        }
    }
    let tasks: Vec<TaskLine> = by_task
        .into_iter()
        .map(|(task, scores)| {
            let flips = scores
                .iter()
                .skip(1)
                .map(|s| match (&scores[0], s) {
                    (Some(a), Some(b)) if a.passes && !b.passes => Some("broke"),
                    (Some(a), Some(b)) if !a.passes && b.passes => Some("fixed"),
                    _ => None,
                })
                .collect();
            TaskLine {
                task,
                scores,
                flips,
            }
        })
        .collect();
    let paired = (1..ids.len()).map(|side| paired(&tasks, side)).collect();
    Ok(Grid {
        sides,
        tasks,
        paired,
    })
}

/// Each task of a batch's grid with a finished trial: its score over those.
fn scores(grid: &crate::batch::Grid) -> BTreeMap<String, Score> {
    grid.rows
        .iter()
        .filter_map(|row| {
            let done: Vec<&crate::batch::Cell> = row
                .cells
                .iter()
                .filter(|c| matches!(c.state, "passed" | "failed"))
                .collect();
            if done.is_empty() {
                return None;
            }
            let passed = done.iter().filter(|c| c.state == "passed").count();
            let rewards: Vec<f64> = done.iter().filter_map(|c| c.reward).collect();
            let score = if rewards.is_empty() {
                passed as f64 / done.len() as f64
            } else {
                rewards.iter().sum::<f64>() / rewards.len() as f64
            };
            let score = Score {
                trials: done.len(),
                passed,
                score,
                passes: passed * 2 >= done.len(),
                run: done.iter().find_map(|c| c.run.clone()),
            };
            Some((row.task.clone(), score))
        })
        .collect()
}

fn paired(tasks: &[TaskLine], side: usize) -> Paired {
    let differences: Vec<f64> = tasks
        .iter()
        .filter_map(|t| match (&t.scores[0], &t.scores[side]) {
            (Some(a), Some(b)) => Some(b.score - a.score),
            _ => None,
        })
        .collect();
    let flips = tasks.iter().filter_map(|t| t.flips[side - 1]);
    let fixed = flips.clone().filter(|f| *f == "fixed").count();
    let broke = flips.filter(|f| *f == "broke").count();
    let n = differences.len();
    let mean = if n == 0 {
        0.0
    } else {
        differences.iter().sum::<f64>() / n as f64
    };
    Paired {
        side,
        n,
        mean_difference: mean,
        interval: bootstrap(&differences),
        fixed,
        broke,
        sign_test_p: sign_test(fixed, broke),
    }
}

/// A percentile bootstrap 95% interval on the mean.
pub fn bootstrap(values: &[f64]) -> (f64, f64) {
    let n = values.len();
    if n == 0 {
        return (0.0, 0.0);
    }
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut means: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            (0..n)
                .map(|_| values[(next() % n as u64) as usize])
                .sum::<f64>()
                / n as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[((q * (RESAMPLES - 1) as f64).round() as usize).min(RESAMPLES - 1)];
    (at(0.025), at(0.975))
}

/// Two-sided exact binomial test of `b` against `c` with p = 1/2.
pub fn sign_test(b: usize, c: usize) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let low = b.min(c);
    // ln P(X = k), walked up from k = 0.
    let mut ln_p = -(n as f64) * std::f64::consts::LN_2;
    let mut tail = 0.0;
    for k in 0..=low {
        tail += ln_p.exp();
        ln_p += ((n - k) as f64 / (k + 1) as f64).ln();
    }
    (2.0 * tail).min(1.0)
}

/// One tool call and what came of it.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub seq: u64,
    pub tool: String,
    pub arguments: String,
    pub status: Option<String>,
    pub exit_code: Option<i64>,
    pub output: String,
    #[serde(skip)]
    call_id: String,
    /// The arguments' hash, as JSON in one key order (spacing and order do not count).
    #[serde(skip)]
    arguments_key: String,
    /// The output's hash (its blob's, when it has one).
    #[serde(skip)]
    output_id: String,
}

#[derive(Debug, Serialize)]
pub struct Trajectory {
    /// More calls than [`MAX_STEPS`]: the first ones are here.
    pub truncated: bool,
    pub run: String,
    pub task: String,
    pub outcome: Option<String>,
    pub steps: Vec<Step>,
}

/// Where two trajectories first differ: the step (from 0) and what differs there.
#[derive(Debug, PartialEq, Serialize)]
pub struct Divergence {
    pub step: usize,
    pub field: &'static str,
}

#[derive(Debug, Serialize)]
pub struct Pair {
    pub a: Trajectory,
    pub b: Trajectory,
    pub divergence: Option<Divergence>,
}

/// A session's tool calls in order, each with its result.
pub fn trajectory(run: &str, dir: &Path) -> Result<Trajectory, ViewError> {
    let mut steps: Vec<Step> = Vec::new();
    let (mut task, mut outcome, mut truncated) = (String::new(), None, false);
    for envelope in harness_replay::events(dir, |_| {})? {
        let envelope = envelope?;
        match envelope.event {
            harness_log::Event::SessionStarted(started) => task = cut(&started.task),
            // The first calls only: a trajectory's memory does not grow with a hostile log.
            harness_log::Event::ToolCall(_) if steps.len() >= MAX_STEPS => truncated = true,
            harness_log::Event::ToolCall(call) => steps.push(Step {
                seq: envelope.seq,
                arguments_key: arguments_key(&call.arguments),
                call_id: call.call_id,
                tool: call.name,
                arguments: cut(&call.arguments),
                status: None,
                exit_code: None,
                output: String::new(),
                output_id: String::new(),
            }),
            harness_log::Event::ToolResult(result) => {
                if let Some(step) = steps.iter_mut().rev().find(|s| s.call_id == result.call_id) {
                    step.status = Some(result.status.as_str().to_owned());
                    step.exit_code = result.exit_code.map(i64::from);
                    step.output = cut(result
                        .output
                        .text
                        .as_deref()
                        .or(result.output.preview.as_deref())
                        .unwrap_or_default());
                    step.output_id = match (&result.output.text, &result.output.blob) {
                        (Some(text), _) => hex::encode(Sha256::digest(text.as_bytes())),
                        (None, Some(blob)) => blob.sha256.clone(),
                        (None, None) => String::new(),
                    };
                }
            }
            harness_log::Event::SessionFinished(finished) => {
                outcome = Some(finished.outcome.as_str().to_owned());
            }
            _ => {}
        }
    }
    Ok(Trajectory {
        run: run.to_owned(),
        task,
        outcome,
        steps,
        truncated,
    })
}

/// The first step at which `a` and `b` differ: the tool, its arguments (as JSON, so spacing
/// does not count), its status or exit code, its output; or one ending before the other.
pub fn first_divergence(a: &[Step], b: &[Step]) -> Option<Divergence> {
    for (step, (x, y)) in a.iter().zip(b).enumerate() {
        let field = if x.tool != y.tool {
            "tool"
        } else if x.arguments_key != y.arguments_key {
            "arguments"
        } else if x.status != y.status || x.exit_code != y.exit_code {
            "status"
        } else if x.output_id != y.output_id {
            "output"
        } else {
            continue;
        };
        return Some(Divergence { step, field });
    }
    (a.len() != b.len()).then_some(Divergence {
        step: a.len().min(b.len()),
        field: "length",
    })
}

/// The hash of a call's arguments as JSON in one key order (text that is not JSON as itself).
fn arguments_key(arguments: &str) -> String {
    let canonical = serde_json::from_str::<Value>(arguments)
        .map_or_else(|_| arguments.to_owned(), |value| value.to_string());
    hex::encode(Sha256::digest(canonical.as_bytes()))
}

fn cut(text: &str) -> String {
    match text.char_indices().nth(STEP_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(tool: &str, arguments: &str, output: &str) -> Step {
        Step {
            seq: 0,
            call_id: String::new(),
            tool: tool.to_owned(),
            arguments: arguments.to_owned(),
            status: Some("ok".to_owned()),
            exit_code: Some(0),
            output: output.to_owned(),
            arguments_key: arguments_key(arguments),
            output_id: output.to_owned(),
        }
    }

    #[test]
    fn the_first_divergence_is_where_calls_or_outputs_first_differ() {
        let a = [
            step("bash", r#"{"cmd": "ls"}"#, "x"),
            step("bash", r#"{"cmd":"cat x"}"#, "1"),
        ];
        let same = [
            step("bash", r#"{"cmd":"ls"}"#, "x"),
            step("bash", r#"{"cmd":"cat x"}"#, "1"),
        ];
        assert_eq!(first_divergence(&a, &same), None);
        let other = [
            step("bash", r#"{"cmd":"ls"}"#, "x"),
            step("bash", r#"{"cmd":"cat y"}"#, "1"),
        ];
        assert_eq!(
            first_divergence(&a, &other),
            Some(Divergence {
                step: 1,
                field: "arguments"
            })
        );
        let output = [step("bash", r#"{"cmd":"ls"}"#, "y")];
        assert_eq!(
            first_divergence(&a, &output),
            Some(Divergence {
                step: 0,
                field: "output"
            })
        );
        assert_eq!(
            first_divergence(&a, &a[..1]),
            Some(Divergence {
                step: 1,
                field: "length"
            })
        );
    }

    #[test]
    fn a_trajectory_keeps_its_first_calls_and_says_it_was_cut() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::new();
        for seq in 0..MAX_STEPS + 10 {
            text.push_str(&format!(
                "{{\"seq\":{seq},\"ts\":\"2026-01-01T00:00:00.000Z\",\"type\":\"tool_call\",\"data\":{{\"call_id\":\"c{seq}\",\"name\":\"bash\",\"arguments\":\"{{}}\"}}}}\n"
            ));
        }
        std::fs::write(dir.path().join("events.jsonl"), text).unwrap();
        let trajectory = trajectory("0", dir.path()).unwrap();
        assert_eq!(
            (trajectory.steps.len(), trajectory.truncated),
            (MAX_STEPS, true)
        );
        // Arguments compare as JSON: spacing and key order do not count.
        assert_eq!(
            arguments_key(r#"{"a": 1, "b": 2}"#),
            arguments_key(r#"{"b":2,"a":1}"#)
        );
    }

    #[test]
    fn the_statistics_are_the_textbook_ones() {
        // 8 of 10 flips one way: p = 2 * P(X <= 2 | n = 10) = 2 * 56/1024.
        assert!((sign_test(8, 2) - 112.0 / 1024.0).abs() < 1e-12);
        assert_eq!(sign_test(0, 0), 1.0);
        assert_eq!(sign_test(3, 3), 1.0);
        let (low, high) = bootstrap(&[1.0; 20]);
        assert_eq!((low, high), (1.0, 1.0));
        let (low, high) = bootstrap(&[0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0]);
        assert!(low < 0.5 && 0.5 < high && low >= 0.0 && high <= 1.0);
    }
}
