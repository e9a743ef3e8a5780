//! Walking the workspace through directory descriptors, for snapshots and archives.
//!
//! Every entry is looked at with `fstatat` beneath the descriptor of its folder and opened with
//! `openat(O_NOFOLLOW | O_NONBLOCK)`; what was opened is checked again with `fstat`. No path is
//! ever handed to the kernel to resolve again, so a folder swapped for a symlink mid-walk
//! cannot lead the walk outside the workspace, and a file swapped for a FIFO cannot block it.
//! Names are bytes (non-UTF-8 names stay distinct); depth is not bounded by `PATH_MAX`.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, readlinkat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat};

/// Folders kept open on the way down; further up ones are reopened through `..` and checked.
const MAX_OPEN: usize = 64;

/// What a path is, as the walk found it.
#[derive(Debug)]
pub enum Node {
    Dir,
    /// A regular file, opened for reading.
    File(OwnedFd),
    Symlink(Vec<u8>),
    /// A FIFO, socket or device: never opened.
    Special(&'static str),
}

/// A path the walk found, relative to the root, `/`-separated bytes.
pub struct Found<'a> {
    pub path: &'a [u8],
    pub node: Node,
    /// From `fstat` of what was opened (files, folders), else from `fstatat`.
    pub stat: FileStat,
}

/// A path left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub path: Vec<u8>,
    pub why: String,
}

/// One folder on the way down: its path, its descriptor while open, its identity, and the
/// names still to visit.
struct Level {
    path: Vec<u8>,
    fd: Option<OwnedFd>,
    id: (u64, u64),
    names: Vec<Vec<u8>>,
}

/// More paths than one walk may find (`--scan-max-entries`): the walk stopped there, before
/// it held them all. Carried in the `io::Error` the walk returns; see [`TooManyPaths::of`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the workspace holds more than {limit} paths (--scan-max-entries): the walk stopped at path {reached}, in `{folder}`; remove some and retry"
)]
pub struct TooManyPaths {
    /// The most paths a walk may find.
    pub limit: u64,
    /// How many it had found when it stopped.
    pub reached: u64,
    /// The folder it was listing then (`.`: the root), readable.
    pub folder: String,
}

impl TooManyPaths {
    /// The limit a walk stopped at, when that is what `err` is.
    pub fn of(err: &io::Error) -> Option<&TooManyPaths> {
        err.get_ref()?.downcast_ref::<TooManyPaths>()
    }
}

/// What a walk keeps beside its folders: the paths left out, and how many it has found (each
/// name listed counts, whether then kept or not) against the most it may.
struct Tally {
    skipped: Vec<Skipped>,
    limit: u64,
    found: u64,
}

/// Walks everything beneath `root` (a directory descriptor), depth first; `skip(path, name)`
/// leaves a path and all beneath it out. `visit` sees every path kept; the paths left out
/// because they changed mid-walk or could not be read are returned. Past `limit` paths found
/// (counted as their folders are listed, so a folder of millions of names is never held
/// whole) the walk stops with an error that [`TooManyPaths::of`] recognises.
pub fn walk(
    root: BorrowedFd<'_>,
    limit: u64,
    skip: impl Fn(&[u8], &[u8]) -> bool,
    mut visit: impl FnMut(Found<'_>) -> io::Result<()>,
) -> io::Result<Vec<Skipped>> {
    let root = openat(root, ".", dir_flags(), Mode::empty()).map_err(io::Error::from)?;
    let stat = fstat(&root).map_err(io::Error::from)?;
    let mut tally = Tally {
        skipped: Vec::new(),
        limit,
        found: 0,
    };
    let mut levels = vec![Level {
        path: Vec::new(),
        names: list(&root, b"", &skip, &mut tally)?,
        id: identity(&stat),
        fd: Some(root),
    }];
    while let Some(top) = levels.last_mut() {
        let Some(name) = top.names.pop() else {
            ascend(&mut levels, &mut tally.skipped)?;
            continue;
        };
        let path = join(&top.path, &name);
        let parent = top.fd.as_ref().expect("the deepest folder is open");
        match entry(parent.as_fd(), &name) {
            Ok(Some((node, stat, opened))) => {
                let is_dir = matches!(node, Node::Dir);
                visit(Found {
                    path: &path,
                    node,
                    stat,
                })?;
                if let (true, Some(fd)) = (is_dir, opened) {
                    descend(&mut levels, path, fd, &stat, &skip, &mut tally)?;
                }
            }
            Ok(None) => {}
            Err(why) => tally.skipped.push(Skipped { path, why }),
        }
    }
    Ok(tally.skipped)
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK
}

fn identity(stat: &FileStat) -> (u64, u64) {
    (stat.st_dev, stat.st_ino)
}

fn join(folder: &[u8], name: &[u8]) -> Vec<u8> {
    let mut path = folder.to_vec();
    if !path.is_empty() {
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}

/// A folder's names (not `.` and `..`, nor those `skip` leaves out), in reverse order so that
/// popping visits them sorted. Each counts in `tally`; one past its limit ends the listing
/// (and the walk) with [`TooManyPaths`].
fn list(
    fd: &OwnedFd,
    folder: &[u8],
    skip: &impl Fn(&[u8], &[u8]) -> bool,
    tally: &mut Tally,
) -> io::Result<Vec<Vec<u8>>> {
    let mut dir = Dir::from_fd(fd.try_clone()?).map_err(io::Error::from)?;
    let mut names = Vec::new();
    for entry in dir.iter() {
        let entry = entry.map_err(io::Error::from)?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." || skip(join(folder, name).as_slice(), name) {
            continue;
        }
        tally.found += 1;
        if tally.found > tally.limit {
            return Err(io::Error::other(TooManyPaths {
                limit: tally.limit,
                reached: tally.found,
                folder: if folder.is_empty() {
                    ".".to_owned()
                } else {
                    String::from_utf8_lossy(folder).into_owned()
                },
            }));
        }
        names.push(name.to_vec());
    }
    names.sort_unstable_by(|a, b| b.cmp(a));
    Ok(names)
}

fn kind_of(stat: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT
}

fn special(kind: SFlag) -> &'static str {
    match kind {
        k if k == SFlag::S_IFIFO => "FIFO",
        k if k == SFlag::S_IFSOCK => "socket",
        k if k == SFlag::S_IFCHR => "character device",
        k if k == SFlag::S_IFBLK => "block device",
        _ => "special file",
    }
}

/// Looks at one name beneath `parent`: `None` when it vanished; an error (the reason) when it
/// changed between the look and the open, or could not be read.
#[allow(clippy::type_complexity)]
fn entry(
    parent: BorrowedFd<'_>,
    name: &[u8],
) -> Result<Option<(Node, FileStat, Option<OwnedFd>)>, String> {
    let name = OsStr::from_bytes(name);
    let stat = match fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(Errno::ENOENT) => return Ok(None),
        Err(errno) => return Err(format!("could not be examined ({errno})")),
    };
    let kind = kind_of(&stat);
    let opened = |flags: OFlag, want: SFlag| -> Result<Option<(OwnedFd, FileStat)>, String> {
        let fd = match openat(parent, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                return Err("replaced by a symlink while it was walked".to_owned());
            }
            Err(errno) => return Err(format!("could not be opened ({errno})")),
        };
        let stat = fstat(&fd).map_err(|errno| format!("could not be examined ({errno})"))?;
        if kind_of(&stat) != want {
            return Err(format!(
                "replaced by a {} while it was walked",
                special(kind_of(&stat))
            ));
        }
        Ok(Some((fd, stat)))
    };
    if kind == SFlag::S_IFDIR {
        return Ok(
            opened(dir_flags(), SFlag::S_IFDIR)?.map(|(fd, stat)| (Node::Dir, stat, Some(fd)))
        );
    }
    if kind == SFlag::S_IFREG {
        let flags = OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_CLOEXEC
            | OFlag::O_NOCTTY;
        return Ok(opened(flags, SFlag::S_IFREG)?.map(|(fd, stat)| (Node::File(fd), stat, None)));
    }
    if kind == SFlag::S_IFLNK {
        return match readlinkat(parent, name) {
            Ok(target) => Ok(Some((
                Node::Symlink(target.as_bytes().to_vec()),
                stat,
                None,
            ))),
            Err(Errno::ENOENT) => Ok(None),
            Err(Errno::EINVAL) => Err("replaced while it was walked".to_owned()),
            Err(errno) => Err(format!("could not be read ({errno})")),
        };
    }
    Ok(Some((Node::Special(special(kind)), stat, None)))
}

/// Enters a folder just opened; past `MAX_OPEN` levels the oldest open one (not the root) is
/// closed, to be reopened on the way back. A folder that cannot be listed is left out; one
/// whose names pass the walk's limit ends the walk.
fn descend(
    levels: &mut Vec<Level>,
    path: Vec<u8>,
    fd: OwnedFd,
    stat: &FileStat,
    skip: &impl Fn(&[u8], &[u8]) -> bool,
    tally: &mut Tally,
) -> io::Result<()> {
    let names = match list(&fd, &path, skip, tally) {
        Ok(names) => names,
        Err(err) if TooManyPaths::of(&err).is_some() => return Err(err),
        Err(err) => {
            tally.skipped.push(Skipped {
                path,
                why: format!("could not be listed ({err})"),
            });
            return Ok(());
        }
    };
    levels.push(Level {
        path,
        fd: Some(fd),
        id: identity(stat),
        names,
    });
    let open = levels.iter().filter(|l| l.fd.is_some()).count();
    if open > MAX_OPEN
        && let Some(oldest) = levels.iter_mut().skip(1).find(|l| l.fd.is_some())
    {
        oldest.fd = None;
    }
    Ok(())
}

/// Leaves the deepest folder. When its parent was closed, it is reopened through `..` and
/// must be the same folder (device and inode) as before; a folder moved meanwhile ends the
/// walk of what was left in it.
fn ascend(levels: &mut Vec<Level>, skipped: &mut Vec<Skipped>) -> io::Result<()> {
    let Some(child) = levels.pop() else {
        return Ok(());
    };
    let Some(parent) = levels.last_mut() else {
        return Ok(());
    };
    if parent.fd.is_some() {
        return Ok(());
    }
    let child_fd = child.fd.expect("the deepest folder is open");
    let reopened = openat(child_fd.as_fd(), "..", dir_flags(), Mode::empty())
        .and_then(|fd| fstat(&fd).map(|stat| (fd, stat)));
    match reopened {
        Ok((fd, stat)) if identity(&stat) == parent.id => parent.fd = Some(fd),
        _ => {
            // The parent and every closed folder above it are abandoned; the root stays open.
            while levels.last().is_some_and(|l| l.fd.is_none()) {
                let level = levels.pop().expect("a level");
                skipped.push(Skipped {
                    path: level.path,
                    why: "moved while it was walked; what was left in it was left out".to_owned(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;

    fn paths(root: &std::path::Path) -> (Vec<(String, String)>, Vec<Skipped>) {
        let dir = std::fs::File::open(root).unwrap();
        let mut seen = Vec::new();
        let skipped = walk(
            dir.as_fd(),
            u64::MAX,
            |_, _| false,
            |found| {
                let kind = match found.node {
                    Node::Dir => "dir".to_owned(),
                    Node::File(_) => "file".to_owned(),
                    Node::Symlink(target) => format!("-> {}", String::from_utf8_lossy(&target)),
                    Node::Special(what) => what.to_owned(),
                };
                seen.push((String::from_utf8_lossy(found.path).into_owned(), kind));
                Ok(())
            },
        )
        .unwrap();
        (seen, skipped)
    }

    #[test]
    fn every_kind_is_found_and_nothing_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/f"), "x").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("a/etc")).unwrap();
        nix::unistd::mkfifo(&root.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        let (seen, skipped) = paths(root);
        let seen: Vec<(&str, &str)> = seen.iter().map(|(p, k)| (p.as_str(), k.as_str())).collect();
        assert_eq!(
            seen,
            [
                ("a", "dir"),
                ("a/b", "dir"),
                ("a/b/f", "file"),
                ("a/etc", "-> /etc"),
                ("fifo", "FIFO")
            ]
        );
        assert!(skipped.is_empty());
    }

    #[test]
    fn paths_deeper_than_path_max_are_walked() {
        let dir = tempfile::tempdir().unwrap();
        let mut fd = std::fs::File::open(dir.path()).unwrap();
        let depth = 2500; // 2 bytes a level: 5000 bytes, past PATH_MAX (4096)
        for _ in 0..depth {
            nix::sys::stat::mkdirat(fd.as_fd(), "d", Mode::from_bits_truncate(0o755)).unwrap();
            let next = openat(
                fd.as_fd(),
                "d",
                OFlag::O_RDONLY | OFlag::O_DIRECTORY,
                Mode::empty(),
            )
            .unwrap();
            fd = std::fs::File::from(next);
        }
        let file = openat(
            fd.as_fd(),
            "deep.txt",
            OFlag::O_WRONLY | OFlag::O_CREAT,
            Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        drop(file);
        let (seen, skipped) = paths(dir.path());
        assert!(skipped.is_empty(), "{skipped:?}");
        assert_eq!(seen.len(), depth + 1);
        let deepest = &seen.last().unwrap().0;
        assert!(
            deepest.ends_with("d/deep.txt") && deepest.len() > 4096,
            "{}",
            deepest.len()
        );
        drop(fd); // the temporary folder's removal walks by descriptor too
    }

    #[test]
    fn names_that_are_not_utf8_stay_distinct() {
        let dir = tempfile::tempdir().unwrap();
        for name in [b"x\xff".as_slice(), b"x\xfe"] {
            std::fs::write(dir.path().join(OsStr::from_bytes(name)), "").unwrap();
        }
        let root = std::fs::File::open(dir.path()).unwrap();
        let mut names = Vec::new();
        walk(
            root.as_fd(),
            u64::MAX,
            |_, _| false,
            |found| {
                names.push(found.path.to_vec());
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(names, [b"x\xfe".to_vec(), b"x\xff".to_vec()]);
    }

    /// How many paths a walk of `root` with `limit` finds, or the limit it stopped at; names
    /// `skip`ped count for nothing.
    fn count(root: &std::path::Path, limit: u64) -> Result<usize, TooManyPaths> {
        let dir = std::fs::File::open(root).unwrap();
        let mut n = 0;
        let walked = walk(
            dir.as_fd(),
            limit,
            |_, name| name == b"ignored",
            |_| {
                n += 1;
                Ok(())
            },
        );
        match walked {
            Ok(_) => Ok(n),
            Err(err) => Err(TooManyPaths::of(&err).cloned().expect("the limit")),
        }
    }

    #[test]
    fn a_walk_stops_past_its_limit_of_paths() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::create_dir(dir.path().join("ignored")).unwrap();
        for i in 0..4 {
            std::fs::write(dir.path().join(format!("d/f{i}")), "").unwrap();
            std::fs::write(dir.path().join(format!("ignored/f{i}")), "").unwrap();
        }
        assert_eq!(count(dir.path(), 5), Ok(5), "d and its 4 files");
        let stopped = count(dir.path(), 4).unwrap_err();
        assert_eq!(
            (stopped.limit, stopped.reached, stopped.folder.as_str()),
            (4, 5, "d")
        );
        let message = stopped.to_string();
        assert!(
            message.contains("more than 4 paths (--scan-max-entries)"),
            "{message}"
        );
        for i in 0..6 {
            std::fs::write(dir.path().join(format!("top{i}")), "").unwrap();
        }
        let stopped = count(dir.path(), 5).unwrap_err();
        assert_eq!((stopped.reached, stopped.folder.as_str()), (6, "."));
    }
}
