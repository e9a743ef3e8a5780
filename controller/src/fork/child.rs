//! The children of a fork: each one's workspace in the form its sandbox takes, its session
//! continuing the parent's conversation, and its result; and the model each child talks to.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;

use harness_log::{Durability, Event, EventLog, ForkedFrom, Outcome, TaskFinished, TaskStarted};
use harness_models::{Model, ScriptedModel};
use harness_policy::Nobody;
use harness_replay::fork::{ForkChild, ForkPoint};
use harness_replay::restore;
use harness_runtime::config::RunConfig;
use harness_runtime::run_loop::{Resume, Totals};
use harness_runtime::session::{Audience, SessionOptions, SessionSummary};
use harness_runtime::task::WorkspaceSource;

use super::workspace::{self, ChildWorkspace};
use super::{ForkDisplay, benchmark, linker};

/// What every child of one fork shares.
pub(super) struct Fork<'a> {
    pub(super) dir: &'a Path,
    pub(super) out: &'a Path,
    pub(super) template: &'a Path,
    /// The workspace at the step as one tar archive, for children in containers.
    pub(super) archive: Option<&'a Path>,
    /// Links the parent's blobs into each child's log, in the background.
    pub(super) linker: linker::Linker,
    /// Those blobs' names, which the children's initial snapshots leave to it.
    pub(super) provided: Arc<std::collections::BTreeSet<String>>,
    /// Or an image that holds it, for children in containers of `--sandbox docker`.
    pub(super) image: Option<&'a harness_runtime::sandbox::docker::fork_image::ForkImage>,
    /// Where the children's workspaces are made.
    pub(super) workspaces: &'a Path,
    /// What only this process may enter (inside `workspaces`): overlays' layers, lists of
    /// known files.
    pub(super) layers: &'a Path,
    /// The workspace at the step, shared with the blocking tasks that make workspaces.
    pub(super) state: Arc<restore::State>,
    pub(super) point: &'a ForkPoint,
    pub(super) config: &'a RunConfig,
    pub(super) fork_id: &'a str,
    /// The fork's own log (a batch log: a task per child).
    pub(super) log: &'a EventLog,
    pub(super) durability: Durability,
    pub(super) keep: bool,
    /// Whose the overlaid workspaces are, when children get overlays.
    pub(super) overlay: Option<workspace::Owner>,
    /// With overlays: the servers' `--known-files` list made once from the template, and how
    /// many files it names.
    pub(super) known: Option<(PathBuf, usize)>,
    pub(super) cancel: &'a CancellationToken,
    pub(super) display: &'a dyn ForkDisplay,
}

impl Fork<'_> {
    /// Children `1..=count`, `parallel` at once, each shown as it ends; a child that could not
    /// run keeps its error beside its number.
    pub(super) async fn run_all(
        &self,
        count: u32,
        parallel: usize,
    ) -> Vec<(u32, anyhow::Result<ForkChild>)> {
        futures::stream::iter(1..=count)
            .map(|n| self.child(n).map(move |child| (n, child)))
            .buffer_unordered(parallel)
            .inspect(|(_, child)| {
                if let Ok(child) = child {
                    self.display.child(child, count);
                }
            })
            .collect()
            .await
    }

    /// One child: its workspace, its session from the parent's conversation, its result.
    async fn child(&self, child: u32) -> anyhow::Result<ForkChild> {
        let log_dir = self.out.join(format!("child-{child}"));
        // Named past guessing: the children's commands share a user, and the folder above
        // them can be passed through, not listed.
        let workspace = self
            .workspaces
            .join(format!("child-{child}-{:016x}", rand::random::<u64>()));
        let mut config = self.config.clone();
        // Held for the session's length: an overlay is unmounted, a copy removed, on drop.
        let held = self.workspace(child, &workspace, &mut config).await?;
        // The parent's blobs, linked once the child is at work (it needs none of them); the
        // child prints nothing as it goes (its log has everything).
        let linked = linker::LinkWhenAtWork::new(&self.linker, &log_dir);
        let model = child_model(self.point, &config)?;
        let has_check = config.check.is_some();
        let options = SessionOptions {
            config,
            session_id: harness_log::new_session_id(),
            log_dir: log_dir.clone(),
            durability: self.durability,
            sandbox_log_in_folder: true,
            gates: None,
            lease: None,
            warm: None,
            build_policy: harness_judge::build_policy,
            resume: Some(Arc::new(self.resume(child))),
            subagent: None,
        };
        let (summary, started) = self
            .run_session(child, options, model, &linked, &log_dir)
            .await?;
        drop(held);
        Ok(self.result(child, &log_dir, summary, has_check, started))
    }

    /// Gives the child's config its workspace, in the form its sandbox takes; what it returns
    /// (a local workspace) is held for the session's length.
    async fn workspace(
        &self,
        child: u32,
        workspace: &Path,
        config: &mut RunConfig,
    ) -> anyhow::Result<Option<ChildWorkspace>> {
        match config.sandbox {
            harness_runtime::config::SandboxTarget::Local => {
                let (made, known) = self.local_workspace(child, workspace).await?;
                if child == 1 {
                    self.display.note(&format!(
                        "children's workspaces: {}; {} files' hashes known to their servers",
                        made.made.describe(),
                        known.1
                    ));
                }
                config.working_dir = Some(made.path.clone());
                config.known_files = Some(known.0);
                return Ok(Some(made));
            }
            // A container of the fork's image has the workspace already.
            harness_runtime::config::SandboxTarget::Docker(ref mut spec)
                if self.image.is_some() =>
            {
                let image = self.image.context("no fork image")?;
                spec.image = image.tag.clone();
                spec.known_files = image.known_files.clone();
                config.workspace = None;
                if child == 1 {
                    self.display.note(&format!(
                        "children's workspaces: containers of {} ({}), which holds the workspace at the step{}",
                        image.tag,
                        if image.reused { "kept from an earlier fork" } else { "made now" },
                        if image.known_files.is_some() {
                            " and every file's verified hash"
                        } else {
                            ""
                        }
                    ));
                }
            }
            // A container's workspace (a task image's own too) is replaced by the verified
            // copy's archive.
            _ => {
                let archive = self
                    .archive
                    .context("no archive of the workspace at the step")?;
                config.workspace = Some(WorkspaceSource::Replace(archive.to_owned()));
            }
        }
        Ok(None)
    }

    /// A local child's workspace, made off the async threads (a copy can be large), and the
    /// servers' list of its known files with how many it names.
    async fn local_workspace(
        &self,
        child: u32,
        workspace: &Path,
    ) -> anyhow::Result<(ChildWorkspace, (PathBuf, usize))> {
        let (from, to) = (self.template.to_owned(), workspace.to_owned());
        let layers = self.layers.join(format!("child-{child}"));
        let own_list = self.layers.join(format!("known-{child}.jsonl"));
        let shared = self.known.clone();
        let (overlay, keep) = (self.overlay, self.keep);
        let state = Arc::clone(&self.state);
        tokio::task::spawn_blocking(move || {
            let made = ChildWorkspace::make(&from, &to, &layers, overlay, keep)?;
            // An overlay shows the template's own files (their inode and times): the
            // list made from the template holds for every overlay; a copy has its own.
            let known = match (made.made, shared) {
                (workspace::Made::Overlay, Some(shared)) => shared,
                _ => {
                    let n = workspace::known_files(&state, &made.path, &own_list)?;
                    (own_list, n)
                }
            };
            Ok::<_, std::io::Error>((made, known))
        })
        .await
        .context("making the child's workspace")?
        .with_context(|| format!("making the workspace {}", workspace.display()))
    }

    /// Where the child goes on from: the parent's conversation at the step, and whose child
    /// it is (its header says so).
    fn resume(&self, child: u32) -> Resume {
        Resume {
            messages: self.point.messages.clone(),
            turns: self.point.turns,
            forked_from: ForkedFrom {
                session_id: self.point.header.session_id.clone(),
                log_dir: self.dir.display().to_string(),
                seq: self.point.seq,
                turns: self.point.turns,
                n_messages: self.point.messages.len() as u64,
                fork_id: self.fork_id.to_owned(),
                child,
            },
            provided_blobs: Arc::clone(&self.provided),
        }
    }

    /// The child's session, between its task's start and end in the fork's log; when it
    /// started.
    async fn run_session(
        &self,
        child: u32,
        options: SessionOptions,
        model: Arc<dyn Model>,
        linked: &linker::LinkWhenAtWork<'_>,
        log_dir: &Path,
    ) -> anyhow::Result<(SessionSummary, Instant)> {
        let totals = Mutex::new(Totals::default());
        let audience = Audience {
            observer: linked,
            asker: &Nobody,
        };
        let task = format!("child-{child}");
        self.log
            .record(Event::TaskStarted(TaskStarted {
                task: task.clone(),
                attempt: 1,
                log_dir: task.clone(),
                sandbox: None,
            }))
            .await?;
        let started = Instant::now();
        let summary = harness_runtime::session::run_session(
            options,
            model,
            audience,
            &totals,
            self.cancel.clone(),
        )
        .await;
        // Its log is whole once the links are made: only then is the child said to be done.
        linked
            .done()
            .await
            .with_context(|| format!("linking the parent's blobs into {}", log_dir.display()))?;
        self.log
            .record(Event::TaskFinished(TaskFinished {
                task,
                attempt: 1,
                outcome: summary.outcome.logged(),
                failure: summary.outcome.failure_class(),
                passed: summary.outcome.passed(),
                duration_ms: summary.duration.as_millis() as u64,
                cost: summary.totals.cost_with_subagents(),
            }))
            .await?;
        Ok((summary, started))
    }

    /// The child as `forks.json` names it, with its reward.
    fn result(
        &self,
        child: u32,
        log_dir: &Path,
        summary: SessionSummary,
        has_check: bool,
        started: Instant,
    ) -> ForkChild {
        let outcome = summary.outcome.logged();
        let reward = match outcome {
            // A benchmark child's is its verifier's.
            _ if self.point.header.config.benchmark.is_some() => benchmark::reward(log_dir),
            Outcome::Completed if has_check => Some(1.0),
            Outcome::CheckFailed => Some(0.0),
            _ => None,
        };
        ForkChild {
            child,
            session_id: summary.session_id,
            log_dir: log_dir.display().to_string(),
            outcome,
            failure: summary.outcome.failure_class(),
            reward,
            cost: summary.totals.cost_with_subagents(),
            turns: summary.totals.turns,
            tool_calls: summary.totals.tool_calls,
            duration_ms: started.elapsed().as_millis() as u64,
            answer: summary.reason.unwrap_or(summary.answer),
        }
    }
}

/// A child's model: its own instance (a scripted one has a position); the parent's script goes
/// on where the parent was.
pub(super) fn child_model(point: &ForkPoint, config: &RunConfig) -> anyhow::Result<Arc<dyn Model>> {
    let parent = &point.header.config.model;
    if config.model.name == *parent
        && let Some(path) = parent.strip_prefix("script:")
    {
        let script =
            ScriptedModel::load(Path::new(path))?.skipping(point.turn_replies, point.verdicts)?;
        return Ok(Arc::new(script));
    }
    crate::launch::build_model(config, None)
}
