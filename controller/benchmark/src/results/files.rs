//! Writing Harbor's files, and why it failed: a file that could not be written or read back,
//! or a log that does not hold what the files are made of.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Why a trial's or a job's files could not be written, or a trial's record read back.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    /// A file or folder could not be written or read.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A trial's `result.json` is not JSON.
    #[error("{}: not JSON: {source}", path.display())]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// The session's log could not be read.
    #[error(transparent)]
    Log(#[from] harness_replay::ReplayError),
    /// The log lacks what the files are made of (its header, its end, its benchmark task).
    #[error("{0}")]
    Incomplete(&'static str),
}

/// `path`'s bytes, written whole.
pub(super) fn write(path: &Path, bytes: impl AsRef<[u8]>) -> Result<(), ResultsError> {
    std::fs::write(path, bytes).map_err(|source| ResultsError::Io {
        path: path.to_owned(),
        source,
    })
}

/// A folder and its parents, made where missing.
pub(super) fn create_dir_all(path: &Path) -> Result<(), ResultsError> {
    std::fs::create_dir_all(path).map_err(|source| ResultsError::Io {
        path: path.to_owned(),
        source,
    })
}

/// `value` as indented JSON with a final newline.
pub fn write_json(path: &Path, value: &Value) -> Result<(), ResultsError> {
    // A `Value` always serialises; its text is written whole.
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    write(path, text + "\n")
}

/// The largest result file read back (a trial's is a few KiB).
const MAX_JSON: u64 = 16 * 1024 * 1024;

/// A JSON file read back: a regular file of at most [`MAX_JSON`] bytes, since a shared job
/// folder may hold a link, a FIFO or a huge file in its place.
pub(super) fn read_json(path: &Path) -> Result<Value, ResultsError> {
    let bytes =
        harness_log::reader::read_regular(path, MAX_JSON).map_err(|source| ResultsError::Io {
            path: path.to_owned(),
            source,
        })?;
    serde_json::from_slice(&bytes).map_err(|source| ResultsError::Json {
        path: path.to_owned(),
        source,
    })
}
