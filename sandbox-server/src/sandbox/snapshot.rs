//! Workspace manifests and the changes between them.
//!
//! A scan walks the workspace through directory descriptors (see [`super::walk`]). A file whose
//! size, mtime, ctime and inode match the previous manifest keeps its hash; only the others are
//! read (from the descriptor the walk opened), hashed and kept in the blob store, so finding
//! one changed file among thousands costs one walk of `fstatat`s. A file is read for exactly
//! the size its `fstat` gave, and left out (reported as skipped) when it changed while read;
//! a sparse file over the blob store's limit is never read: it stands for its stat
//! ([`BlobStore::unread`]), so what a scan reads is bounded by what the files hold on disk. Paths are bytes: names
//! that are not UTF-8 stay distinct, and the API carries them in base64 beside a readable form.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::File;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex};

use base64::Engine;
use nix::sys::stat::{FileStat, fstat};
use sandbox_protocol::{
    ChangeKind, EntryKind, FileChange, FileVersion, ManifestEntry, SkippedPath,
};

use super::blobs::{BlobStore, StatStamp};
use super::walk::{self, Node};

/// How many manifests are kept for `changes?since=`…
const KEPT_SNAPSHOTS: usize = 32;
/// …and how many paths they may hold together: past it the oldest go first (the newest is
/// always kept), so 32 manifests of a huge workspace cannot each hold their million paths.
const KEPT_PATHS: usize = 4_000_000;

/// One path in a manifest, with what decides whether it must be hashed again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub version: FileVersion,
    stamp: (i64, i64, i64, i64, u64),
}

/// Every path of the workspace at one moment, sorted by its bytes.
pub type Manifest = BTreeMap<Vec<u8>, Entry>;

/// A path for the API: itself when UTF-8; else a readable form (`\xff` for each byte that is
/// not) and the exact bytes in base64.
pub fn api_path(path: &[u8]) -> (String, Option<String>) {
    match std::str::from_utf8(path) {
        Ok(text) => (text.to_owned(), None),
        Err(_) => {
            let mut readable = String::new();
            for chunk in path.utf8_chunks() {
                readable.push_str(chunk.valid());
                for byte in chunk.invalid() {
                    readable.push_str(&format!("\\x{byte:02x}"));
                }
            }
            let exact = base64::engine::general_purpose::STANDARD.encode(path);
            (readable, Some(exact))
        }
    }
}

/// Paths not recorded: an entry with `/` is a path from the root; one without matches that
/// name at any depth.
#[derive(Debug, Clone, Default)]
pub struct IgnoreList {
    paths: Vec<Vec<u8>>,
    names: Vec<Vec<u8>>,
}

impl IgnoreList {
    pub fn new(patterns: &[String]) -> IgnoreList {
        let mut list = IgnoreList::default();
        for raw in patterns.iter().map(|p| p.trim()) {
            // A leading `/` anchors a name at the root (`/proc`); so does any inner `/`.
            let pattern = raw.trim_matches('/');
            if pattern.is_empty() {
                continue;
            }
            if raw.starts_with('/') || pattern.contains('/') {
                list.paths.push(pattern.as_bytes().to_vec());
            } else {
                list.names.push(pattern.as_bytes().to_vec());
            }
        }
        list
    }

    pub fn ignores(&self, relative: &[u8], name: &[u8]) -> bool {
        self.names.iter().any(|n| n == name) || self.paths.iter().any(|p| p == relative)
    }
}

/// The manifest a first scan reuses hashes from: the files a client said it holds, each with
/// the stamp it recorded (`--known-files`). Their content is not in the blob store.
pub fn known(files: &[sandbox_protocol::KnownFile]) -> Manifest {
    files
        .iter()
        .map(|file| {
            let entry = Entry {
                version: FileVersion {
                    kind: EntryKind::File,
                    size: file.size,
                    mode: 0,
                    sha256: Some(file.sha256.clone()),
                    target: None,
                },
                stamp: (
                    file.mtime[0],
                    file.mtime[1],
                    file.ctime[0],
                    file.ctime[1],
                    file.ino,
                ),
            };
            (file.path.as_bytes().to_vec(), entry)
        })
        .collect()
}

/// A scan's result.
#[derive(Debug)]
pub struct Scanned {
    pub manifest: Manifest,
    /// Files read and hashed (the others kept their previous hash, or are over the blob
    /// store's limit and stand for their stat, unread).
    pub n_hashed: u64,
    /// Paths left out because they changed mid-walk (or while read) or could not be read.
    pub skipped: Vec<walk::Skipped>,
}

/// Scans the workspace beneath `root` into a manifest, reusing `previous` hashes where
/// nothing changed. Past `max_paths` paths (`--scan-max-entries`) the scan stops with an error
/// that [`walk::TooManyPaths::of`] recognises, before the manifest holds them all.
pub fn scan(
    root: BorrowedFd<'_>,
    ignore: &IgnoreList,
    previous: Option<&Manifest>,
    blobs: &BlobStore,
    max_paths: u64,
) -> io::Result<Scanned> {
    let mut manifest = Manifest::new();
    let mut n_hashed = 0;
    let mut skipped_files = Vec::new();
    let skipped = walk::walk(
        root,
        max_paths,
        |path, name| ignore.ignores(path, name),
        |found| {
            let old = previous.and_then(|m| m.get(found.path));
            match entry(found.node, &found.stat, old, blobs) {
                Ok((entry, hashed)) => {
                    n_hashed += u64::from(hashed);
                    manifest.insert(found.path.to_vec(), entry);
                }
                Err(why) => skipped_files.push(walk::Skipped {
                    path: found.path.to_vec(),
                    why,
                }),
            }
            Ok(())
        },
    )?;
    let mut skipped = skipped;
    skipped.extend(skipped_files);
    Ok(Scanned {
        manifest,
        n_hashed,
        skipped,
    })
}

/// One path's entry, hashing a file only when its stamp differs from `old`. Also says whether
/// it was hashed; an error is why the file could not be read.
fn entry(
    node: Node,
    stat: &FileStat,
    old: Option<&Entry>,
    blobs: &BlobStore,
) -> Result<(Entry, bool), String> {
    let stamp = stamp_of(stat);
    let size = stat.st_size as u64;
    let mut version = FileVersion {
        kind: EntryKind::Other,
        size: 0,
        mode: stat.st_mode & 0o7777,
        sha256: None,
        target: None,
    };
    let mut hashed = false;
    match node {
        Node::Dir => version.kind = EntryKind::Dir,
        Node::Symlink(target) => {
            version.kind = EntryKind::Symlink;
            version.size = size;
            version.target = Some(String::from_utf8_lossy(&target).into_owned());
        }
        Node::File(fd) => {
            version.kind = EntryKind::File;
            version.size = size;
            let unchanged = old.filter(|old| {
                old.stamp == stamp
                    && old.version.size == size
                    && old.version.kind == EntryKind::File
            });
            version.sha256 = match unchanged {
                Some(old) => old.version.sha256.clone(),
                // Not read: its bytes would not be kept, and a sparse file's holes cost no
                // disk, so what a scan would read is unbounded.
                None if !blobs.keeps(size) && sparse(stat) => Some(blobs.unread(StatStamp {
                    size,
                    mtime: (stamp.0, stamp.1),
                    ctime: (stamp.2, stamp.3),
                    ino: stamp.4,
                })),
                None => {
                    hashed = true;
                    Some(hash_file(&File::from(fd), stat, blobs)?)
                }
            };
        }
        Node::Special(_) => {}
    }
    Ok((Entry { version, stamp }, hashed))
}

/// Whether a file has fewer bytes on disk than its size (holes that read as zeros).
fn sparse(stat: &FileStat) -> bool {
    u64::try_from(stat.st_blocks)
        .unwrap_or(0)
        .saturating_mul(512)
        < stat.st_size as u64
}

/// What decides whether a file must be read again: mtime, ctime (seconds, nanoseconds), inode.
fn stamp_of(stat: &FileStat) -> (i64, i64, i64, i64, u64) {
    (
        stat.st_mtime,
        stat.st_mtime_nsec,
        stat.st_ctime,
        stat.st_ctime_nsec,
        stat.st_ino,
    )
}

/// Reads, hashes and keeps the `st_size` bytes `stat` gave `file` (opened by the walk), then
/// `fstat`s it again. A file whose size or times moved meanwhile was written while it was
/// read: what was hashed may be no version the file ever had, so it is left out and reported,
/// as the walk reports a path that changed under it (the next scan reads it again).
fn hash_file(file: &File, stat: &FileStat, blobs: &BlobStore) -> Result<String, String> {
    let size = stat.st_size as u64;
    let hashed = blobs.put_reader(file, size);
    let still = fstat(file)
        .is_ok_and(|after| after.st_size == stat.st_size && stamp_of(&after) == stamp_of(stat));
    match hashed {
        _ if !still => Err(format!(
            "changed while it was read (it had {size} bytes); left out until it is still"
        )),
        Ok((sha256, _kept)) => Ok(sha256),
        Err(err) => Err(format!("could not be read ({err})")),
    }
}

/// The changes from `before` to `after`, sorted by path.
pub fn diff(before: &Manifest, after: &Manifest) -> Vec<FileChange> {
    let mut changes = Vec::new();
    for (key, old) in before {
        let (path, path_b64) = api_path(key);
        match after.get(key) {
            None => changes.push(FileChange {
                path,
                path_b64,
                change: ChangeKind::Deleted,
                before: Some(old.version.clone()),
                after: None,
            }),
            Some(new) if new.version != old.version => {
                let change = if new.version.kind != old.version.kind {
                    ChangeKind::TypeChanged
                } else if new.version.sha256 == old.version.sha256
                    && new.version.target == old.version.target
                    && new.version.size == old.version.size
                {
                    ChangeKind::ModeChanged
                } else {
                    ChangeKind::Modified
                };
                changes.push(FileChange {
                    path,
                    path_b64,
                    change,
                    before: Some(old.version.clone()),
                    after: Some(new.version.clone()),
                });
            }
            Some(_) => {}
        }
    }
    for (key, new) in after {
        if !before.contains_key(key) {
            let (path, path_b64) = api_path(key);
            changes.push(FileChange {
                path,
                path_b64,
                change: ChangeKind::Added,
                before: None,
                after: Some(new.version.clone()),
            });
        }
    }
    changes.sort_by(|a, b| {
        a.path
            .cmp(&b.path)
            .then_with(|| a.path_b64.cmp(&b.path_b64))
    });
    changes
}

pub fn entries(manifest: &Manifest) -> Vec<ManifestEntry> {
    manifest
        .iter()
        .map(|(key, entry)| {
            let (path, path_b64) = api_path(key);
            ManifestEntry {
                path,
                path_b64,
                version: entry.version.clone(),
            }
        })
        .collect()
}

/// Skipped paths for the API.
pub fn skipped(skipped: &[walk::Skipped]) -> Vec<SkippedPath> {
    skipped
        .iter()
        .map(|s| {
            let (path, path_b64) = api_path(&s.path);
            SkippedPath {
                path,
                path_b64,
                reason: s.why.clone(),
            }
        })
        .collect()
}

/// A snapshot just taken.
#[derive(Debug)]
pub struct Taken {
    pub id: String,
    pub manifest: Arc<Manifest>,
    /// Files read and hashed for it (the others kept their previous hash, or were not read).
    pub n_hashed: u64,
    /// The manifest named by `since`, when one was.
    pub base: Option<Arc<Manifest>>,
    /// Paths left out, and why.
    pub skipped: Vec<walk::Skipped>,
}

/// The recent manifests by id. The lock is held only to read and record manifests, never
/// across the walk: a slow or stuck file cannot hold up other snapshots.
#[derive(Debug)]
pub struct Snapshots {
    inner: Mutex<SnapshotsInner>,
    /// The most paths the kept manifests may hold together (`KEPT_PATHS`).
    budget: usize,
}

impl Default for Snapshots {
    fn default() -> Self {
        Self::keeping(KEPT_PATHS)
    }
}

#[derive(Debug, Default)]
struct SnapshotsInner {
    next_id: u64,
    order: VecDeque<String>,
    manifests: HashMap<String, Arc<Manifest>>,
    latest: Option<Arc<Manifest>>,
}

impl SnapshotsInner {
    /// The paths the kept manifests hold together.
    fn kept_paths(&self) -> usize {
        self.manifests.values().map(|manifest| manifest.len()).sum()
    }
}

impl Snapshots {
    /// No snapshot yet; the kept manifests may hold `budget` paths together.
    fn keeping(budget: usize) -> Self {
        Snapshots {
            inner: Mutex::default(),
            budget,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SnapshotsInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Scans and records a manifest; `since` names the one to diff against. Ids are given as
    /// scans finish. A workspace of more than `max_paths` paths is refused
    /// ([`SnapshotError::TooManyPaths`]), and nothing is recorded.
    pub fn take(
        &self,
        root: BorrowedFd<'_>,
        ignore: &IgnoreList,
        blobs: &BlobStore,
        since: Option<&str>,
        max_paths: u64,
    ) -> Result<Taken, SnapshotError> {
        let (base, reuse) = {
            let inner = self.lock();
            let base = match since {
                Some(id) => Some(
                    inner
                        .manifests
                        .get(id)
                        .cloned()
                        .ok_or_else(|| SnapshotError::Unknown(id.to_owned()))?,
                ),
                None => None,
            };
            let reuse = base.clone().or_else(|| inner.latest.clone());
            (base, reuse)
        };
        let scanned =
            scan(root, ignore, reuse.as_deref(), blobs, max_paths).map_err(SnapshotError::from)?;
        let manifest = Arc::new(scanned.manifest);
        let mut inner = self.lock();
        inner.next_id += 1;
        let id = format!("snap_{}", inner.next_id);
        inner.order.push_back(id.clone());
        inner.manifests.insert(id.clone(), manifest.clone());
        inner.latest = Some(manifest.clone());
        while inner.order.len() > 1
            && (inner.order.len() > KEPT_SNAPSHOTS || inner.kept_paths() > self.budget)
        {
            if let Some(old) = inner.order.pop_front() {
                inner.manifests.remove(&old);
            }
        }
        Ok(Taken {
            id,
            manifest,
            n_hashed: scanned.n_hashed,
            base,
            skipped: scanned.skipped,
        })
    }

    /// A manifest the next scan reuses hashes from, as if it were the latest (no id: nothing
    /// can diff against it).
    pub fn seed(&self, manifest: Manifest) {
        self.lock().latest = Some(Arc::new(manifest));
    }

    pub fn get(&self, id: &str) -> Option<Arc<Manifest>> {
        self.lock().manifests.get(id).cloned()
    }

    /// Forgets every snapshot (a pool reset).
    pub fn clear(&self) {
        *self.lock() = SnapshotsInner::default();
    }
}

/// Why a snapshot could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The `since` id was never issued, or is no longer kept (older than the last 32
    /// snapshots, or than those that fit in `KEPT_PATHS`).
    #[error(
        "no snapshot `{0}` (unknown, or no longer kept: the last 32 are, fewer when they hold over 4000000 paths together): take a new one"
    )]
    Unknown(String),
    /// The workspace holds more paths than a scan may (`--scan-max-entries`); the scan stopped.
    #[error(transparent)]
    TooManyPaths(walk::TooManyPaths),
    /// Reading the workspace failed.
    #[error("scanning the workspace: {0}")]
    Io(io::Error),
}

impl From<io::Error> for SnapshotError {
    fn from(err: io::Error) -> SnapshotError {
        match walk::TooManyPaths::of(&err) {
            Some(too_many) => SnapshotError::TooManyPaths(too_many.clone()),
            None => SnapshotError::Io(err),
        }
    }
}

pub mod restore;
pub mod unified;

#[cfg(test)]
mod tests;
