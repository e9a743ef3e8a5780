//! The session log: one writer per session, every frame, crash-proof.
//!
//! `EventLog` is a cheap handle around a channel. One task owns `events.jsonl`: it assigns
//! `seq` (gap-free) and `ts`, writes whole lines, and in `durable` mode fsyncs each batch
//! (group commit) before acknowledging, so `record(..).await` returns once the event is on
//! disk. Large payloads go to `blobs/<sha256>` first, written whole (temporary file, rename),
//! so every reference in a complete line resolves. Secrets are redacted from both.
//!
//! A log is untrusted when read: every reader of a log folder (here, the toolkit, the viewer,
//! the benchmark adapter) opens through `reader::open_regular` (a regular file, never a link),
//! holds at most `reader::MAX_LINE` (64 MiB) of a line, and reads a blob only by a sha256 name,
//! whole up to `reader::MAX_BLOB`, and only when it hashes to that name (`reader::read_blob`).
//! Log text on its way to a terminal passes `text::terminal_safe`.
//!
//! # This crate (`harness-log`)
//! The bottom of the controller: the log's writer, reader and schema ([`secrets`] redacts what
//! it writes; [`text`] holds the escaping, sizes and tool-name globs every crate shares). It
//! depends on the sandbox protocol and nothing else of the harness: every other crate may
//! depend on it, and it on none of them. The schema is `proto-docs/event-log.schema.json`.

pub mod blobs;
mod event;
mod hook;
mod kinds;
pub mod reader;
pub mod secrets;
/// Logs made by hand for tests: blobs and `events.jsonl` (the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod text;
pub mod views;
mod writer;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot};

pub use event::*;
pub use hook::*;
pub use kinds::*;
use writer::Cmd;

/// Payloads longer than this go to a blob instead of inline.
pub const INLINE_LIMIT: usize = 4096;
const PREVIEW_CHARS: usize = 300;

/// Why the log could not be written.
#[derive(Debug, thiserror::Error)]
pub enum EventLogError {
    /// Creating or writing the log folder, the events file or a blob failed.
    #[error("session log {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The writer task has stopped (after a write error or `close`).
    #[error("the session log writer has stopped")]
    Closed,
}

/// A handle to one session's log. Clone it freely; only the writer task touches the file.
#[derive(Debug, Clone)]
pub struct EventLog {
    tx: mpsc::Sender<Cmd>,
    dir: PathBuf,
    /// Every secret the harness knows, kept out of every line and blob.
    redactor: Arc<crate::secrets::Redactor>,
    durability: Durability,
}

impl EventLog {
    /// Creates `dir` (which must not exist yet) with `events.jsonl` and `blobs/`, and starts the writer.
    pub fn create(
        dir: &Path,
        durability: Durability,
        secrets: &[String],
    ) -> Result<EventLog, EventLogError> {
        let io = |source| EventLogError::Io {
            path: dir.to_owned(),
            source,
        };
        fs::create_dir_all(dir.parent().unwrap_or(Path::new("."))).map_err(io)?;
        // The log holds a session's commands, outputs and files: its owner's alone.
        private_dir(dir).map_err(io)?;
        private_dir(&dir.join("blobs")).map_err(io)?;
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .mode(0o600)
            .open(dir.join("events.jsonl"))
            .map_err(io)?;
        Self::start(dir, file, 0, durability, secrets).map_err(io)
    }

    /// Starts the writer thread over an open file whose next event is `next_seq`.
    fn start(
        dir: &Path,
        file: File,
        next_seq: u64,
        durability: Durability,
        secrets: &[String],
    ) -> std::io::Result<EventLog> {
        let redactor = Arc::new(crate::secrets::Redactor::new(secrets));
        let tx = writer::spawn(
            file,
            dir.join("events.jsonl"),
            next_seq,
            durability,
            redactor.clone(),
        )?;
        Ok(EventLog {
            tx,
            dir: dir.to_owned(),
            redactor,
            durability,
        })
    }

    /// Opens the log in `dir` again to add to it (a resumed batch): the next event's `seq`
    /// follows the last complete line's. A torn last line (a killed writer) is moved to
    /// `events.torn-at-<seq>.part` beside the log, so that the log stays whole.
    pub fn reopen(
        dir: &Path,
        durability: Durability,
        secrets: &[String],
    ) -> Result<EventLog, EventLogError> {
        let path = dir.join("events.jsonl");
        let io = |source| EventLogError::Io {
            path: path.clone(),
            source,
        };
        let text = fs::read(&path).map_err(io)?;
        let next_seq = text
            .split(|b| *b == b'\n')
            .filter_map(|line| serde_json::from_slice::<serde_json::Value>(line).ok())
            .filter_map(|value| value["seq"].as_u64())
            .max()
            .map_or(0, |seq| seq + 1);
        fs::create_dir_all(dir.join("blobs")).map_err(io)?;
        let whole = text
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |at| at + 1);
        if whole < text.len() {
            // A torn last line would sit mid-file once more lines follow, where readers take
            // it for corruption: its bytes are kept beside the log, and the log cut after its
            // last whole line.
            let aside = dir.join(format!("events.torn-at-{next_seq}.part"));
            fs::write(&aside, &text[whole..]).map_err(io)?;
            let file = OpenOptions::new().write(true).open(&path).map_err(io)?;
            file.set_len(whole as u64).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        let file = OpenOptions::new().append(true).open(&path).map_err(io)?;
        Self::start(dir, file, next_seq, durability, secrets).map_err(io)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Sends an event; returns its `seq` once it is written (and, when durable, synced).
    pub async fn record(&self, event: Event) -> Result<u64, EventLogError> {
        self.record_then(event, || {}).await
    }

    /// As [`EventLog::record`], calling `queued` once the writer has the event (it will be
    /// written even if this future is dropped from then on), before waiting for it to be
    /// written: for state that must change exactly when the event is certain.
    pub async fn record_then(
        &self,
        event: Event,
        queued: impl FnOnce(),
    ) -> Result<u64, EventLogError> {
        let (ack, done) = oneshot::channel();
        self.tx
            .send(Cmd::Record {
                event: Box::new(event),
                ack,
            })
            .await
            .map_err(|_| EventLogError::Closed)?;
        queued();
        match done.await {
            Ok(Ok(seq)) => Ok(seq),
            Ok(Err(message)) => Err(EventLogError::Io {
                path: self.dir.clone(),
                source: std::io::Error::other(message),
            }),
            Err(_) => Err(EventLogError::Closed),
        }
    }

    /// Flushes and syncs everything, then stops the writer.
    pub async fn close(&self) -> Result<(), EventLogError> {
        let (ack, done) = oneshot::channel();
        self.tx
            .send(Cmd::Close { ack })
            .await
            .map_err(|_| EventLogError::Closed)?;
        match done.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(EventLogError::Io {
                path: self.dir.clone(),
                source: std::io::Error::other(message),
            }),
            Err(_) => Err(EventLogError::Closed),
        }
    }

    /// Stores bytes (redacted) as a blob; returns its reference. Written whole before return.
    pub fn blob(&self, bytes: &[u8]) -> Result<BlobRef, EventLogError> {
        let redacted = self.redactor.redact_bytes(bytes);
        let sha256 = hex::encode(Sha256::digest(&redacted));
        let path = self.dir.join("blobs").join(&sha256);
        if !path.exists() {
            let io = |source| EventLogError::Io {
                path: path.clone(),
                source,
            };
            let temp = self
                .dir
                .join("blobs")
                .join(format!(".{sha256}.{:08x}", rand::random::<u32>()));
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&temp)
                .map_err(io)?;
            file.write_all(&redacted).map_err(io)?;
            if self.durability == Durability::Durable {
                file.sync_data().map_err(io)?;
            }
            fs::rename(&temp, &path).map_err(io)?;
        }
        Ok(BlobRef {
            sha256,
            size: redacted.len() as u64,
        })
    }

    /// A JSON value as a blob.
    pub fn json_blob(&self, value: &serde_json::Value) -> Result<BlobRef, EventLogError> {
        self.blob(value.to_string().as_bytes())
    }

    /// `text` without any run of a secret this log keeps out (what a model is shown, too).
    pub fn redact(&self, text: &str) -> String {
        self.redactor.redact(text).into_owned()
    }

    /// Text inline when short, else a blob with a preview.
    pub fn text(&self, text: &str) -> Result<Text, EventLogError> {
        if text.len() <= INLINE_LIMIT {
            return Ok(Text {
                text: Some(text.to_owned()),
                blob: None,
                preview: None,
                size: text.len() as u64,
            });
        }
        let blob = self.blob(text.as_bytes())?;
        let preview: String = text.chars().take(PREVIEW_CHARS).collect();
        Ok(Text {
            text: None,
            blob: Some(blob),
            preview: Some(self.redact(&preview)),
            size: text.len() as u64,
        })
    }
}

/// The JSON Schema of one line of the log, generated from these types.
pub fn schema() -> serde_json::Value {
    let mut schema =
        serde_json::to_value(schemars::schema_for!(Envelope)).expect("a schema always serializes");
    schema["title"] = serde_json::json!("harness session log line");
    schema["description"] = serde_json::json!(
        "One line of events.jsonl: {seq, ts, type, data}. The first line is session_started. New types may appear in later versions."
    );
    schema
}

/// Now, RFC 3339 UTC with milliseconds.
pub fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// Moves an earlier attempt's session folder `<root>/<name>` aside, to
/// `<root>/attempts/<name>.<n>` (the first free n from 1), so the name is free for a new
/// attempt and the old log is kept, out of the way of `replay metrics <root>`. Returns where it
/// went, or `None` when there was nothing there.
pub fn set_aside(root: &Path, name: &str) -> std::io::Result<Option<PathBuf>> {
    let current = root.join(name);
    if !current.exists() {
        return Ok(None);
    }
    let attempts = root.join("attempts");
    std::fs::create_dir_all(&attempts)?;
    for n in 1.. {
        let target = attempts.join(format!("{name}.{n}"));
        if !target.exists() {
            std::fs::rename(&current, &target)?;
            return Ok(Some(target));
        }
    }
    unreachable!("some attempt number is free")
}

/// A sortable, unique session id: `20261130T004512Z-3f9a1c`.
pub fn new_session_id() -> String {
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let compact: String = stamp
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    format!("{compact}-{:06x}", rand::random::<u32>() & 0xff_ffff)
}

/// A new folder only its owner may enter (`0700`, whatever the umask).
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    // A folder made ahead (a fork's child, its blobs linked in first) is taken as it is;
    // `events.jsonl` itself is never overwritten.
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => {}
        other => other?,
    }
    fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(message: &str) -> Event {
        Event::Error(ErrorEvent {
            class: ErrorClass::Internal,
            message: message.to_owned(),
            call_id: None,
        })
    }

    #[tokio::test]
    async fn a_reopened_log_goes_on_after_its_last_whole_line_and_sets_a_torn_one_aside() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("log");
        let log = EventLog::create(&dir, Durability::Durable, &[]).unwrap();
        assert_eq!(log.record(error("one")).await.unwrap(), 0);
        assert_eq!(log.record(error("two")).await.unwrap(), 1);
        log.close().await.unwrap();
        // A writer killed mid-line.
        let path = dir.join("events.jsonl");
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"{\"seq\":2,\"ts\":\"2026-").unwrap();
        drop(file);

        let log = EventLog::reopen(&dir, Durability::Durable, &[]).unwrap();
        assert_eq!(log.record(error("three")).await.unwrap(), 2);
        log.close().await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[2].contains("\"three\"") && lines[2].starts_with("{\"seq\":2"));
        assert_eq!(
            std::fs::read_to_string(dir.join("events.torn-at-2.part")).unwrap(),
            "{\"seq\":2,\"ts\":\"2026-",
            "the torn bytes are kept"
        );
        assert_eq!(
            reader::events(&dir).unwrap().filter(|e| e.is_err()).count(),
            0
        );
    }

    #[test]
    fn an_earlier_attempt_is_set_aside_under_attempts_with_the_next_free_number() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(set_aside(root.path(), "task").unwrap(), None);
        for n in 1..=2 {
            std::fs::create_dir(root.path().join("task")).unwrap();
            std::fs::write(root.path().join("task/events.jsonl"), format!("{n}")).unwrap();
            let moved = set_aside(root.path(), "task").unwrap().unwrap();
            assert_eq!(moved, root.path().join(format!("attempts/task.{n}")));
            assert_eq!(
                std::fs::read_to_string(moved.join("events.jsonl")).unwrap(),
                n.to_string()
            );
        }
        assert!(!root.path().join("task").exists());
    }
}
