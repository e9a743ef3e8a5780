//! Writing beneath a folder through descriptors: every path is walked one name at a time with
//! `openat(O_NOFOLLOW)` from the folder's descriptor, so nothing a restore writes can land
//! outside it, whatever the names or links it meets.

use std::cell::RefCell;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{Mode, fchmod, mkdirat};
use nix::unistd::symlinkat;

use super::PERMISSION_BITS;

/// A folder written beneath.
pub(super) struct Beneath {
    root: OwnedFd,
    /// The last folder walked to, by its path beneath `root`: a restore walks paths in order,
    /// so most files share the previous one's folder and are opened with one call.
    last: RefCell<Option<(String, OwnedFd)>>,
}

fn folder_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

impl Beneath {
    pub(super) fn open(root: &Path) -> io::Result<Beneath> {
        let root = openat(nix::fcntl::AT_FDCWD, root, folder_flags(), Mode::empty())?;
        Ok(Beneath {
            root,
            last: RefCell::new(None),
        })
    }

    /// The folder holding `path`'s last name (created as needed), and that name.
    fn parent<'p>(&self, path: &'p str, create: bool) -> io::Result<(OwnedFd, &'p str)> {
        let (folders, name) = path.rsplit_once('/').unwrap_or(("", path));
        if let Some((last, fd)) = self.last.borrow().as_ref()
            && last == folders
        {
            return Ok((fd.try_clone()?, name));
        }
        let current = self.walk(folders, create)?;
        *self.last.borrow_mut() = Some((folders.to_owned(), current.try_clone()?));
        Ok((current, name))
    }

    /// Opens the folder `folders` beneath the root one name at a time (creating each as
    /// needed).
    fn walk(&self, folders: &str, create: bool) -> io::Result<OwnedFd> {
        let mut current = self.root.try_clone()?;
        for part in folders.split('/').filter(|p| !p.is_empty()) {
            if create {
                match mkdirat(current.as_fd(), part, Mode::from_bits_truncate(0o755)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(errno) => return Err(errno.into()),
                }
            }
            current = openat(current.as_fd(), part, folder_flags(), Mode::empty())?;
        }
        Ok(current)
    }

    pub(super) fn dir(&self, path: &str) -> io::Result<()> {
        let (parent, name) = self.parent(path, true)?;
        match mkdirat(parent.as_fd(), name, Mode::from_bits_truncate(0o755)) {
            Ok(()) | Err(Errno::EEXIST) => Ok(()),
            Err(errno) => Err(errno.into()),
        }
    }

    /// A new file (never an existing one, never through a link) with what `content` holds and
    /// `mode`'s permission bits (set on the written descriptor, so a read-only mode does not
    /// stop the write; never setuid, setgid or sticky).
    pub(super) fn file(&self, path: &str, content: &mut impl Read, mode: u32) -> io::Result<()> {
        let (parent, name) = self.parent(path, true)?;
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(parent.as_fd(), name, flags, Mode::from_bits_truncate(0o600))?;
        let mut file = File::from(fd);
        io::copy(content, &mut file)?;
        fchmod(
            file.as_fd(),
            Mode::from_bits_truncate(mode & PERMISSION_BITS),
        )?;
        Ok(())
    }

    pub(super) fn symlink(&self, path: &str, target: &str) -> io::Result<()> {
        let (parent, name) = self.parent(path, true)?;
        symlinkat(OsStr::new(target), parent.as_fd(), name).map_err(io::Error::from)
    }

    /// Opens a file or folder at `path` without following links; `None` for anything else.
    fn node(&self, path: &str, flags: OFlag) -> io::Result<OwnedFd> {
        let (parent, name) = self.parent(path, false)?;
        Ok(openat(
            parent.as_fd(),
            name,
            flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?)
    }

    /// Sets `mode`'s permission bits (never setuid, setgid or sticky).
    pub(super) fn chmod(&self, path: &str, mode: u32) -> io::Result<()> {
        let fd = self.node(path, OFlag::O_RDONLY | OFlag::O_NONBLOCK)?;
        fchmod(fd.as_fd(), Mode::from_bits_truncate(mode & PERMISSION_BITS))?;
        Ok(())
    }

    pub(super) fn read(&self, path: &str) -> io::Result<File> {
        Ok(File::from(
            self.node(path, OFlag::O_RDONLY | OFlag::O_NONBLOCK)?,
        ))
    }
}
