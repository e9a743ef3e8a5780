//! The workspace boundary for file tools.
//!
//! Paths are resolved one component at a time with `openat` from a directory descriptor of
//! the root, never by string manipulation on the full path. Every step is `O_NOFOLLOW`;
//! symlinks are expanded here, by hand, so one that leads outside (as the last component or
//! any parent) is refused, and one swapped in between the check and the open makes the open
//! fail instead of escaping. `bash` is not confined by this module.

mod dirs;
mod trace;

pub use trace::Traced;

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, RenameFlags, openat, readlinkat, renameat, renameat2};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstat, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

/// How many symlinks one resolution may follow, as Linux's own limit.
const MAX_SYMLINKS: usize = 40;

/// Why a path was refused or could not be used.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The path leads outside the workspace root (absolute, `..` or through a symlink).
    #[error("{path}: path is outside the workspace ({why})")]
    OutsideWorkspace { path: String, why: String },
    /// The path names a directory, FIFO, socket or device where a regular file was expected.
    #[error("{path}: not a regular file (it is a {kind})")]
    NotRegularFile { path: String, kind: &'static str },
    /// No file at that path.
    #[error("{path}: no such file")]
    NotFound { path: String },
    /// The path is empty or contains a NUL byte.
    #[error("path: {0}")]
    InvalidPath(String),
    /// The server's user may not access the file.
    #[error("{path}: permission denied")]
    PermissionDenied { path: String },
    /// A directory was expected.
    #[error("{path}: not a directory (it is a {kind})")]
    NotADirectory { path: String, kind: &'static str },
    /// A folder holds more entries than a listing may (`--scan-max-entries`); the listing
    /// stopped at the first past it.
    #[error(
        "{path}: the folder holds more than {limit} entries (--scan-max-entries): the listing stopped at entry {reached}; remove some and retry"
    )]
    TooManyEntries {
        path: String,
        limit: u64,
        reached: u64,
    },
    /// Any other I/O failure.
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
}

/// The result of an atomic write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOutcome {
    pub created: bool,
}

/// The confined workspace root.
#[derive(Debug)]
pub struct Workspace {
    root: PathBuf,
    root_fd: OwnedFd,
    /// `--files-anywhere`: file tools may reach the whole file system (a task's container is
    /// the boundary); paths resolve from `/`, relative ones from the root.
    anywhere: Option<OwnedFd>,
    /// `--durable-writes`: fsync each written file before its rename.
    durable: bool,
}

fn open_path(path: &Path) -> io::Result<OwnedFd> {
    Ok(openat(
        nix::fcntl::AT_FDCWD,
        path,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?)
}

impl Workspace {
    /// Opens the root; it must exist and be a directory.
    pub fn open(root: &Path) -> io::Result<Workspace> {
        let root = root.canonicalize()?;
        let root_fd = open_path(&root)?;
        Ok(Workspace {
            root,
            root_fd,
            anywhere: None,
            durable: false,
        })
    }

    /// Every write is flushed to the disk (fsync) before it replaces the file. Off by default:
    /// writes stay atomic (a temporary file renamed over the old one), and a sandbox whose
    /// machine loses power loses its container anyway.
    pub fn with_durable_writes(mut self, durable: bool) -> Workspace {
        self.durable = durable;
        self
    }

    /// As [`Workspace::open`], with file tools reaching the whole file system: the root is
    /// where relative paths start, `/` is the boundary.
    pub fn open_anywhere(root: &Path) -> io::Result<Workspace> {
        let mut workspace = Workspace::open(root)?;
        workspace.anywhere = Some(open_path(Path::new("/"))?);
        Ok(workspace)
    }

    /// The canonical absolute path of the root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where file tools may reach: `/` with `--files-anywhere`, else the root.
    pub fn boundary(&self) -> &Path {
        if self.anywhere.is_some() {
            Path::new("/")
        } else {
            &self.root
        }
    }

    /// A descriptor of the root (`O_PATH`), for walks that stay beneath it.
    pub fn root_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.root_fd.as_fd()
    }

    /// Opens a regular file for reading; returns it with its size.
    pub fn open_regular(&self, path: &str) -> Result<(File, u64), WorkspaceError> {
        let (dir, name) = self.resolve(path, false)?;
        let flags = OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_CLOEXEC
            | OFlag::O_NOCTTY;
        let fd = openat(&dir, name.as_os_str(), flags, Mode::empty()).map_err(|errno| {
            // A socket cannot be opened at all (ENXIO); say what it is rather than why.
            match fstatat(&dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(stat) if errno != Errno::ELOOP => match irregular_kind(&stat) {
                    Some(kind) => WorkspaceError::NotRegularFile {
                        path: path.to_owned(),
                        kind,
                    },
                    None => open_error(path, errno),
                },
                _ => open_error(path, errno),
            }
        })?;
        let stat = fstat(&fd).map_err(|errno| io_error(path, errno))?;
        if let Some(kind) = irregular_kind(&stat) {
            return Err(WorkspaceError::NotRegularFile {
                path: path.to_owned(),
                kind,
            });
        }
        Ok((File::from(fd), stat.st_size as u64))
    }

    /// Replaces (or creates) a file with `content`: a temporary file in the same folder
    /// (synced first with `--durable-writes`), then put in the target's place, so a reader or
    /// a crash of the server sees the old file or the new one, never half of either. Missing parent folders are created; an existing file keeps its mode.
    pub fn write_atomic(&self, path: &str, content: &[u8]) -> Result<WriteOutcome, WorkspaceError> {
        self.write_atomic_with_mode(path, content, None)
    }

    /// As [`Workspace::write_atomic`], setting the file's permission bits when `mode` is given.
    pub fn write_atomic_with_mode(
        &self,
        path: &str,
        content: &[u8],
        mode: Option<u32>,
    ) -> Result<WriteOutcome, WorkspaceError> {
        self.write_atomic_from(path, content, mode)
            .map(|(outcome, _)| outcome)
    }

    /// As [`Workspace::write_atomic_with_mode`], with the content read from `content` as it
    /// comes (a streamed upload); also returns the bytes written. A read that fails leaves the
    /// old file in place.
    pub fn write_atomic_from(
        &self,
        path: &str,
        mut content: impl io::Read,
        mode: Option<u32>,
    ) -> Result<(WriteOutcome, u64), WorkspaceError> {
        let (dir, name) = self.resolve(path, true)?;
        let existing = match fstatat(&dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) => {
                if let Some(kind) = irregular_kind(&stat) {
                    return Err(WorkspaceError::NotRegularFile {
                        path: path.to_owned(),
                        kind,
                    });
                }
                Some(stat)
            }
            Err(Errno::ENOENT) => None,
            Err(errno) => return Err(io_error(path, errno)),
        };
        let temp_name = format!(".sandbox-tmp-{:016x}", rand::random::<u64>());
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(
            &dir,
            temp_name.as_str(),
            flags,
            Mode::from_bits_truncate(0o666),
        )
        .map_err(|errno| open_error(path, errno))?;
        let result = (|| {
            let keep = existing.as_ref().map(|stat| stat.st_mode & 0o7777);
            if let Some(bits) = mode.or(keep) {
                // Never set-id: a rewritten set-id file loses the bits, as a write by anyone
                // but root would have cleared them.
                fchmod(&fd, Mode::from_bits_truncate(bits & 0o1777))?;
            }
            let mut file = File::from(fd);
            let written = io::copy(&mut content, &mut file)?;
            file.flush()?;
            if self.durable {
                file.sync_all()?;
            }
            replace(&dir, &temp_name, &name, existing.is_some())?;
            Ok::<u64, io::Error>(written)
        })();
        let written = match result {
            Ok(written) => written,
            Err(source) => {
                let _ = unlinkat(&dir, temp_name.as_str(), UnlinkatFlags::NoRemoveDir);
                return Err(WorkspaceError::Io {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let outcome = WriteOutcome {
            created: existing.is_none(),
        };
        Ok((outcome, written))
    }

    /// Resolves `path` to its parent directory and final name, inside the root.
    fn resolve(
        &self,
        path: &str,
        create_parents: bool,
    ) -> Result<(OwnedFd, OsString), WorkspaceError> {
        let mut walk = Walk::start(self, path)?;
        while let Some((component, is_last)) = walk.next_component() {
            if component == ".." {
                walk.up()?;
                continue;
            }
            match walk.stat(&component) {
                Ok(stat) if file_type(&stat) == SFlag::S_IFLNK => walk.follow(self, &component)?,
                Ok(_) if is_last => return walk.finish(component),
                Ok(stat) if file_type(&stat) != SFlag::S_IFDIR => {
                    return Err(WorkspaceError::NotFound {
                        path: path.to_owned(),
                    });
                }
                Ok(_) => walk.descend(&component)?,
                Err(Errno::ENOENT) if is_last => return walk.finish(component),
                Err(Errno::ENOENT) if create_parents => walk.create(&component)?,
                Err(Errno::ENOENT) => {
                    return Err(WorkspaceError::NotFound {
                        path: path.to_owned(),
                    });
                }
                Err(errno) => return Err(io_error(path, errno)),
            }
        }
        Err(WorkspaceError::NotRegularFile {
            path: path.to_owned(),
            kind: "directory",
        })
    }

    /// Splits a path into components relative to where resolution starts (the root, or `/`
    /// for `--files-anywhere`). An absolute path is accepted only when it lies under the root's
    /// canonical path (anywhere with `--files-anywhere`). `from_root`: a relative path is the
    /// root's (a caller's path), not a symlink target's (relative to its own folder).
    fn components(
        &self,
        original: &str,
        path: &Path,
        from_root: bool,
    ) -> Result<VecDeque<OsString>, Refusal> {
        if path.as_os_str().is_empty() {
            return Err(Refusal::Invalid(format!("`{original}` is empty")));
        }
        if path.as_os_str().as_bytes().contains(&0) {
            return Err(Refusal::Invalid("contains a NUL byte".to_owned()));
        }
        let joined;
        let relative = match (&self.anywhere, path.is_absolute()) {
            (Some(_), true) => path.strip_prefix("/").unwrap_or(path),
            (Some(_), false) if from_root => {
                joined = self.root.join(path);
                joined.strip_prefix("/").unwrap_or(&joined)
            }
            (Some(_), false) => path,
            (None, true) => path.strip_prefix(&self.root).map_err(|_| {
                Refusal::Outside(format!("absolute path not under {}", self.root.display()))
            })?,
            (None, false) => path,
        };
        Ok(relative
            .components()
            .filter_map(|component| match component {
                Component::Normal(name) => Some(name.to_owned()),
                Component::ParentDir => Some(OsString::from("..")),
                Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
            })
            .collect())
    }

    /// Where resolution starts: the root, or `/` with `--files-anywhere`.
    fn dup_root(&self) -> io::Result<OwnedFd> {
        self.anywhere.as_ref().unwrap_or(&self.root_fd).try_clone()
    }
}

enum Refusal {
    Outside(String),
    Invalid(String),
}

fn dup(fd: &OwnedFd) -> Result<OwnedFd, Errno> {
    fd.try_clone()
        .map_err(|err| Errno::from_raw(err.raw_os_error().unwrap_or(libc_eio())))
}

fn libc_eio() -> i32 {
    Errno::EIO as i32
}

fn open_dir(parent: &OwnedFd, name: &OsStr) -> Result<OwnedFd, Errno> {
    openat(
        parent.as_fd(),
        name,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// One resolution in progress: the components left, and a descriptor per folder entered.
struct Walk<'a> {
    path: &'a str,
    queue: VecDeque<OsString>,
    /// The root first; `..` pops.
    stack: Vec<OwnedFd>,
    n_links: usize,
}

impl<'a> Walk<'a> {
    fn start(workspace: &Workspace, path: &'a str) -> Result<Walk<'a>, WorkspaceError> {
        let queue = workspace
            .components(path, Path::new(path), true)
            .map_err(|why| match why {
                Refusal::Outside(why) => outside(path, &why),
                Refusal::Invalid(why) => WorkspaceError::InvalidPath(why),
            })?;
        let root = workspace.dup_root().map_err(|source| WorkspaceError::Io {
            path: path.to_owned(),
            source,
        })?;
        Ok(Walk {
            path,
            queue,
            stack: vec![root],
            n_links: 0,
        })
    }

    fn top(&self) -> &OwnedFd {
        self.stack.last().expect("the stack always holds the root")
    }

    /// The next component to take, `.` skipped, and whether it is the last.
    fn next_component(&mut self) -> Option<(OsString, bool)> {
        loop {
            let component = self.queue.pop_front()?;
            if component != "." {
                return Some((component, self.queue.is_empty()));
            }
        }
    }

    /// What is at `name` in the folder the walk is in, a link not followed.
    fn stat(&self, name: &OsStr) -> Result<FileStat, Errno> {
        fstatat(self.top(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
    }

    fn up(&mut self) -> Result<(), WorkspaceError> {
        if self.stack.len() == 1 {
            return Err(outside(self.path, "`..` leads above the workspace root"));
        }
        self.stack.pop();
        Ok(())
    }

    /// Expands a symlink in place: its target's components go first in the queue.
    fn follow(&mut self, workspace: &Workspace, link: &OsStr) -> Result<(), WorkspaceError> {
        self.n_links += 1;
        if self.n_links > MAX_SYMLINKS {
            return Err(outside(self.path, "too many levels of symbolic links"));
        }
        let target = readlinkat(self.top(), link).map_err(|errno| io_error(self.path, errno))?;
        let target_path = PathBuf::from(&target);
        if target_path.is_absolute() {
            self.stack.truncate(1);
        }
        let mut expanded = workspace
            .components(self.path, &target_path, false)
            .map_err(|_| {
                outside(
                    self.path,
                    &format!("a symlink points to {}", target_path.display()),
                )
            })?;
        expanded.extend(std::mem::take(&mut self.queue));
        self.queue = expanded;
        Ok(())
    }

    fn descend(&mut self, dir: &OsStr) -> Result<(), WorkspaceError> {
        let opened = open_dir(self.top(), dir).map_err(|errno| open_error(self.path, errno))?;
        self.stack.push(opened);
        Ok(())
    }

    fn create(&mut self, dir: &OsStr) -> Result<(), WorkspaceError> {
        match mkdirat(self.top(), dir, Mode::from_bits_truncate(0o777)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(errno) => return Err(io_error(self.path, errno)),
        }
        self.descend(dir)
    }

    fn finish(self, name: OsString) -> Result<(OwnedFd, OsString), WorkspaceError> {
        let parent = dup(self.top()).map_err(|errno| io_error(self.path, errno))?;
        Ok((parent, name))
    }
}

fn outside(path: &str, why: &str) -> WorkspaceError {
    WorkspaceError::OutsideWorkspace {
        path: path.to_owned(),
        why: why.to_owned(),
    }
}

fn file_type(stat: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT
}

/// `None` for a regular file, else what it is.
fn irregular_kind(stat: &FileStat) -> Option<&'static str> {
    let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    match kind {
        k if k == SFlag::S_IFREG => None,
        k if k == SFlag::S_IFDIR => Some("directory"),
        k if k == SFlag::S_IFIFO => Some("FIFO"),
        k if k == SFlag::S_IFSOCK => Some("socket"),
        k if k == SFlag::S_IFCHR => Some("character device"),
        k if k == SFlag::S_IFBLK => Some("block device"),
        k if k == SFlag::S_IFLNK => Some("symbolic link"),
        _ => Some("special file"),
    }
}

fn open_error(path: &str, errno: Errno) -> WorkspaceError {
    match errno {
        // O_NOFOLLOW met a symlink, or O_DIRECTORY a non-directory: the tree changed between
        // the check and the open. Refuse rather than follow.
        Errno::ELOOP | Errno::ENOTDIR => WorkspaceError::OutsideWorkspace {
            path: path.to_owned(),
            why: "a path component was replaced by a symlink while it was being opened".to_owned(),
        },
        Errno::ENOENT => WorkspaceError::NotFound {
            path: path.to_owned(),
        },
        _ => io_error(path, errno),
    }
}

fn io_error(path: &str, errno: Errno) -> WorkspaceError {
    match errno {
        Errno::EACCES | Errno::EPERM => WorkspaceError::PermissionDenied {
            path: path.to_owned(),
        },
        Errno::ENOENT => WorkspaceError::NotFound {
            path: path.to_owned(),
        },
        Errno::EISDIR => WorkspaceError::NotRegularFile {
            path: path.to_owned(),
            kind: "directory",
        },
        _ => WorkspaceError::Io {
            path: path.to_owned(),
            source: io::Error::from(errno),
        },
    }
}
/// Puts the temporary file `temp` in place of `name`, both in `dir`; the name shows the old
/// content or the new at every moment. On ext4, over an existing file, the two are exchanged
/// and the old one unlinked: ext4 makes a rename over an existing file wait for the new file's
/// data to be allocated (`auto_da_alloc`, 0.1 ms a write), a durability `--durable-writes` asks
/// for explicitly. Elsewhere a plain rename: on overlayfs (a container's root) an exchange
/// would first copy the old file up from the image only to delete it. Also where exchanging is
/// refused, or the target vanished.
fn replace(dir: &OwnedFd, temp: &str, name: &OsStr, existing: bool) -> io::Result<()> {
    let ext4 = nix::sys::statfs::fstatfs(dir)
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::EXT4_SUPER_MAGIC);
    if existing && ext4 {
        match renameat2(dir, temp, dir, name, RenameFlags::RENAME_EXCHANGE) {
            Ok(()) => {
                return match unlinkat(dir, temp, UnlinkatFlags::NoRemoveDir) {
                    Ok(()) => Ok(()),
                    Err(errno) => {
                        // The target became something else meanwhile (a folder): put it back.
                        let _ = renameat2(dir, temp, dir, name, RenameFlags::RENAME_EXCHANGE);
                        let _ = unlinkat(dir, temp, UnlinkatFlags::NoRemoveDir);
                        Err(errno.into())
                    }
                };
            }
            Err(Errno::EINVAL | Errno::ENOENT | Errno::ENOSYS | Errno::EOPNOTSUPP) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    renameat(dir, temp, dir, name)?;
    Ok(())
}
