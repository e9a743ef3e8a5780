//! A fork's files: a child's workspace copied from the template, its log's blobs linked from
//! the parent's.

use std::collections::BTreeSet;
use std::path::Path;

use super::super::restore::State;

/// Copies the workspace folder `from` into `to` (which must not exist): files (their bytes
/// copied by the kernel, `copy_file_range`, which shares them where the file system can),
/// folders and symbolic links, with their modes. Nothing is followed: a link is copied as a
/// link. Returns the files copied.
pub fn clone_workspace(from: &Path, to: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::PermissionsExt;
    let mut files = 0;
    std::fs::create_dir(to)?;
    let mut stack = vec![(from.to_owned(), to.to_owned())];
    while let Some((source, target)) = stack.pop() {
        for entry in std::fs::read_dir(&source)? {
            let entry = entry?;
            let (path, dest) = (entry.path(), target.join(entry.file_name()));
            let kind = entry.file_type()?;
            if kind.is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(&path)?, &dest)?;
            } else if kind.is_dir() {
                std::fs::create_dir(&dest)?;
                stack.push((path, dest));
            } else if kind.is_file() {
                std::fs::copy(&path, &dest)?;
                files += 1;
            }
        }
        let mode = std::fs::metadata(&source)?.permissions().mode();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(files)
}

/// Makes each blob `state` names present in the session folder `to` (`to/blobs/`), hard-linked
/// from the parent's `from` (copied across file systems), so a child's log holds its initial
/// workspace without fetching it from its sandbox. Blobs the parent lacks are left to the child.
pub fn link_blobs(from: &Path, state: &State, to: &Path) -> std::io::Result<()> {
    let blobs = to.join("blobs");
    harness_log::private_dir(to)?;
    harness_log::private_dir(&blobs)?;
    let names: BTreeSet<&str> = state
        .values()
        .filter_map(|version| version.sha256.as_deref())
        .collect();
    for name in names {
        let (source, target) = (from.join("blobs").join(name), blobs.join(name));
        // One call per blob in the usual case (a fork links thousands, per child).
        if let Err(err) = harness_log::blobs::link_or_copy(&source, &target)
            && source.is_file()
        {
            return Err(err);
        }
    }
    Ok(())
}
