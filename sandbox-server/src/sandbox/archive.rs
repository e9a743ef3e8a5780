//! The workspace as a tar archive: written out as it is (symlinks as symlinks, through the
//! descriptor walk of [`super::walk`]), and replaced by one after the whole archive has been
//! unpacked safely beside it, within caps on its entries and unpacked bytes.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use nix::dir::Dir;
use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::{Mode, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::walk::{self, Node, Skipped};
use place::Refused;

mod guard;
mod place;

const STAGING_PREFIX: &str = ".sandbox-restore-";

/// Writes the workspace beneath `root` as a tar stream to `out`. FIFOs, sockets and devices
/// are left out, and returned with what changed mid-walk. Past `max_paths` paths
/// (`--scan-max-entries`) the stream stops, unfinished, with an error that
/// [`walk::TooManyPaths::of`] recognises.
pub fn write_tar(
    root: BorrowedFd<'_>,
    out: impl Write,
    max_paths: u64,
) -> io::Result<Vec<Skipped>> {
    let mut builder = tar::Builder::new(out);
    let mut left_out = Vec::new();
    let staging = |path: &[u8], name: &[u8]| {
        !path.contains(&b'/') && name.starts_with(STAGING_PREFIX.as_bytes())
    };
    let mut skipped = walk::walk(root, max_paths, staging, |found| {
        let path = Path::new(OsStr::from_bytes(found.path));
        let mut header = tar::Header::new_gnu();
        header.set_mode(found.stat.st_mode & 0o7777);
        header.set_mtime(u64::try_from(found.stat.st_mtime).unwrap_or(0));
        header.set_uid(u64::from(found.stat.st_uid));
        header.set_gid(u64::from(found.stat.st_gid));
        match found.node {
            Node::Dir => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                builder.append_data(&mut header, path, io::empty())
            }
            Node::File(fd) => {
                let size = found.stat.st_size as u64;
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(size);
                builder.append_data(&mut header, path, Exactly::new(File::from(fd), size))
            }
            Node::Symlink(target) => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                builder.append_link(&mut header, path, OsStr::from_bytes(&target))
            }
            Node::Special(kind) => {
                left_out.push(Skipped {
                    path: found.path.to_vec(),
                    why: format!("a {kind}: not archived"),
                });
                Ok(())
            }
        }
    })?;
    builder.into_inner()?.flush()?;
    skipped.extend(left_out);
    Ok(skipped)
}

/// Exactly `size` bytes of a file that may change while it is read: cut when it grew, padded
/// with zeros when it shrank, so the archive stays well-formed.
struct Exactly {
    inner: io::Take<File>,
    left: u64,
}

impl Exactly {
    fn new(file: File, size: u64) -> Exactly {
        Exactly {
            inner: file.take(size),
            left: size,
        }
    }
}

impl Read for Exactly {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let mut n = self.inner.read(buf)?;
        if n == 0 {
            n = buf
                .len()
                .min(usize::try_from(self.left).unwrap_or(usize::MAX));
            buf[..n].fill(0);
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Why an archive did not replace the workspace.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The archive itself is unusable (empty, not tar, an entry leading outside); nothing
    /// changed.
    #[error("archive: {0}")]
    Invalid(io::Error),
    /// Past a cap on entries or unpacked bytes; nothing changed.
    #[error("archive: {0}")]
    TooLarge(String),
    /// Replacing the workspace with the unpacked archive failed.
    #[error("replacing the workspace: {0}")]
    Io(io::Error),
}

/// What an archive brought in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unpacked {
    pub n_files: u64,
    pub n_bytes: u64,
}

/// How much an archive may unpack to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub max_entries: u64,
    pub max_bytes: u64,
}

/// Replaces everything beneath the folder `root` (the workspace's descriptor) with the archive
/// `body` reads (tar, or tar.gz by its magic bytes). The archive is unpacked into a staging
/// folder first; the workspace is touched only once that succeeded, so a bad, empty or
/// oversized archive changes nothing. Neither the staging folder nor the workspace is reached
/// by path ([`place`]), so a command that swaps either (or anything in them) for a symlink
/// cannot make the server write, move or remove files elsewhere.
pub fn replace_from_tar(
    root: BorrowedFd<'_>,
    body: impl Read,
    caps: Caps,
) -> Result<Unpacked, ArchiveError> {
    let name = format!("{STAGING_PREFIX}{:016x}", rand::random::<u64>());
    mkdirat(root, name.as_str(), Mode::from_bits_truncate(0o700))
        .map_err(|errno| ArchiveError::Io(errno.into()))?;
    let staging = openat(
        root,
        name.as_str(),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| ArchiveError::Io(errno.into()))?;
    let (unpacked, top) = match unpack(staging.as_fd(), body, caps) {
        Ok(unpacked) => unpacked,
        Err(err) => {
            // Beneath the root's descriptor; `remove_dir_all` removes a symlink, not what it
            // names.
            let _ = fs::remove_dir_all(beneath(root).join(&name));
            return Err(err);
        }
    };
    swap_in(root, &name, &staging).map_err(ArchiveError::Io)?;
    place::set_times(root, top).map_err(|refused| ArchiveError::Io(refused_io(refused)))?;
    Ok(unpacked)
}

/// The folder `dir` as a path the kernel resolves through the descriptor, not by name.
fn beneath(dir: BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()))
}

/// Empties `root` but for the staging folder `name`, then moves what `staging` holds into
/// `root`, name by name beneath the two descriptors.
fn swap_in(root: BorrowedFd<'_>, name: &str, staging: &OwnedFd) -> io::Result<()> {
    for entry in fs::read_dir(beneath(root))? {
        let entry = entry?;
        if entry.file_name() == name {
            continue;
        }
        // Neither follows a symlink a command put in the entry's place meanwhile.
        if entry.file_type()?.is_dir() {
            fs::remove_dir_all(entry.path())?;
        } else {
            fs::remove_file(entry.path())?;
        }
    }
    let mut listing = Dir::from_fd(nix::unistd::dup(staging)?)?;
    let names: Vec<Vec<u8>> = listing
        .iter()
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_bytes().to_vec())
        .filter(|entry| entry != b"." && entry != b"..")
        .collect();
    for entry in names {
        let entry = OsStr::from_bytes(&entry);
        renameat(staging, entry, root, entry)?;
    }
    Ok(unlinkat(root, name, UnlinkatFlags::RemoveDir)?)
}

fn invalid(why: impl Into<String>) -> ArchiveError {
    ArchiveError::Invalid(io::Error::new(io::ErrorKind::InvalidData, why.into()))
}

fn refused_io(refused: Refused) -> io::Error {
    match refused {
        Refused::Io(err) => err,
        other => io::Error::other(format!("{other:?}")),
    }
}

/// An error of the stream: past a bound of the guard's, or unreadable.
fn stream_error(err: io::Error, budget: &guard::Budget) -> ArchiveError {
    match budget.tripped() {
        Some(_) => ArchiveError::TooLarge(format!(
            "{err} (--archive-max-bytes and --archive-max-entries bound the stream)"
        )),
        None => ArchiveError::Invalid(err),
    }
}

/// Unpacks `body` beneath `into`; what it brought in, and the top-level folders whose modes are
/// set once they are in the workspace.
fn unpack(
    into: BorrowedFd<'_>,
    body: impl Read,
    caps: Caps,
) -> Result<(Unpacked, Vec<place::FolderTimes>), ArchiveError> {
    let mut body = io::BufReader::new(body);
    let head = io::BufRead::fill_buf(&mut body).map_err(ArchiveError::Invalid)?;
    if head.is_empty() {
        return Err(invalid("the body is empty: send a tar or tar.gz archive"));
    }
    let reader: Box<dyn Read> = if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::GzDecoder::new(body))
    } else {
        Box::new(body)
    };
    // The entries' bytes, and room for each entry's headers and padding.
    let total = caps
        .max_bytes
        .saturating_add(caps.max_entries.saturating_mul(4096))
        .saturating_add(guard::PER_ENTRY);
    let budget = Rc::new(guard::Budget::default());
    let mut archive = tar::Archive::new(guard::Guard::new(reader, total, budget.clone()));
    let mut unpacked = Unpacked {
        n_files: 0,
        n_bytes: 0,
    };
    let (mut n_entries, mut n_bytes) = (0u64, 0u64);
    let mut placer = place::Placer::new(into);
    let mut entries = archive
        .entries()
        .map_err(|err| stream_error(err, &budget))?;
    loop {
        budget.finding();
        let next = entries.next();
        budget.found();
        let Some(entry) = next else { break };
        let mut entry = entry.map_err(|err| stream_error(err, &budget))?;
        n_entries += 1;
        n_bytes = n_bytes.saturating_add(entry.size());
        if n_entries > caps.max_entries {
            return Err(ArchiveError::TooLarge(format!(
                "more than {} entries (--archive-max-entries)",
                caps.max_entries
            )));
        }
        if n_bytes > caps.max_bytes {
            return Err(ArchiveError::TooLarge(format!(
                "more than {} bytes unpacked (--archive-max-bytes)",
                caps.max_bytes
            )));
        }
        let kind = entry.header().entry_type();
        if kind.is_block_special() || kind.is_character_special() || kind.is_fifo() {
            return Err(invalid(format!(
                "archive entry `{}` is a device or FIFO, which a workspace does not hold",
                entry_path(&entry)
            )));
        }
        if let Err(refused) = placer.place(&mut entry) {
            return Err(refusal(refused, &entry_path(&entry), &budget));
        }
        // What an entry carries beyond what was placed (a link's or a folder's data) is read
        // here, not by the tar reader while it finds the next entry.
        io::copy(&mut entry, &mut io::sink()).map_err(|err| stream_error(err, &budget))?;
        if kind.is_file() {
            unpacked.n_files += 1;
            unpacked.n_bytes += entry.size();
        }
    }
    // `entries` borrows the archive; its last use is above, so the archive is free here.
    if n_entries == 0 {
        empty_archive(archive.into_inner(), &budget)?;
    }
    let top = placer
        .finish()
        .map_err(|refused| refusal(refused, "a folder's mode", &budget))?;
    Ok((unpacked, top))
}

/// Whether a stream of no entries is an empty archive (what `GET /v1/workspace/archive` of an
/// empty workspace sends: an end marker, zeros, at most a few records of them) rather than
/// something that is no archive at all.
fn empty_archive(rest: impl Read, budget: &guard::Budget) -> Result<(), ArchiveError> {
    /// GNU tar pads to records of 10 KiB; a few of them are still an empty archive.
    const EMPTY_MOST: u64 = 64 << 10;
    let mut rest = rest.take(EMPTY_MOST + 1);
    io::copy(&mut rest, &mut io::sink()).map_err(|err| stream_error(err, budget))?;
    match budget.zeros() {
        Some(read) if read > 0 && read <= EMPTY_MOST => Ok(()),
        _ => Err(invalid("the archive holds no entries")),
    }
}

/// The error for an entry at `path` that was not placed.
fn refusal(refused: Refused, path: &str, budget: &guard::Budget) -> ArchiveError {
    match refused {
        Refused::Outside => invalid(format!(
            "archive entry `{path}` leads outside the workspace (`..`, or a way through a symlink)"
        )),
        Refused::NotAFolder => invalid(format!(
            "archive entry `{path}`: a name on its way is a file, not a folder"
        )),
        Refused::Kind => invalid(format!("archive entry `{path}` is a link without a target")),
        Refused::Io(err) => match stream_error(err, budget) {
            ArchiveError::Invalid(err) => invalid(format!("archive entry `{path}`: {err}")),
            other => other,
        },
    }
}

fn entry_path<R: Read>(entry: &tar::Entry<'_, R>) -> String {
    entry
        .path()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
