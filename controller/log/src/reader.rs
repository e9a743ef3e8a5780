//! Reading a session log as a stream: one event at a time, so a log of any length reads in
//! constant memory. A torn last line (the writer was killed mid-line) is reported, not fatal.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::{BlobRef, Envelope};

/// A line that is not a valid event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// The last line has no newline: the writer stopped in the middle of it.
    #[error("line {line}: torn last line ({bytes} bytes without a newline), ignored")]
    Torn { line: u64, bytes: usize },
    /// A complete line that is not a valid event.
    #[error("line {line}: {message}")]
    Invalid { line: u64, message: String },
}

/// The folder of a session, given either it or its `events.jsonl`.
pub fn session_dir(path: &Path) -> PathBuf {
    if path.is_file() {
        path.parent().map(Path::to_owned).unwrap_or_default()
    } else {
        path.to_owned()
    }
}

/// Streams the events of a session folder.
pub fn events(dir: &Path) -> std::io::Result<Events> {
    let file = File::open(dir.join("events.jsonl"))?;
    Ok(Events {
        reader: BufReader::with_capacity(256 * 1024, file),
        line: 0,
        buffer: Vec::new(),
    })
}

pub struct Events {
    reader: BufReader<File>,
    line: u64,
    buffer: Vec<u8>,
}

impl Iterator for Events {
    type Item = Result<Envelope, LineError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.buffer.clear();
        let n = match self.reader.read_until(b'\n', &mut self.buffer) {
            Ok(0) => return None,
            Ok(n) => n,
            Err(err) => {
                return Some(Err(LineError::Invalid {
                    line: self.line + 1,
                    message: err.to_string(),
                }));
            }
        };
        self.line += 1;
        if self.buffer.last() != Some(&b'\n') {
            return Some(Err(LineError::Torn {
                line: self.line,
                bytes: n,
            }));
        }
        Some(
            serde_json::from_slice(&self.buffer).map_err(|err| LineError::Invalid {
                line: self.line,
                message: err.to_string(),
            }),
        )
    }
}

/// The bytes of a blob of the session in `dir`.
pub fn blob(dir: &Path, blob: &BlobRef) -> std::io::Result<Vec<u8>> {
    std::fs::read(dir.join("blobs").join(&blob.sha256))
}
