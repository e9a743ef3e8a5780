//! Folders of the workspace: listing one, and finding one for a command's working directory.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{Mode, SFlag, fstatat};
use sandbox_protocol::{DirEntry, EntryKind};

use super::{Workspace, WorkspaceError, io_error, irregular_kind, open_error};

impl Workspace {
    /// The entries of a directory, sorted by name; `.` or an empty path is the root. A folder
    /// of more than `max_entries` entries (`--scan-max-entries`) is refused
    /// ([`WorkspaceError::TooManyEntries`]) as soon as the listing finds one more, before it
    /// holds them all.
    pub fn list_dir(&self, path: &str, max_entries: u64) -> Result<Vec<DirEntry>, WorkspaceError> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let is_root = Path::new(path)
            .components()
            .all(|c| matches!(c, Component::CurDir))
            || path == self.root.to_string_lossy();
        let boundary = self
            .anywhere
            .as_ref()
            .filter(|_| Path::new(path) == Path::new("/"));
        let fd = if let Some(boundary) = boundary {
            openat(boundary, ".", flags, Mode::empty()).map_err(|errno| io_error(path, errno))?
        } else if is_root {
            openat(&self.root_fd, ".", flags, Mode::empty())
                .map_err(|errno| io_error(path, errno))?
        } else {
            let (dir, name) = self.resolve(path, false)?;
            match openat(&dir, name.as_os_str(), flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::ENOTDIR) => {
                    let stat = fstatat(&dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                        .map_err(|errno| io_error(path, errno))?;
                    let kind = irregular_kind(&stat).unwrap_or("regular file");
                    return Err(WorkspaceError::NotADirectory {
                        path: path.to_owned(),
                        kind,
                    });
                }
                Err(errno) => return Err(open_error(path, errno)),
            }
        };
        // A second descriptor of the same directory for fstatat while `dir` is being iterated.
        let stat_fd = fd.try_clone().map_err(|source| WorkspaceError::Io {
            path: path.to_owned(),
            source,
        })?;
        let mut dir = nix::dir::Dir::from_fd(fd).map_err(|errno| io_error(path, errno))?;
        let mut entries = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(|errno| io_error(path, errno))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if entries.len() as u64 >= max_entries {
                return Err(WorkspaceError::TooManyEntries {
                    path: path.to_owned(),
                    limit: max_entries,
                    reached: entries.len() as u64 + 1,
                });
            }
            let name = OsStr::from_bytes(name);
            let Ok(stat) = fstatat(&stat_fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
                continue;
            };
            let kind = match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
                k if k == SFlag::S_IFREG => EntryKind::File,
                k if k == SFlag::S_IFDIR => EntryKind::Dir,
                k if k == SFlag::S_IFLNK => EntryKind::Symlink,
                _ => EntryKind::Other,
            };
            entries.push(DirEntry {
                name: name.to_string_lossy().into_owned(),
                kind,
                size: stat.st_size as u64,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// The absolute path of an existing directory inside the boundary (`.` or empty: the root),
    /// for a command's working directory.
    pub fn directory(&self, path: &str) -> Result<PathBuf, WorkspaceError> {
        if Path::new(path)
            .components()
            .all(|c| matches!(c, Component::CurDir))
        {
            return Ok(self.root.clone());
        }
        let (dir, name) = self.resolve(path, false)?;
        let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = match openat(&dir, name.as_os_str(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOTDIR | Errno::ELOOP) => {
                return Err(WorkspaceError::NotADirectory {
                    path: path.to_owned(),
                    kind: "file",
                });
            }
            Err(errno) => return Err(open_error(path, errno)),
        };
        let link = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        std::fs::read_link(link).map_err(|source| WorkspaceError::Io {
            path: path.to_owned(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_past_the_scan_limit_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("big")).unwrap();
        for i in 0..5 {
            std::fs::write(dir.path().join(format!("big/f{i}")), "x").unwrap();
        }
        let workspace = Workspace::open(dir.path()).unwrap();
        assert_eq!(workspace.list_dir("big", 5).unwrap().len(), 5);
        for i in 5..10 {
            std::fs::write(dir.path().join(format!("big/f{i}")), "x").unwrap();
        }
        let err = workspace.list_dir("big", 5).unwrap_err();
        assert!(
            matches!(
                err,
                WorkspaceError::TooManyEntries {
                    limit: 5,
                    reached: 6,
                    ..
                }
            ),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(
            message.starts_with("big: the folder holds more than 5 entries (--scan-max-entries)"),
            "{message}"
        );
        assert_eq!(workspace.list_dir(".", 5).unwrap().len(), 1, "the root");
    }
}
