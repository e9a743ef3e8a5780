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

/// How many manifests are kept for `changes?since=`.
const KEPT_SNAPSHOTS: usize = 32;

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
/// nothing changed.
pub fn scan(
    root: BorrowedFd<'_>,
    ignore: &IgnoreList,
    previous: Option<&Manifest>,
    blobs: &BlobStore,
) -> io::Result<Scanned> {
    let mut manifest = Manifest::new();
    let mut n_hashed = 0;
    let mut skipped_files = Vec::new();
    let skipped = walk::walk(
        root,
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
    fn lock(&self) -> std::sync::MutexGuard<'_, SnapshotsInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Scans and records a manifest; `since` names the one to diff against. Ids are given as
    /// scans finish.
    pub fn take(
        &self,
        root: BorrowedFd<'_>,
        ignore: &IgnoreList,
        blobs: &BlobStore,
        since: Option<&str>,
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
        let scanned = scan(root, ignore, reuse.as_deref(), blobs).map_err(SnapshotError::Io)?;
        let manifest = Arc::new(scanned.manifest);
        let mut inner = self.lock();
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
    /// The `since` id was never issued, or is older than the last 32 snapshots.
    #[error("no snapshot `{0}` (unknown, or older than the last 32): take a new one")]
    Unknown(String),
    /// Reading the workspace failed.
    #[error("scanning the workspace: {0}")]
    Io(io::Error),
}

pub mod restore;

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

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
        let open = || std::fs::File::open(root).unwrap();
        let scanned = scan(open().as_fd(), &ignore, None, &blobs).unwrap();
        let (before, hashed) = (scanned.manifest, scanned.n_hashed);
        assert_eq!(hashed, 4);
        assert!(
            !before.contains_key(b".git/objects/x".as_slice())
                && before.contains_key(b".git".as_slice())
        );

        std::fs::write(root.join("edit.txt"), "new!").unwrap();
        std::fs::remove_file(root.join("gone.txt")).unwrap();
        std::fs::write(root.join("new.txt"), "hi").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root.join("mode.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let scanned = scan(open().as_fd(), &ignore, Some(&before), &blobs).unwrap();
        let (after, hashed) = (scanned.manifest, scanned.n_hashed);
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
        let old = before[b"edit.txt".as_slice()]
            .version
            .sha256
            .clone()
            .unwrap();
        assert_eq!(
            std::fs::read(blobs.path(&old).unwrap()).unwrap(),
            b"old",
            "the before version is kept"
        );
    }

    #[test]
    fn sparse_files_over_the_blob_limit_are_not_read_and_still_change() {
        let dir = tempfile::tempdir().unwrap();
        let store_dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(store_dir.path(), 4).unwrap();
        let big = dir.path().join("big");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        std::fs::write(dir.path().join("dense"), "12345678").unwrap();
        std::fs::write(dir.path().join("small"), "1234").unwrap();
        let ignore = IgnoreList::default();
        let open = || std::fs::File::open(dir.path()).unwrap();
        let before = scan(open().as_fd(), &ignore, None, &blobs).unwrap();
        assert_eq!(
            before.n_hashed, 2,
            "the sparse file over the limit is not read"
        );
        let version = &before.manifest[b"big".as_slice()].version;
        assert_eq!(version.size, 1 << 20);
        // A file over the limit that holds its bytes on disk is read and hashed (not kept).
        let dense = &before.manifest[b"dense".as_slice()].version;
        use sha2::Digest as _;
        let expected = hex::encode(sha2::Sha256::digest(b"12345678"));
        assert_eq!(dense.sha256.as_deref(), Some(expected.as_str()));
        let stand_in = version.sha256.clone().unwrap();
        assert!(blobs.path(&stand_in).is_none(), "not kept");
        // The same size, another mtime: a change, though the content was never read.
        let file = std::fs::File::options().write(true).open(&big).unwrap();
        file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1000))
            .unwrap();
        let after = scan(open().as_fd(), &ignore, Some(&before.manifest), &blobs).unwrap();
        let changes: Vec<(String, ChangeKind)> = diff(&before.manifest, &after.manifest)
            .into_iter()
            .map(|c| (c.path, c.change))
            .collect();
        assert_eq!(changes, [("big".to_owned(), ChangeKind::Modified)]);
    }
}
