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

/// The longest line a reader keeps (a batch's first line lists every task); a longer one is
/// an invalid line, read past without being held, so a hostile log's gigabyte line costs no
/// memory.
pub const MAX_LINE: usize = 64 * 1024 * 1024;

/// One line into `buffer`, keeping at most `max + 1` of its bytes and reading past the rest.
/// Returns the bytes the line takes in the file and whether it ends with a newline (a line
/// without is still being written, or torn).
pub fn read_line(
    reader: &mut impl BufRead,
    buffer: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<(u64, bool)> {
    buffer.clear();
    let mut taken = 0u64;
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok((taken, false));
        }
        let (n, done) = match available.iter().position(|b| *b == b'\n') {
            Some(at) => (at + 1, true),
            None => (available.len(), false),
        };
        let room = (max + 1).saturating_sub(buffer.len());
        buffer.extend_from_slice(&available[..n.min(room)]);
        reader.consume(n);
        taken += n as u64;
        if done {
            return Ok((taken, true));
        }
    }
}

impl Iterator for Events {
    type Item = Result<Envelope, LineError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (n, whole) = match read_line(&mut self.reader, &mut self.buffer, MAX_LINE) {
            Ok((0, _)) => return None,
            Ok(read) => read,
            Err(err) => {
                return Some(Err(LineError::Invalid {
                    line: self.line + 1,
                    message: err.to_string(),
                }));
            }
        };
        self.line += 1;
        if !whole {
            return Some(Err(LineError::Torn {
                line: self.line,
                bytes: n as usize,
            }));
        }
        if self.buffer.len() > MAX_LINE {
            return Some(Err(LineError::Invalid {
                line: self.line,
                message: format!("{n} bytes, longer than a line may be ({MAX_LINE}): not read"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_longer_than_a_reader_keeps_is_an_invalid_line_and_the_next_reads_on() {
        let dir = tempfile::tempdir().unwrap();
        let header = r#"{"seq":0,"ts":"2026-01-01T00:00:00.000Z","type":"error","data":{"class":"internal","message":"m","call_id":null}}"#;
        let mut text = format!("{header}\n");
        text.push_str(&"x".repeat(MAX_LINE + 10));
        text.push('\n');
        text.push_str(&header.replace("\"seq\":0", "\"seq\":2"));
        text.push('\n');
        std::fs::write(dir.path().join("events.jsonl"), text).unwrap();
        let lines: Vec<Result<u64, LineError>> = events(dir.path())
            .unwrap()
            .map(|line| line.map(|envelope| envelope.seq))
            .collect();
        assert_eq!(lines[0], Ok(0));
        assert!(
            matches!(&lines[1], Err(LineError::Invalid { line: 2, message }) if message.contains("longer than a line may be")),
            "{:?}",
            lines[1]
        );
        assert_eq!(lines[2], Ok(2));
    }
}
