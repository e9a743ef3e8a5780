//! Logs made by hand for other crates' unit tests (the `testing` feature): blobs, and
//! `events.jsonl` written from events or from raw lines, laid out as the writer lays them.

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::{BlobRef, Envelope, Event, Text, ToolResult, ToolStatus};

/// The time every event written here is stamped with.
pub const TS: &str = "2026-01-01T00:00:00.000Z";

/// Stores `bytes` as a blob of the log in `dir` (`blobs/` made when missing); its reference.
pub fn put_blob(dir: &Path, bytes: &[u8]) -> BlobRef {
    let blobs = dir.join("blobs");
    std::fs::create_dir_all(&blobs).expect("make the log's blobs folder");
    let sha256 = hex::encode(Sha256::digest(bytes));
    std::fs::write(blobs.join(&sha256), bytes).expect("write a blob");
    BlobRef {
        sha256,
        size: bytes.len() as u64,
    }
}

/// A text that is all in `blob`, with no preview.
pub fn blob_text(blob: BlobRef) -> Text {
    Text {
        text: None,
        size: blob.size,
        blob: Some(blob),
        preview: None,
    }
}

/// The result of the `bash` call `call_id` that printed `output`: `ok`, exit 0, in a millisecond.
pub fn bash_result(call_id: String, output: Text) -> Event {
    Event::ToolResult(ToolResult {
        call_id,
        name: "bash".to_owned(),
        status: ToolStatus::Ok,
        output,
        exit_code: Some(0),
        timed_out: None,
        duration_ms: 1,
        outputs: Vec::new(),
    })
}

/// Writes `events` as `dir/events.jsonl`, numbered from 0 and stamped [`TS`].
pub fn write_events(dir: &Path, events: impl IntoIterator<Item = Event>) {
    let lines = events.into_iter().enumerate().map(|(seq, event)| {
        let envelope = Envelope {
            seq: seq as u64,
            ts: TS.to_owned(),
            event,
        };
        serde_json::to_string(&envelope).expect("an event is JSON")
    });
    write_lines(dir, lines);
}

/// Writes `lines` (each one JSON line, without its newline) as `dir/events.jsonl`.
pub fn write_lines<S: AsRef<str>>(dir: &Path, lines: impl IntoIterator<Item = S>) {
    let mut text = String::new();
    for line in lines {
        text.push_str(line.as_ref());
        text.push('\n');
    }
    std::fs::write(dir.join("events.jsonl"), text).expect("write events.jsonl");
}
