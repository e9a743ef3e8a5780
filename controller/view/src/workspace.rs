//! The workspace at any step, as `replay restore` has it ([`harness_replay::restore::state_at`]): its
//! tree, one file's content from the log's blobs (its hash checked against the record), and
//! what changed against the step before, the last earlier event that changed the workspace.

use std::io::Read;
use std::path::Path;

use harness_log::VersionRecord;
use harness_replay::restore::{self, State};
use sandbox_protocol::EntryKind;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::ViewError;
// The largest blob the viewer reads (a larger one is named, not read).
use harness_log::reader::MAX_BLOB;

/// The largest file whose content is shown (a larger one is named with its size).
const MAX_SHOWN: u64 = 4 * 1024 * 1024;
/// Lines of a diff shown at most.
const MAX_DIFF_LINES: usize = 20_000;

/// An event that made the workspace what it is.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub seq: u64,
    /// `snapshot` (as the agent found it) or `changed` (by a tool call).
    pub kind: &'static str,
    pub call_id: Option<String>,
    pub changes: usize,
}

/// One path at a step, and how it changed against the step before.
#[derive(Debug, Serialize)]
pub struct Entry {
    pub path: String,
    #[serde(flatten)]
    pub version: VersionRecord,
    /// `added`, `modified` or `deleted` against the step before; absent when the same.
    pub change: Option<&'static str>,
}

/// One page of the tree at a step.
#[derive(Debug, Serialize)]
pub struct Tree {
    pub step: u64,
    /// The step it is compared with.
    pub base: Option<u64>,
    /// Entries at the step (deleted ones not counted).
    pub total: usize,
    /// Entries added, modified or deleted against the base.
    pub changed: usize,
    /// Entries in the whole listing, every page (`changed`, or `total` and the deleted).
    pub listed: usize,
    /// This page, by path.
    pub entries: Vec<Entry>,
    /// The last path of this page when more follow: the next page's `after`.
    pub next: Option<String>,
}

/// Which part of a tree to answer: a workspace of a million files is not one page.
#[derive(Debug, Clone, Default)]
pub struct TreePage {
    /// Only the paths after this one (the previous page's `next`).
    pub after: Option<String>,
    /// At most this many entries.
    pub limit: usize,
    /// Only the entries that changed against the base.
    pub changed_only: bool,
}

/// One file at a step.
#[derive(Debug, Serialize)]
pub struct FileView {
    pub path: String,
    pub step: u64,
    pub base: Option<u64>,
    pub version: Option<VersionRecord>,
    pub text: Option<String>,
    /// Why there is no text: binary, too large, not in the log, a hash that does not match.
    pub note: Option<String>,
    /// Its content hashes to the recorded sha256.
    pub verified: bool,
    /// A unified diff against the step before, when either side is text.
    pub diff: Option<String>,
}

/// The events that changed the workspace, in order (the log streamed, as restore reads it).
pub fn steps(dir: &Path) -> Result<Vec<Step>, ViewError> {
    let mut steps = Vec::new();
    for envelope in harness_replay::events(dir, |_| {})? {
        let envelope = envelope?;
        match envelope.event {
            harness_log::Event::WorkspaceSnapshot(_) => steps.push(Step {
                seq: envelope.seq,
                kind: "snapshot",
                call_id: None,
                changes: 0,
            }),
            harness_log::Event::WorkspaceChanged(changed) => steps.push(Step {
                seq: envelope.seq,
                kind: "changed",
                call_id: Some(changed.call_id),
                changes: changed.changes.len(),
            }),
            _ => {}
        }
    }
    Ok(steps)
}

/// The step a view at `step` is compared with: the change before the last change up to it.
fn base_of(steps: &[Step], step: u64) -> Option<u64> {
    let current = steps.iter().rposition(|s| s.seq <= step)?;
    current.checked_sub(1).map(|before| steps[before].seq)
}

fn state(dir: &Path, step: u64) -> Result<State, ViewError> {
    let (state, _) = restore::state_at(dir, step)?;
    restore::check_state(&state)?;
    Ok(state)
}

/// A page of the tree after event `step`, each path marked with its change against the step
/// before.
pub fn tree(dir: &Path, step: u64, page: &TreePage) -> Result<Tree, ViewError> {
    let now = state(dir, step)?;
    let base = base_of(&steps(dir)?, step);
    let before = match base {
        Some(base) => Some(state(dir, base)?),
        None => None,
    };
    let change = |path: &String, version: &VersionRecord| {
        before.as_ref().and_then(|before| match before.get(path) {
            None => Some("added"),
            Some(old) if old != version => Some("modified"),
            Some(_) => None,
        })
    };
    let deleted = |(path, _): &(&String, &VersionRecord)| !now.contains_key(*path);
    let gone: Vec<(&String, &VersionRecord)> = before
        .iter()
        .flat_map(|before| before.iter())
        .filter(deleted)
        .collect();
    let deletions = gone.len();
    let changed = now
        .iter()
        .filter(|(path, version)| change(path, version).is_some())
        .count()
        + deletions;
    // Both maps are sorted by path: merged, the whole tree is in order without a sort.
    let mut all = merge_sorted(
        now.iter()
            .map(|(path, version)| (path, version, change(path, version))),
        gone.into_iter()
            .map(|(path, version)| (path, version, Some("deleted"))),
    )
    .filter(|(_, _, change)| !page.changed_only || change.is_some())
    .filter(|(path, _, _)| page.after.as_ref().is_none_or(|after| *path > after))
    .map(|(path, version, change)| Entry {
        path: path.clone(),
        version: version.clone(),
        change,
    });
    let entries: Vec<Entry> = all.by_ref().take(page.limit).collect();
    let next = match all.next() {
        Some(_) => entries.last().map(|entry| entry.path.clone()),
        None => None,
    };
    Ok(Tree {
        step,
        base,
        total: now.len(),
        changed,
        listed: if page.changed_only {
            changed
        } else {
            now.len() + deletions
        },
        entries,
        next,
    })
}

/// Two iterators sorted by their first element, as one sorted iterator.
fn merge_sorted<'a, T: 'a>(
    left: impl Iterator<Item = (&'a String, T, Option<&'static str>)>,
    right: impl Iterator<Item = (&'a String, T, Option<&'static str>)>,
) -> impl Iterator<Item = (&'a String, T, Option<&'static str>)> {
    let (mut left, mut right) = (left.peekable(), right.peekable());
    std::iter::from_fn(move || match (left.peek(), right.peek()) {
        (Some(l), Some(r)) if r.0 < l.0 => right.next(),
        (Some(_), _) => left.next(),
        (None, _) => right.next(),
    })
}

/// The file `path` after event `step`, with its diff against the step before.
pub fn file(dir: &Path, step: u64, path: &str) -> Result<FileView, ViewError> {
    let now = state(dir, step)?;
    let base = base_of(&steps(dir)?, step);
    let before = match base {
        Some(base) => state(dir, base)?.remove(path),
        None => None,
    };
    let version = now.get(path).cloned();
    if version.is_none() && before.is_none() {
        return Err(ViewError::NotFound(format!(
            "`{}` is not in the workspace at step {step} nor at the step before",
            path.escape_debug()
        )));
    }
    let (text, note, verified) = match &version {
        Some(version) => content(dir, version),
        None => (None, Some("deleted at this step".to_owned()), false),
    };
    let old = before.as_ref().map(|v| content(dir, v).0);
    let diff = match (&old, &text) {
        (Some(Some(old)), Some(new)) if old != new => Some(unified(old, new, path)),
        (None | Some(None), Some(new)) if version.is_some() && base.is_some() => {
            Some(unified("", new, path))
        }
        (Some(Some(old)), None) if version.is_none() => Some(unified(old, "", path)),
        _ => None,
    };
    Ok(FileView {
        path: path.to_owned(),
        step,
        base,
        version,
        text,
        note,
        verified,
        diff,
    })
}

/// A version's text from the log's blobs, why there is none, and whether it hashed right.
fn content(dir: &Path, version: &VersionRecord) -> (Option<String>, Option<String>, bool) {
    let note = |text: String| (None, Some(text), false);
    match version.kind {
        EntryKind::File => {}
        EntryKind::Dir => return note("a folder".to_owned()),
        EntryKind::Symlink => {
            let target = version.target.clone().unwrap_or_default();
            return note(format!("a symbolic link to `{}`", target.escape_debug()));
        }
        EntryKind::Other => {
            return note("not a regular file (a FIFO, socket or device)".to_owned());
        }
    }
    let Some(sha256) = &version.sha256 else {
        return note("no content was recorded (unreadable in the sandbox)".to_owned());
    };
    if version.size > MAX_SHOWN {
        return note(format!(
            "{} bytes: too large to show here (`replay restore` writes it)",
            version.size
        ));
    }
    // `check_state` vetted the name: 64 lowercase hex digits.
    let bytes = match read_blob(dir, sha256, MAX_SHOWN) {
        Ok(Blob {
            bytes,
            verified: true,
            ..
        }) => bytes,
        Ok(_) => {
            return note(format!(
                "the blob does not hash to {sha256}: the log was altered"
            ));
        }
        Err(why) => return note(why),
    };
    if bytes.contains(&0) {
        return (None, Some(format!("binary, {} bytes", bytes.len())), true);
    }
    match String::from_utf8(bytes) {
        Ok(text) => (Some(text), None, true),
        Err(err) => (
            None,
            Some(format!("binary, {} bytes", err.as_bytes().len())),
            true,
        ),
    }
}

/// A blob's first bytes, its size, and whether all of it hashes to its name.
#[derive(Debug)]
pub struct Blob {
    pub bytes: Vec<u8>,
    pub size: u64,
    pub verified: bool,
}

/// The blob `sha256` (a vetted hash) of the log in `dir`: at most `keep` bytes of it kept, all
/// of it hashed. Only a regular file in a real `blobs/` folder is read — a shared log's
/// `blobs/` entry that is a link (to a secret, to `/dev/zero`) is refused — and what is
/// served is content-addressed: a caller shows it only when it hashes to its name.
pub fn read_blob(dir: &Path, sha256: &str, keep: u64) -> Result<Blob, String> {
    let (mut file, size) = harness_log::reader::open_blob(dir, sha256).map_err(|err| {
        format!(
            "content {sha256} is not in the log as a file (over the sandbox's blob size limit, redacted, or not a regular file): {err}"
        )
    })?;
    if size > MAX_BLOB {
        return Err(format!(
            "blob {sha256}: {size} bytes, more than the viewer reads"
        ));
    }
    let (mut hasher, mut bytes, mut buffer) = (Sha256::new(), Vec::new(), vec![0u8; 256 * 1024]);
    let mut read = 0u64;
    loop {
        let n = file
            .read(&mut buffer)
            .map_err(|err| format!("blob {sha256}: {err}"))?;
        if n == 0 || read > MAX_BLOB {
            break;
        }
        hasher.update(&buffer[..n]);
        let room = keep.saturating_sub(bytes.len() as u64) as usize;
        bytes.extend_from_slice(&buffer[..n.min(room)]);
        read += n as u64;
    }
    Ok(Blob {
        bytes,
        size: read,
        verified: hex::encode(hasher.finalize()) == sha256,
    })
}

fn unified(old: &str, new: &str, path: &str) -> String {
    let text =
        harness_log::text::unified_diff(old, new, &format!("a/{path}"), &format!("b/{path}"));
    let mut lines: Vec<&str> = text.lines().take(MAX_DIFF_LINES + 1).collect();
    if lines.len() > MAX_DIFF_LINES {
        lines.truncate(MAX_DIFF_LINES);
        lines.push("… (the diff goes on)");
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_is_read_only_as_a_regular_file_and_served_only_when_it_hashes_to_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = dir.path().join("blobs");
        std::fs::create_dir_all(&blobs).unwrap();
        let content = b"hello\n";
        let sha = hex::encode(Sha256::digest(content));
        std::fs::write(blobs.join(&sha), content).unwrap();
        let blob = read_blob(dir.path(), &sha, 3).unwrap();
        assert_eq!(
            (blob.bytes.as_slice(), blob.size, blob.verified),
            (&b"hel"[..], 6, true)
        );
        // A file under another file's name: read, but not verified.
        let other = hex::encode(Sha256::digest(b"other"));
        std::fs::write(blobs.join(&other), content).unwrap();
        assert!(!read_blob(dir.path(), &other, 100).unwrap().verified);
        // A link (to a secret, to a device) is not read at all.
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "s3cret").unwrap();
        let linked = hex::encode(Sha256::digest(b"s3cret"));
        std::os::unix::fs::symlink(&secret, blobs.join(&linked)).unwrap();
        assert!(read_blob(dir.path(), &linked, 100).is_err());
        let zero = hex::encode(Sha256::digest(b"zero"));
        std::os::unix::fs::symlink("/dev/zero", blobs.join(&zero)).unwrap();
        assert!(read_blob(dir.path(), &zero, 100).is_err());
    }
}
