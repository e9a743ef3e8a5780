//! Placing an archive's entries beneath the staging folder's descriptor. Commands run while an
//! archive is restored and may rename, replace or link anything in the workspace, the staging
//! folder included, so no path is handed to the kernel to resolve from the workspace's root:
//! every folder on an entry's way is opened with `O_NOFOLLOW` beneath the one before, every
//! leaf is made with `*at` calls beneath its folder's descriptor, and a file is written through
//! the descriptor that made it. An entry whose way passes a symlink (made by the archive or by
//! a command) is refused, as leading outside the workspace.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{Mode, fchmod, futimens, mkdirat};
use nix::sys::time::TimeSpec;
use nix::unistd::{UnlinkatFlags, linkat, symlinkat, unlinkat};

/// Why an entry was not placed.
#[derive(Debug)]
pub(super) enum Refused {
    /// Absolute, with `..`, empty, or through a symlink.
    Outside,
    /// A kind of entry a workspace does not hold.
    Kind,
    Io(io::Error),
}

impl From<Errno> for Refused {
    fn from(errno: Errno) -> Refused {
        Refused::Io(errno.into())
    }
}

impl From<io::Error> for Refused {
    fn from(err: io::Error) -> Refused {
        Refused::Io(err)
    }
}

/// A folder's mode and time, set once everything beneath it is in place (a read-only folder
/// would refuse its entries otherwise).
pub(super) struct FolderTimes {
    way: Vec<Vec<u8>>,
    mode: u32,
    mtime: i64,
}

/// Places `entry` beneath `base`; a folder's mode and time are returned for [`finish`].
pub(super) fn place<R: Read>(
    base: BorrowedFd<'_>,
    entry: &mut tar::Entry<'_, R>,
) -> Result<Option<FolderTimes>, Refused> {
    let path = entry.path().map_err(Refused::Io)?.into_owned();
    let way = components(&path).ok_or(Refused::Outside)?;
    let header = entry.header();
    let kind = header.entry_type();
    let mode = header.mode().map_err(Refused::Io)? & 0o7777;
    let mtime = header.mtime().map_err(Refused::Io)?;
    let mtime = i64::try_from(mtime).unwrap_or(i64::MAX);
    if kind.is_dir() {
        open_folders(base, &way, true)?;
        return Ok(Some(FolderTimes { way, mode, mtime }));
    }
    let (leaf, folders) = way.split_last().ok_or(Refused::Outside)?;
    let folder = open_folders(base, folders, true)?;
    let leaf = OsStr::from_bytes(leaf);
    if kind.is_file() || kind.is_contiguous() || kind.is_gnu_sparse() {
        clear(folder.as_fd(), leaf)?;
        let fd = openat(
            &folder,
            leaf,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )?;
        let mut file = File::from(fd);
        io::copy(entry, &mut file)?;
        fchmod(&file, Mode::from_bits_truncate(mode))?;
        let when = TimeSpec::new(mtime, 0);
        futimens(&file, &when, &when)?;
    } else if kind.is_symlink() {
        let target = entry.link_name_bytes().ok_or(Refused::Kind)?.into_owned();
        clear(folder.as_fd(), leaf)?;
        symlinkat(OsStr::from_bytes(&target), &folder, leaf)?;
    } else if kind.is_hard_link() {
        let target = entry
            .link_name()
            .map_err(Refused::Io)?
            .ok_or(Refused::Kind)?;
        let target = components(&target).ok_or(Refused::Outside)?;
        let (target_leaf, target_folders) = target.split_last().ok_or(Refused::Outside)?;
        let target_folder = open_folders(base, target_folders, false)?;
        clear(folder.as_fd(), leaf)?;
        linkat(
            &target_folder,
            OsStr::from_bytes(target_leaf),
            &folder,
            leaf,
            AtFlags::empty(),
        )?;
    } else if !(kind.is_pax_global_extensions() || kind.is_pax_local_extensions()) {
        return Err(Refused::Kind);
    }
    Ok(None)
}

/// Sets the folders' modes and times, once their entries are in.
pub(super) fn finish(base: BorrowedFd<'_>, folders: &[FolderTimes]) -> Result<(), Refused> {
    for folder in folders.iter().rev() {
        let fd = open_folders(base, &folder.way, false)?;
        fchmod(&fd, Mode::from_bits_truncate(folder.mode))?;
        let when = TimeSpec::new(folder.mtime, 0);
        futimens(&fd, &when, &when)?;
    }
    Ok(())
}

/// The entry's names, relative and plain; `None` for an absolute path, `..` or no name at all.
fn components(path: &Path) -> Option<Vec<Vec<u8>>> {
    let mut way = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => way.push(name.as_bytes().to_vec()),
            Component::CurDir => {}
            Component::RootDir | Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    (!way.is_empty()).then_some(way)
}

/// Opens the folder `way` beneath `base`, each step with `O_NOFOLLOW` (making the missing ones
/// when `make`); a step that is a symlink or not a folder is refused as leading outside.
fn open_folders(base: BorrowedFd<'_>, way: &[Vec<u8>], make: bool) -> Result<OwnedFd, Refused> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut folder = nix::unistd::dup(base)?;
    for name in way {
        let name = OsStr::from_bytes(name);
        let opened = match openat(&folder, name, flags, Mode::empty()) {
            Err(Errno::ENOENT) if make => {
                match mkdirat(&folder, name, Mode::from_bits_truncate(0o755)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(errno) => return Err(errno.into()),
                }
                openat(&folder, name, flags, Mode::empty())
            }
            opened => opened,
        };
        folder = match opened {
            Ok(fd) => fd,
            Err(Errno::ELOOP | Errno::ENOTDIR) => return Err(Refused::Outside),
            Err(errno) => return Err(errno.into()),
        };
    }
    Ok(folder)
}

/// Removes a non-folder `name` in `folder` (a later entry of the same name replaces it).
fn clear(folder: BorrowedFd<'_>, name: &OsStr) -> Result<(), Refused> {
    match unlinkat(folder, name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}
