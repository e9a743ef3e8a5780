//! Reading a session back, at four levels: text (`show`), state (`restore`), metrics (one
//! session, or a batch's [`report`], drawn with [`charts`]; two batches side by side with
//! [`compare`]), and a regression re-run (`rerun`); its recorded replies as a [`model`]; and its
//! state after a step, conversation and workspace, for the sessions that [`fork`] from there.
//! Every reader streams the log, so its length does not matter.
//!
//! A log is untrusted input. [`restore`] refuses paths that are not plain names and blob ids
//! that are not hashes, writes through descriptors beneath its target with `O_NOFOLLOW` (links
//! last), sets permission bits only (never set-id or sticky), and writes at most
//! `restore::MAX_RESTORE_BYTES` (16 GiB) from a manifest of at most 5,000,000 entries. The ATIF
//! export and `rerun` read blob texts within one [`budget::BlobBudget`] per command. What the
//! toolkit writes into a log's own folder goes through [`folder`]. A fork starts only from a
//! conversation that matches every model request the log holds.
//!
//! # This crate (`harness-replay`)
//! The log toolkit. It reads logs (`harness-log`) and re-runs sessions through the runtime
//! (`harness-runtime`), with the models of `harness-models`; a rerun is handed the policy it
//! judges calls by (`rerun::Check`, a `harness-policy` `Policy`), never the rules' crate. It
//! never depends on the benchmark adapter: what a report shows of a benchmark trial's own files
//! it is given through [`report::TrialFiles`], which the adapter implements.

pub mod budget;
pub mod charts;
pub mod compare;
pub mod folder;
pub mod fork;
pub mod metrics;
pub mod model;
pub mod render;
pub mod report;
pub mod rerun;
pub mod restore;
mod text_table;

use std::path::{Path, PathBuf};

pub use budget::BlobBudget;
use harness_log::reader::{self, LineError};
use harness_log::{BlobRef, Envelope, Text};

/// What a replay could not do.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The folder has no `events.jsonl`.
    #[error("{0}: not a session log (no events.jsonl)")]
    NotALog(PathBuf),
    /// The folder is not a batch's (its log does not start with `batch_started`).
    #[error(
        "{0}: not a batch folder (its events.jsonl must start with `batch_started`: the folder `harness batch --out` wrote)"
    )]
    NotABatch(PathBuf),
    /// Nothing is at that path.
    #[error("{0}: no such folder (a session log is the folder `harness run` printed as `log:`)")]
    Missing(PathBuf),
    /// A complete line of the log is not a valid event.
    #[error("{path}: {error}")]
    BadLine { path: PathBuf, error: LineError },
    /// A blob the log names is missing.
    #[error("{path}: blob {sha256} is missing")]
    MissingBlob { path: PathBuf, sha256: String },
    #[error("{0}")]
    Io(String),
}

/// Every event of a session, in order. A torn last line is reported through `on_torn` and
/// skipped; any other bad line is an error (replay needs the whole story).
pub fn events(
    dir: &Path,
    mut on_torn: impl FnMut(&LineError),
) -> Result<impl Iterator<Item = Result<Envelope, ReplayError>>, ReplayError> {
    if !dir.exists() {
        return Err(ReplayError::Missing(dir.to_owned()));
    }
    if !dir.join("events.jsonl").is_file() {
        return Err(ReplayError::NotALog(dir.to_owned()));
    }
    let events =
        reader::events(dir).map_err(|err| ReplayError::Io(format!("{}: {err}", dir.display())))?;
    let path = dir.to_owned();
    Ok(events.filter_map(move |item| match item {
        Ok(envelope) => Some(Ok(envelope)),
        Err(torn @ LineError::Torn { .. }) => {
            on_torn(&torn);
            None
        }
        Err(error) => Some(Err(ReplayError::BadLine {
            path: path.clone(),
            error,
        })),
    }))
}

/// The bytes of a blob, checked against its name ([`reader::read_blob`]).
pub fn blob(dir: &Path, blob: &BlobRef) -> Result<Vec<u8>, ReplayError> {
    reader::blob(dir, blob).map_err(|err| match err.kind() {
        std::io::ErrorKind::NotFound => ReplayError::MissingBlob {
            path: dir.to_owned(),
            sha256: blob.sha256.clone(),
        },
        _ => ReplayError::Io(format!("{}: {err}", dir.display())),
    })
}

/// The whole of a `Text`, reading its blob when it has one. A reader that resolves many texts
/// of a log (an export, a rerun) reads them through a [`BlobBudget`] instead.
pub fn text(dir: &Path, text: &Text) -> Result<String, ReplayError> {
    match (&text.text, &text.blob) {
        (Some(inline), _) => Ok(inline.clone()),
        (None, Some(reference)) => Ok(String::from_utf8_lossy(&blob(dir, reference)?).into_owned()),
        (None, None) => Ok(String::new()),
    }
}

/// Whether `name` is one plain name in a folder: not empty, not `.` or `..`, without `/` (or
/// NUL). A name a log gives for a file or folder beside it must be one, or it could name a
/// place anywhere (`../x`, `/home/…`).
pub fn plain_name(name: &str) -> bool {
    !matches!(name, "" | "." | "..") && !name.contains(['/', '\0'])
}

/// The folder of the subagent whose log a parent in `dir` names `log_dir`
/// (`subagent_started.log_dir`). A log may be hostile: the name must be a plain relative path
/// beneath `agents/`, and the folder, once links are followed, must lie beneath `dir` (a
/// crafted log could link a child back to itself, or out of the log).
pub fn subagent_dir(dir: &Path, log_dir: &str) -> Result<PathBuf, ReplayError> {
    let plain = log_dir.starts_with("agents/")
        && log_dir
            .split('/')
            .all(|part| !matches!(part, "" | "." | ".."));
    if !plain {
        return Err(ReplayError::Io(format!(
            "{}: the subagent log folder {log_dir:?} is not beneath agents/",
            dir.display()
        )));
    }
    let child = dir.join(log_dir);
    let why = match (child.canonicalize(), dir.canonicalize()) {
        (Ok(real), Ok(parent)) if real.starts_with(&parent) && real != parent => return Ok(child),
        (Err(err), _) | (_, Err(err)) => format!(" ({err})"),
        _ => String::new(),
    };
    Err(ReplayError::Io(format!(
        "{}: a subagent's log must be a folder beneath its parent's{why}",
        child.display()
    )))
}

/// A recorded reply's tool calls, as the loop had them.
fn tool_calls(response: &harness_log::ModelResponse) -> Vec<harness_models::ToolCall> {
    response
        .tool_calls
        .iter()
        .map(|call| harness_models::ToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        })
        .collect()
}

/// The folders directly under `dir` that hold a log.
fn child_logs(dir: &Path) -> Result<Vec<PathBuf>, ReplayError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|err| ReplayError::Io(format!("{}: {err}", dir.display())))?;
    Ok(entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("events.jsonl").is_file())
        .collect())
}

/// Session folders named by `paths`: each is a session, or a folder of sessions (a batch's
/// tasks, or a log folder in which a batch folder stands for its tasks).
pub fn session_dirs(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ReplayError> {
    let mut dirs = Vec::new();
    for path in paths {
        let path = reader::session_dir(path);
        if report::is_batch(&path) {
            let mut tasks = child_logs(&path)?;
            tasks.sort();
            dirs.extend(tasks);
            continue;
        }
        if path.join("events.jsonl").is_file() {
            dirs.push(path);
            continue;
        }
        let mut found = Vec::new();
        for child in child_logs(&path)? {
            // A batch folder among them stands for its tasks' sessions, not for itself.
            if report::is_batch(&child) {
                found.extend(child_logs(&child)?);
            } else {
                found.push(child);
            }
        }
        if found.is_empty() {
            return Err(ReplayError::NotALog(path));
        }
        found.sort();
        dirs.extend(found);
    }
    Ok(dirs)
}

#[cfg(test)]
mod tests {
    use super::subagent_dir;

    /// A shared log whose blob is a link to a secret of this machine restores without it: the
    /// file is a problem, and nothing of the secret is written.
    #[test]
    fn a_blob_that_links_out_of_the_log_is_not_restored() {
        use sandbox_protocol::EntryKind;
        use sha2::Digest as _;
        let root = tempfile::tempdir().unwrap();
        let log = root.path().join("log");
        std::fs::create_dir_all(log.join("blobs")).unwrap();
        let secret = root.path().join("secret");
        std::fs::write(&secret, "key=hunter2\n").unwrap();
        let sha256 = hex::encode(sha2::Sha256::digest(b"key=hunter2\n"));
        std::os::unix::fs::symlink(&secret, log.join("blobs").join(&sha256)).unwrap();
        let version = harness_log::VersionRecord {
            kind: EntryKind::File,
            size: 12,
            mode: 0o644,
            sha256: Some(sha256),
            target: None,
        };
        let state = [("stolen.txt".to_owned(), version)].into_iter().collect();
        let target = root.path().join("target");
        let restored = crate::restore::write_state(&log, &state, &target).unwrap();
        assert_eq!(restored.problems.len(), 1, "{:?}", restored.problems);
        assert!(
            restored.problems[0].contains("not a regular file"),
            "{:?}",
            restored.problems
        );
        assert!(!target.join("stolen.txt").exists());
    }

    #[test]
    fn a_subagent_folder_must_lie_beneath_its_parents_agents() {
        let root = tempfile::tempdir().unwrap();
        let parent = root.path().join("session");
        std::fs::create_dir_all(parent.join("agents/1-call_a")).unwrap();
        std::fs::create_dir_all(root.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(&parent, parent.join("agents/loop")).unwrap();
        std::os::unix::fs::symlink(root.path().join("elsewhere"), parent.join("agents/out"))
            .unwrap();
        assert_eq!(
            subagent_dir(&parent, "agents/1-call_a").unwrap(),
            parent.join("agents/1-call_a")
        );
        for (name, said) in [
            ("../elsewhere", "is not beneath agents/"),
            ("/etc", "is not beneath agents/"),
            ("agents/../../elsewhere", "is not beneath agents/"),
            ("agents//1-call_a", "is not beneath agents/"),
            ("agents/loop", "beneath its parent's"),
            ("agents/out", "beneath its parent's"),
            ("agents/absent", "beneath its parent's"),
        ] {
            let err = subagent_dir(&parent, name).unwrap_err().to_string();
            assert!(err.contains(said), "{name}: {err}");
        }
    }
}
