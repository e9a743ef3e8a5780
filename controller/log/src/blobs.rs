//! Blobs shared between logs: a fork's children and a subagent link their parent's instead of
//! fetching the same bytes again.

use std::path::Path;

/// Makes `target` the blob `source`: a hard link, or a copy across file systems. A `target`
/// that exists already is left as it is (a blob's name is its hash).
pub fn link_or_copy(source: &Path, target: &Path) -> std::io::Result<()> {
    match std::fs::hard_link(source, target) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(err) if !source.is_file() => Err(err),
        Err(_) => std::fs::copy(source, target).map(drop),
    }
}
