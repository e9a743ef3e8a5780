//! Rerunning a group of `agent` calls: each child's own recorded calls, re-executed where it
//! made them (a shared child on the session's sandbox, a forked child on a copy made at the
//! group's start), in call order; a forked child's changes compared with what its parent
//! recorded and applied as they were; then the group's net change compared with the log's.

use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use sandbox_protocol::ManifestEntry;

use super::{Divergence, RecordedCall, Recording, Rerun, RerunReport, summarize};
use crate::ReplayError;
use harness_log::{ForkMerge, SubagentStarted, WorkspaceMode};
use harness_runtime::recording::diff;
use harness_runtime::run_loop::{offered, parse_call};
use harness_runtime::sandbox::{SandboxClient, SandboxError};
use harness_runtime::subagent::is_agent_tool;

/// How deep subagents' logs are followed (a crafted log could link one to itself).
const DEEPEST: usize = 16;

/// How many subagents' logs one rerun reads at the most.
const MOST_CHILDREN: usize = 1000;

/// A child session as its parent's log names it.
#[derive(Debug, Clone)]
pub struct RecordedChild {
    /// Relative to the parent's folder.
    pub log_dir: String,
    pub workspace: WorkspaceMode,
    pub recording: Box<Recording>,
    /// A forked child's changes and whether they were applied.
    pub merge: Option<ForkMerge>,
    /// The parent's log folder (its blobs hold a forked child's changes).
    pub parent_log: PathBuf,
}

impl RecordedChild {
    /// The child `started` names, `depth` subagents below the session rerun; `loaded` counts
    /// the logs read over the whole tree, `budget` their blob bytes.
    pub(super) fn load(
        dir: &Path,
        started: &SubagentStarted,
        depth: usize,
        loaded: &mut usize,
        budget: &mut crate::BlobBudget,
    ) -> Result<RecordedChild, ReplayError> {
        let child_dir = crate::subagent_dir(dir, &started.log_dir)?;
        if depth > DEEPEST {
            return Err(ReplayError::Io(format!(
                "{}: subagents nested deeper than {DEEPEST}",
                child_dir.display()
            )));
        }
        *loaded += 1;
        if *loaded > MOST_CHILDREN {
            return Err(ReplayError::Io(format!(
                "{}: more than {MOST_CHILDREN} subagents' logs to rerun",
                child_dir.display()
            )));
        }
        Ok(RecordedChild {
            log_dir: started.log_dir.clone(),
            workspace: started.workspace,
            recording: Box::new(super::load_at(&child_dir, depth, loaded, budget)?),
            merge: None,
            parent_log: dir.to_owned(),
        })
    }
}

/// A copy of a sandbox for a forked child's rerun.
pub trait ForkedSandbox: Send + Sync {
    fn client(&self) -> &SandboxClient;
    fn stop(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// Makes copies of the rerun's sandbox.
pub trait Forker: Send + Sync {
    fn fork<'a>(
        &'a self,
        from: &'a SandboxClient,
    ) -> BoxFuture<'a, Result<Box<dyn ForkedSandbox>, String>>;
}

/// The `agent` calls at the head of `calls` (a group, as the session ran them).
pub(super) fn group(calls: &[RecordedCall]) -> &[RecordedCall] {
    let n = calls
        .iter()
        .take_while(|c| is_agent_tool(&c.call.name))
        .count();
    &calls[..n]
}

async fn manifest(sandbox: &SandboxClient) -> Result<(String, Vec<ManifestEntry>), SandboxError> {
    let snapshot = sandbox.snapshot().await?;
    let entries = sandbox.manifest(&snapshot.snapshot_id).await?.entries;
    Ok((snapshot.snapshot_id, entries))
}

/// A child of the group that runs again: its call, its recording, and the copy of the
/// workspace a forked one works in.
type ChildRun<'r> = (
    &'r RecordedCall,
    &'r RecordedChild,
    Option<Box<dyn ForkedSandbox>>,
);

/// Reruns a group; the snapshot the next call's changes are taken since.
pub(super) async fn rerun_group(
    group: &[RecordedCall],
    recording: &Recording,
    sandbox: &SandboxClient,
    with: Rerun<'_>,
    report: &mut RerunReport,
) -> Result<String, SandboxError> {
    let (_, base) = manifest(sandbox).await?;
    let runs = children_to_run(group, recording, sandbox, with, report).await;
    for (_, child, copy) in &runs {
        let target = copy.as_ref().map_or(sandbox, |c| c.client());
        let theirs = Box::pin(super::rerun(&child.recording, target, with)).await?;
        absorb(report, theirs, &child.log_dir);
    }
    for (recorded, child, copy) in runs {
        let Some(copy) = copy else { continue };
        merge_back(recorded, child, copy, &base, sandbox, report).await?;
    }
    let (snapshot_id, now) = manifest(sandbox).await?;
    if let Some(last) = group.last() {
        let again = summarize(&diff(&base, &now));
        if last.changes != again {
            report.divergences.push(diverged(
                last,
                "changes",
                super::show(&last.changes),
                super::show(&again),
            ));
        }
    }
    Ok(snapshot_id)
}

/// Which children of the group run again, and the copies of the forked ones: all made before
/// any child runs, as the session made them.
async fn children_to_run<'r>(
    group: &'r [RecordedCall],
    recording: &Recording,
    sandbox: &SandboxClient,
    with: Rerun<'_>,
    report: &mut RerunReport,
) -> Vec<ChildRun<'r>> {
    let mut runs = Vec::new();
    for recorded in group {
        let Some(child) = recorded.child.as_ref().filter(|_| recorded.allowed) else {
            // Refused, by the policy or a limit: it started nothing.
            report.n_skipped += 1;
            continue;
        };
        let parsed = offered(&recording.tools, &recorded.call)
            .and_then(|()| parse_call(&recorded.call, None));
        if let Ok(parsed) = parsed
            && super::refused(with.check, recorded, &parsed.input, sandbox, report).await
        {
            continue;
        }
        report.n_calls += 1;
        let copy = match child.workspace {
            WorkspaceMode::Shared => None,
            WorkspaceMode::Fork => {
                let copied = match with.forker {
                    Some(forker) => forker.fork(sandbox).await,
                    None => Err("this rerun's sandbox cannot be copied for it".to_owned()),
                };
                match copied {
                    Ok(copy) => Some(copy),
                    Err(why) => {
                        let what = "a copy of the workspace for a forked subagent".to_owned();
                        report
                            .divergences
                            .push(diverged(recorded, "workspace", what, why));
                        continue;
                    }
                }
            }
        };
        runs.push((recorded, child, copy));
    }
    runs
}

/// A forked child's changes compared with those its log recorded, then applied to the
/// rerun's workspace when the session applied them: its later calls find the same files.
async fn merge_back(
    recorded: &RecordedCall,
    child: &RecordedChild,
    copy: Box<dyn ForkedSandbox>,
    base: &[ManifestEntry],
    sandbox: &SandboxClient,
    report: &mut RerunReport,
) -> Result<(), SandboxError> {
    let changed = manifest(copy.client())
        .await
        .map(|(_, now)| diff(base, &now));
    copy.stop().await;
    let merge = child.merge.clone().unwrap_or(ForkMerge {
        changes: Vec::new(),
        applied: false,
        conflicts: Vec::new(),
    });
    let (recorded_changes, again) = (summarize(&merge.changes), summarize(&changed?));
    if recorded_changes != again {
        report.divergences.push(diverged(
            recorded,
            "changes",
            super::show(&recorded_changes),
            super::show(&again),
        ));
    }
    if merge.applied {
        let applied =
            harness_runtime::subagent::fork::apply(&merge.changes, sandbox, &child.parent_log)
                .await;
        if let Err(err) = applied {
            report.divergences.push(diverged(
                recorded,
                "changes",
                "its changes applied".to_owned(),
                format!("applying them failed: {err}"),
            ));
        }
    }
    Ok(())
}

/// A child's rerun counted in its parent's, its divergences named by its log.
fn absorb(report: &mut RerunReport, theirs: RerunReport, log_dir: &str) {
    report.n_calls += theirs.n_calls;
    report.n_skipped += theirs.n_skipped;
    report.n_from_log += theirs.n_from_log;
    report.refused.extend(
        theirs
            .refused
            .into_iter()
            .map(|r| format!("{log_dir}: {r}")),
    );
    report
        .divergences
        .extend(theirs.divergences.into_iter().map(|mut d| {
            d.log = match d.log.is_empty() {
                true => log_dir.to_owned(),
                false => format!("{log_dir}/{}", d.log),
            };
            d
        }));
}

fn diverged(
    recorded: &RecordedCall,
    field: &str,
    recorded_value: String,
    rerun: String,
) -> Divergence {
    Divergence {
        seq: recorded.seq,
        call_id: recorded.call.id.clone(),
        tool: recorded.call.name.clone(),
        field: field.to_owned(),
        recorded: recorded_value,
        rerun,
        log: String::new(),
    }
}
