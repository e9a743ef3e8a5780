//! Restoring the workspace to a snapshot: its manifest and the blob store's copies become a tar
//! archive (in a file of the server's own folder), which replaces the workspace as
//! `PUT /v1/workspace/archive` does, through a staging folder.

use std::fs::File;
use std::io::{self, Seek};
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
    #[error("building the archive: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

/// Replaces the workspace under `root` with the snapshot `manifest`, staging the archive in
/// `scratch` (a folder of the server's, outside the workspace).
pub fn restore(
    root: &Path,
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
    root: &Path,
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
            header.set_entry_type(tar::EntryType::Regular);
            header.set_size(version.size);
            builder.append_data(&mut header, name, content)?;
        }
        // A FIFO, socket or device is not content: a snapshot lists it, a restore leaves it out.
        EntryKind::Other => {}
    }
    Ok(())
}
