//! The workspace at a step kept for the next fork (`replay fork --keep-state`): the verified
//! template and its servers' `--known-files` list, in `RUN/forks/.state-SEQ/`, so a second
//! fork of the same step neither rebuilds 100 MB from the log's blobs nor deletes it after.
//!
//! A kept workspace is reused only when it is still exactly the one that was verified: the
//! same entries (no more, no fewer), each file with the size, times and inode recorded when its
//! hash was checked (a write changes the change time, which no one can set back), each entry
//! the mode and owner it was given, each link its target. Anything else is rebuilt, and said.
//! A shared lock is held while children read it; rebuilding takes the exclusive one.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;
use nix::fcntl::{Flock, FlockArg};
use sandbox_protocol::{EntryKind, KnownFile};
use tokio_util::sync::CancellationToken;

use harness_replay::restore::{self, State};

use super::workspace::{self, Owner};

/// A kept workspace, locked for reading while this value lives.
pub(super) struct Kept {
    folder: PathBuf,
    /// How many files its list names.
    pub(super) n_known: usize,
    /// Whether it was found (and verified) rather than built now.
    pub(super) reused: bool,
    /// Why a kept workspace that was there was not reused.
    pub(super) rebuilt_because: Option<String>,
    _lock: Flock<File>,
}

impl Kept {
    /// The workspace at step `seq` of the session `run`, `owner`'s: reused when the kept one
    /// verifies, else rebuilt from the log (a workspace that cannot be rebuilt exactly is an
    /// error, as without `--keep-state`).
    pub(super) fn open(
        run: &Path,
        seq: u64,
        state: &State,
        owner: Option<Owner>,
        note: &dyn Fn(&str),
        cancel: &CancellationToken,
    ) -> anyhow::Result<Kept> {
        let forks = super::at_step::forks_folder(run)?;
        harness_log::private_dir(&forks)
            .with_context(|| format!("creating {}", forks.display()))?;
        let folder = forks.join(format!(".state-{seq}"));
        let lock_path = forks.join(format!(".state-{seq}.lock"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&lock_path)
            .with_context(|| format!("opening {}", lock_path.display()))?;
        let lock = Flock::lock(file, FlockArg::LockShared)
            .map_err(|(_, errno)| errno)
            .with_context(|| format!("locking {}", lock_path.display()))?;
        let expected = owner.unwrap_or_else(Owner::current);
        if let Ok(n_known) = verify(&folder, state, expected) {
            return Ok(Kept {
                folder,
                n_known,
                reused: true,
                rebuilt_because: None,
                _lock: lock,
            });
        }
        // Rebuilt under the exclusive lock (no fork reads it meanwhile), checked again first:
        // another fork may have rebuilt it while this one waited.
        // Polled, so that Ctrl-C ends the wait (the other forks may run for long).
        if lock.relock(FlockArg::LockExclusiveNonblock).is_err() {
            note(&format!(
                "waiting for the other forks reading {} to end: it is rebuilt under an exclusive lock",
                folder.display()
            ));
            while lock.relock(FlockArg::LockExclusiveNonblock).is_err() {
                if cancel.is_cancelled() {
                    anyhow::bail!(
                        "interrupted while waiting for the other forks reading {}",
                        folder.display()
                    );
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        }
        sweep(&forks);
        let (n_known, rebuilt_because) = match verify(&folder, state, expected) {
            Ok(n) => (n, None),
            Err(why) => {
                let why = folder.exists().then_some(why);
                (build(run, &folder, state, owner)?, why)
            }
        };
        lock.relock(FlockArg::LockShared)
            .with_context(|| format!("locking {}", lock_path.display()))?;
        Ok(Kept {
            folder,
            n_known,
            reused: false,
            rebuilt_because,
            _lock: lock,
        })
    }

    /// The workspace folder (children's overlays read it as their lower layer).
    pub(super) fn workspace(&self) -> PathBuf {
        self.folder.join("workspace")
    }

    /// The servers' `--known-files` list for it.
    pub(super) fn known(&self) -> PathBuf {
        self.folder.join("known.jsonl")
    }
}

/// Restores the workspace into a new folder beside `folder`, gives it to `owner`, lists its
/// files, and only then puts it in `folder`'s place.
fn build(run: &Path, folder: &Path, state: &State, owner: Option<Owner>) -> anyhow::Result<usize> {
    let parent = folder.parent().unwrap_or(folder);
    let fresh = tempfile::Builder::new()
        .prefix(".state-building-")
        .tempdir_in(parent)
        .with_context(|| format!("creating a folder in {}", parent.display()))?;
    let template = fresh.path().join("workspace");
    let restored = restore::write_state(run, state, &template)?;
    if !restored.problems.is_empty() {
        anyhow::bail!(
            "the workspace cannot be rebuilt exactly: {}",
            restored.problems.join("; ")
        );
    }
    if let Some(owner) = owner {
        owner
            .take(&template)
            .context("giving the workspace at the step to the commands' user")?;
    }
    let n_known = workspace::known_files(state, &template, &fresh.path().join("known.jsonl"))
        .context("listing the workspace's known files")?;
    // The stale one out of the way first (removed after, and by the next rebuild's sweep if
    // that fails): a rebuild never depends on removing it.
    if folder.exists() {
        let aside = parent.join(format!(".state-stale-{}", harness_log::new_session_id()));
        std::fs::rename(folder, &aside)
            .with_context(|| format!("moving the stale {} aside", folder.display()))?;
        remove_tree(&aside);
    }
    // Its own user's alone, as the log folder is (the commands reach it through overlays).
    std::fs::set_permissions(fresh.path(), std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("closing {}", fresh.path().display()))?;
    std::fs::rename(fresh.keep(), folder)
        .with_context(|| format!("putting the workspace in {}", folder.display()))?;
    Ok(n_known)
}

/// What a killed fork left beside the kept workspaces (a half-built one, a stale one that could
/// not be removed), removed as far as it can be. Under the exclusive lock of one step: another
/// step's build in progress is a folder `tempfile` holds open, which this leaves alone unless
/// it is an hour old.
fn sweep(forks: &Path) {
    let Ok(entries) = std::fs::read_dir(forks) else {
        return;
    };
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let old = entry
            .metadata()
            .and_then(|meta| meta.modified())
            .is_ok_and(|modified| modified < hour_ago);
        if name.starts_with(".state-stale-") || (name.starts_with(".state-building-") && old) {
            remove_tree(&entry.path());
        }
    }
}

/// Removes `dir` and everything beneath it, best effort: folders are made writable first (a
/// workspace may hold read-only ones, which would stop a removal that is not root's). Links
/// are never followed.
fn remove_tree(dir: &Path) {
    // A link (a log from elsewhere may hold one) is removed, never followed.
    if !std::fs::symlink_metadata(dir).is_ok_and(|meta| meta.is_dir()) {
        let _ = std::fs::remove_file(dir);
        return;
    }
    let mut stack = vec![dir.to_owned()];
    while let Some(folder) = stack.pop() {
        let _ = std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700));
        if let Ok(entries) = std::fs::read_dir(&folder) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                    stack.push(entry.path());
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `Ok(files listed)` when `folder` holds exactly `state` as it was verified; else why not.
fn verify(folder: &Path, state: &State, owner: Owner) -> Result<usize, String> {
    // Only what this harness made: real folders and a list of a size the step's files can
    // have (a log from elsewhere may carry a folder of that name, or a link).
    let real_dir = |path: &Path| std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_dir());
    if !real_dir(folder) || !real_dir(&folder.join("workspace")) {
        return Err("not a folder this harness kept".to_owned());
    }
    let list_path = folder.join("known.jsonl");
    let most = 4096 + state.len() as u64 * (4096 + 512);
    match std::fs::symlink_metadata(&list_path) {
        Ok(meta) if meta.is_file() && meta.len() <= most => {}
        Ok(_) => return Err("known.jsonl: not a list this harness wrote".to_owned()),
        Err(err) => return Err(format!("known.jsonl: {err}")),
    }
    let list = std::fs::read_to_string(&list_path).map_err(|err| format!("known.jsonl: {err}"))?;
    let mut stamps = BTreeMap::new();
    for line in list.lines() {
        let file: KnownFile =
            serde_json::from_str(line).map_err(|err| format!("known.jsonl: {err}"))?;
        stamps.insert(file.path.clone(), file);
    }
    let root = folder.join("workspace");
    let mut found = 0usize;
    let mut stack = vec![(root, String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|err| format!("{}: {err}", dir.display()))?;
        for entry in entries {
            let entry = entry.map_err(|err| format!("{}: {err}", dir.display()))?;
            let name = entry.file_name();
            let name = name
                .to_str()
                .ok_or_else(|| format!("{}: a name that is not UTF-8", dir.display()))?;
            let path = format!("{prefix}{name}");
            let meta = entry.metadata().map_err(|err| format!("{path}: {err}"))?;
            same(&path, &meta, state, &stamps, owner, &entry.path())?;
            found += 1;
            if meta.is_dir() {
                stack.push((entry.path(), format!("{path}/")));
            }
        }
    }
    let expected = state
        .values()
        .filter(|version| version.kind != EntryKind::Other)
        .count();
    if found != expected {
        return Err(format!("{found} entries, the step has {expected}"));
    }
    Ok(stamps.len())
}

/// Whether the entry at `path` (its `meta`, not followed) is the one `state` and `stamps` say.
fn same(
    path: &str,
    meta: &std::fs::Metadata,
    state: &State,
    stamps: &BTreeMap<String, KnownFile>,
    owner: Owner,
    at: &Path,
) -> Result<(), String> {
    let version = state
        .get(path)
        .ok_or_else(|| format!("{path}: not in the workspace at the step"))?;
    if (meta.uid(), meta.gid()) != owner.ids() {
        return Err(format!("{path}: another owner"));
    }
    let kind = meta.file_type();
    // Permission bits only: a workspace is restored without setuid, setgid or sticky bits.
    let mode_differs = meta.permissions().mode() & 0o777 != version.mode & 0o777;
    match version.kind {
        EntryKind::File => {
            let stamp = stamps
                .get(path)
                .ok_or_else(|| format!("{path}: not in known.jsonl"))?;
            let stat_now = (
                meta.size(),
                [meta.mtime(), meta.mtime_nsec()],
                [meta.ctime(), meta.ctime_nsec()],
                meta.ino(),
            );
            if !kind.is_file()
                || mode_differs
                || Some(stamp.sha256.as_str()) != version.sha256.as_deref()
                || stat_now != (stamp.size, stamp.mtime, stamp.ctime, stamp.ino)
            {
                return Err(format!("{path}: changed since it was verified"));
            }
        }
        EntryKind::Dir if !kind.is_dir() || mode_differs => {
            return Err(format!("{path}: not the folder it was"));
        }
        EntryKind::Symlink => {
            let target = std::fs::read_link(at).map_err(|err| format!("{path}: {err}"))?;
            if !kind.is_symlink()
                || Some(target.to_string_lossy().as_ref()) != version.target.as_deref()
            {
                return Err(format!("{path}: not the link it was"));
            }
        }
        EntryKind::Dir => {}
        EntryKind::Other => return Err(format!("{path}: not restored at the step")),
    }
    Ok(())
}
