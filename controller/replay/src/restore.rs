//! State replay: the workspace exactly as it was after any event, verified file by file.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use sandbox_protocol::EntryKind;
use sha2::{Digest, Sha256};

use super::{ReplayError, blob, events};

mod beneath;

use beneath::Beneath;
use event_log::{BlobRef, Event, VersionRecord, reader};

/// A workspace as the log knows it at one step: path to version.
pub type State = BTreeMap<String, VersionRecord>;

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
                state = Some(manifest(dir, &snapshot.manifest)?);
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

fn manifest(dir: &Path, reference: &BlobRef) -> Result<State, ReplayError> {
    let bytes = blob(dir, reference)?;
    let entries: Vec<serde_json::Value> = serde_json::from_slice(&bytes)
        .map_err(|err| ReplayError::Io(format!("the workspace manifest: {err}")))?;
    let mut state = State::new();
    for mut entry in entries {
        let path = entry
            .as_object_mut()
            .and_then(|object| object.remove("path"))
            .and_then(|p| p.as_str().map(str::to_owned))
            .unwrap_or_default();
        let version: VersionRecord = serde_json::from_value(entry)
            .map_err(|err| ReplayError::Io(format!("a manifest entry: {err}")))?;
        state.insert(path, version);
    }
    Ok(state)
}

/// What a restore wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    pub n_files: u64,
    pub n_dirs: u64,
    pub n_symlinks: u64,
    /// Files whose content could not be written or does not hash as recorded.
    pub problems: Vec<String>,
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
/// last, so a crafted log cannot write outside `to`, not even through a link it creates.
pub fn write_state(dir: &Path, state: &State, to: &Path) -> Result<Restored, ReplayError> {
    check_state(state)?;
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
    for (path, version) in state {
        match version.kind {
            EntryKind::Dir => {
                target.dir(path).map_err(|err| io(path, err))?;
                restored.n_dirs += 1;
            }
            EntryKind::File => match write_file(dir, &target, path, version) {
                Ok(()) => restored.n_files += 1,
                Err(problem) => restored.problems.push(problem),
            },
            EntryKind::Symlink | EntryKind::Other => {}
        }
    }
    for (path, version) in state.iter().filter(|(_, v)| v.kind == EntryKind::Symlink) {
        match target.symlink(path, version.target.as_deref().unwrap_or("")) {
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

/// One file from the log's blobs; a problem (not an error) when its content is missing.
fn write_file(
    dir: &Path,
    target: &Beneath,
    path: &str,
    version: &VersionRecord,
) -> Result<(), String> {
    let Some(sha256) = &version.sha256 else {
        return Err(format!(
            "{path}: no content was recorded (unreadable in the sandbox)"
        ));
    };
    // Only a regular file of the log's own blobs: a shared log's blob that links out of it (to
    // a secret of this machine, a device, a FIFO) never reaches the target. Content that does
    // not hash to its name is written and then reported by `verify`, as a changed state is.
    let read = |(file, _): (std::fs::File, u64)| -> std::io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        file.take(reader::MAX_BLOB).read_to_end(&mut bytes)?;
        Ok(bytes)
    };
    let bytes = match reader::open_blob(dir, sha256).and_then(read) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "{path}: content {sha256} is not in the log (over the sandbox's blob size limit, or redacted)"
            ));
        }
        Err(err) => return Err(format!("{path}: {err}")),
    };
    target
        .file(path, &bytes, version.mode)
        .map_err(|err| format!("{path}: {err}"))
}

/// Folders' modes last, so a read-only folder does not stop its own files from being written
/// (files take theirs as they are written); set on descriptors, never through a path the
/// kernel follows.
fn set_modes(state: &State, target: &Beneath) {
    for (path, version) in state.iter().rev() {
        if version.kind == EntryKind::Dir {
            let _ = target.chmod(path, version.mode);
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
