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
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

mod at_step;
mod benchmark;
mod child;
mod child_config;
mod container;
mod from_log;
mod kept;
mod linker;
mod workspace;

use at_step::{AtStep, forks_folder};
use child::{Fork, child_model};
use child_config::child_config;

use harness_log::{BatchFinished, BatchStarted, BatchTask, Durability, Event, EventLog};
use harness_replay::fork::{ForkChild, ForkParent, ForkPoint, ForkSummary};
use harness_replay::report;
use harness_runtime::config::{RunConfig, SessionFlags};

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
    let out = fork_folder(&config, &dir, &fork_id)?;
    let parallel = config.parallel.max(1);
    let log = open_log(&config, &dir, &out, &fork_id, &child_config, parallel).await?;
    let run = Run {
        config: &config,
        cancel: &cancel,
        display,
        dir: &dir,
        point: &point,
        child_config: &child_config,
        out: &out,
        log: &log,
        parallel,
    };
    run.children(fork_id).await
}

/// The fork's folder, made: it must be new, so that no earlier fork's logs are mixed in.
fn fork_folder(config: &ForkConfig, dir: &Path, fork_id: &str) -> anyhow::Result<PathBuf> {
    let out = match &config.out {
        Some(out) => out.clone(),
        None => forks_folder(dir)?.join(fork_id),
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
    Ok(out)
}

/// The fork's log, with its `batch_started`. The fork's folder is a batch's: its log has a
/// task per child, so `replay metrics`, `report.html` and `replay compare` read a fork as they
/// read a batch.
async fn open_log(
    config: &ForkConfig,
    dir: &Path,
    out: &Path,
    fork_id: &str,
    child_config: &RunConfig,
    parallel: usize,
) -> anyhow::Result<EventLog> {
    let log = EventLog::create(out, config.durability, &[])
        .with_context(|| format!("creating the fork's log in {}", out.display()))?;
    let task_name = format!(
        "{}@{}",
        dir.file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default(),
        config.seq
    );
    log.record(Event::BatchStarted(BatchStarted {
        format_version: harness_log::FORMAT_VERSION,
        batch_id: fork_id.to_owned(),
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
    Ok(log)
}

/// The folder of the children's workspaces and, inside it, `layers`. The workspace at the step
/// is made once, verified; the children's are copies of it, beside it in a folder their
/// commands' user can enter (the log folder is its owner's alone).
fn scratch_folders() -> anyhow::Result<(tempfile::TempDir, PathBuf)> {
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
    Ok((scratch, layers))
}

/// Whose the children's overlays are, when they get overlays: when this process can mount
/// them, the workspace is then their commands' user's (an overlay cannot be idmapped).
fn overlay_owner(child_config: &RunConfig) -> Option<workspace::Owner> {
    match child_config.sandbox {
        harness_runtime::config::SandboxTarget::Local => child_config
            .run_as
            .server_flag()
            .ok()
            .and_then(|flag| workspace::Owner::of(flag.as_deref())),
        _ => None,
    }
}

/// What the fork's steps after its log share.
struct Run<'a> {
    config: &'a ForkConfig,
    cancel: &'a CancellationToken,
    display: &'a dyn ForkDisplay,
    /// The parent session's folder, absolute.
    dir: &'a Path,
    point: &'a ForkPoint,
    child_config: &'a RunConfig,
    /// The fork's folder.
    out: &'a Path,
    /// The fork's own log (a batch log: a task per child).
    log: &'a EventLog,
    /// Children at once, at least one.
    parallel: usize,
}

impl Run<'_> {
    /// The workspace at the step made once, the children run from it, and the fork's end
    /// written. What is made here is held to the end: the workspaces' folder goes on return.
    async fn children(&self, fork_id: String) -> anyhow::Result<ForkSummary> {
        let started = Instant::now();
        let (scratch, layers) = scratch_folders()?;
        let overlay = overlay_owner(self.child_config);
        let owner = overlay.filter(|_| !self.config.flags.keep_workspace);
        let at_step = AtStep::make(
            self.dir,
            self.config,
            &self.point.state,
            &layers,
            owner,
            self.display,
            self.cancel,
        )?;
        self.note_kept(&at_step);
        let template = at_step.template.clone();
        let image = self.image(&template, &layers).await?;
        let archive = self.archive(image.is_some(), &template, &layers).await?;
        let state = Arc::new(self.point.state.clone());
        let parent = self.parent(at_step.n_files);
        let fork = Fork {
            dir: self.dir,
            out: self.out,
            template: &template,
            archive: archive.as_deref(),
            image: image.as_ref(),
            linker: linker::Linker::start(self.dir, Arc::clone(&state))
                .context("starting the thread that links the parent's blobs")?,
            provided: Arc::new(provided(self.point)),
            workspaces: scratch.path(),
            layers: &layers,
            state: Arc::clone(&state),
            point: self.point,
            config: self.child_config,
            fork_id: &fork_id,
            log: self.log,
            durability: self.config.durability,
            keep: self.config.flags.keep_workspace,
            overlay,
            known: owner.and(at_step.known.clone()),
            cancel: self.cancel,
            display: self.display,
        };
        let children = fork.run_all(self.config.count, self.parallel).await;
        // The image goes with the fork, unless kept for the next one or found from an earlier one
        // (then this fork lets go of it).
        if let Some(image) = image.as_ref() {
            release_image(image, self.config.keep_state).await;
        }
        if self.config.flags.keep_workspace {
            self.display.note(&format!(
                "the children's workspaces are kept in {} (--keep-workspace)",
                scratch.keep().display()
            ));
        }
        self.finish(fork_id, parent, children, started).await
    }

    /// Says where the kept workspace at the step is (`--keep-state`), and why it was rebuilt.
    fn note_kept(&self, at_step: &AtStep) {
        let Some(kept) = &at_step.kept else {
            return;
        };
        self.display.note(&format!(
            "the workspace at step {}: {} {}",
            self.config.seq,
            if kept.reused {
                "reused (every entry as verified)"
            } else {
                "kept for the next fork in"
            },
            kept.workspace().display()
        ));
        if let Some(why) = &kept.rebuilt_because {
            self.display
                .note(&format!("the kept workspace was rebuilt: {why}"));
        }
    }

    /// Containers start from one image of the workspace where theirs can take it.
    async fn image(
        &self,
        template: &Path,
        layers: &Path,
    ) -> anyhow::Result<Option<harness_runtime::sandbox::docker::fork_image::ForkImage>> {
        let header = &self.point.header;
        Ok(match &self.child_config.sandbox {
            harness_runtime::config::SandboxTarget::Docker(spec)
                if header.config.benchmark.is_none() =>
            {
                let note = |text: &str| self.display.note(text);
                let of = container::ForkOf {
                    session_id: &header.session_id,
                    seq: self.config.seq,
                    keep: self.config.keep_state,
                };
                container::image(spec, &self.point.state, template, layers, of, &note).await?
            }
            _ => None,
        })
    }

    /// Other containers get the workspace as one archive, made once.
    async fn archive(
        &self,
        has_image: bool,
        template: &Path,
        layers: &Path,
    ) -> anyhow::Result<Option<PathBuf>> {
        Ok(match self.child_config.sandbox {
            harness_runtime::config::SandboxTarget::Local => None,
            _ if has_image => None,
            _ => {
                let (from, to) = (template.to_owned(), layers.join("at-step.tar"));
                let doing = format!("archiving the workspace at the step into {}", to.display());
                tokio::task::spawn_blocking(move || {
                    workspace::archive(&from, &to, None).map(|()| to)
                })
                .await
                .with_context(|| doing.clone())?
                .with_context(|| doing.clone())
                .map(Some)?
            }
        })
    }

    /// The parent as `forks.json` names it.
    fn parent(&self, n_files: u64) -> ForkParent {
        let point = self.point;
        ForkParent {
            log_dir: self.dir.display().to_string(),
            session_id: point.header.session_id.clone(),
            seq: self.config.seq,
            turns: point.turns,
            n_messages: point.messages.len() as u64,
            cost: point.cost,
            n_files,
        }
    }

    /// The fork's end: `batch_finished`, `forks.json` and the report. A child that could not
    /// run is said and counted; the others' results are kept.
    async fn finish(
        &self,
        fork_id: String,
        parent: ForkParent,
        children: Vec<(u32, anyhow::Result<ForkChild>)>,
        started: Instant,
    ) -> anyhow::Result<ForkSummary> {
        let mut ran = Vec::new();
        let mut not_run = Vec::new();
        for (n, child) in children {
            match child {
                Ok(child) => ran.push(child),
                Err(err) => not_run.push(format!("child {n}: {err:#}")),
            }
        }
        for why in &not_run {
            self.display.note(&format!("did not run: {why}"));
        }
        let summary = ForkSummary::new(fork_id, parent, self.point.messages.clone(), ran);
        let n_passed = summary.n_passed;
        self.log
            .record(Event::BatchFinished(BatchFinished {
                interrupted: self.cancel.is_cancelled(),
                n_passed,
                n_failed: summary.children.len() as u32 - n_passed,
                n_not_run: not_run.len() as u32,
                n_retries: 0,
                duration_ms: started.elapsed().as_millis() as u64,
                rate_limits: Vec::new(),
                warm_pool: None,
            }))
            .await?;
        self.log.close().await?;
        self.write_summary(&summary)?;
        if let Some(first) = not_run.first() {
            anyhow::bail!(
                "{} of {} children did not run (the others' results are in {}); {first}",
                not_run.len(),
                self.config.count,
                self.out.join("forks.json").display()
            );
        }
        Ok(summary)
    }

    /// `forks.json` and `report.html`, once the fork's log is closed (the report reads it).
    fn write_summary(&self, summary: &ForkSummary) -> anyhow::Result<()> {
        let out = self.out;
        let json = serde_json::to_string_pretty(summary).context("writing forks.json")? + "\n";
        std::fs::write(out.join("forks.json"), json)
            .with_context(|| format!("writing {}", out.join("forks.json").display()))?;
        let report = report::load(out, &harness_benchmark::results::HarborFiles)
            .context("reading the fork back for its report")?;
        let page = report::write_html(out, &report)?;
        self.display.note(&format!("report: {}", page.display()));
        Ok(())
    }
}

/// Lets go of the fork's image, and removes it unless kept for the next fork or found from an
/// earlier one.
async fn release_image(
    image: &harness_runtime::sandbox::docker::fork_image::ForkImage,
    keep_state: bool,
) {
    harness_runtime::sandbox::docker::fork_image::release(image).await;
    if !keep_state && !image.reused {
        harness_runtime::sandbox::docker::fork_image::remove(&image.tag).await;
    }
}

/// The parent's blobs' names, which the children's initial snapshots leave to the linker.
fn provided(point: &ForkPoint) -> std::collections::BTreeSet<String> {
    point
        .state
        .values()
        .filter_map(|version| version.sha256.clone())
        .collect()
}
