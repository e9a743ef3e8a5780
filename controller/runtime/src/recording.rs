//! What the session log records about the sandbox: the workspace as the agent found it, the
//! files each tool call changed, and the side effects in the state fingerprint.

use std::collections::BTreeMap;

use base64::Engine;
use sandbox_protocol::{ChangesResponse, FileChange, FileVersion, FingerprintResponse, ToolStep};
use sha2::{Digest, Sha256};
use tokio::sync::Mutex;

use crate::sandbox::{SandboxClient, SandboxError};
use harness_log::{
    ChangeRecord, Event, EventLog, EventLogError, ListenerRecord, ProcessRecord, StateFingerprint,
    VersionRecord, WatchedRecord, WorkspaceChanged, WorkspaceSnapshot,
};

mod call;
mod group;
mod interrupted;

pub use call::{CallRecord, CallResult};
pub use group::{change_kind, diff};

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
    session_id: String,
    snapshot_id: Mutex<Option<String>>,
    last_fingerprint: Mutex<Option<StateFingerprint>>,
    /// See [`Recorder::on_host_network`].
    host_network: bool,
    /// The tool calls running now, for [`Recorder::record_interrupted`].
    in_flight: std::sync::Mutex<Vec<interrupted::InFlight>>,
    /// Another log's blobs folder whose files are linked instead of fetched (a subagent's
    /// parent's: the workspace they share is there already).
    blob_source: Option<std::path::PathBuf>,
    /// Blobs someone else puts into this log while the session runs (see
    /// [`Resume::provided_blobs`](crate::run_loop::Resume)): never copied nor fetched here.
    provided: std::sync::Arc<std::collections::BTreeSet<String>>,
}

impl Recorder {
    pub fn new(log: EventLog, sandbox: SandboxClient, session_id: &str) -> Recorder {
        Recorder {
            log,
            sandbox,
            session_id: session_id.to_owned(),
            snapshot_id: Mutex::new(None),
            last_fingerprint: Mutex::new(None),
            in_flight: std::sync::Mutex::new(Vec::new()),
            host_network: false,
            blob_source: None,
            provided: std::sync::Arc::default(),
        }
    }

    /// Blobs of the initial workspace that the caller puts into the log itself.
    pub fn with_provided_blobs(
        mut self,
        provided: std::sync::Arc<std::collections::BTreeSet<String>>,
    ) -> Recorder {
        self.provided = provided;
        self
    }

    /// Blobs found in `dir` (another log's `blobs/`) are linked from there, not fetched.
    pub fn with_blob_source(mut self, dir: Option<std::path::PathBuf>) -> Recorder {
        self.blob_source = dir;
        self
    }

    /// A sandbox on the host's network (a local one): a listener no process of its server's
    /// holds is the host's, and its coming and going is no change of the sandbox's state.
    /// (In a container, such a listener is the container's own, a service of its image.)
    pub fn on_host_network(mut self, shared: bool) -> Recorder {
        self.host_network = shared;
        self
    }

    /// The `Idempotency-Key` of a tool call: its name on the sandbox (`{session}-{number}`,
    /// [`Recorder::call_name`]) and the model's call id. The number makes it unique in the
    /// session even when a model repeats its call ids, or a scripted stand-in makes the same call
    /// in each step.
    pub fn call_key(&self, name: &str, call_id: &str) -> String {
        format!("{name}:{call_id}")
    }

    /// A tool call's name on the sandbox (`Sandbox-Call-Id`): the session and the call's
    /// number in it, unique on a sandbox that several sessions use in turn.
    /// The session's id.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    pub fn call_name(&self, number: u64) -> String {
        let session: String = self
            .session_id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            .take(48)
            .collect();
        format!("{session}-{number}")
    }

    /// The snapshot the next call's changes are taken since; `None` before the first one.
    pub async fn since(&self) -> Option<String> {
        self.snapshot_id.lock().await.clone()
    }

    /// Records the workspace as it is now, every file's bytes included: the base of restore
    /// and rerun.
    pub async fn initial_snapshot(&self) -> Result<(), RecordError> {
        let snapshot = self.sandbox.snapshot().await?;
        let manifest = self.sandbox.manifest(&snapshot.snapshot_id).await?;
        for entry in &manifest.entries {
            if let Some(sha256) = &entry.version.sha256
                && !self.provided.contains(sha256)
            {
                self.copy_blob(sha256, None).await?;
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

    /// Copies a file version from the sandbox into the log's blobs: from `inline` when the
    /// call's answer brought it, else with a request. Its name is the sandbox's word, joined
    /// to folders here only when it is a sha256 (see [`invalid_blob`]).
    async fn copy_blob(&self, sha256: &str, inline: Option<&Inline>) -> Result<(), RecordError> {
        if !harness_log::blobs::is_sha256(sha256) {
            return Err(invalid_blob(self.sandbox.url(), sha256).into());
        }
        let kept = self.log.dir().join("blobs").join(sha256);
        if kept.exists() {
            return Ok(());
        }
        if let Some(source) = &self.blob_source
            && harness_log::blobs::link_or_copy(&source.join(sha256), &kept).is_ok()
        {
            return Ok(());
        }
        if let Some(bytes) = inline.and_then(|inline| inline.get(sha256)) {
            self.log.blob(&bytes)?;
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

    /// After a tool call: the files it changed, with their new versions' bytes, and the state
    /// fingerprint when it changed. Taken from the call's own answer (`step`) when it brought
    /// them, else asked for.
    pub async fn after_tool_call(
        &self,
        call_id: &str,
        step: Option<ToolStep>,
    ) -> Result<(), RecordError> {
        let (changes, fingerprint, inline) = match step {
            Some(step) => (step.changes, step.fingerprint, Inline::new(step.inline)),
            None => (None, None, Inline::default()),
        };
        self.changes(call_id, changes, &inline).await?;
        let fingerprint = match fingerprint {
            Some(fingerprint) => fingerprint,
            None => self.sandbox.fingerprint().await?,
        };
        self.record_fingerprint(fingerprint, Some(call_id)).await
    }

    async fn changes(
        &self,
        call_id: &str,
        brought: Option<ChangesResponse>,
        inline: &Inline,
    ) -> Result<(), RecordError> {
        let mut current = self.snapshot_id.lock().await;
        let Some(since) = current.clone() else {
            return Ok(());
        };
        let changes = match brought.filter(|changes| changes.since == since) {
            Some(changes) => changes,
            None => self.sandbox.changes(&since).await?,
        };
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
                self.copy_blob(sha256, Some(inline)).await?;
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
        let fingerprint = self.sandbox.fingerprint().await?;
        self.record_fingerprint(fingerprint, call_id).await
    }

    async fn record_fingerprint(
        &self,
        fingerprint: FingerprintResponse,
        call_id: Option<&str>,
    ) -> Result<(), RecordError> {
        let fingerprint = fingerprint_record(fingerprint, call_id);
        let mut last = self.last_fingerprint.lock().await;
        // The sandbox's part: on the host's network, a socket no process of the server's
        // holds is the host's; it is recorded, but its coming and going is not a change of the
        // sandbox's state, so a busy host does not add events to a session's log.
        let sandbox_sockets = |record: &StateFingerprint| {
            record
                .listening
                .iter()
                .filter(|socket| !self.host_network || socket.pid.is_some())
                .cloned()
                .collect::<Vec<_>>()
        };
        let same = last.as_ref().is_some_and(|previous| {
            previous.processes == fingerprint.processes
                && sandbox_sockets(previous) == sandbox_sockets(&fingerprint)
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

/// A sandbox's manifest or change list that names a file version by something other than a
/// sha256 (`../../.env`): joined to a log's `blobs/` folder, it would link or copy a host file
/// into the log. Refused as the sandbox's failure.
pub(crate) fn invalid_blob(url: &str, sha256: &str) -> SandboxError {
    SandboxError::BadResponse {
        url: url.to_owned(),
        message: format!(
            "it named a file version {:?}, which is not a sha256 (64 lowercase hex digits): refused as a blob name (a hostile or broken server?)",
            harness_log::text::head(sha256, 200)
        ),
    }
}

/// Bytes a call's answer brought inline (base64), by sha256.
#[derive(Debug, Default)]
pub struct Inline(BTreeMap<String, String>);

impl Inline {
    pub fn new(inline: BTreeMap<String, String>) -> Inline {
        Inline(inline)
    }

    /// The bytes of `sha256`, when brought and they hash to it.
    pub fn get(&self, sha256: &str) -> Option<Vec<u8>> {
        let text = self.0.get(sha256)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .ok()?;
        (hex::encode(Sha256::digest(&bytes)) == sha256).then_some(bytes)
    }
}

pub(crate) fn version_record(version: &FileVersion) -> VersionRecord {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A sandbox's manifest that names a file version `../../host.env` gets an error, and no
    /// file of the host is linked into the log from beside the blob source.
    #[tokio::test]
    async fn a_blob_name_that_is_not_a_sha256_is_refused_before_any_path() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("parent/blobs");
        std::fs::create_dir_all(&source).unwrap();
        std::fs::write(dir.path().join("host.env"), "KEY=secret").unwrap();
        let log_dir = dir.path().join("logs/run");
        let log = EventLog::create(&log_dir, harness_log::Durability::Relaxed, &[]).unwrap();
        // Nothing listens there: the name is refused before any request.
        let sandbox = SandboxClient::new("http://127.0.0.1:9", None);
        let recorder = Recorder::new(log, sandbox, "s").with_blob_source(Some(source));
        for name in ["../../host.env", "/etc/passwd", ""] {
            let err = recorder.copy_blob(name, None).await.unwrap_err();
            assert!(matches!(err, RecordError::Sandbox(_)), "{err}");
            assert!(err.to_string().contains("not a sha256"), "{err}");
        }
        assert!(!dir.path().join("logs/host.env").exists());
        recorder.log.close().await.unwrap();
    }
}
