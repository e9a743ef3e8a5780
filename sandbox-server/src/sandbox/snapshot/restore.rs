//! Restoring the workspace to a snapshot: its manifest and the blob store's copies become a tar
//! archive (in a file of the server's own folder), which replaces the workspace as
//! `PUT /v1/workspace/archive` does, through a staging folder.

use std::fs::File;
use std::io::{self, Read, Seek};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use sandbox_protocol::EntryKind;

use super::{Manifest, api_path};
use crate::sandbox::archive::{self, ArchiveError, Caps, Unpacked};
use crate::sandbox::blobs::BlobStore;

/// Why a snapshot could not be restored.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// A file whose content the blob store did not keep (over `--blob-max-file-bytes`, or a
    /// hash taken from `--known-files`, whose content the client holds).
    #[error(
        "{0}: its content was not kept (larger than the blob store takes, or known to the client through --known-files: restore it from the client's copy); nothing changed"
    )]
    NotKept(String),
    /// A kept blob whose length is not the size the manifest recorded for the file. Its bytes
    /// past the size would be read as tar entries of their own, so nothing is restored.
    #[error(
        "{path}: its kept content is {kept} bytes, but the snapshot recorded {recorded}; the snapshot cannot be restored as recorded; nothing changed"
    )]
    Mismatch {
        path: String,
        recorded: u64,
        kept: u64,
    },
    #[error("building the archive: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

/// Replaces the workspace beneath the folder `root` (its descriptor) with the snapshot `manifest`, staging the archive in
/// `scratch` (a folder of the server's, outside the workspace).
pub fn restore(
    root: std::os::fd::BorrowedFd<'_>,
    manifest: &Manifest,
    blobs: &BlobStore,
    scratch: &Path,
    caps: Caps,
) -> Result<Unpacked, RestoreError> {
    let staged = scratch.join(format!(".restore-{:016x}.tar", rand::random::<u64>()));
    let result = build_and_unpack(root, manifest, blobs, &staged, caps);
    let _ = std::fs::remove_file(&staged);
    result
}

fn build_and_unpack(
    root: std::os::fd::BorrowedFd<'_>,
    manifest: &Manifest,
    blobs: &BlobStore,
    staged: &Path,
    caps: Caps,
) -> Result<Unpacked, RestoreError> {
    let mut file = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(staged)?;
    {
        let mut builder = tar::Builder::new(&mut file);
        builder.follow_symlinks(false);
        for (path, entry) in manifest {
            let name = Path::new(std::ffi::OsStr::from_bytes(path));
            append(&mut builder, name, &entry.version, blobs)?;
        }
        builder.finish()?;
    }
    file.rewind()?;
    Ok(archive::replace_from_tar(root, file, caps)?)
}

fn append(
    builder: &mut tar::Builder<&mut File>,
    name: &Path,
    version: &sandbox_protocol::FileVersion,
    blobs: &BlobStore,
) -> Result<(), RestoreError> {
    let mut header = tar::Header::new_gnu();
    header.set_mode(version.mode);
    match version.kind {
        EntryKind::Dir => {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_size(0);
            builder.append_data(&mut header, name, io::empty())?;
        }
        EntryKind::Symlink => {
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_size(0);
            let target = version.target.clone().unwrap_or_default();
            builder.append_link(&mut header, name, target)?;
        }
        EntryKind::File => {
            let readable = || api_path(name.as_os_str().as_encoded_bytes()).0;
            let path = version
                .sha256
                .as_deref()
                .and_then(|sha| blobs.path(sha))
                .ok_or_else(|| RestoreError::NotKept(readable()))?;
            let content = File::open(&path).map_err(|_| RestoreError::NotKept(readable()))?;
            let kept = content.metadata()?.len();
            if kept != version.size {
                return Err(RestoreError::Mismatch {
                    path: readable(),
                    recorded: version.size,
                    kept,
                });
            }
            header.set_entry_type(tar::EntryType::Regular);
            header.set_size(version.size);
            let content = Exact {
                blob: content,
                remaining: version.size,
            };
            builder.append_data(&mut header, name, content)?;
        }
        // A FIFO, socket or device is not content: a snapshot lists it, a restore leaves it out.
        EntryKind::Other => {}
    }
    Ok(())
}

/// Exactly `remaining` bytes of a blob, as its tar header says: never more (a blob that grew
/// since its length was checked adds nothing), and an error when it ends first (the entries
/// after it would be misaligned).
struct Exact {
    blob: File,
    remaining: u64,
}

impl Read for Exact {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 || buffer.is_empty() {
            return Ok(0);
        }
        let want = usize::try_from(self.remaining).map_or(buffer.len(), |r| r.min(buffer.len()));
        let n = self.blob.read(&mut buffer[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "a kept blob ended {} bytes before its recorded size",
                    self.remaining
                ),
            ));
        }
        self.remaining -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;
    use crate::sandbox::snapshot::{IgnoreList, scan};

    /// A blob longer than its recorded size (a file that grew while an older scan read it):
    /// its bytes past the size hold a tar header of their own, which a restore must not unpack.
    #[test]
    fn a_blob_longer_than_its_recorded_size_is_refused() {
        let (workspace, store, scratch) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        let blobs = BlobStore::new(store.path(), 1 << 20).unwrap();
        let mut content = vec![b'x'; 512];
        let mut injected = tar::Header::new_gnu();
        injected.set_path("injected").unwrap();
        injected.set_entry_type(tar::EntryType::Regular);
        injected.set_size(0);
        injected.set_mode(0o644);
        injected.set_cksum();
        content.extend_from_slice(injected.as_bytes());
        std::fs::write(workspace.path().join("data"), &content).unwrap();
        let root = File::open(workspace.path()).unwrap();
        let mut manifest = scan(root.as_fd(), &IgnoreList::default(), None, &blobs, u64::MAX)
            .unwrap()
            .manifest;
        manifest.get_mut(b"data".as_slice()).unwrap().version.size = 512;
        let caps = Caps {
            max_entries: 100,
            max_bytes: 1 << 20,
        };
        let err = restore(root.as_fd(), &manifest, &blobs, scratch.path(), caps).unwrap_err();
        assert!(
            matches!(err, RestoreError::Mismatch { ref path, recorded: 512, kept: 1024 } if path == "data"),
            "{err}"
        );
        assert!(!workspace.path().join("injected").exists());
        assert_eq!(
            std::fs::read(workspace.path().join("data")).unwrap(),
            content
        );
    }
}
