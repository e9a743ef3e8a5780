//! The blocks of the sandbox's state: the workspace as it began, what a call changed (a diff
//! where one can be read), and the processes and sockets a fingerprint saw.

use std::path::Path;

use sandbox_protocol::EntryKind;

use crate::ReplayError;
use crate::render::{Block, DIFF_MAX_BYTES, Section};
use harness_log::text::plural;
use harness_log::{
    ChangeRecord, StateFingerprint, VersionRecord, WorkspaceChanged, WorkspaceSnapshot,
};

pub(super) fn workspace_snapshot(
    block: &mut Block,
    _dir: &Path,
    snapshot: &WorkspaceSnapshot,
) -> Result<(), ReplayError> {
    block.title = format!(
        "Workspace: {} files, {} bytes",
        snapshot.n_files, snapshot.n_bytes
    );
    Ok(())
}

pub(super) fn workspace_changed(
    block: &mut Block,
    dir: &Path,
    changed: &WorkspaceChanged,
) -> Result<(), ReplayError> {
    block.title = format!(
        "Workspace changed by call {}: {}",
        changed.call_id,
        plural(changed.changes.len(), "path")
    );
    for change in &changed.changes {
        block.sections.push(change_section(dir, change));
    }
    Ok(())
}

pub(super) fn state_fingerprint(
    block: &mut Block,
    _dir: &Path,
    fingerprint: &StateFingerprint,
) -> Result<(), ReplayError> {
    // A socket is the sandbox's when one of its commands' processes owns it; the rest (the
    // server's own, the host's in a shared network) are shown apart.
    let ours = |pid: Option<u32>| {
        pid.is_some_and(|pid| fingerprint.processes.iter().any(|p| p.pid == pid))
    };
    let (own, other): (Vec<_>, Vec<_>) = fingerprint
        .listening
        .iter()
        .partition(|socket| ours(socket.pid));
    block.title = format!(
        "State: {}, {} of its own, {}",
        plural(fingerprint.processes.len(), "process"),
        plural(own.len(), "listening socket"),
        plural(fingerprint.watched.len(), "watched path")
    );
    for process in &fingerprint.processes {
        block
            .notes
            .push(format!("process {}: {}", process.pid, process.command));
    }
    for socket in own {
        block.notes.push(format!(
            "listening {} {}:{} (process {})",
            socket.protocol.as_str(),
            socket.address,
            socket.port,
            socket.pid.unwrap_or_default()
        ));
    }
    for socket in other {
        block.notes.push(format!(
            "listening {} {}:{} (not the sandbox's commands: the server's or the host's)",
            socket.protocol.as_str(),
            socket.address,
            socket.port
        ));
    }
    Ok(())
}

/// A unified diff of a changed text file, or a line saying what changed.
fn change_section(dir: &Path, change: &ChangeRecord) -> Section {
    let label = format!("{} {}", change.change.as_str(), change.path);
    let content = |version: &Option<VersionRecord>| -> Option<String> {
        let version = version.as_ref()?;
        if version.kind != EntryKind::File || version.size > DIFF_MAX_BYTES {
            return None;
        }
        // The size the log claims may lie: the blob's own decides (a larger one is not read).
        let sha256 = version.sha256.as_deref()?;
        let bytes = crate::budget::blob_at_most(dir, sha256, DIFF_MAX_BYTES)
            .ok()
            .flatten()?;
        if bytes.contains(&0) {
            return None;
        }
        Some(String::from_utf8_lossy(&bytes).into_owned())
    };
    let is_text = |version: &Option<VersionRecord>| {
        version.as_ref().is_none_or(|v| v.kind == EntryKind::File)
    };
    let (before, after) = (content(&change.before), content(&change.after));
    let diffable = (before.is_some() || change.before.is_none())
        && (after.is_some() || change.after.is_none());
    if diffable && is_text(&change.before) && is_text(&change.after) {
        let (old, new) = (before.unwrap_or_default(), after.unwrap_or_default());
        let (a, b) = (format!("a/{}", change.path), format!("b/{}", change.path));
        let diff = harness_log::text::unified_diff(&old, &new, &a, &b);
        return Section {
            label,
            body: diff,
            lang: "diff",
            full: None,
        };
    }
    let describe = |version: &Option<VersionRecord>| match version {
        Some(v) => format!(
            "{} {} bytes mode {:o}{}",
            v.kind.as_str(),
            v.size,
            v.mode,
            v.target
                .as_ref()
                .map(|t| format!(" -> {t}"))
                .unwrap_or_default()
        ),
        None => "nothing".to_owned(),
    };
    Section {
        label,
        body: format!(
            "{} => {}",
            describe(&change.before),
            describe(&change.after)
        ),
        lang: "text",
        full: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::Digest as _;

    /// A change whose new version the log claims is small: the blob's real size decides
    /// whether it is read for a diff.
    fn added(dir: &Path, bytes: &[u8]) -> Section {
        std::fs::create_dir_all(dir.join("blobs")).unwrap();
        let sha256 = hex::encode(sha2::Sha256::digest(bytes));
        std::fs::write(dir.join("blobs").join(&sha256), bytes).unwrap();
        let after = VersionRecord {
            kind: EntryKind::File,
            size: 2,
            mode: 0o644,
            sha256: Some(sha256),
            target: None,
        };
        let change = ChangeRecord {
            path: "f.txt".to_owned(),
            change: sandbox_protocol::ChangeKind::Added,
            before: None,
            after: Some(after),
        };
        change_section(dir, &change)
    }

    #[test]
    fn a_diff_is_read_only_from_a_blob_really_under_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let small = added(dir.path(), b"hi\n");
        assert_eq!(small.lang, "diff");
        assert!(small.body.contains("+hi"), "{}", small.body);
        let large = vec![b'a'; usize::try_from(DIFF_MAX_BYTES).unwrap() + 1];
        let large = added(dir.path(), &large);
        assert_eq!(large.lang, "text", "{}", large.body);
    }
}
