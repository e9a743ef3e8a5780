//! The runs under the viewed folders: found by walking them, each summarised from the ends of
//! its log ([`summary`](crate::summary)), and looked at again when its log grows. The index
//! holds summaries, never logs, so its size is the number of runs, not their length.
//!
//! A run's id is `<root number>/<path under that root>`; requests name runs by id and the
//! server finds their folders here, so no request path is ever joined onto the disk.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::SystemTime;

use serde::Serialize;

use crate::summary::{self, Kind, Status, Summary};

/// Folders below a root looked into.
const MAX_DEPTH: usize = 6;
/// Runs indexed at most: a folder of more is cut, and says so.
pub const MAX_RUNS: usize = 200_000;

/// One run: where it is and what it is.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub id: String,
    /// Its folder, as found under the root given.
    pub path: String,
    /// Its folder's name.
    pub name: String,
    /// The batch whose folder holds it.
    pub batch: Option<String>,
    #[serde(flatten)]
    pub summary: Summary,
    #[serde(skip)]
    pub dir: PathBuf,
    #[serde(skip)]
    len: u64,
    #[serde(skip)]
    modified: Option<SystemTime>,
    /// A batch log: how far it was folded.
    #[serde(skip)]
    folded_to: u64,
}

#[derive(Debug, Default)]
pub struct Runs {
    pub by_id: HashMap<String, Run>,
    /// Ids, newest first.
    pub order: Vec<String>,
    /// Grows whenever anything changed: a page that polls asks whether it moved.
    pub generation: u64,
    /// More runs were found than [`MAX_RUNS`].
    pub cut: bool,
}

pub struct Index {
    roots: Vec<PathBuf>,
    runs: RwLock<Runs>,
}

/// A log folder found by the walk.
struct Found {
    id: String,
    dir: PathBuf,
    path: String,
    batch: Option<String>,
}

impl Index {
    pub fn new(roots: Vec<PathBuf>) -> Index {
        Index {
            roots,
            runs: RwLock::new(Runs::default()),
        }
    }

    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Reads the index (a poisoned lock is still a consistent index: writers replace whole runs).
    pub fn read(&self) -> std::sync::RwLockReadGuard<'_, Runs> {
        self.runs.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The folder of the run `id`, and its kind.
    pub fn dir_of(&self, id: &str) -> Option<(PathBuf, Option<Kind>)> {
        let runs = self.read();
        runs.by_id.get(id).map(|r| (r.dir.clone(), r.summary.kind))
    }

    /// Walks the roots again and looks at every log that changed since the last time; returns
    /// whether anything did. Blocking: call it off the async threads.
    pub fn refresh(&self) -> bool {
        let mut found = Vec::new();
        let mut cut = false;
        for (number, root) in self.roots.iter().enumerate() {
            walk(
                root,
                &number.to_string(),
                root,
                0,
                None,
                &mut found,
                &mut cut,
            );
        }
        // Read what changed without holding the lock; then swap it in.
        let previous: HashMap<String, (u64, Option<SystemTime>, Summary, u64)> = {
            let runs = self.read();
            runs.by_id
                .values()
                .map(|r| {
                    let state = (r.len, r.modified, r.summary.clone(), r.folded_to);
                    (r.id.clone(), state)
                })
                .collect()
        };
        let mut changed = found.len() != previous.len();
        let mut next = HashMap::with_capacity(found.len());
        for found in found {
            let before = previous.get(&found.id);
            let (run, moved) = look(found, before);
            changed |= moved;
            next.insert(run.id.clone(), run);
        }
        if !changed {
            return false;
        }
        let mut order: Vec<&Run> = next.values().collect();
        order.sort_by(|a, b| {
            b.summary
                .started
                .cmp(&a.summary.started)
                .then_with(|| a.id.cmp(&b.id))
        });
        let order = order.into_iter().map(|r| r.id.clone()).collect();
        let mut runs = self.runs.write().unwrap_or_else(|e| e.into_inner());
        runs.by_id = next;
        runs.order = order;
        runs.generation += 1;
        runs.cut = cut;
        true
    }
}

/// A run as it is now: summarised again only when its log changed (or, still running, to let
/// it go quiet).
fn look(found: Found, before: Option<&(u64, Option<SystemTime>, Summary, u64)>) -> (Run, bool) {
    let meta = std::fs::symlink_metadata(found.dir.join("events.jsonl")).ok();
    let len = meta.as_ref().map_or(0, std::fs::Metadata::len);
    let modified = meta.as_ref().and_then(|m| m.modified().ok());
    let name = found
        .dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| found.path.clone());
    let mut run = Run {
        id: found.id,
        path: found.path,
        name,
        batch: found.batch,
        summary: Summary::default(),
        dir: found.dir,
        len,
        modified,
        folded_to: 0,
    };
    if let Some((old_len, old_modified, old, folded_to)) = before
        && *old_len == len
        && *old_modified == modified
    {
        run.summary = old.clone();
        run.folded_to = *folded_to;
        if run.summary.status != Some(Status::Running) {
            return (run, false);
        }
        // Still running by the last look: it may have gone quiet since.
        run.summary.status = None;
        summary::settle(&mut run.summary, modified.unwrap_or(SystemTime::UNIX_EPOCH));
        let moved = run.summary.status != Some(Status::Running);
        return (run, moved);
    }
    let modified_at = modified.unwrap_or(SystemTime::UNIX_EPOCH);
    let is_batch =
        before.is_some_and(|(_, _, s, _)| s.kind == Some(Kind::Batch)) || starts_a_batch(&run.dir);
    if is_batch {
        // Folded on from where it stopped, unless the log was replaced by a shorter one.
        let (mut summary, from) = match before {
            Some((old_len, _, old, folded_to)) if len >= *old_len => (old.clone(), *folded_to),
            _ => (Summary::default(), 0),
        };
        summary.status = summary
            .status
            .filter(|s| *s != Status::Running && *s != Status::Unfinished);
        run.folded_to = summary::batch(&run.dir, &mut summary, from).unwrap_or(from);
        summary::settle(&mut summary, modified_at);
        run.summary = summary;
    } else {
        run.summary = summary::session(&run.dir, modified_at).unwrap_or_else(|err| Summary {
            task: format!("unreadable log: {err}"),
            status: Some(Status::Unfinished),
            ..Summary::default()
        });
    }
    (run, true)
}

/// Whether the log in `dir` begins with `batch_started` (read from its first bytes).
fn starts_a_batch(dir: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(dir.join("events.jsonl"))
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    memchr::memmem::find(&head[..n], b"\"type\":\"batch_started\"").is_some()
}

/// Finds the log folders under `dir`. A session's folder is not looked into (its `blobs/`,
/// its subagents' `agents/` are its own); a batch's is, for its trials. Symbolic links are not
/// followed, so a hostile folder can neither loop nor reach outside the root.
fn walk(
    root: &Path,
    number: &str,
    dir: &Path,
    depth: usize,
    batch: Option<&str>,
    found: &mut Vec<Found>,
    cut: &mut bool,
) {
    if found.len() >= MAX_RUNS {
        *cut = true;
        return;
    }
    let log = std::fs::symlink_metadata(dir.join("events.jsonl")).is_ok_and(|m| m.is_file());
    let mut inside = batch.map(str::to_owned);
    if log {
        let relative = dir.strip_prefix(root).unwrap_or(dir);
        let rel = relative.to_string_lossy();
        let id = if rel.is_empty() {
            number.to_owned()
        } else {
            format!("{number}/{rel}")
        };
        let path = root.join(relative).display().to_string();
        let is_batch = starts_a_batch(dir);
        found.push(Found {
            id: id.clone(),
            dir: dir.to_owned(),
            path,
            batch: batch.map(str::to_owned),
        });
        if !is_batch {
            return;
        }
        inside = Some(id);
    }
    if depth >= MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut children: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            !(name.starts_with('.') || name == "blobs" || name == "agents")
        })
        .map(|e| e.path())
        .collect();
    children.sort();
    for child in children {
        walk(
            root,
            number,
            &child,
            depth + 1,
            inside.as_deref(),
            found,
            cut,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(dir: &Path, first: &str) {
        std::fs::create_dir_all(dir.join("blobs")).unwrap();
        std::fs::write(dir.join("events.jsonl"), format!("{first}\n")).unwrap();
    }

    #[test]
    fn batches_hold_their_trials_and_links_are_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let batch = root.path().join("b");
        log(
            &batch,
            r#"{"seq":0,"ts":"2026-01-02T00:00:00Z","type":"batch_started","data":{"tasks":[{}]}}"#,
        );
        log(
            &batch.join("t1"),
            r#"{"seq":0,"ts":"2026-01-02T00:00:01Z","type":"session_started","data":{"task":"one"}}"#,
        );
        log(
            &root.path().join("s"),
            r#"{"seq":0,"ts":"2026-01-01T00:00:00Z","type":"session_started","data":{"task":"alone"}}"#,
        );
        // A session's own folders are its own.
        log(
            &root.path().join("s/agents/1-x"),
            r#"{"seq":0,"ts":"t","type":"session_started","data":{}}"#,
        );
        std::os::unix::fs::symlink(root.path(), root.path().join("loop")).unwrap();
        let index = Index::new(vec![root.path().to_owned()]);
        assert!(index.refresh());
        let runs = index.read();
        assert_eq!(runs.order, ["0/b/t1", "0/b", "0/s"]);
        assert_eq!(runs.by_id["0/b/t1"].batch.as_deref(), Some("0/b"));
        assert_eq!(runs.by_id["0/b"].summary.kind, Some(Kind::Batch));
        assert_eq!(runs.by_id["0/s"].summary.task, "alone");
        drop(runs);
        // Nothing changed: nothing moves.
        assert!(!index.refresh());
    }
}
