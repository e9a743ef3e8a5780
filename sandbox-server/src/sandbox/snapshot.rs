//! Workspace manifests and the changes between them.
//!
//! A scan walks the workspace without following symlinks. A file whose size, mtime, ctime and
//! inode match the previous manifest keeps its hash; only the others are read, hashed and kept
//! in the blob store, so finding one changed file among thousands costs one walk of `lstat`s.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use sandbox_protocol::{ChangeKind, EntryKind, FileChange, FileVersion, ManifestEntry};

use super::blobs::BlobStore;

/// How many manifests are kept for `changes?since=`.
const KEPT_SNAPSHOTS: usize = 32;

/// One path in a manifest, with what decides whether it must be hashed again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub version: FileVersion,
    stamp: (i64, i64, i64, i64, u64),
}

/// Every path of the workspace at one moment, sorted.
pub type Manifest = BTreeMap<String, Entry>;

/// Paths not recorded: an entry with `/` is a path from the root; one without matches that
/// name at any depth.
#[derive(Debug, Clone, Default)]
pub struct IgnoreList {
    paths: Vec<String>,
    names: Vec<String>,
}

impl IgnoreList {
    pub fn new(patterns: &[String]) -> IgnoreList {
        let mut list = IgnoreList::default();
        for pattern in patterns
            .iter()
            .map(|p| p.trim().trim_matches('/'))
            .filter(|p| !p.is_empty())
        {
            if pattern.contains('/') {
                list.paths.push(pattern.to_owned());
            } else {
                list.names.push(pattern.to_owned());
            }
        }
        list
    }

    fn ignores(&self, relative: &str, name: &str) -> bool {
        self.names.iter().any(|n| n == name) || self.paths.iter().any(|p| p == relative)
    }
}

/// Scans `root` into a manifest, reusing `previous` hashes where nothing changed.
pub fn scan(
    root: &Path,
    ignore: &IgnoreList,
    previous: Option<&Manifest>,
    blobs: &BlobStore,
) -> io::Result<(Manifest, u64)> {
    let mut manifest = Manifest::new();
    let mut n_hashed = 0;
    let mut stack = vec![String::new()];
    while let Some(dir) = stack.pop() {
        let full = if dir.is_empty() {
            root.to_owned()
        } else {
            root.join(&dir)
        };
        let entries = match std::fs::read_dir(&full) {
            Ok(entries) => entries,
            // A folder removed during the walk, or unreadable: recorded as it is, without content.
            Err(err)
                if err.kind() == io::ErrorKind::NotFound
                    || err.kind() == io::ErrorKind::PermissionDenied =>
            {
                continue;
            }
            Err(err) => return Err(err),
        };
        for dirent in entries {
            let dirent = dirent?;
            let name = dirent.file_name().to_string_lossy().into_owned();
            let relative = if dir.is_empty() {
                name.clone()
            } else {
                format!("{dir}/{name}")
            };
            if ignore.ignores(&relative, &name) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(dirent.path()) else {
                continue;
            };
            let old = previous.and_then(|m| m.get(&relative));
            let Some((entry, hashed)) = scan_entry(&dirent.path(), &meta, old, blobs)? else {
                continue;
            };
            if entry.version.kind == EntryKind::Dir {
                stack.push(relative.clone());
            }
            n_hashed += u64::from(hashed);
            manifest.insert(relative, entry);
        }
    }
    Ok((manifest, n_hashed))
}

/// One path's entry, hashing a file only when its stamp differs from `old`; `None` when it
/// vanished meanwhile. Also says whether it was hashed.
fn scan_entry(
    path: &Path,
    meta: &std::fs::Metadata,
    old: Option<&Entry>,
    blobs: &BlobStore,
) -> io::Result<Option<(Entry, bool)>> {
    let stamp = (
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec(),
        meta.ino(),
    );
    let file_type = meta.file_type();
    let mut version = FileVersion {
        kind: EntryKind::Other,
        size: 0,
        mode: meta.mode() & 0o7777,
        sha256: None,
        target: None,
    };
    let mut hashed = false;
    if file_type.is_dir() {
        version.kind = EntryKind::Dir;
    } else if file_type.is_symlink() {
        version.kind = EntryKind::Symlink;
        version.size = meta.len();
        version.target = std::fs::read_link(path)
            .map(|t| t.to_string_lossy().into_owned())
            .ok();
    } else if file_type.is_file() {
        version.kind = EntryKind::File;
        version.size = meta.len();
        let unchanged = old.filter(|old| {
            old.stamp == stamp
                && old.version.size == meta.len()
                && old.version.kind == EntryKind::File
        });
        version.sha256 = match unchanged {
            Some(old) => old.version.sha256.clone(),
            None => {
                hashed = true;
                match blobs.put_file(path, meta.len()) {
                    Ok((sha256, _kept)) => Some(sha256),
                    Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
                    Err(err) if err.kind() == io::ErrorKind::PermissionDenied => None,
                    Err(err) => return Err(err),
                }
            }
        };
    }
    Ok(Some((Entry { version, stamp }, hashed)))
}

/// The changes from `before` to `after`, sorted by path.
pub fn diff(before: &Manifest, after: &Manifest) -> Vec<FileChange> {
    let mut changes = Vec::new();
    for (path, old) in before {
        match after.get(path) {
            None => changes.push(FileChange {
                path: path.clone(),
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
                    path: path.clone(),
                    change,
                    before: Some(old.version.clone()),
                    after: Some(new.version.clone()),
                });
            }
            Some(_) => {}
        }
    }
    for (path, new) in after {
        if !before.contains_key(path) {
            changes.push(FileChange {
                path: path.clone(),
                change: ChangeKind::Added,
                before: None,
                after: Some(new.version.clone()),
            });
        }
    }
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    changes
}

pub fn entries(manifest: &Manifest) -> Vec<ManifestEntry> {
    manifest
        .iter()
        .map(|(path, entry)| ManifestEntry {
            path: path.clone(),
            version: entry.version.clone(),
        })
        .collect()
}

/// A snapshot just taken.
#[derive(Debug)]
pub struct Taken {
    pub id: String,
    pub manifest: Arc<Manifest>,
    /// Files read and hashed for it (the others kept their previous hash).
    pub n_hashed: u64,
    /// The manifest named by `since`, when one was.
    pub base: Option<Arc<Manifest>>,
}

/// The recent manifests by id; one scan at a time, so ids follow the order of the states.
#[derive(Debug, Default)]
pub struct Snapshots {
    inner: Mutex<SnapshotsInner>,
}

#[derive(Debug, Default)]
struct SnapshotsInner {
    next_id: u64,
    order: VecDeque<String>,
    manifests: HashMap<String, Arc<Manifest>>,
    latest: Option<Arc<Manifest>>,
}

impl Snapshots {
    /// Scans and records a manifest; `since` names the one to diff against. Holds the lock for
    /// the scan so that two snapshots never interleave.
    pub fn take(
        &self,
        root: &Path,
        ignore: &IgnoreList,
        blobs: &BlobStore,
        since: Option<&str>,
    ) -> Result<Taken, SnapshotError> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
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
        let (manifest, n_hashed) =
            scan(root, ignore, reuse.as_deref(), blobs).map_err(SnapshotError::Io)?;
        let manifest = Arc::new(manifest);
        inner.next_id += 1;
        let id = format!("snap_{}", inner.next_id);
        inner.order.push_back(id.clone());
        inner.manifests.insert(id.clone(), manifest.clone());
        inner.latest = Some(manifest.clone());
        while inner.order.len() > KEPT_SNAPSHOTS {
            if let Some(old) = inner.order.pop_front() {
                inner.manifests.remove(&old);
            }
        }
        Ok(Taken {
            id,
            manifest,
            n_hashed,
            base,
        })
    }

    pub fn get(&self, id: &str) -> Option<Arc<Manifest>> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .manifests
            .get(id)
            .cloned()
    }
}

/// Why a snapshot could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The `since` id was never issued, or is older than the last 32 snapshots.
    #[error("no snapshot `{0}` (unknown, or older than the last 32): take a new one")]
    Unknown(String),
    /// Reading the workspace failed.
    #[error("scanning the workspace: {0}")]
    Io(io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_every_kind_of_change() {
        let dir = tempfile::tempdir().unwrap();
        let store_dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(store_dir.path(), 1 << 20).unwrap();
        let root = dir.path();
        std::fs::write(root.join("same.txt"), "same").unwrap();
        std::fs::write(root.join("edit.txt"), "old").unwrap();
        std::fs::write(root.join("gone.txt"), "bye").unwrap();
        std::fs::write(root.join("mode.sh"), "#!/bin/sh").unwrap();
        std::fs::create_dir(root.join(".git")).unwrap();
        std::fs::create_dir(root.join(".git/objects")).unwrap();
        std::fs::write(root.join(".git/objects/x"), "blob").unwrap();
        let ignore = IgnoreList::new(&[".git/objects".to_owned()]);
        let (before, hashed) = scan(root, &ignore, None, &blobs).unwrap();
        assert_eq!(hashed, 4);
        assert!(!before.contains_key(".git/objects/x") && before.contains_key(".git"));

        std::fs::write(root.join("edit.txt"), "new!").unwrap();
        std::fs::remove_file(root.join("gone.txt")).unwrap();
        std::fs::write(root.join("new.txt"), "hi").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root.join("mode.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let (after, hashed) = scan(root, &ignore, Some(&before), &blobs).unwrap();
        let changes: Vec<(String, ChangeKind)> = diff(&before, &after)
            .into_iter()
            .map(|c| (c.path, c.change))
            .collect();
        let expected = [
            ("edit.txt", ChangeKind::Modified),
            ("gone.txt", ChangeKind::Deleted),
            ("mode.sh", ChangeKind::ModeChanged),
            ("new.txt", ChangeKind::Added),
        ];
        assert_eq!(changes, expected.map(|(p, c)| (p.to_owned(), c)).to_vec());
        assert_eq!(
            hashed, 3,
            "edit.txt, new.txt and mode.sh (its ctime changed); same.txt reused"
        );
        let old = before["edit.txt"].version.sha256.clone().unwrap();
        assert_eq!(
            std::fs::read(blobs.path(&old).unwrap()).unwrap(),
            b"old",
            "the before version is kept"
        );
    }
}
