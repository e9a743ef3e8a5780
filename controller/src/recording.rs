//! What the session log records about the sandbox: the workspace as the agent found it, the
//! files each tool call changed, and the side effects in the state fingerprint.

use sandbox_protocol::{FileChange, FileVersion, FingerprintResponse};
use tokio::sync::Mutex;

use crate::event_log::{
    ChangeRecord, Event, EventLog, EventLogError, ListenerRecord, ProcessRecord, StateFingerprint,
    VersionRecord, WatchedRecord, WorkspaceChanged, WorkspaceSnapshot,
};
use crate::sandbox::{SandboxClient, SandboxError};

/// Why recording failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Log(#[from] EventLogError),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

/// Tracks the workspace between tool calls for one session.
#[derive(Debug)]
pub struct Recorder {
    pub log: EventLog,
    sandbox: SandboxClient,
    snapshot_id: Mutex<Option<String>>,
    last_fingerprint: Mutex<Option<StateFingerprint>>,
}

impl Recorder {
    pub fn new(log: EventLog, sandbox: SandboxClient) -> Recorder {
        Recorder {
            log,
            sandbox,
            snapshot_id: Mutex::new(None),
            last_fingerprint: Mutex::new(None),
        }
    }

    /// Records the workspace as it is now, every file's bytes included: the base of restore
    /// and rerun.
    pub async fn initial_snapshot(&self) -> Result<(), RecordError> {
        let snapshot = self.sandbox.snapshot().await?;
        let manifest = self.sandbox.manifest(&snapshot.snapshot_id).await?;
        for entry in &manifest.entries {
            if let Some(sha256) = &entry.version.sha256 {
                self.copy_blob(sha256).await?;
            }
        }
        let manifest_json =
            serde_json::to_value(&manifest.entries).expect("manifest entries serialize");
        let event = WorkspaceSnapshot {
            snapshot_id: snapshot.snapshot_id.clone(),
            manifest: self.log.json_blob(&manifest_json)?,
            n_files: snapshot.n_files,
            n_bytes: snapshot.n_bytes,
        };
        self.log.record(Event::WorkspaceSnapshot(event)).await?;
        *self.snapshot_id.lock().await = Some(snapshot.snapshot_id);
        Ok(())
    }

    /// Copies a file version from the sandbox into the log's blobs.
    async fn copy_blob(&self, sha256: &str) -> Result<(), RecordError> {
        if self.log.dir().join("blobs").join(sha256).exists() {
            return Ok(());
        }
        match self.sandbox.blob(sha256).await? {
            Some(bytes) => {
                self.log.blob(&bytes)?;
            }
            None => tracing::warn!(
                sha256,
                "the sandbox did not keep this file version (over its size limit)"
            ),
        }
        Ok(())
    }

    /// After a tool call: the files it changed, with their new versions' bytes.
    pub async fn after_tool_call(&self, call_id: &str) -> Result<(), RecordError> {
        let mut current = self.snapshot_id.lock().await;
        let Some(since) = current.clone() else {
            return Ok(());
        };
        let changes = self.sandbox.changes(&since).await?;
        *current = Some(changes.snapshot_id.clone());
        drop(current);
        if changes.changes.is_empty() {
            return Ok(());
        }
        for change in &changes.changes {
            if let Some(sha256) = change
                .after
                .as_ref()
                .and_then(|after| after.sha256.as_deref())
            {
                self.copy_blob(sha256).await?;
            }
        }
        let event = WorkspaceChanged {
            call_id: call_id.to_owned(),
            snapshot_id: changes.snapshot_id,
            changes: changes.changes.iter().map(change_record).collect(),
        };
        self.log.record(Event::WorkspaceChanged(event)).await?;
        Ok(())
    }

    /// Records the state fingerprint when it differs from the last one recorded.
    pub async fn fingerprint(&self, call_id: Option<&str>) -> Result<(), RecordError> {
        let fingerprint = fingerprint_record(self.sandbox.fingerprint().await?, call_id);
        let mut last = self.last_fingerprint.lock().await;
        let same = last.as_ref().is_some_and(|previous| {
            previous.processes == fingerprint.processes
                && previous.listening == fingerprint.listening
                && previous.watched == fingerprint.watched
        });
        if same {
            return Ok(());
        }
        self.log
            .record(Event::StateFingerprint(fingerprint.clone()))
            .await?;
        *last = Some(fingerprint);
        Ok(())
    }
}

fn version_record(version: &FileVersion) -> VersionRecord {
    VersionRecord {
        kind: version.kind,
        size: version.size,
        mode: version.mode,
        sha256: version.sha256.clone(),
        target: version.target.clone(),
    }
}

fn change_record(change: &FileChange) -> ChangeRecord {
    ChangeRecord {
        path: change.path.clone(),
        change: change.change,
        before: change.before.as_ref().map(version_record),
        after: change.after.as_ref().map(version_record),
    }
}

fn fingerprint_record(fingerprint: FingerprintResponse, call_id: Option<&str>) -> StateFingerprint {
    StateFingerprint {
        call_id: call_id.map(str::to_owned),
        processes: fingerprint
            .processes
            .into_iter()
            .map(|p| ProcessRecord {
                pid: p.pid,
                command: p.command,
                started_at: p.started_at,
            })
            .collect(),
        listening: fingerprint
            .listening
            .into_iter()
            .map(|l| ListenerRecord {
                protocol: l.protocol,
                address: l.address,
                port: l.port,
                pid: l.pid,
            })
            .collect(),
        watched: fingerprint
            .watched
            .into_iter()
            .map(|w| WatchedRecord {
                path: w.path,
                kind: w.kind,
                sha256: w.sha256,
            })
            .collect(),
    }
}
