//! The workspace around a group of `agent` calls. Subagents make their own calls, logged in
//! their own logs, and the sandbox keeps only its last snapshots; so the parent records the
//! group's net change between two manifests (every path, folders included), which stays exact
//! however many calls the children made.

use std::collections::BTreeMap;

use sandbox_protocol::{ChangeKind, FileVersion, ManifestEntry};

use super::{RecordError, Recorder, version_record};
use harness_log::{ChangeRecord, Event, WorkspaceChanged};

impl Recorder {
    /// The workspace as the next group of `agent` calls finds it: the last snapshot's
    /// manifest (empty before the first snapshot).
    pub async fn group_base(&self) -> Result<Vec<ManifestEntry>, RecordError> {
        match self.since().await {
            Some(id) => Ok(self.sandbox.manifest(&id).await?.entries),
            None => Ok(Vec::new()),
        }
    }

    /// After a group of `agent` calls (the last one `call_id`): what changed since `base`, with
    /// the new versions' bytes, and the state fingerprint; the next call's changes are taken
    /// from here.
    pub async fn after_group(
        &self,
        call_id: &str,
        base: &[ManifestEntry],
    ) -> Result<(), RecordError> {
        let mut current = self.snapshot_id.lock().await;
        let snapshot = self.sandbox.snapshot().await?;
        let manifest = self.sandbox.manifest(&snapshot.snapshot_id).await?;
        *current = Some(snapshot.snapshot_id.clone());
        drop(current);
        let changes = diff(base, &manifest.entries);
        if !changes.is_empty() {
            for change in &changes {
                if let Some(sha256) = change.after.as_ref().and_then(|a| a.sha256.as_deref()) {
                    self.copy_blob(sha256, None).await?;
                }
            }
            let event = WorkspaceChanged {
                call_id: call_id.to_owned(),
                snapshot_id: snapshot.snapshot_id,
                changes,
            };
            self.log.record(Event::WorkspaceChanged(event)).await?;
        }
        self.fingerprint(Some(call_id)).await
    }
}

/// How the workspace went from `before` to `after`, path by path in path order, as the
/// sandbox's `changes` words it.
pub fn diff(before: &[ManifestEntry], after: &[ManifestEntry]) -> Vec<ChangeRecord> {
    let index = |entries: &[ManifestEntry]| -> BTreeMap<String, FileVersion> {
        entries
            .iter()
            .map(|e| (e.path.clone(), e.version.clone()))
            .collect()
    };
    let (before, after) = (index(before), index(after));
    let mut paths: Vec<&String> = before.keys().chain(after.keys()).collect();
    paths.sort();
    paths.dedup();
    paths
        .into_iter()
        .filter_map(|path| {
            let (old, new) = (before.get(path), after.get(path));
            let change = change_kind(old, new)?;
            Some(ChangeRecord {
                path: path.clone(),
                change,
                before: old.map(version_record),
                after: new.map(version_record),
            })
        })
        .collect()
}

/// How one path changed; `None` when it did not.
pub fn change_kind(old: Option<&FileVersion>, new: Option<&FileVersion>) -> Option<ChangeKind> {
    match (old, new) {
        (None, None) => None,
        (None, Some(_)) => Some(ChangeKind::Added),
        (Some(_), None) => Some(ChangeKind::Deleted),
        (Some(old), Some(new)) if old.kind != new.kind => Some(ChangeKind::TypeChanged),
        (Some(old), Some(new)) if old.sha256 != new.sha256 || old.target != new.target => {
            Some(ChangeKind::Modified)
        }
        (Some(old), Some(new)) if old.mode != new.mode => Some(ChangeKind::ModeChanged),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_protocol::EntryKind;

    fn entry(path: &str, kind: EntryKind, sha: Option<&str>, mode: u32) -> ManifestEntry {
        ManifestEntry {
            path: path.to_owned(),
            path_b64: None,
            version: FileVersion {
                kind,
                size: 1,
                mode,
                sha256: sha.map(str::to_owned),
                target: None,
            },
        }
    }

    #[test]
    fn every_kind_of_change_in_path_order() {
        let before = vec![
            entry("a", EntryKind::File, Some("1"), 0o644),
            entry("b", EntryKind::File, Some("2"), 0o644),
            entry("c", EntryKind::File, Some("3"), 0o644),
            entry("d", EntryKind::Dir, None, 0o755),
            entry("same", EntryKind::File, Some("9"), 0o644),
        ];
        let after = vec![
            entry("a", EntryKind::File, Some("1"), 0o755),
            entry("b", EntryKind::File, Some("22"), 0o644),
            entry("d", EntryKind::File, Some("4"), 0o644),
            entry("e", EntryKind::File, Some("5"), 0o644),
            entry("same", EntryKind::File, Some("9"), 0o644),
        ];
        let changes: Vec<(String, ChangeKind)> = diff(&before, &after)
            .into_iter()
            .map(|c| (c.path, c.change))
            .collect();
        assert_eq!(
            changes,
            vec![
                ("a".to_owned(), ChangeKind::ModeChanged),
                ("b".to_owned(), ChangeKind::Modified),
                ("c".to_owned(), ChangeKind::Deleted),
                ("d".to_owned(), ChangeKind::TypeChanged),
                ("e".to_owned(), ChangeKind::Added),
            ]
        );
    }
}
