//! A forked subagent's workspace: a new sandbox of the parent's kind (a local server over a
//! temporary folder, or a container of the same image) with the parent's workspace streamed
//! in; after the child, what it changed (two manifests' difference) comes back, and is applied
//! to the parent's workspace when none of its paths changed there meanwhile (all or nothing).
//!
//! Applying is the harness's own act, like a task's setup: files through `PUT /v1/files`,
//! deletions, folders, symlinks and modes through one `bash` call of quoted paths. The
//! changes it replays were each judged by the policy when the child made them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use sandbox_protocol::{EntryKind, FileVersion, ManifestEntry};

use crate::recording::{change_kind, diff};
use crate::sandbox::{SandboxClient, SandboxError};
use crate::session::SessionOptions;
use crate::session::sandbox::Sandbox;
use harness_log::{ChangeRecord, EventLog, ForkMerge, VersionRecord};

mod applying;

pub use applying::apply;
use applying::{blob_bytes, safe_path};

/// The most of the changes' unified diff the parent's model is shown.
const DIFF_SHOWN: usize = 16 * 1024;
/// Files larger than this are listed, not diffed (a diff's cost grows with both sides).
const DIFF_FILE_MAX: u64 = 256 * 1024;

/// A forked child's sandbox, and the workspace it started from.
pub struct Forked {
    sandbox: Sandbox,
    token: String,
    base: Vec<ManifestEntry>,
}

impl Forked {
    /// Starts the copy for the child `options` describe, from `parent`'s workspace now.
    pub async fn start(options: &SessionOptions, parent: &SandboxClient) -> Result<Forked, String> {
        let snapshot = parent.snapshot().await.map_err(|e| e.to_string())?;
        let base = parent
            .manifest(&snapshot.snapshot_id)
            .await
            .map_err(|e| e.to_string())?
            .entries;
        // The child's folder is made ahead for its server's own log; only a folder made here
        // is removed when the copy fails.
        let fresh = !options.log_dir.exists();
        let made = options
            .log_dir
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| harness_log::private_dir(&options.log_dir));
        made.map_err(|err| format!("making {}: {err}", options.log_dir.display()))?;
        let server_log = options.log_dir.join("sandbox-server.log");
        let token = format!("{:032x}", rand::random::<u128>());
        let started = Sandbox::start_fork(
            &options.config,
            &options.session_id,
            &token,
            Some(&server_log),
        )
        .await
        .map_err(|err| err.to_string());
        let copied = match started {
            Ok(sandbox) => match parent.copy_workspace_to(&sandbox.client).await {
                Ok(()) => Ok(sandbox),
                Err(err) => {
                    sandbox.stop().await;
                    Err(err.to_string())
                }
            },
            Err(err) => Err(err),
        };
        let sandbox = copied.map_err(|err| abandoned(&options.log_dir, fresh, &server_log, err))?;
        Ok(Forked {
            sandbox,
            token,
            base,
        })
    }

    pub fn client(&self) -> &SandboxClient {
        &self.sandbox.client
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// After the child: its changes against the base, each new version's bytes put in
    /// `parent_log` (linked from the child's log, else read from the copy); then the copy is
    /// stopped.
    pub async fn finish(self, child_log: &Path, parent_log: &EventLog) -> Changes {
        let result = self.changes(child_log, parent_log).await;
        self.sandbox.stop().await;
        let base = index(&self.base);
        match result {
            Ok((changes, unnamed)) => Changes {
                base,
                changes,
                unnamed,
                error: None,
            },
            Err(err) => Changes {
                base,
                changes: Vec::new(),
                unnamed: BTreeSet::new(),
                error: Some(format!("its changes could not be read: {err}")),
            },
        }
    }

    async fn changes(
        &self,
        child_log: &Path,
        parent_log: &EventLog,
    ) -> Result<(Vec<ChangeRecord>, BTreeSet<String>), String> {
        let client = &self.sandbox.client;
        let snapshot = client.snapshot().await.map_err(|e| e.to_string())?;
        let after = client
            .manifest(&snapshot.snapshot_id)
            .await
            .map_err(|e| e.to_string())?
            .entries;
        let changes = diff(&self.base, &after);
        // A name that is not UTF-8 is listed escaped: it cannot be applied by that name.
        let unnamed = self
            .base
            .iter()
            .chain(&after)
            .filter(|e| e.path_b64.is_some())
            .map(|e| e.path.clone())
            .collect();
        for sha256 in changes
            .iter()
            .filter_map(|c| c.after.as_ref()?.sha256.as_deref())
        {
            // The child's sandbox names them: joined to folders here only when sha256s.
            if !harness_log::blobs::is_sha256(sha256) {
                return Err(crate::recording::invalid_blob(client.url(), sha256).to_string());
            }
            let kept = parent_log.dir().join("blobs").join(sha256);
            let source = child_log.join("blobs").join(sha256);
            if harness_log::blobs::link_or_copy(&source, &kept).is_ok() {
                continue;
            }
            if let Some(bytes) = client.blob(sha256).await.map_err(|e| e.to_string())? {
                parent_log.blob(&bytes).map_err(|e| e.to_string())?;
            }
        }
        Ok((changes, unnamed))
    }
}

/// A finished forked child's changes, until they are merged.
pub struct Changes {
    base: BTreeMap<String, FileVersion>,
    changes: Vec<ChangeRecord>,
    /// Paths listed escaped (not UTF-8), which no change may be applied by.
    unnamed: BTreeSet<String>,
    error: Option<String>,
}

/// What merging made of them.
pub struct Merged {
    pub record: ForkMerge,
    /// Why nothing was applied, when something failed.
    error: Option<String>,
    /// The unified diff of the text files, for the model.
    diff: String,
    /// What was applied otherwise than the child left it (set-id bits left out).
    notes: Vec<String>,
}

impl Merged {
    /// The lines the call's result gets.
    pub fn describe(&self) -> String {
        let n = self.record.changes.len();
        let mut text = match (&self.error, self.record.applied) {
            (Some(error), _) => format!("\n[its changes: {n} paths; not applied: {error}]"),
            (None, _) if n == 0 => "\n[its changes: none]".to_owned(),
            (None, true) => format!("\n[its changes: {n} paths; applied to your workspace]"),
            (None, false) => format!(
                "\n[its changes: {n} paths; not applied: your workspace changed these meanwhile: {}]",
                self.record.conflicts.join(", ")
            ),
        };
        for change in &self.record.changes {
            let _ = write!(text, "\n  {} {}", change.change.as_str(), change.path);
        }
        for note in &self.notes {
            let _ = write!(text, "\n  note: {note}");
        }
        if !self.diff.is_empty() {
            text.push('\n');
            text.push_str(&self.diff);
        }
        text
    }
}

impl Changes {
    /// Applies the changes to `parent` when none of their paths changed there since the
    /// fork; all or none.
    pub async fn merge(self, parent: &SandboxClient, log: &EventLog) -> Merged {
        let mut merged = self.withheld(log, None);
        if merged.error.is_some() || merged.record.changes.is_empty() {
            return merged;
        }
        match self.clashes(parent).await {
            Ok(clashes) if !clashes.is_empty() => merged.record.conflicts = clashes,
            Ok(_) => match apply(&self.changes, parent, log.dir()).await {
                Ok(notes) => {
                    merged.record.applied = true;
                    merged.notes = notes;
                }
                Err(err) => {
                    merged.error = Some(format!(
                        "applying failed, and your workspace may hold part of them: {err}"
                    ));
                }
            },
            Err(err) => merged.error = Some(format!("reading your workspace: {err}")),
        }
        merged
    }

    /// The changes recorded and shown, not applied: `why`, when they are kept from the parent
    /// (its session is stopping: a merge cut short would leave half of them).
    pub fn withheld(&self, log: &EventLog, why: Option<&str>) -> Merged {
        let diff = unified(&self.changes, log);
        Merged {
            record: ForkMerge {
                changes: self.changes.clone(),
                applied: false,
                conflicts: Vec::new(),
            },
            error: self.error.clone().or_else(|| why.map(str::to_owned)),
            diff,
            notes: Vec::new(),
        }
    }

    /// The changed paths that changed in the parent too since the fork, or that cannot be
    /// applied by name. A folder the child deleted or replaced clashes with anything the
    /// parent changed inside it (a folder's own entry does not change when a file is added to
    /// it, and applying the deletion would take that file).
    async fn clashes(&self, parent: &SandboxClient) -> Result<Vec<String>, SandboxError> {
        let snapshot = parent.snapshot().await?;
        let now = index(&parent.manifest(&snapshot.snapshot_id).await?.entries);
        let changed_here =
            |path: &String| change_kind(self.base.get(path), now.get(path)).is_some();
        let changed_inside = |folder: &str| {
            let prefix = format!("{folder}/");
            let inside = |map: &BTreeMap<String, FileVersion>| {
                map.range(prefix.clone()..)
                    .take_while(|(path, _)| path.starts_with(&prefix))
                    .any(|(path, _)| changed_here(path))
            };
            inside(&self.base) || inside(&now)
        };
        Ok(self
            .changes
            .iter()
            .filter(|change| {
                let was_folder = change
                    .before
                    .as_ref()
                    .is_some_and(|v| v.kind == EntryKind::Dir);
                let still_folder = change
                    .after
                    .as_ref()
                    .is_some_and(|v| v.kind == EntryKind::Dir);
                !safe_path(&change.path)
                    || self.unnamed.contains(&change.path)
                    || changed_here(&change.path)
                    || (was_folder && !still_folder && changed_inside(&change.path))
            })
            .map(|change| change.path.clone())
            .collect())
    }
}

fn index(entries: &[ManifestEntry]) -> BTreeMap<String, FileVersion> {
    entries
        .iter()
        .filter(|e| e.path_b64.is_none())
        .map(|e| (e.path.clone(), e.version.clone()))
        .collect()
}

/// The unified diff of the changed text files, at most [`DIFF_SHOWN`] bytes.
fn unified(changes: &[ChangeRecord], log: &EventLog) -> String {
    let log_dir = log.dir();
    let text_of = |version: Option<&VersionRecord>| -> Option<String> {
        match version {
            None => Some(String::new()),
            Some(v) if v.kind == EntryKind::File && v.size <= DIFF_FILE_MAX => {
                String::from_utf8(blob_bytes(log_dir, v).ok()?).ok()
            }
            Some(_) => None,
        }
    };
    let mut out = String::new();
    for change in changes {
        let (Some(old), Some(new)) = (
            text_of(change.before.as_ref()),
            text_of(change.after.as_ref()),
        ) else {
            continue;
        };
        if old == new {
            continue;
        }
        let a = format!("a/{}", change.path);
        let b = format!("b/{}", change.path);
        let text = harness_log::text::unified_diff(&old, &new, &a, &b);
        out.push_str(&text);
        if out.len() > DIFF_SHOWN {
            let cut = harness_log::text::head(&out, DIFF_SHOWN).len();
            out.truncate(cut);
            out.push_str("\n[… the diff goes on; every change is in the child's log]");
            break;
        }
    }
    out
}

/// The failure of a fork that never ran, said once its folder is dealt with: a sandbox log
/// with something in it is kept and named (it says why the copy failed), an empty folder is
/// removed (when this fork made it), so the parent's log folder holds no child that never
/// started.
fn abandoned(log_dir: &Path, fresh: bool, server_log: &Path, err: String) -> String {
    let said = std::fs::metadata(server_log).is_ok_and(|m| m.len() > 0);
    if said {
        return format!("{err} (the copy's sandbox log: {})", server_log.display());
    }
    if fresh {
        let _ = std::fs::remove_dir_all(log_dir);
    }
    err
}
