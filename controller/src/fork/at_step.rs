//! The verified workspace at the step, which the children's are made from: rebuilt from the
//! log for this fork, or kept from an earlier one (`--keep-state`); and `RUN/forks`, where a
//! fork writes.

use std::path::{Path, PathBuf};

use anyhow::Context;
use harness_replay::restore;
use tokio_util::sync::CancellationToken;

use super::{ForkConfig, ForkDisplay, kept, workspace};

/// `RUN/forks`, where a session's forks (and kept workspaces) go: a real folder or none yet. A
/// log from elsewhere may carry a link of that name, which would send what a fork writes (and
/// the modes it sets) to wherever it points.
pub(super) fn forks_folder(run: &Path) -> anyhow::Result<PathBuf> {
    let forks = run.join("forks");
    match std::fs::symlink_metadata(&forks) {
        Ok(meta) if !meta.is_dir() => anyhow::bail!(
            "{}: not a folder (a link or a file); a fork writes only into a real one: move it, or give --out DIR",
            forks.display()
        ),
        _ => Ok(forks),
    }
}

/// The verified workspace at the step that the children's are made from.
pub(super) struct AtStep {
    pub(super) template: PathBuf,
    pub(super) n_files: u64,
    /// With overlays: the servers' `--known-files` list made once from the template, and how
    /// many files it names.
    pub(super) known: Option<(PathBuf, usize)>,
    /// Held while the children run, with `--keep-state`.
    pub(super) kept: Option<kept::Kept>,
}

impl AtStep {
    /// Rebuilt from the log into `layers/at-step` (or kept, `--keep-state`), every hash
    /// verified, and `owner`'s when children get overlays.
    pub(super) fn make(
        dir: &Path,
        config: &ForkConfig,
        state: &restore::State,
        layers: &Path,
        owner: Option<workspace::Owner>,
        display: &dyn ForkDisplay,
        cancel: &CancellationToken,
    ) -> anyhow::Result<AtStep> {
        let n_files = state
            .values()
            .filter(|version| version.kind == sandbox_protocol::EntryKind::File)
            .count() as u64;
        if config.keep_state {
            let kept = kept::Kept::open(
                dir,
                config.seq,
                state,
                owner,
                &|text| display.note(text),
                cancel,
            )?;
            return Ok(AtStep {
                template: kept.workspace(),
                n_files,
                known: Some((kept.known(), kept.n_known)),
                kept: Some(kept),
            });
        }
        let template = layers.join("at-step");
        let restored = restore::write_state(dir, state, &template)?;
        for note in &restored.notes {
            display.note(note);
        }
        if !restored.problems.is_empty() {
            anyhow::bail!(
                "the workspace at step {} cannot be rebuilt exactly: {}",
                config.seq,
                restored.problems.join("; ")
            );
        }
        let known = match owner {
            Some(owner) => {
                owner
                    .take(&template)
                    .context("giving the workspace at the step to the commands' user")?;
                let list = layers.join("known.jsonl");
                let n = workspace::known_files(state, &template, &list)
                    .context("listing the workspace's known files")?;
                Some((list, n))
            }
            None => None,
        };
        Ok(AtStep {
            template,
            n_files,
            known,
            kept: None,
        })
    }
}
