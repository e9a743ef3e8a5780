//! The workspace as a tar archive: written out as it is (symlinks as symlinks), and replaced
//! by one after the whole archive has been unpacked safely beside it.

use std::fs;
use std::io::{self, Read, Write};
use std::path::Path;

/// Writes the workspace under `root` as a tar stream to `out`.
pub fn write_tar(root: &Path, out: impl Write) -> io::Result<()> {
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    builder.mode(tar::HeaderMode::Complete);
    let mut entries: Vec<_> = fs::read_dir(root)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|entry| entry.file_name());
    for entry in entries {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with(STAGING_PREFIX) {
            continue;
        }
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            builder.append_dir_all(&name, &path)?;
        } else {
            builder.append_path_with_name(&path, &name)?;
        }
    }
    builder.into_inner()?.flush()
}

const STAGING_PREFIX: &str = ".sandbox-restore-";

/// Why an archive did not replace the workspace.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The archive itself is unusable (not tar, an entry leading outside); nothing changed.
    #[error("archive: {0}")]
    Invalid(io::Error),
    /// Replacing the workspace with the unpacked archive failed.
    #[error("replacing the workspace: {0}")]
    Io(io::Error),
}

/// What an archive brought in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unpacked {
    pub n_files: u64,
    pub n_bytes: u64,
}

/// Replaces everything under `root` with the archive in `bytes` (tar, or tar.gz by its magic
/// bytes). The archive is unpacked into a staging folder first; the workspace is touched only
/// once that succeeded, so a bad archive changes nothing.
pub fn replace_from_tar(root: &Path, bytes: &[u8]) -> Result<Unpacked, ArchiveError> {
    let staging = root.join(format!("{STAGING_PREFIX}{:016x}", rand::random::<u64>()));
    fs::create_dir(&staging).map_err(ArchiveError::Io)?;
    let unpacked = match unpack(&staging, bytes) {
        Ok(unpacked) => unpacked,
        Err(err) => {
            let _ = fs::remove_dir_all(&staging);
            return Err(ArchiveError::Invalid(err));
        }
    };
    swap_in(root, &staging).map_err(ArchiveError::Io)?;
    Ok(unpacked)
}

/// Empties `root` but for `staging`, then moves what `staging` holds into `root`.
fn swap_in(root: &Path, staging: &Path) -> io::Result<()> {
    for entry in fs::read_dir(root)? {
        let entry = entry?;
        if entry.path() == staging {
            continue;
        }
        if entry.file_type()?.is_dir() {
            fs::remove_dir_all(entry.path())?;
        } else {
            fs::remove_file(entry.path())?;
        }
    }
    for entry in fs::read_dir(staging)? {
        let entry = entry?;
        fs::rename(entry.path(), root.join(entry.file_name()))?;
    }
    fs::remove_dir(staging)
}

fn unpack(into: &Path, bytes: &[u8]) -> io::Result<Unpacked> {
    let reader: Box<dyn Read> = if bytes.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::GzDecoder::new(bytes))
    } else {
        Box::new(bytes)
    };
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(true);
    archive.set_overwrite(true);
    let mut unpacked = Unpacked {
        n_files: 0,
        n_bytes: 0,
    };
    for entry in archive.entries()? {
        let mut entry = entry?;
        let is_file = entry.header().entry_type().is_file();
        let size = entry.header().size().unwrap_or(0);
        // `unpack_in` refuses entries that would land outside `into` (`..`, absolute paths,
        // or a path through a symlink the archive created).
        if !entry.unpack_in(into)? {
            let path = entry
                .path()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("archive entry `{path}` leads outside the workspace"),
            ));
        }
        if is_file {
            unpacked.n_files += 1;
            unpacked.n_bytes += size;
        }
    }
    Ok(unpacked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archive_round_trips_and_a_bad_one_changes_nothing() {
        let source = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(source.path().join("a/b")).unwrap();
        std::fs::write(source.path().join("a/b/c.txt"), "deep").unwrap();
        std::os::unix::fs::symlink("a/b/c.txt", source.path().join("link")).unwrap();
        let mut tar_bytes = Vec::new();
        write_tar(source.path(), &mut tar_bytes).unwrap();

        let target = tempfile::tempdir().unwrap();
        std::fs::write(target.path().join("old.txt"), "old").unwrap();
        let unpacked = replace_from_tar(target.path(), &tar_bytes).unwrap();
        assert_eq!(
            unpacked,
            Unpacked {
                n_files: 1,
                n_bytes: 4
            }
        );
        assert!(!target.path().join("old.txt").exists());
        assert_eq!(
            std::fs::read_to_string(target.path().join("link")).unwrap(),
            "deep"
        );
        assert!(
            std::fs::symlink_metadata(target.path().join("link"))
                .unwrap()
                .file_type()
                .is_symlink()
        );

        let err = replace_from_tar(target.path(), b"this is not a tar archive at all").unwrap_err();
        assert!(!err.to_string().is_empty());
        assert_eq!(
            std::fs::read_to_string(target.path().join("a/b/c.txt")).unwrap(),
            "deep",
            "untouched"
        );
        let names: Vec<_> = std::fs::read_dir(target.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "no staging folder left: {names:?}");
    }
}
