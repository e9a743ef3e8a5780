//! Writing into a log's own folder (a batch's `report.html` and `transcripts/`), which may be
//! shared, and so hostile: whoever can write there may have put a link where a file or a folder
//! is expected. Each file is written as a new file beside its name (never an existing file,
//! never through a link) and then renamed over the name — `rename` replaces a link of that name
//! instead of following it — all through the folder's descriptor; a sub-folder is opened
//! without following a link. So nothing is written outside the folder, and no file is
//! truncated but the one named.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::{Mode, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

/// A folder, open, to write files into.
#[derive(Debug)]
pub struct Folder {
    fd: OwnedFd,
}

fn folder_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC
}

impl Folder {
    /// The folder at `path`. A link there is followed: it is the folder the user named.
    pub fn open(path: &Path) -> io::Result<Folder> {
        let fd = openat(nix::fcntl::AT_FDCWD, path, folder_flags(), Mode::empty())?;
        Ok(Folder { fd })
    }

    /// Its folder `name`, made when absent; refused when `name` is a link (to a folder
    /// elsewhere) or anything but a folder.
    pub fn subfolder(&self, name: &str) -> io::Result<Folder> {
        plain(name)?;
        match mkdirat(self.fd.as_fd(), name, Mode::from_bits_truncate(0o777)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(errno) => return Err(errno.into()),
        }
        let flags = folder_flags() | OFlag::O_NOFOLLOW;
        match openat(self.fd.as_fd(), name, flags, Mode::empty()) {
            Ok(fd) => Ok(Folder { fd }),
            Err(Errno::ELOOP | Errno::ENOTDIR) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{name}: a link or a file, not a folder: refused (nothing is written through it)"
                ),
            )),
            Err(errno) => Err(errno.into()),
        }
    }

    /// Writes `bytes` as its file `name`, in place of what was there (see [`Folder::create`]).
    pub fn write(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let mut file = self.create(name)?;
        file.write_all(bytes)?;
        file.finish()
    }

    /// A new file that becomes its file `name` once [`Replacing::finish`]ed: made under a
    /// fresh name beside it (`O_EXCL | O_NOFOLLOW`), then renamed over `name`.
    pub fn create(&self, name: &str) -> io::Result<Replacing<'_>> {
        plain(name)?;
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let mut tries = 0;
        loop {
            let temp = temp_name(name);
            let mode = Mode::from_bits_truncate(0o666);
            match openat(self.fd.as_fd(), temp.as_str(), flags, mode) {
                Ok(fd) => {
                    return Ok(Replacing {
                        folder: self,
                        temp,
                        name: name.to_owned(),
                        file: File::from(fd),
                        done: false,
                    });
                }
                // Someone else's file of that name (planted, or a concurrent writer's).
                Err(Errno::EEXIST) if tries < 16 => tries += 1,
                Err(errno) => return Err(errno.into()),
            }
        }
    }
}

/// A file being written in place of another (see [`Folder::create`]). Dropped unfinished, the
/// new file is removed and the old one stays as it was.
#[derive(Debug)]
pub struct Replacing<'f> {
    folder: &'f Folder,
    temp: String,
    name: String,
    file: File,
    done: bool,
}

impl Replacing<'_> {
    /// Puts the new file in place of the old one (or of a link of that name).
    pub fn finish(mut self) -> io::Result<()> {
        self.file.flush()?;
        let fd = self.folder.fd.as_fd();
        renameat(fd, self.temp.as_str(), fd, self.name.as_str())?;
        self.done = true;
        Ok(())
    }
}

impl Write for Replacing<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for Replacing<'_> {
    fn drop(&mut self) {
        if !self.done {
            let fd = self.folder.fd.as_fd();
            let _ = unlinkat(fd, self.temp.as_str(), UnlinkatFlags::NoRemoveDir);
        }
    }
}

/// Writes `bytes` as the file at `path`, replacing what is there (a link included) instead of
/// writing through it: see [`Folder::create`].
pub fn write_replacing(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = path.file_name().and_then(|name| name.to_str());
    let (Some(parent), Some(name)) = (path.parent(), name) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a file's path", path.display()),
        ));
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    Folder::open(parent)?.write(name, bytes)
}

fn plain(name: &str) -> io::Result<()> {
    if crate::plain_name(name) {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not one plain file name"),
        ))
    }
}

/// A name for a new file beside `name`, hidden and not guessed ahead (the process, a count and
/// the clock's nanoseconds), short enough for any `name`.
fn temp_name(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    format!(
        ".{}.{}-{n}-{nanos:x}.tmp",
        harness_log::text::head(name, 100),
        std::process::id()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link planted where a file goes is replaced, not written through; a link planted
    /// where a folder goes is refused; nothing is left behind.
    #[test]
    fn files_replace_links_and_folders_refuse_them() {
        let root = tempfile::tempdir().unwrap();
        let (dir, outside) = (root.path().join("shared"), root.path().join("outside"));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "keep\n").unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), dir.join("page.html")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), dir.join("sub/page.html")).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("linked")).unwrap();
        write_replacing(&dir.join("page.html"), b"new\n").unwrap();
        let folder = Folder::open(&dir).unwrap();
        folder
            .subfolder("sub")
            .unwrap()
            .write("page.html", b"sub\n")
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(outside.join("secret")).unwrap(),
            "keep\n"
        );
        for (path, text) in [("page.html", "new\n"), ("sub/page.html", "sub\n")] {
            let path = dir.join(path);
            assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        }
        let err = folder.subfolder("linked").unwrap_err().to_string();
        assert!(err.contains("linked: a link"), "{err}");
        folder.subfolder("made").unwrap().write("x", b"x").unwrap();
        assert!(dir.join("made/x").is_file());
        for bad in ["../x", "a/b", "..", ""] {
            assert!(folder.write(bad, b"x").is_err(), "{bad}");
        }
        // An unfinished file leaves nothing.
        drop(folder.create("unfinished").unwrap());
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["linked", "made", "page.html", "sub"]);
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    }
}
