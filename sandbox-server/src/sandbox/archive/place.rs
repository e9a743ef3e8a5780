//! Placing an archive's entries beneath the staging folder's descriptor. Commands run while an
//! archive is restored and may rename, replace or link anything in the workspace, the staging
//! folder included, so no path is handed to the kernel to resolve from the workspace's root:
//! every folder on an entry's way is opened with `O_NOFOLLOW` beneath the one before, every
//! leaf is made with `*at` calls beneath its folder's descriptor, and a file is written through
//! the descriptor that made it. An entry whose way passes a symlink (made by the archive or by
//! a command) is refused, as leading outside the workspace. The last folder opened is kept, so
//! an archive in walk order (every tree this server writes) opens each folder once, however
//! deep.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{Mode, SFlag, fchmod, futimens, mkdirat};
use nix::sys::time::TimeSpec;
use nix::unistd::{UnlinkatFlags, linkat, symlinkat, unlinkat};

/// The mode bits an entry keeps: permissions and the sticky bit, never set-user or set-group
/// id (the server may be root, and what it makes is its own).
const KEPT_MODE: u32 = 0o1777;

/// Why an entry was not placed.
#[derive(Debug)]
pub(super) enum Refused {
    /// Absolute with `..`, or through a symlink.
    Outside,
    /// A name on its way is a file, not a folder.
    NotAFolder,
    /// A link without a target.
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

/// Places entries beneath `base`.
pub(super) struct Placer<'a> {
    base: BorrowedFd<'a>,
    /// The last folder opened, by its way from `base`.
    last: Option<(Vec<Vec<u8>>, OwnedFd)>,
    folders: Vec<FolderTimes>,
}

impl<'a> Placer<'a> {
    pub(super) fn new(base: BorrowedFd<'a>) -> Placer<'a> {
        Placer {
            base,
            last: None,
            folders: Vec::new(),
        }
    }

    /// Places `entry`; an entry naming the root itself (`./`) is passed over.
    pub(super) fn place<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>) -> Result<(), Refused> {
        let path = entry.path().map_err(Refused::Io)?.into_owned();
        let way = components(&path).ok_or(Refused::Outside)?;
        let header = entry.header();
        let kind = header.entry_type();
        let mode = header.mode().map_err(Refused::Io)? & KEPT_MODE;
        let mtime = i64::try_from(header.mtime().map_err(Refused::Io)?).unwrap_or(i64::MAX);
        // An old-style archive marks a folder by the `/` its name ends with.
        let folder = kind.is_dir() || (kind.is_file() && entry.path_bytes().ends_with(b"/"));
        if way.is_empty() {
            return Ok(());
        }
        if folder {
            self.folder(&way, true)?;
            self.folders.push(FolderTimes { way, mode, mtime });
            return Ok(());
        }
        if kind.is_pax_global_extensions() || kind.is_pax_local_extensions() {
            return Ok(());
        }
        let (leaf, folders) = way.split_last().ok_or(Refused::Outside)?;
        let leaf = OsStr::from_bytes(leaf);
        if kind.is_symlink() {
            let target = entry.link_name_bytes().ok_or(Refused::Kind)?.into_owned();
            let folder = self.folder(folders, true)?;
            clear(folder, leaf)?;
            symlinkat(OsStr::from_bytes(&target), folder, leaf)?;
        } else if kind.is_hard_link() {
            let target = entry
                .link_name()
                .map_err(Refused::Io)?
                .ok_or(Refused::Kind)?;
            let target = components(&target).ok_or(Refused::Outside)?;
            let (target_leaf, target_folders) = target.split_last().ok_or(Refused::Outside)?;
            let from = nix::unistd::dup(self.folder(target_folders, false)?)?;
            let folder = self.folder(folders, true)?;
            clear(folder, leaf)?;
            let target_leaf = OsStr::from_bytes(target_leaf);
            linkat(&from, target_leaf, folder, leaf, AtFlags::empty())?;
        } else {
            // A regular file; as POSIX asks, so is a kind this does not know.
            let folder = self.folder(folders, true)?;
            clear(folder, leaf)?;
            let flags = OFlag::O_WRONLY
                | OFlag::O_CREAT
                | OFlag::O_EXCL
                | OFlag::O_NOFOLLOW
                | OFlag::O_CLOEXEC;
            let fd = openat(folder, leaf, flags, Mode::from_bits_truncate(0o600))?;
            let mut file = File::from(fd);
            io::copy(entry, &mut file)?;
            fchmod(&file, Mode::from_bits_truncate(mode))?;
            let when = TimeSpec::new(mtime, 0);
            futimens(&file, &when, &when)?;
        }
        Ok(())
    }

    /// Sets the folders' modes and times, deepest first, but for the top-level ones, which are
    /// returned: their modes are set once they are moved into the workspace (a folder that is
    /// not writable cannot be moved to another parent).
    pub(super) fn finish(mut self) -> Result<Vec<FolderTimes>, Refused> {
        self.last = None;
        let folders = std::mem::take(&mut self.folders);
        let (top, below): (Vec<_>, Vec<_>) = folders.into_iter().partition(|f| f.way.len() == 1);
        set_times(self.base, below)?;
        Ok(top)
    }

    /// The folder `way` beneath the base, each step opened with `O_NOFOLLOW` (the missing
    /// ones made when `make`), from the last folder opened where that is on the way.
    fn folder(&mut self, way: &[Vec<u8>], make: bool) -> Result<BorrowedFd<'_>, Refused> {
        let reuse = match &self.last {
            Some((last, _)) if way.starts_with(last) => last.len(),
            _ => 0,
        };
        if reuse == 0 || reuse < way.len() {
            let start = match (&self.last, reuse) {
                (Some((_, fd)), n) if n > 0 => fd.as_fd(),
                _ => self.base,
            };
            let opened = open_folders(start, &way[reuse..], make)?;
            self.last = Some((way.to_vec(), opened));
        }
        match &self.last {
            Some((_, fd)) => Ok(fd.as_fd()),
            None => Ok(self.base),
        }
    }
}

/// Sets each folder's mode and time beneath `base`, deepest first.
pub(super) fn set_times(
    base: BorrowedFd<'_>,
    mut folders: Vec<FolderTimes>,
) -> Result<(), Refused> {
    folders.sort_by_key(|folder| std::cmp::Reverse(folder.way.len()));
    for folder in folders {
        let fd = open_folders(base, &folder.way, false)?;
        fchmod(&fd, Mode::from_bits_truncate(folder.mode))?;
        let when = TimeSpec::new(folder.mtime, 0);
        futimens(&fd, &when, &when)?;
    }
    Ok(())
}

/// The entry's names, relative and plain (a leading `/` and `.` passed over, as tar does);
/// `None` when a `..` would climb.
fn components(path: &Path) -> Option<Vec<Vec<u8>>> {
    let mut way = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => way.push(name.as_bytes().to_vec()),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            Component::ParentDir => return None,
        }
    }
    Some(way)
}

/// Opens the folder `way` beneath `base`, each step with `O_NOFOLLOW` (making the missing ones
/// when `make`); a step that is a symlink is refused as leading outside, a file as not a folder.
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
            Err(Errno::ELOOP) => return Err(Refused::Outside),
            // `O_DIRECTORY` on a symlink says ENOTDIR too: which of the two it is decides.
            Err(Errno::ENOTDIR) => return Err(not_a_folder(&folder, name)),
            Err(errno) => return Err(errno.into()),
        };
    }
    Ok(folder)
}

/// Why `name` in `folder` could not be opened as a folder: a symlink leads outside.
fn not_a_folder(folder: &OwnedFd, name: &OsStr) -> Refused {
    match nix::sys::stat::fstatat(folder, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK => {
            Refused::Outside
        }
        _ => Refused::NotAFolder,
    }
}

/// Removes a non-folder `name` in `folder` (a later entry of the same name replaces it).
fn clear(folder: BorrowedFd<'_>, name: &OsStr) -> Result<(), Refused> {
    match unlinkat(folder, name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}
