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
    let (file, _) = open_regular(&dir.join("events.jsonl"))?;
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

/// The largest blob read whole (a workspace file the sandbox kept is far smaller).
pub const MAX_BLOB: u64 = 1024 * 1024 * 1024;

/// The bytes of a blob of the session in `dir`, as [`read_blob`] reads them.
pub fn blob(dir: &Path, blob: &BlobRef) -> std::io::Result<Vec<u8>> {
    read_blob(dir, &blob.sha256)
}

/// The blob named `sha256` of the session in `dir`, whole and checked: a log may be hostile, so
/// only a regular file of at most [`MAX_BLOB`] bytes in a real `blobs/` folder is read (see
/// [`open_blob`]), and only content that hashes to its name is answered (`InvalidData`
/// otherwise).
pub fn read_blob(dir: &Path, sha256: &str) -> std::io::Result<Vec<u8>> {
    use sha2::Digest as _;
    use std::io::Read as _;
    let (file, size) = open_blob(dir, sha256)?;
    if size > MAX_BLOB {
        return Err(invalid(format!(
            "blob {sha256}: {size} bytes, more than a blob is read whole ({MAX_BLOB})"
        )));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(MAX_BLOB + 1).read_to_end(&mut bytes)?;
    if hex::encode(sha2::Sha256::digest(&bytes)) != sha256 {
        return Err(invalid(format!(
            "blob {sha256}: its content does not hash to its name"
        )));
    }
    Ok(bytes)
}

/// The file of the blob named `sha256` in `dir/blobs/`, open, and its size. The name must be a
/// sha256 in lowercase hex (a crafted reference cannot name a path), and neither the folder
/// nor the file may be a link or anything but a folder and a regular file — a shared log's
/// `blobs/` entry that links to a secret, a device or a FIFO is refused, also when it is
/// swapped in between the check and the open (the opened file must be the one checked).
pub fn open_blob(dir: &Path, sha256: &str) -> std::io::Result<(File, u64)> {
    if !crate::blobs::is_sha256(sha256) {
        return Err(invalid(format!("{sha256:?} is not a sha256 blob name")));
    }
    let folder = dir.join("blobs");
    if !std::fs::symlink_metadata(&folder)?.is_dir() {
        return Err(invalid(format!("{}: not a folder", folder.display())));
    }
    open_regular(&folder.join(sha256)).map_err(|err| match err.kind() {
        std::io::ErrorKind::NotFound => err,
        _ => invalid(format!("blob {sha256}: {err}")),
    })
}

/// The file at `path`, open, and its size, when it is a regular file and not a link (a FIFO
/// would block the reader, a device never end, a link lead out of a shared folder); the file
/// opened must be the one checked.
pub fn open_regular(path: &Path) -> std::io::Result<(File, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    let checked = std::fs::symlink_metadata(path)?;
    if !checked.is_file() {
        return Err(invalid("not a regular file".to_owned()));
    }
    let file = File::open(path)?;
    let opened = file.metadata()?;
    if (opened.dev(), opened.ino()) != (checked.dev(), checked.ino()) || !opened.is_file() {
        return Err(invalid("changed while it was opened".to_owned()));
    }
    Ok((file, opened.len()))
}

/// The whole of the regular file at `path` (see [`open_regular`]), refused when it holds more
/// than `max` bytes: for the small files a shared log folder holds besides its events.
pub fn read_regular(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let (file, size) = open_regular(path)?;
    let mut bytes = Vec::with_capacity(usize::try_from(size.min(max)).unwrap_or(0));
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(invalid(format!("more than {max} bytes")));
    }
    Ok(bytes)
}

fn invalid(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_is_read_only_by_its_hash_from_a_regular_file_whose_content_matches() {
        use sha2::Digest as _;
        let dir = tempfile::tempdir().unwrap();
        let blobs = dir.path().join("blobs");
        std::fs::create_dir(&blobs).unwrap();
        let name = |bytes: &[u8]| hex::encode(sha2::Sha256::digest(bytes));
        let good = name(b"hello");
        std::fs::write(blobs.join(&good), b"hello").unwrap();
        assert_eq!(read_blob(dir.path(), &good).unwrap(), b"hello");
        // A secret of this machine, linked in under the name of its own hash.
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"key").unwrap();
        let linked = name(b"key");
        std::os::unix::fs::symlink(&secret, blobs.join(&linked)).unwrap();
        // Content that is not what its name says.
        let lying = name(b"other");
        std::fs::write(blobs.join(&lying), b"not other").unwrap();
        // A socket, as a FIFO (which would block a reader for ever) or a device, is no file.
        let fifo = name(b"fifo");
        let _socket = std::os::unix::net::UnixListener::bind(blobs.join(&fifo)).unwrap();
        for (sha256, said) in [
            (linked.as_str(), "not a regular file"),
            (lying.as_str(), "does not hash to its name"),
            (fifo.as_str(), "not a regular file"),
            ("/etc/passwd", "not a sha256 blob name"),
            ("../secret", "not a sha256 blob name"),
            (&good.to_uppercase(), "not a sha256 blob name"),
        ] {
            let err = read_blob(dir.path(), sha256).unwrap_err();
            assert!(err.to_string().contains(said), "{sha256}: {err}");
        }
        let missing = name(b"absent");
        let err = read_blob(dir.path(), &missing).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        // A blobs folder that is a link out of the log is not read through.
        let other = tempfile::tempdir().unwrap();
        std::fs::remove_dir_all(&blobs).unwrap();
        std::fs::create_dir(other.path().join("blobs")).unwrap();
        std::fs::write(other.path().join("blobs").join(&good), b"hello").unwrap();
        std::os::unix::fs::symlink(other.path().join("blobs"), &blobs).unwrap();
        let err = read_blob(dir.path(), &good).unwrap_err();
        assert!(err.to_string().contains("not a folder"), "{err}");
    }

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
