//! How much of a log's blobs one command reads. A log may be hostile, and a small one can name
//! one big blob many times (sixty replies pointing at one 50 MB blob): a reader that resolves
//! every text whole would hold sixty copies. A [`BlobBudget`] counts the real size of every
//! blob a command resolves, refuses past its total, and keeps at most its per-text cap of
//! each text (the rest is cut, with a line saying so).

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::Path;

use harness_log::reader;
use harness_log::{BlobRef, Text};
use sha2::{Digest, Sha256};

use crate::ReplayError;

/// The blob bytes one command may resolve, every text and blob together, and the most of one
/// text it keeps.
#[derive(Debug, Clone)]
pub struct BlobBudget {
    total: u64,
    left: u64,
    per_text: u64,
}

impl Default for BlobBudget {
    fn default() -> BlobBudget {
        BlobBudget::new(BlobBudget::TOTAL, BlobBudget::PER_TEXT)
    }
}

impl BlobBudget {
    /// The default total: as much as one blob read whole ([`reader::MAX_BLOB`], 1 GiB); a real
    /// session's texts in blobs are a small part of it.
    pub const TOTAL: u64 = reader::MAX_BLOB;
    /// The default per-text cap: the sandbox's default `--blob-max-file-bytes` (64 MiB).
    pub const PER_TEXT: u64 = 64 * 1024 * 1024;

    /// A budget of `total` bytes of blobs, keeping at most `per_text` bytes of each text.
    pub fn new(total: u64, per_text: u64) -> BlobBudget {
        BlobBudget {
            total,
            left: total,
            per_text,
        }
    }

    /// The bytes not spent yet.
    pub fn left(&self) -> u64 {
        self.left
    }

    /// The whole of a `Text` (inline text costs nothing: it is in the log's own lines); a text
    /// from a blob longer than the per-text cap is cut there, with a line saying so.
    pub fn text(&mut self, dir: &Path, text: &Text) -> Result<String, ReplayError> {
        let reference = match (&text.text, &text.blob) {
            (Some(inline), _) => return Ok(inline.clone()),
            (None, Some(reference)) => reference,
            (None, None) => return Ok(String::new()),
        };
        let (file, size) = open(dir, &reference.sha256)?;
        self.spend(dir, size)?;
        let kept = read_checked(file, size, &reference.sha256, self.per_text)
            .map_err(|err| io_error(dir, &err))?;
        let mut text = String::from_utf8_lossy(&kept).into_owned();
        if size > self.per_text {
            text.push_str(&format!(
                "\n[cut: this text is {size} bytes; only its first {} are kept]",
                self.per_text
            ));
        }
        Ok(text)
    }

    /// The whole of a blob (at most [`reader::MAX_BLOB`] bytes), checked against its name.
    pub fn blob(&mut self, dir: &Path, reference: &BlobRef) -> Result<Vec<u8>, ReplayError> {
        let (file, size) = open(dir, &reference.sha256)?;
        if size > reader::MAX_BLOB {
            return Err(ReplayError::Io(format!(
                "{}: blob {}: {size} bytes, more than a blob is read whole ({})",
                dir.display(),
                reference.sha256,
                reader::MAX_BLOB
            )));
        }
        self.spend(dir, size)?;
        read_checked(file, size, &reference.sha256, u64::MAX).map_err(|err| io_error(dir, &err))
    }

    fn spend(&mut self, dir: &Path, size: u64) -> Result<(), ReplayError> {
        if size > self.left {
            return Err(ReplayError::Io(format!(
                "{}: the log's texts resolve to more than {} bytes (a crafted log? one blob named many times costs each time)",
                dir.display(),
                self.total
            )));
        }
        self.left -= size;
        Ok(())
    }
}

/// The blob named `sha256` when it really holds at most `max` bytes (its size on disk, not
/// the one the log claims), checked against its name; `None` when it holds more.
pub fn blob_at_most(dir: &Path, sha256: &str, max: u64) -> Result<Option<Vec<u8>>, ReplayError> {
    let (file, size) = open(dir, sha256)?;
    if size > max {
        return Ok(None);
    }
    read_checked(file, size, sha256, u64::MAX)
        .map(Some)
        .map_err(|err| io_error(dir, &err))
}

fn open(dir: &Path, sha256: &str) -> Result<(File, u64), ReplayError> {
    reader::open_blob(dir, sha256).map_err(|err| match err.kind() {
        ErrorKind::NotFound => ReplayError::MissingBlob {
            path: dir.to_owned(),
            sha256: sha256.to_owned(),
        },
        _ => io_error(dir, &err),
    })
}

fn io_error(dir: &Path, err: &std::io::Error) -> ReplayError {
    ReplayError::Io(format!("{}: {err}", dir.display()))
}

/// The first `keep` bytes of `file`, all `size` bytes of it hashed (never more than the size
/// counted, should the file grow): `InvalidData` when they do not hash to `sha256`.
fn read_checked(file: File, size: u64, sha256: &str, keep: u64) -> std::io::Result<Vec<u8>> {
    let mut file = file.take(size);
    let mut hasher = Sha256::new();
    let mut kept = Vec::with_capacity(usize::try_from(size.min(keep)).unwrap_or(0));
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if err.kind() == ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        hasher.update(&buffer[..n]);
        let room = keep.saturating_sub(kept.len() as u64);
        let take = usize::try_from(room).map_or(n, |room| n.min(room));
        kept.extend_from_slice(&buffer[..take]);
    }
    if hex::encode(hasher.finalize()) != sha256 {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            format!("blob {sha256}: its content does not hash to its name"),
        ));
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log folder with one blob of `bytes`; its reference.
    fn log_with(bytes: &[u8]) -> (tempfile::TempDir, BlobRef) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("blobs")).unwrap();
        let sha256 = hex::encode(Sha256::digest(bytes));
        std::fs::write(dir.path().join("blobs").join(&sha256), bytes).unwrap();
        let size = bytes.len() as u64;
        (dir, BlobRef { sha256, size })
    }

    fn text_of(reference: &BlobRef) -> Text {
        Text {
            text: None,
            blob: Some(reference.clone()),
            preview: None,
            size: reference.size,
        }
    }

    /// One blob named many times costs each time: past the total the read fails and says why.
    #[test]
    fn a_blob_named_many_times_spends_the_budget_each_time() {
        let (dir, reference) = log_with(&[b'a'; 100]);
        let mut budget = BlobBudget::new(250, 1000);
        for _ in 0..2 {
            assert_eq!(
                budget.text(dir.path(), &text_of(&reference)).unwrap().len(),
                100
            );
        }
        assert_eq!(budget.left(), 50);
        let err = budget
            .text(dir.path(), &text_of(&reference))
            .unwrap_err()
            .to_string();
        assert!(err.contains("resolve to more than 250 bytes"), "{err}");
        assert!(budget.blob(dir.path(), &reference).is_err());
        // Inline text is the log's own line: it costs nothing.
        let inline = Text {
            text: Some("hi".to_owned()),
            blob: None,
            preview: None,
            size: 2,
        };
        assert_eq!(budget.text(dir.path(), &inline).unwrap(), "hi");
    }

    /// A text longer than the per-text cap is cut there, and says so; a blob is whole.
    #[test]
    fn a_long_text_is_cut_and_says_so() {
        let (dir, reference) = log_with(&[b'x'; 100]);
        let mut budget = BlobBudget::new(1000, 10);
        let text = budget.text(dir.path(), &text_of(&reference)).unwrap();
        assert!(text.starts_with(&"x".repeat(10)), "{text}");
        assert!(!text.starts_with(&"x".repeat(11)), "{text}");
        assert!(
            text.contains("this text is 100 bytes; only its first 10"),
            "{text}"
        );
        assert_eq!(budget.blob(dir.path(), &reference).unwrap().len(), 100);
        assert_eq!(budget.left(), 800);
    }

    /// The size that counts is the blob's own, not the one the log claims; content that does
    /// not hash to its name is refused.
    #[test]
    fn the_real_size_counts_and_the_hash_is_checked() {
        let (dir, mut reference) = log_with(&[b'y'; 100]);
        reference.size = 1;
        assert!(
            blob_at_most(dir.path(), &reference.sha256, 99)
                .unwrap()
                .is_none()
        );
        assert_eq!(
            blob_at_most(dir.path(), &reference.sha256, 100)
                .unwrap()
                .unwrap()
                .len(),
            100
        );
        let mut budget = BlobBudget::new(99, 1000);
        assert!(budget.blob(dir.path(), &reference).is_err());
        let lying = hex::encode(Sha256::digest(b"other"));
        std::fs::write(dir.path().join("blobs").join(&lying), b"not other").unwrap();
        let err = blob_at_most(dir.path(), &lying, 100)
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not hash to its name"), "{err}");
    }
}
