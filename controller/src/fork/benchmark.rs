//! A benchmark session's children: the task's own containers, started from the folder the log
//! names (holding the very files the session ran: their digest), the workspace at the step put
//! in place of the image's, and the task's verifier as the grader; each child's reward is its
//! verifier's.

use std::path::Path;

use anyhow::Context;
use harness_benchmark::flags::TrialFlags;
use harness_log::{BenchmarkRecord, Event, RunSettings};
use harness_runtime::config::{RunConfig, SessionFlags};

use super::ForkDisplay;

/// The children's run config for the benchmark task `bench` of the session `parent` under
/// `flags` (already the parent's where the fork's own say nothing); the agent's network is the
/// log's only when no wider than the task's own, unless `trust_log`.
pub(super) fn config(
    bench: &BenchmarkRecord,
    parent: &RunSettings,
    flags: &SessionFlags,
    trial: &TrialFlags,
    trust_log: bool,
    display: &dyn ForkDisplay,
) -> anyhow::Result<RunConfig> {
    let dir = Path::new(&bench.dir);
    if let Some(agent) = parent.agent.as_deref().filter(|agent| *agent != "model")
        && flags
            .model
            .as_deref()
            .is_none_or(|model| model == parent.model)
    {
        anyhow::bail!(
            "the session's agent was the task's {agent}, not a model: a fork continues a model's conversation; give the children one with --model"
        );
    }
    // The archive of the step replaces the workspace; the container's root is not one.
    if parent.workspace_root.as_deref() == Some("/") {
        anyhow::bail!(
            "{}: the task has no working folder (WORKDIR), so its workspace is the container's root, which the workspace at the step cannot replace",
            bench.dir
        );
    }
    let task = harness_benchmark::load(
        dir,
        &bench.name,
        &harness_benchmark::HostVars::named(&trial.task_env),
    )
    .with_context(|| format!("loading the task the session ran ({})", bench.dir))?;
    // A log is someone else's: its children run the files it ran, or none.
    if task.digest != bench.digest {
        anyhow::bail!(
            "{}: the task's files are not those the session ran ({} now, {} in the log): fork with the task folder as it was",
            bench.dir,
            task.digest,
            bench.digest
        );
    }
    if !task.steps.is_empty() {
        anyhow::bail!(
            "{}: a multi-step task's session cannot be forked: its children would have to start inside one of its steps, whose verifier has run or not",
            bench.dir
        );
    }
    let mut flags = flags.clone();
    // The agent's network as the session had it (`--network` may have set it then); from a log
    // not trusted, no wider than the task's own.
    if flags.network.is_none() {
        let wider = bench.online && task.network.agent != harness_benchmark::NetworkPolicy::Public;
        if wider && !trust_log {
            display.note(
                "the log's `online` is not taken: the agent's network is the task's own (a log is someone else's; --trust-log or --network host to take it)",
            );
        } else {
            flags.network = Some(if bench.online { "host" } else { "none" }.to_owned());
        }
    }
    Ok(harness_benchmark::run::run_config(
        dir,
        &bench.name,
        &flags,
        trial,
    )?)
}

/// The reward of the child's verifier (the last one, for a task of steps), from its log.
pub(super) fn reward(log_dir: &Path) -> Option<f64> {
    let events = harness_replay::events(log_dir, |_| {}).ok()?;
    events
        .filter_map(Result::ok)
        .filter_map(|envelope| match envelope.event {
            Event::VerifierFinished(verifier) => Some(verifier.reward),
            _ => None,
        })
        .last()
        .flatten()
}
