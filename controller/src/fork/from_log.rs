//! What a fork's children take from the parent's log header. A log is someone else's (a shared
//! one may be crafted): by default the children take from it only what runs nothing of this
//! machine's and spends no more than `harness run` would, and each key not taken is said once;
//! `--trust-log` takes them all as the log has them.

use harness_log::RunSettings;
use harness_replay::fork::ForkPoint;
use harness_runtime::config::SessionFlags;

use super::ForkDisplay;

/// How a hosted model's name begins (`PROVIDER/NAME`, reached over HTTP); `script:FILE` and
/// `replay:DIR` name files of this machine.
const HOSTED: [&str; 3] = ["openai/", "openai-compat/", "anthropic/"];

/// Fills what `flags` leave unset from the log's header: the model and its reasoning effort,
/// web search, `allow-all`, and what was left of the turn and cost limits at the step.
pub(super) fn settings(
    point: &ForkPoint,
    flags: &mut SessionFlags,
    trust_log: bool,
    display: &dyn ForkDisplay,
) -> anyhow::Result<()> {
    let parent = &point.header.config;
    model(parent, flags, trust_log)?;
    flags.reasoning_effort = flags
        .reasoning_effort
        .take()
        .or_else(|| parent.reasoning_effort.clone());
    // A parent that ran unchecked has unchecked children under --trust-log; any other policy
    // is the flags' (a rules file is not in the log: give it with --policy again).
    if flags.policy.is_none() && parent.policy == harness_log::DecisionSource::AllowAll.as_str() {
        if trust_log {
            flags.policy = Some("allow-all".to_owned());
        } else {
            not_taken(
                display,
                "policy",
                "(allow_all) is not taken: the children's calls are judged by the built-in rules",
                "--trust-log or --policy allow-all to take it",
            );
        }
    }
    if parent.web_search && !flags.web_search {
        if trust_log {
            flags.web_search = true;
        } else {
            not_taken(
                display,
                "web_search",
                "is not taken",
                "--trust-log or --web-search to take it",
            );
        }
    }
    limits(point, flags, trust_log, display);
    Ok(())
}

/// The check the children run: the log's only under `--trust-log` (it is a shell command).
pub(super) fn check(
    parent: &RunSettings,
    trust_log: bool,
    display: &dyn ForkDisplay,
) -> Option<String> {
    if parent.check.is_some() && !trust_log {
        not_taken(display, "check", "is not run", "--trust-log to run it");
        return None;
    }
    parent.check.clone()
}

/// The log's model when the flags name none: a hosted one, or any under `--trust-log`. A
/// scripted or replayed model is a file of this machine the log would choose: refused, rather
/// than the children going on with another (maybe paid) model than the log's.
fn model(parent: &RunSettings, flags: &mut SessionFlags, trust_log: bool) -> anyhow::Result<()> {
    if flags.model.is_some() {
        return Ok(());
    }
    if trust_log || HOSTED.iter().any(|prefix| parent.model.starts_with(prefix)) {
        flags.model = Some(parent.model.clone());
        return Ok(());
    }
    anyhow::bail!(
        "the log's `model` ({:?}) names a file of this machine, which a log is not trusted to choose (a log is someone else's): give the children's model with --model, or --trust-log for a log of your own",
        parent.model
    )
}

/// The `agent` tool's limits the children take from the log: as recorded under `--trust-log`,
/// else no more than a run's defaults (depth 1, 4 at once, 10 in all), so a header cannot
/// start thousands of sandboxes.
pub(super) fn agent_limits(
    limits: harness_log::SubagentLimits,
    trust_log: bool,
    display: &dyn ForkDisplay,
) -> harness_runtime::subagent::AgentFlags {
    let defaults = (1, 4, 10);
    let (depth, parallel, total) = if trust_log {
        (limits.max_depth, limits.max_parallel, limits.max_total)
    } else {
        let capped = (
            limits.max_depth.min(defaults.0),
            limits.max_parallel.min(defaults.1),
            limits.max_total.min(defaults.2),
        );
        if capped != (limits.max_depth, limits.max_parallel, limits.max_total) {
            not_taken(
                display,
                "subagents",
                "limits are capped at a run's defaults (depth 1, 4 at once, 10 in all)",
                "--trust-log or --agent-depth/--agent-parallel/--agent-max to give more",
            );
        }
        capped
    };
    harness_runtime::subagent::AgentFlags {
        max_depth: Some(depth),
        max_parallel: Some(parallel),
        max_total: Some(total),
        workspace: Some(limits.workspace.as_str().to_owned()),
    }
}

/// What was left of the parent's turn and cost limits at the step, when the flags give none:
/// no more than a run without those flags gets, unless `--trust-log`.
fn limits(point: &ForkPoint, flags: &mut SessionFlags, trust_log: bool, display: &dyn ForkDisplay) {
    let parent = &point.header.config;
    let (most_turns, most_cost) = match parent.benchmark {
        Some(_) => (
            harness_benchmark::run::DEFAULT_MAX_TURNS,
            harness_benchmark::run::DEFAULT_MAX_COST,
        ),
        None => (
            harness_runtime::config::DEFAULT_MAX_TURNS,
            harness_runtime::config::DEFAULT_MAX_COST,
        ),
    };
    // The turns the parent itself took (a parent that is a fork numbers its turns after its
    // own parent's, and its limit is its own).
    let own_turns = point.turns.saturating_sub(
        point
            .header
            .forked_from
            .as_ref()
            .map_or(0, |from| from.turns),
    );
    if flags.max_turns.is_none() {
        let left = parent.max_turns.saturating_sub(own_turns).max(1);
        flags.max_turns = Some(if trust_log || left <= most_turns {
            left
        } else {
            not_taken(
                display,
                "max_turns",
                &format!(
                    "leaves the children {left} turns: they get {most_turns}, as a run without --max-turns"
                ),
                "--trust-log or --max-turns to give more",
            );
            most_turns
        });
    }
    if flags.max_cost.is_none() {
        let left = (parent.max_cost - point.cost).max(0.0);
        flags.max_cost = Some(if trust_log || left <= most_cost {
            left
        } else {
            not_taken(
                display,
                "max_cost",
                &format!(
                    "leaves the children ${left:.2}: they get ${most_cost:.2}, as a run without --max-cost"
                ),
                "--trust-log or --max-cost to give more",
            );
            most_cost
        });
    }
}

/// Says once that the log's `key` is not taken as it is, and how to take it.
fn not_taken(display: &dyn ForkDisplay, key: &str, what: &str, how: &str) {
    display.note(&format!(
        "the log's `{key}` {what} (a log is someone else's; {how})"
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Notes(Mutex<Vec<String>>);

    impl ForkDisplay for Notes {
        fn note(&self, text: &str) {
            self.0.lock().unwrap().push(text.to_owned());
        }
        fn child(&self, _child: &harness_replay::fork::ForkChild, _count: u32) {}
    }

    /// A header asking for thousands of subagents gets a run's defaults unless trusted, and
    /// says so once; limits within the defaults are taken as they are, silently.
    #[test]
    fn a_logs_subagent_limits_are_capped_unless_trusted() {
        let huge = harness_log::SubagentLimits {
            max_depth: 50,
            max_parallel: u32::MAX,
            max_total: 100_000,
            workspace: harness_log::WorkspaceMode::Fork,
        };
        let notes = Notes::default();
        let capped = agent_limits(huge, false, &notes);
        let limits = (capped.max_depth, capped.max_parallel, capped.max_total);
        assert_eq!(limits, (Some(1), Some(4), Some(10)));
        assert_eq!(capped.workspace.as_deref(), Some("fork"));
        let said = notes.0.lock().unwrap().clone();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].contains("the log's `subagents` limits are capped"),
            "{said:?}"
        );

        let trusted = agent_limits(huge, true, &notes);
        assert_eq!(trusted.max_parallel, Some(u32::MAX));
        let small = harness_log::SubagentLimits {
            max_depth: 1,
            max_parallel: 2,
            max_total: 3,
            workspace: harness_log::WorkspaceMode::Shared,
        };
        let taken = agent_limits(small, false, &notes);
        let limits = (taken.max_depth, taken.max_parallel, taken.max_total);
        assert_eq!(limits, (Some(1), Some(2), Some(3)));
        assert_eq!(notes.0.lock().unwrap().len(), 1, "nothing more was said");
    }
}
