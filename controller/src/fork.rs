//! `harness replay fork`: K child sessions, each from one recorded session's state after a
//! step — its conversation and its workspace — continuing live.
//!
//! The workspace at the step is written once (every file's hash verified) and each child gets
//! a copy of it; a child's log gets the parent's blobs linked in, so its initial snapshot is
//! not fetched again. Each child's header names its parent (`forked_from`); the fork's folder
//! (`<RUN>/forks/<fork-id>/` unless `--out`) holds the children's logs, a batch log with a task
//! per child (so it reads as a batch: `report.html`, `replay metrics`, `replay compare`), and
//! `forks.json`.
//!
//! A benchmark session's children run in the task's own containers and are graded by its
//! verifier ([`benchmark`]); children in containers get the workspace at the step as one archive
//! that replaces the image's.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;

mod at_step;
mod benchmark;
mod child_config;
mod container;
mod from_log;
mod kept;
mod linker;
mod workspace;

use at_step::{AtStep, forks_folder};
use child_config::child_config;
use workspace::ChildWorkspace;

use harness_log::{
    BatchFinished, BatchStarted, BatchTask, Durability, Event, EventLog, ForkedFrom, Outcome,
    TaskFinished, TaskStarted,
};
use harness_models::{Model, ScriptedModel};
use harness_policy::Nobody;
use harness_replay::fork::{ForkChild, ForkParent, ForkPoint, ForkSummary};
use harness_replay::{report, restore};
use harness_runtime::config::{RunConfig, SessionFlags};
use harness_runtime::run_loop::{Resume, Totals};
use harness_runtime::session::{Audience, SessionOptions};
use harness_runtime::task::WorkspaceSource;

/// What a fork runs.
#[derive(Debug)]
pub struct ForkConfig {
    /// The parent session's folder.
    pub run: PathBuf,
    /// The event after which the children begin.
    pub seq: u64,
    pub count: u32,
    /// Children at once.
    pub parallel: usize,
    /// The fork's folder (`<run>/forks/<fork-id>` when none).
    pub out: Option<PathBuf>,
    /// The run flags; what they leave unset is the parent's.
    pub flags: SessionFlags,
    /// The flags a benchmark task's children take.
    pub trial: harness_benchmark::flags::TrialFlags,
    pub durability: Durability,
    /// Keep the verified workspace at the step in `<run>/forks/.state-SEQ/` and start from it
    /// when it is still as verified (`--keep-state`).
    pub keep_state: bool,
    /// Take the log's check, model, policy, web search and limits as they are (`--trust-log`).
    pub trust_log: bool,
}

/// Whoever shows a fork as it goes.
pub trait ForkDisplay: Sync {
    /// A warning or a note.
    fn note(&self, text: &str);
    /// Child `child.child` of `count` ended.
    fn child(&self, child: &ForkChild, count: u32);
}

/// Runs the fork; `display` is told of each child as it ends.
pub async fn run_fork(
    config: ForkConfig,
    cancel: CancellationToken,
    display: &dyn ForkDisplay,
) -> anyhow::Result<ForkSummary> {
    // Absolute and without a trailing `/`: the children's headers name it.
    let dir: PathBuf = std::path::absolute(harness_log::reader::session_dir(&config.run))
        .context("the session's folder")?
        .components()
        .collect();
    let point = ForkPoint::read(&dir, config.seq)?;
    let header = &point.header;
    let fork_id = format!("step-{}-{}", config.seq, harness_log::new_session_id());
    // Before any folder is made: a fork refused for what its log says leaves nothing.
    let child_config = child_config(
        &point,
        &config.flags,
        &config.trial,
        config.trust_log,
        display,
    )?;
    // Once, not per child: a model that cannot be built fails the fork before it starts.
    child_model(&point, &child_config).context("the children's model")?;
    let out = match &config.out {
        Some(out) => out.clone(),
        None => forks_folder(&dir)?.join(&fork_id),
    };
    if out.exists() {
        anyhow::bail!("{}: already exists; give --out a new folder", out.display());
    }
    std::fs::create_dir_all(&out).with_context(|| {
        format!(
            "creating the fork's folder {} (give --out DIR when the session's folder is not writable)",
            out.display()
        )
    })?;
    // The fork's folder is a batch's: its log has a task per child, so `replay metrics`,
    // `report.html` and `replay compare` read a fork as they read a batch.
    let log = EventLog::create(&out, config.durability, &[])
        .with_context(|| format!("creating the fork's log in {}", out.display()))?;
    let task_name = format!(
        "{}@{}",
        dir.file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default(),
        config.seq
    );
    let parallel = config.parallel.max(1);
    log.record(Event::BatchStarted(BatchStarted {
        format_version: harness_log::FORMAT_VERSION,
        batch_id: fork_id.clone(),
        harness_version: env!("CARGO_PKG_VERSION").to_owned(),
        tasks: (1..=config.count)
            .map(|child| BatchTask {
                id: format!("child-{child}"),
                file: dir.display().to_string(),
                task: Some(task_name.clone()),
                trial: Some(child),
            })
            .collect(),
        parallel: parallel as u32,
        parallel_reason: format!("{parallel} children at once"),
        sandbox: child_config.sandbox.label().to_owned(),
        retries: 0,
        resumed: false,
        attempts: Some(config.count),
    }))
    .await?;
    let started = Instant::now();
    // The workspace at the step, once, verified; the children's are copies of it, beside it
    // in a folder their commands' user can enter (the log folder is its owner's alone).
    let scratch = tempfile::Builder::new()
        .prefix("harness-fork-")
        .tempdir()
        .context("creating a folder for the children's workspaces")?;
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o711))
        .context("opening the workspaces' folder to the commands' user")?;
    // What only this process may enter: the workspace at the step, the overlays' layers, the
    // servers' lists of known files.
    let layers = scratch.path().join("layers");
    std::fs::create_dir(&layers)
        .and_then(|()| std::fs::set_permissions(&layers, std::fs::Permissions::from_mode(0o700)))
        .context("creating the folder of the children's layers")?;
    // Children on overlays of it when this process can mount them: the workspace is then
    // their commands' user's (an overlay cannot be idmapped).
    let overlay = match child_config.sandbox {
        harness_runtime::config::SandboxTarget::Local => child_config
            .run_as
            .server_flag()
            .ok()
            .and_then(|flag| workspace::Owner::of(flag.as_deref())),
        _ => None,
    };
    let owner = overlay.filter(|_| !config.flags.keep_workspace);
    let at_step = AtStep::make(
        &dir,
        &config,
        &point.state,
        &layers,
        owner,
        display,
        &cancel,
    )?;
    if let Some(kept) = &at_step.kept {
        display.note(&format!(
            "the workspace at step {}: {} {}",
            config.seq,
            if kept.reused {
                "reused (every entry as verified)"
            } else {
                "kept for the next fork in"
            },
            kept.workspace().display()
        ));
        if let Some(why) = &kept.rebuilt_because {
            display.note(&format!("the kept workspace was rebuilt: {why}"));
        }
    }
    let template = at_step.template.clone();
    // Containers start from one image of the workspace where theirs can take it.
    let image = match &child_config.sandbox {
        harness_runtime::config::SandboxTarget::Docker(spec)
            if header.config.benchmark.is_none() =>
        {
            let note = |text: &str| display.note(text);
            let of = container::ForkOf {
                session_id: &header.session_id,
                seq: config.seq,
                keep: config.keep_state,
            };
            container::image(spec, &point.state, &template, &layers, of, &note).await?
        }
        _ => None,
    };
    // Other containers get the workspace as one archive, made once.
    let archive = match child_config.sandbox {
        harness_runtime::config::SandboxTarget::Local => None,
        _ if image.is_some() => None,
        _ => {
            let (from, to) = (template.clone(), layers.join("at-step.tar"));
            let doing = format!("archiving the workspace at the step into {}", to.display());
            tokio::task::spawn_blocking(move || workspace::archive(&from, &to, None).map(|()| to))
                .await
                .with_context(|| doing.clone())?
                .with_context(|| doing.clone())
                .map(Some)?
        }
    };
    let state = Arc::new(point.state.clone());
    let parent = ForkParent {
        log_dir: dir.display().to_string(),
        session_id: header.session_id.clone(),
        seq: config.seq,
        turns: point.turns,
        n_messages: point.messages.len() as u64,
        cost: point.cost,
        n_files: at_step.n_files,
    };
    let fork = Fork {
        dir: &dir,
        out: &out,
        template: &template,
        archive: archive.as_deref(),
        image: image.as_ref(),
        linker: linker::Linker::start(&dir, Arc::clone(&state))
            .context("starting the thread that links the parent's blobs")?,
        provided: Arc::new(
            point
                .state
                .values()
                .filter_map(|version| version.sha256.clone())
                .collect(),
        ),
        workspaces: scratch.path(),
        layers: &layers,
        state: Arc::clone(&state),
        point: &point,
        config: &child_config,
        fork_id: &fork_id,
        log: &log,
        durability: config.durability,
        keep: config.flags.keep_workspace,
        overlay,
        known: owner.and(at_step.known.clone()),
        cancel: &cancel,
        display,
    };
    let count = config.count;
    let children: Vec<(u32, anyhow::Result<ForkChild>)> = futures::stream::iter(1..=count)
        .map(|n| fork.child(n).map(move |child| (n, child)))
        .buffer_unordered(parallel)
        .inspect(|(_, child)| {
            if let Ok(child) = child {
                display.child(child, count);
            }
        })
        .collect()
        .await;
    // The image goes with the fork, unless kept for the next one or found from an earlier one
    // (then this fork lets go of it).
    if let Some(image) = image.as_ref() {
        harness_runtime::sandbox::docker::fork_image::release(image).await;
        if !config.keep_state && !image.reused {
            harness_runtime::sandbox::docker::fork_image::remove(&image.tag).await;
        }
    }
    if config.flags.keep_workspace {
        display.note(&format!(
            "the children's workspaces are kept in {} (--keep-workspace)",
            scratch.keep().display()
        ));
    }
    // A child that could not run is said and counted; the others' results are kept.
    let mut ran = Vec::new();
    let mut not_run = Vec::new();
    for (n, child) in children {
        match child {
            Ok(child) => ran.push(child),
            Err(err) => not_run.push(format!("child {n}: {err:#}")),
        }
    }
    for why in &not_run {
        display.note(&format!("did not run: {why}"));
    }
    let summary = ForkSummary::new(fork_id, parent, point.messages.clone(), ran);
    let n_passed = summary.n_passed;
    log.record(Event::BatchFinished(BatchFinished {
        interrupted: cancel.is_cancelled(),
        n_passed,
        n_failed: summary.children.len() as u32 - n_passed,
        n_not_run: not_run.len() as u32,
        n_retries: 0,
        duration_ms: started.elapsed().as_millis() as u64,
        rate_limits: Vec::new(),
        warm_pool: None,
    }))
    .await?;
    log.close().await?;
    let json = serde_json::to_string_pretty(&summary).context("writing forks.json")? + "\n";
    std::fs::write(out.join("forks.json"), json)
        .with_context(|| format!("writing {}", out.join("forks.json").display()))?;
    let report = report::load(&out, &harness_benchmark::results::HarborFiles)
        .context("reading the fork back for its report")?;
    let page = report::write_html(&out, &report)?;
    display.note(&format!("report: {}", page.display()));
    if let Some(first) = not_run.first() {
        anyhow::bail!(
            "{} of {count} children did not run (the others' results are in {}); {first}",
            not_run.len(),
            out.join("forks.json").display()
        );
    }
    Ok(summary)
}

/// What every child of one fork shares.
struct Fork<'a> {
    dir: &'a Path,
    out: &'a Path,
    template: &'a Path,
    /// The workspace at the step as one tar archive, for children in containers.
    archive: Option<&'a Path>,
    /// Links the parent's blobs into each child's log, in the background.
    linker: linker::Linker,
    /// Those blobs' names, which the children's initial snapshots leave to it.
    provided: Arc<std::collections::BTreeSet<String>>,
    /// Or an image that holds it, for children in containers of `--sandbox docker`.
    image: Option<&'a harness_runtime::sandbox::docker::fork_image::ForkImage>,
    /// Where the children's workspaces are made.
    workspaces: &'a Path,
    /// What only this process may enter (inside `workspaces`): overlays' layers, lists of
    /// known files.
    layers: &'a Path,
    /// The workspace at the step, shared with the blocking tasks that make workspaces.
    state: Arc<restore::State>,
    point: &'a ForkPoint,
    config: &'a RunConfig,
    fork_id: &'a str,
    /// The fork's own log (a batch log: a task per child).
    log: &'a EventLog,
    durability: Durability,
    keep: bool,
    /// Whose the overlaid workspaces are, when children get overlays.
    overlay: Option<workspace::Owner>,
    /// With overlays: the servers' `--known-files` list made once from the template, and how
    /// many files it names.
    known: Option<(PathBuf, usize)>,
    cancel: &'a CancellationToken,
    display: &'a dyn ForkDisplay,
}

impl Fork<'_> {
    async fn child(&self, child: u32) -> anyhow::Result<ForkChild> {
        let log_dir = self.out.join(format!("child-{child}"));
        // Named past guessing: the children's commands share a user, and the folder above
        // them can be passed through, not listed.
        let workspace = self
            .workspaces
            .join(format!("child-{child}-{:016x}", rand::random::<u64>()));
        let mut config = self.config.clone();
        // Held for the session's length: an overlay is unmounted, a copy removed, on drop.
        let mut held = None;
        match config.sandbox {
            harness_runtime::config::SandboxTarget::Local => {
                let (from, to) = (self.template.to_owned(), workspace.clone());
                let layers = self.layers.join(format!("child-{child}"));
                let own_list = self.layers.join(format!("known-{child}.jsonl"));
                let shared = self.known.clone();
                let (overlay, keep) = (self.overlay, self.keep);
                let state = Arc::clone(&self.state);
                let (made, known) = tokio::task::spawn_blocking(move || {
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
                .with_context(|| format!("making the workspace {}", workspace.display()))?;
                if child == 1 {
                    self.display.note(&format!(
                        "children's workspaces: {}; {} files' hashes known to their servers",
                        made.made.as_str(),
                        known.1
                    ));
                }
                config.working_dir = Some(made.path.clone());
                config.known_files = Some(known.0);
                held = Some(made);
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
        // The parent's blobs, linked once the child is at work (it needs none of them); the
        // child prints nothing as it goes (its log has everything).
        let linked = linker::LinkWhenAtWork::new(&self.linker, &log_dir);
        let model = child_model(self.point, &config)?;
        let resume = Resume {
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
        };
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
            resume: Some(Arc::new(resume)),
            subagent: None,
        };
        let totals = Mutex::new(Totals::default());
        let audience = Audience {
            observer: &linked,
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
        drop(held);
        let outcome = summary.outcome.logged();
        let reward = match outcome {
            // A benchmark child's is its verifier's.
            _ if self.point.header.config.benchmark.is_some() => benchmark::reward(&log_dir),
            Outcome::Completed if has_check => Some(1.0),
            Outcome::CheckFailed => Some(0.0),
            _ => None,
        };
        Ok(ForkChild {
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
        })
    }
}

/// A child's model: its own instance (a scripted one has a position); the parent's script goes
/// on where the parent was.
fn child_model(point: &ForkPoint, config: &RunConfig) -> anyhow::Result<Arc<dyn Model>> {
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
