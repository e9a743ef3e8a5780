//! What the children of a fork did (`forks.json`), found again from the parent's folder and
//! said as a line or a table.

use std::path::Path;

use serde::{Deserialize, Serialize};

use harness_models::Message;

/// What the children of a fork did, as `forks.json` keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ForkSummary {
    pub fork_id: String,
    pub parent: ForkParent,
    /// The conversation the children began with.
    pub prefix: Vec<Message>,
    pub children: Vec<ForkChild>,
    /// The children that passed (the task's check, or a benchmark's reward).
    pub n_passed: u32,
    /// The mean reward of the children that have one: the value of the state at the step.
    pub value: Option<f64>,
    /// USD the children spent (the prefix's cost is the parent's).
    pub cost: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ForkParent {
    pub log_dir: String,
    pub session_id: String,
    pub seq: u64,
    pub turns: u32,
    pub n_messages: u64,
    /// USD the parent had spent by the step.
    pub cost: f64,
    pub n_files: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ForkChild {
    pub child: u32,
    pub session_id: String,
    pub log_dir: String,
    pub outcome: harness_log::Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<harness_log::FailureClass>,
    /// 1 when the check passed, 0 when it failed; none without a check.
    pub reward: Option<f64>,
    pub cost: f64,
    pub turns: u32,
    pub tool_calls: u64,
    pub duration_ms: u64,
    pub answer: String,
}

impl ForkSummary {
    /// The totals over the children.
    pub fn new(
        fork_id: String,
        parent: ForkParent,
        prefix: Vec<Message>,
        mut children: Vec<ForkChild>,
    ) -> ForkSummary {
        children.sort_by_key(|child| child.child);
        let rewards: Vec<f64> = children.iter().filter_map(|child| child.reward).collect();
        let value =
            (!rewards.is_empty()).then(|| rewards.iter().sum::<f64>() / rewards.len() as f64);
        ForkSummary {
            fork_id,
            parent,
            prefix,
            n_passed: children
                .iter()
                .filter(|child| child.outcome == harness_log::Outcome::Completed)
                .count() as u32,
            value,
            cost: children.iter().map(|child| child.cost).sum(),
            children,
        }
    }
}

/// The largest `forks.json` read back (a thousand children's rows are far smaller).
const MAX_SUMMARY: u64 = 64 * 1024 * 1024;

/// The forks of the session in `dir` (each `dir/forks/*/forks.json`), oldest first, each with
/// its folder; a summary that cannot be read is left out.
pub fn forks_of(dir: &Path) -> Vec<(std::path::PathBuf, ForkSummary)> {
    let Ok(entries) = std::fs::read_dir(dir.join("forks")) else {
        return Vec::new();
    };
    let mut found: Vec<_> = entries
        .flatten()
        .filter_map(|entry| {
            let folder = entry.path();
            // A shared log's summary may be a link or a FIFO, or huge: none is read.
            let bytes =
                harness_log::reader::read_regular(&folder.join("forks.json"), MAX_SUMMARY).ok()?;
            Some((folder, serde_json::from_slice(&bytes).ok()?))
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// A fork in one line, for the parent's transcript.
pub fn line(summary: &ForkSummary, folder: &Path) -> String {
    let value = summary.value.map_or_else(
        || "no reward".to_owned(),
        |value| format!("value {value:.3}"),
    );
    format!(
        "fork {} at step {}: {} children, {} passed, {value}, ${:.4} ({})",
        summary.fork_id,
        summary.parent.seq,
        summary.children.len(),
        summary.n_passed,
        summary.cost,
        folder.display()
    )
}

/// The fork as a table: a row per child, then the totals and the value of the state.
pub fn table(summary: &ForkSummary) -> String {
    use std::fmt::Write as _;
    let parent = &summary.parent;
    let mut out = format!(
        "fork {} of {} at step {} (after turn {}, {} messages, {} files)\n",
        summary.fork_id,
        parent.log_dir,
        parent.seq,
        parent.turns,
        parent.n_messages,
        parent.n_files
    );
    let _ = writeln!(
        out,
        "{:>5}  {:<14} {:>6} {:>6} {:>6} {:>10} {:>9}  log",
        "child", "outcome", "reward", "turns", "calls", "cost", "time"
    );
    for child in &summary.children {
        let reward = child
            .reward
            .map_or_else(|| "-".to_owned(), |reward| format!("{reward:.2}"));
        let _ = writeln!(
            out,
            "{:>5}  {:<14} {:>6} {:>6} {:>6} {:>10} {:>8.1}s  {}",
            child.child,
            child.outcome.as_str(),
            reward,
            child.turns,
            child.tool_calls,
            format!("${:.4}", child.cost),
            child.duration_ms as f64 / 1000.0,
            child.log_dir
        );
    }
    let value = summary.value.map_or_else(
        || "none (no child has a reward: the task has no check, or none finished)".to_owned(),
        |value| format!("{value:.3}"),
    );
    let _ = writeln!(
        out,
        "{} of {} passed; value of the state at step {}: {value}; children's cost ${:.4}",
        summary.n_passed,
        summary.children.len(),
        parent.seq,
        summary.cost
    );
    out
}
