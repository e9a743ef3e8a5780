//! State replay: the workspace exactly as it was after any event, verified file by file.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::Path;

use sandbox_protocol::EntryKind;
use sha2::{Digest, Sha256};

use super::{ReplayError, events};

mod beneath;
mod manifest;

use beneath::Beneath;
use harness_log::{Event, VersionRecord, reader};

/// A workspace as the log knows it at one step: path to version.
pub type State = BTreeMap<String, VersionRecord>;

/// The most entries a log's initial manifest may hold: five times the sandbox's default
/// `--scan-max-entries` (1,000,000, the most paths one walk of a workspace finds), so a server
/// run with a higher one still restores, while a crafted manifest cannot make every reader
/// (the viewer reads one per request) hold tens of millions of paths.
pub const MAX_MANIFEST_ENTRIES: usize = 5_000_000;

/// The most bytes one restore writes, every file counted: a crafted log can name one big blob
/// for many files, and each is a copy on disk. A real workspace's files (each at most the
/// sandbox's `--blob-max-file-bytes`, 64 MiB by default) are far fewer bytes.
pub const MAX_RESTORE_BYTES: u64 = 16 * 1024 * 1024 * 1024;

/// The mode bits a restore sets: permissions only. The setuid, setgid and sticky bits of a
/// shared log are never set (a setuid file restored by root would be the log's author's
/// setuid-root program); a file or folder that had them is a problem of the restore.
const PERMISSION_BITS: u32 = 0o777;

/// The recorded workspace after event `step` (the initial snapshot when `step` precedes every
/// change). Also returns the seq of the initial snapshot.
pub fn state_at(dir: &Path, step: u64) -> Result<(State, u64), ReplayError> {
    let mut state: Option<State> = None;
    let mut base_seq = 0;
    let mut last_seq = None;
    for envelope in events(dir, |_| {})? {
        let envelope = envelope?;
        if envelope.seq > step && state.is_some() {
            last_seq = Some(envelope.seq);
            break;
        }
        last_seq = Some(envelope.seq);
        match envelope.event {
            Event::WorkspaceSnapshot(snapshot) => {
                base_seq = envelope.seq;
                state = Some(manifest::read(
                    dir,
                    &snapshot.manifest,
                    MAX_MANIFEST_ENTRIES,
                )?);
            }
            Event::WorkspaceChanged(changed) => {
                let Some(current) = state.as_mut() else {
                    continue;
                };
                for change in changed.changes {
                    match change.after {
                        Some(after) => {
                            current.insert(change.path, after);
                        }
                        None => {
                            // A deleted folder takes everything under it: the paths in
                            // order after `path/`, found without a walk of the whole state.
                            current.remove(&change.path);
                            let prefix = format!("{}/", change.path);
                            let inside: Vec<String> = current
                                .range(prefix.clone()..)
                                .take_while(|(path, _)| path.starts_with(&prefix))
                                .map(|(path, _)| path.clone())
                                .collect();
                            for path in inside {
                                current.remove(&path);
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if let Some(last) = last_seq.filter(|last| step > *last) {
        return Err(ReplayError::Io(format!(
            "{}: the log ends at seq {last}; step {step} is past its end (`replay show` lists the steps)",
            dir.display()
        )));
    }
    let state = state.ok_or_else(|| {
        ReplayError::Io(format!(
            "{}: the log has no workspace_snapshot",
            dir.display()
        ))
    })?;
    Ok((state, base_seq))
}

/// What a restore wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    pub n_files: u64,
    pub n_dirs: u64,
    pub n_symlinks: u64,
    /// Files whose content could not be written or does not hash as recorded, links not made.
    pub problems: Vec<String>,
    /// Files and folders restored without the setuid, setgid or sticky bits the log gave them
    /// (a log is someone else's: those bits are never set on this host).
    pub notes: Vec<String>,
}

/// Checks that a log's state can be written without leaving the target: every path made of
/// normal components (no `..`, `.`, empty or absolute parts, no NUL), every blob id a sha256.
pub fn check_state(state: &State) -> Result<(), ReplayError> {
    for (path, version) in state {
        let bad = path.is_empty()
            || path.contains('\0')
            || path.split('/').any(|part| matches!(part, "" | "." | ".."));
        if bad {
            return Err(ReplayError::Io(format!(
                "the log names the path `{}`, which is not made of plain names: refusing a log that writes outside its target",
                path.escape_debug()
            )));
        }
        if let Some(sha256) = &version.sha256
            && !(sha256.len() == 64
                && sha256
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
        {
            return Err(ReplayError::Io(format!(
                "{path}: the blob id `{}` is not a sha256",
                sha256.escape_debug()
            )));
        }
    }
    Ok(())
}

/// Writes `state` into `to` (which must be empty or absent), then verifies every file's hash.
/// Every write goes through descriptors beneath `to` with `O_NOFOLLOW`, and symlinks are made
/// last, so a crafted log cannot write outside `to`, not even through a link it creates. A
/// state whose files come to more than [`MAX_RESTORE_BYTES`] is refused before anything is
/// written.
pub fn write_state(dir: &Path, state: &State, to: &Path) -> Result<Restored, ReplayError> {
    write_state_within(dir, state, to, MAX_RESTORE_BYTES)
}

/// [`write_state`], refusing a state whose files come to more than `max_bytes`.
pub fn write_state_within(
    dir: &Path,
    state: &State,
    to: &Path,
    max_bytes: u64,
) -> Result<Restored, ReplayError> {
    check_state(state)?;
    check_size(dir, state, max_bytes)?;
    let io = |what: &str, err: std::io::Error| ReplayError::Io(format!("{what}: {err}"));
    std::fs::create_dir_all(to).map_err(|err| io(&to.display().to_string(), err))?;
    if std::fs::read_dir(to)
        .map_err(|err| io(&to.display().to_string(), err))?
        .next()
        .is_some()
    {
        return Err(ReplayError::Io(format!(
            "{}: not empty; restore writes into an empty folder",
            to.display()
        )));
    }
    let target = Beneath::open(to).map_err(|err| io(&to.display().to_string(), err))?;
    let mut restored = Restored::default();
    let mut left = max_bytes;
    for (path, version) in state {
        match version.kind {
            EntryKind::Dir => {
                target.dir(path).map_err(|err| io(path, err))?;
                restored.n_dirs += 1;
                special_bits(path, version, &mut restored.notes);
            }
            EntryKind::File => match write_file(dir, &target, path, version, &mut left) {
                Ok(()) => {
                    restored.n_files += 1;
                    special_bits(path, version, &mut restored.notes);
                }
                Err(problem) => restored.problems.push(problem),
            },
            EntryKind::Symlink | EntryKind::Other => {}
        }
    }
    for (path, version) in state.iter().filter(|(_, v)| v.kind == EntryKind::Symlink) {
        let link = version.target.as_deref().unwrap_or("");
        if leads_out(path, link) {
            // A link out of the folder would let whatever writes there later write elsewhere.
            restored.notes.push(format!(
                "{path}: the symlink to {link:?} was left out: it leads out of the restored folder"
            ));
            continue;
        }
        match target.symlink(path, link) {
            Ok(()) => restored.n_symlinks += 1,
            Err(err) => restored
                .problems
                .push(format!("{path}: the symlink was not made: {err}")),
        }
    }
    set_modes(state, &target);
    verify(state, &target, &mut restored);
    Ok(restored)
}

/// Whether a symlink at `path` (relative to the restored folder) to `link` leads out of it: an
/// absolute target, or one whose `..` climb above the folder, read from the link's own folder.
/// (Links through other links are judged by name: each of those is judged the same way.)
pub fn leads_out(path: &str, link: &str) -> bool {
    if link.starts_with('/') || link.is_empty() {
        return true;
    }
    let mut depth = path
        .split('/')
        .filter(|c| !c.is_empty())
        .count()
        .saturating_sub(1) as i64;
    for component in link.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            _ => depth += 1,
        }
    }
    false
}

/// Refuses a state whose files come to more than `max` bytes, each file counted at the real
/// size of its blob on disk (a crafted log can name one blob for many files, or claim small
/// sizes); a blob that cannot be opened counts nothing (its file is a problem of the restore).
fn check_size(dir: &Path, state: &State, max: u64) -> Result<(), ReplayError> {
    let mut sizes: HashMap<&str, u64> = HashMap::new();
    let mut total = 0u64;
    for version in state.values().filter(|v| v.kind == EntryKind::File) {
        let Some(sha256) = version.sha256.as_deref() else {
            continue;
        };
        let size = *sizes
            .entry(sha256)
            .or_insert_with(|| reader::open_blob(dir, sha256).map_or(0, |(_, size)| size));
        total = total.saturating_add(size);
    }
    if total > max {
        return Err(ReplayError::Io(format!(
            "{}: the workspace's files come to {total} bytes, more than a restore writes ({max} bytes): refusing (a crafted log can name one large blob for many files)",
            dir.display()
        )));
    }
    Ok(())
}

/// A note when `version` had the setuid, setgid or sticky bit, which are never restored.
fn special_bits(path: &str, version: &VersionRecord, notes: &mut Vec<String>) {
    if version.mode & 0o7000 != 0 {
        notes.push(format!(
            "{path}: restored with mode {:o}, without the setuid, setgid or sticky bits of its recorded mode {:o}",
            version.mode & PERMISSION_BITS,
            version.mode & 0o7777
        ));
    }
}

/// One file from the log's blobs, streamed; a problem (not an error) when its content is
/// missing. `left` is what the restore may still write (counted by [`check_size`]).
fn write_file(
    dir: &Path,
    target: &Beneath,
    path: &str,
    version: &VersionRecord,
    left: &mut u64,
) -> Result<(), String> {
    let Some(sha256) = &version.sha256 else {
        return Err(format!(
            "{path}: no content was recorded (unreadable in the sandbox)"
        ));
    };
    // Only a regular file of the log's own blobs: a shared log's blob that links out of it (to
    // a secret of this machine, a device, a FIFO) never reaches the target. Content that does
    // not hash to its name is written and then reported by `verify`, as a changed state is.
    let (file, size) = match reader::open_blob(dir, sha256) {
        Ok(opened) => opened,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "{path}: content {sha256} is not in the log (over the sandbox's blob size limit, or redacted)"
            ));
        }
        Err(err) => return Err(format!("{path}: {err}")),
    };
    // Never more than was counted: a blob that grew since is not written.
    if size > *left {
        return Err(format!(
            "{path}: content {sha256} is {size} bytes, past what the restore may still write"
        ));
    }
    *left -= size;
    target
        .file(path, &mut file.take(size), version.mode & PERMISSION_BITS)
        .map_err(|err| format!("{path}: {err}"))
}

/// Folders' modes last, so a read-only folder does not stop its own files from being written
/// (files take theirs as they are written); set on descriptors, never through a path the
/// kernel follows.
fn set_modes(state: &State, target: &Beneath) {
    for (path, version) in state.iter().rev() {
        if version.kind == EntryKind::Dir {
            let _ = target.chmod(path, version.mode & PERMISSION_BITS);
        }
    }
}

/// Every file's hash against the recorded one; mismatches go to `restored.problems`.
fn verify(state: &State, target: &Beneath, restored: &mut Restored) {
    for (path, version) in state {
        if version.kind != EntryKind::File {
            continue;
        }
        let Some(expected) = &version.sha256 else {
            continue;
        };
        match target.read(path).map(hash_reader) {
            Ok(Ok(actual)) if &actual == expected => {}
            Ok(Ok(actual)) => restored
                .problems
                .push(format!("{path}: hashes to {actual}, recorded {expected}")),
            Ok(Err(_)) | Err(_)
                if restored
                    .problems
                    .iter()
                    .any(|p| p.starts_with(&format!("{path}:"))) => {}
            Ok(Err(err)) | Err(err) => restored.problems.push(format!("{path}: {err}")),
        }
    }
}

pub fn hash_file(path: &Path) -> std::io::Result<String> {
    hash_reader(std::fs::File::open(path)?)
}

fn hash_reader(mut file: impl Read) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// A tar archive of a folder, for restoring into a live sandbox.
pub fn tar_folder(from: &Path) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    builder.mode(tar::HeaderMode::Complete);
    let mut entries: Vec<_> = std::fs::read_dir(from)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|entry| entry.file_name());
    for entry in entries {
        if entry.file_type()?.is_dir() {
            builder.append_dir_all(entry.file_name(), entry.path())?;
        } else {
            builder.append_path_with_name(entry.path(), entry.file_name())?;
        }
    }
    builder.into_inner()
}

#[cfg(test)]
mod tests;
