//! The runs under the viewed folders: found by walking them, each summarised from the ends of
//! its log ([`summary`](crate::summary)), and looked at again when its log grows. The index
//! holds summaries, never logs, so its size is the number of runs, not their length.
//!
//! A run's id is `<root number>/<path under that root>`; requests name runs by id and the
//! server finds their folders here, so no request path is ever joined onto the disk.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use harness_log::EventKind;
use harness_log::views::Line;
use serde::Serialize;

use crate::summary::{self, Kind, Status, Summary};

/// Folders below a root looked into.
const MAX_DEPTH: usize = 6;
/// How much of a log's first line is read to tell a batch's from a session's.
const HEAD_LINE: u64 = 16 * 1024 * 1024;
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
    /// The session whose folder holds it: a subagent (`agents/`) or a fork's child (`forks/`).
    pub parent: Option<String>,
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
    /// Shared with the refresh, which keeps an unchanged run as it is.
    pub by_id: HashMap<String, Arc<Run>>,
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
    /// Each folder's subfolders as last listed, by the folder's mtime: a folder is listed again
    /// only when an entry was added or removed, so the refresh of a batch of ten thousand trials
    /// lists nothing that did not change.
    listed: Mutex<HashMap<PathBuf, Listing>>,
}

#[derive(Debug, Clone)]
struct Listing {
    modified: SystemTime,
    subfolders: Arc<Vec<PathBuf>>,
}

/// A log folder found by the walk.
struct Found {
    id: String,
    dir: PathBuf,
    path: String,
    batch: Option<String>,
    parent: Option<String>,
}

/// What the walk knows from the last refresh: the log folders, and whether each is a batch's.
struct Walk<'a> {
    known: HashMap<&'a Path, bool>,
    listed: &'a mut HashMap<PathBuf, Listing>,
    found: Vec<Found>,
    cut: bool,
}

impl Index {
    pub fn new(roots: Vec<PathBuf>) -> Index {
        Index {
            roots,
            runs: RwLock::new(Runs::default()),
            listed: Mutex::new(HashMap::new()),
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
    /// whether anything did. Blocking: call it off the async threads. Only the refresh writes
    /// the index, so it reads the last one while it works and swaps the new one in at the end.
    pub fn refresh(&self) -> bool {
        let mut listed = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        let runs = self.read();
        let mut walk = Walk {
            known: runs
                .by_id
                .values()
                .map(|r| (r.dir.as_path(), r.summary.kind == Some(Kind::Batch)))
                .collect(),
            listed: &mut listed,
            found: Vec::new(),
            cut: false,
        };
        for (number, root) in self.roots.iter().enumerate() {
            walk.walk(root, &number.to_string(), root, 0, Holder::default());
        }
        let (found, cut) = (std::mem::take(&mut walk.found), walk.cut);
        drop(walk);
        let mut changed = found.len() != runs.by_id.len();
        let mut next = HashMap::with_capacity(found.len());
        for found in found {
            let before = runs.by_id.get(&found.id);
            let (run, moved) = look(found, before);
            changed |= moved;
            next.insert(run.id.clone(), run);
        }
        drop(runs);
        if !changed {
            return false;
        }
        let mut order: Vec<&Arc<Run>> = next.values().collect();
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

/// A run as it is now: the one the index has while its log is unchanged (a running one is
/// looked at again, to let it go quiet), else summarised again.
fn look(found: Found, before: Option<&Arc<Run>>) -> (Arc<Run>, bool) {
    let meta = std::fs::symlink_metadata(found.dir.join("events.jsonl")).ok();
    let len = meta.as_ref().map_or(0, std::fs::Metadata::len);
    let modified = meta.as_ref().and_then(|m| m.modified().ok());
    if let Some(before) = before
        && before.len == len
        && before.modified == modified
        && before.batch == found.batch
        && before.parent == found.parent
    {
        if before.summary.status != Some(Status::Running) {
            return (before.clone(), false);
        }
        let mut summary = before.summary.clone();
        summary.status = None;
        summary::settle(&mut summary, modified.unwrap_or(SystemTime::UNIX_EPOCH));
        if summary.status == Some(Status::Running) {
            return (before.clone(), false);
        }
        let mut run = Run::clone(before);
        run.summary = summary;
        return (Arc::new(run), true);
    }
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
        parent: found.parent,
        summary: Summary::default(),
        dir: found.dir,
        len,
        modified,
        folded_to: 0,
    };
    let modified_at = modified.unwrap_or(SystemTime::UNIX_EPOCH);
    let was_batch = before.is_some_and(|b| b.summary.kind == Some(Kind::Batch));
    if was_batch || starts_a_batch(&run.dir) {
        // Folded on from where it stopped, unless the log was replaced by a shorter one.
        let (mut summary, from) = match before {
            Some(old) if len >= old.len => (old.summary.clone(), old.folded_to),
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
    (Arc::new(run), true)
}

/// Whether the log in `dir` begins with `batch_started`. The writer puts `type` before `data`,
/// so its first bytes tell; a first line written in another key order is read whole (up to
/// [`HEAD_LINE`]) and parsed.
fn starts_a_batch(dir: &Path) -> bool {
    use std::io::{BufRead, Read};
    let Ok(file) =
        harness_log::reader::open_regular(&dir.join("events.jsonl")).map(|(file, _)| file)
    else {
        return false;
    };
    let mut reader = std::io::BufReader::new(file.take(HEAD_LINE));
    let mut head = [0u8; 512];
    let n = reader.read(&mut head).unwrap_or(0);
    let head = &head[..n];
    let first = head.split(|b| *b == b'\n').next().unwrap_or_default();
    if let Some(at) = memchr::memmem::find(first, b"\"type\":\"") {
        let tagged = format!("\"type\":{}", EventKind::BatchStarted.needle());
        return first[at..].starts_with(tagged.as_bytes());
    }
    if first.len() < head.len() {
        // The whole first line is here, and has no type.
        return false;
    }
    let mut line = head.to_vec();
    if reader.read_until(b'\n', &mut line).is_err() {
        return false;
    }
    serde_json::from_slice::<serde_json::Value>(&line)
        .is_ok_and(|v| Line::of(&v).kind == EventKind::BatchStarted)
}

/// The run whose folder holds the folders being walked.
#[derive(Debug, Clone, Copy, Default)]
struct Holder<'a> {
    batch: Option<&'a str>,
    parent: Option<&'a str>,
}

impl Walk<'_> {
    /// Finds the log folders under `dir`. A batch's folder is looked into for its trials; a
    /// session's only for its subagents (`agents/`) and its forks' children (`forks/`), never
    /// its `blobs/`. Symbolic links are not followed, so a hostile folder can neither loop nor
    /// reach outside the root.
    fn walk(&mut self, root: &Path, number: &str, dir: &Path, depth: usize, holder: Holder<'_>) {
        if self.found.len() >= MAX_RUNS {
            self.cut = true;
            return;
        }
        // A log the index has is taken as still there (its look finds out if not).
        let known = self.known.get(dir).copied();
        let log = known.is_some()
            || std::fs::symlink_metadata(dir.join("events.jsonl")).is_ok_and(|m| m.is_file());
        if !log {
            if depth < MAX_DEPTH {
                for child in self.subfolders(dir).iter() {
                    self.walk(root, number, child, depth + 1, holder);
                }
            }
            return;
        }
        let relative = dir.strip_prefix(root).unwrap_or(dir);
        let rel = relative.to_string_lossy();
        let id = if rel.is_empty() {
            number.to_owned()
        } else {
            format!("{number}/{rel}")
        };
        let is_batch = known.unwrap_or_else(|| starts_a_batch(dir));
        self.found.push(Found {
            id: id.clone(),
            dir: dir.to_owned(),
            path: root.join(relative).display().to_string(),
            batch: holder.batch.map(str::to_owned),
            parent: holder.parent.map(str::to_owned),
        });
        if depth >= MAX_DEPTH {
            return;
        }
        if is_batch {
            let inside = Holder {
                batch: Some(&id),
                parent: None,
            };
            for child in self.subfolders(dir).iter() {
                self.walk(root, number, child, depth + 1, inside);
            }
            return;
        }
        let inside = Holder {
            batch: None,
            parent: Some(&id),
        };
        for own in ["agents", "forks"] {
            let folder = dir.join(own);
            if std::fs::symlink_metadata(&folder).is_ok_and(|m| m.is_dir()) {
                for child in self.subfolders(&folder).iter() {
                    self.walk(root, number, child, depth + 2, inside);
                }
            }
        }
    }

    /// The folders in `dir` worth looking into, listed again only when `dir` changed.
    fn subfolders(&mut self, dir: &Path) -> Arc<Vec<PathBuf>> {
        let Ok(modified) = std::fs::symlink_metadata(dir).and_then(|m| m.modified()) else {
            return Arc::default();
        };
        if let Some(listing) = self.listed.get(dir)
            && listing.modified == modified
        {
            return listing.subfolders.clone();
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Arc::default();
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
        let subfolders = Arc::new(children);
        self.listed.insert(
            dir.to_owned(),
            Listing {
                modified,
                subfolders: subfolders.clone(),
            },
        );
        subfolders
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
    fn a_batch_is_told_by_its_first_line_whatever_its_key_order() {
        let root = tempfile::tempdir().unwrap();
        let tasks: Vec<String> = (0..100).map(|i| format!("{{\"id\":\"t{i}\"}}")).collect();
        log(
            root.path(),
            &format!(
                r#"{{"data":{{"tasks":[{}]}},"seq":0,"ts":"t","type":"batch_started"}}"#,
                tasks.join(",")
            ),
        );
        assert!(starts_a_batch(root.path()));
        log(
            root.path(),
            r#"{"seq":0,"ts":"t","type":"session_started","data":{"task":"\"type\":\"batch_started\""}}"#,
        );
        assert!(!starts_a_batch(root.path()));
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
        // A session's subagents are its children; its other folders are its own.
        log(
            &root.path().join("s/agents/1-x"),
            r#"{"seq":0,"ts":"2025-01-01T00:00:00Z","type":"session_started","data":{}}"#,
        );
        log(
            &root.path().join("s/blobs/x"),
            r#"{"seq":0,"ts":"2025-01-01T00:00:00Z","type":"session_started","data":{}}"#,
        );
        std::os::unix::fs::symlink(root.path(), root.path().join("loop")).unwrap();
        let index = Index::new(vec![root.path().to_owned()]);
        assert!(index.refresh());
        let runs = index.read();
        assert_eq!(runs.order, ["0/b/t1", "0/b", "0/s", "0/s/agents/1-x"]);
        assert_eq!(runs.by_id["0/s/agents/1-x"].parent.as_deref(), Some("0/s"));
        assert_eq!(runs.by_id["0/b/t1"].batch.as_deref(), Some("0/b"));
        assert_eq!(runs.by_id["0/b"].summary.kind, Some(Kind::Batch));
        assert_eq!(runs.by_id["0/s"].summary.task, "alone");
        drop(runs);
        // Nothing changed: nothing moves.
        assert!(!index.refresh());
    }
}
