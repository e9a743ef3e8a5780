//! A child's workspace: the verified workspace at the step, shared copy-on-write through an
//! overlay mount where this process may mount one (root), else copied.
//!
//! An overlay costs no copy: the children read the one verified folder as their lower layer
//! and write into an upper layer of their own, so a fork of a large workspace into many
//! children pays for the workspace once. The layers live in a folder only this process's user
//! may enter: a command reaches its workspace through the mount, never another child's upper
//! layer or the shared lower one (the kernel reaches the layers with the mounter's rights).
//!
//! And no child hashes the workspace again: [`known_files`] writes the server's
//! `--known-files` list, the verified hash of each file with the stat it has in the child's
//! workspace, so the server's first snapshot reads none of them. An overlay shows its lower
//! layer's files with their own inode and times, so one list made from the template serves
//! every overlaid child; a copy gets its own.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// How a child's workspace was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Made {
    Overlay,
    Copied,
}

impl Made {
    /// How it was made, in words.
    pub(super) fn describe(self) -> &'static str {
        match self {
            Made::Overlay => "an overlay mount over the workspace at the step (copy-on-write)",
            Made::Copied => "a copy of the workspace at the step",
        }
    }
}

/// A child's workspace folder; an overlay is unmounted and everything removed on drop (unless
/// kept).
#[derive(Debug)]
pub(super) struct ChildWorkspace {
    /// The folder the child's sandbox serves.
    pub(super) path: PathBuf,
    /// An overlay's layers, removed on drop.
    layers: Option<PathBuf>,
    pub(super) made: Made,
    keep: bool,
}

impl ChildWorkspace {
    /// Makes `path` (which must not exist) a workspace equal to `template`: an overlay with its
    /// layers in `layers` (which must not exist either) when `overlay` is allowed and the
    /// kernel lets this process mount one, else a copy. A kept workspace (`keep`) is always a
    /// copy, so it outlives the fork.
    pub(super) fn make(
        template: &Path,
        path: &Path,
        layers: &Path,
        overlay: Option<Owner>,
        keep: bool,
    ) -> std::io::Result<ChildWorkspace> {
        if let Some(owner) = overlay.filter(|_| !keep) {
            match mount_overlay(template, layers, path, owner) {
                Ok(()) => {
                    return Ok(ChildWorkspace {
                        path: path.to_owned(),
                        layers: Some(layers.to_owned()),
                        made: Made::Overlay,
                        keep,
                    });
                }
                Err(err) => {
                    tracing::debug!("no overlay for {}: {err}; copying", path.display());
                    let _ = std::fs::remove_dir_all(layers);
                    let _ = std::fs::remove_dir(path);
                }
            }
        }
        harness_replay::fork::clone_workspace(template, path)?;
        Ok(ChildWorkspace {
            path: path.to_owned(),
            layers: None,
            made: Made::Copied,
            keep,
        })
    }
}

impl Drop for ChildWorkspace {
    fn drop(&mut self) {
        if let Some(layers) = &self.layers {
            // Lazily: the child's sandbox has stopped, but a straggler must not keep it.
            let _ = nix::mount::umount2(&self.path, nix::mount::MntFlags::MNT_DETACH);
            let _ = std::fs::remove_dir(&self.path);
            let _ = std::fs::remove_dir_all(layers);
        } else if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Writes to `to` the server's `--known-files` list for `workspace`, a folder equal to
/// `state`: each regular file of `state` whose size is the recorded one, with its verified
/// hash and the stat it has there. Returns how many files it names. Names that are not UTF-8
/// are left out (the server hashes them as usual).
pub(super) fn known_files(
    state: &harness_replay::restore::State,
    workspace: &Path,
    to: &Path,
) -> std::io::Result<usize> {
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;
    let mut out = std::io::BufWriter::new(std::fs::File::create(to)?);
    let mut named = 0;
    for (path, version) in state {
        let Some(sha256) = &version.sha256 else {
            continue;
        };
        if version.kind != sandbox_protocol::EntryKind::File || path.contains('\\') {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(workspace.join(path)) else {
            continue;
        };
        if !meta.file_type().is_file() || meta.size() != version.size {
            continue;
        }
        let line = sandbox_protocol::KnownFile {
            path: path.clone(),
            sha256: sha256.clone(),
            size: meta.size(),
            mtime: [meta.mtime(), meta.mtime_nsec()],
            ctime: [meta.ctime(), meta.ctime_nsec()],
            ino: meta.ino(),
        };
        serde_json::to_writer(&mut out, &line)?;
        out.write_all(b"\n")?;
        named += 1;
    }
    out.into_inner()
        .map_err(|err| err.into_error())?
        .sync_all()?;
    Ok(named)
}

/// Who owns an overlaid workspace's files: the commands' user. (The server maps a root-owned
/// workspace to that user with an idmapped mount, which an overlay cannot take; a workspace
/// its user owns needs no mapping.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Owner {
    uid: u32,
    gid: u32,
}

impl Owner {
    /// This process's own user and group.
    pub(super) fn current() -> Owner {
        Owner {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
        }
    }

    pub(super) fn ids(self) -> (u32, u32) {
        (self.uid, self.gid)
    }

    /// The commands' user, from the server's `--run-as` value (none: this process's own user);
    /// `None` when it cannot be told or this process cannot mount (it is not root).
    pub(super) fn of(run_as: Option<&str>) -> Option<Owner> {
        if !nix::unistd::geteuid().is_root() {
            return None;
        }
        let Some(text) = run_as else {
            return Some(Owner { uid: 0, gid: 0 });
        };
        let number = |part: &str| part.parse::<u32>().ok();
        match text.split_once(':') {
            Some((uid, gid)) => Some(Owner {
                uid: number(uid)?,
                gid: number(gid)?,
            }),
            None => match number(text) {
                Some(uid) => Some(Owner { uid, gid: uid }),
                None => {
                    let user = nix::unistd::User::from_name(text).ok()??;
                    Some(Owner {
                        uid: user.uid.as_raw(),
                        gid: user.gid.as_raw(),
                    })
                }
            },
        }
    }

    /// Gives every entry beneath `dir` (and `dir`) to this owner, links not followed.
    pub(super) fn take(self, dir: &Path) -> std::io::Result<()> {
        if self.uid == 0 && self.gid == 0 {
            return Ok(());
        }
        // A chown clears the set-user and set-group bits, and they stay cleared: a workspace
        // on this host never holds them (a restore does not set them either).
        let chown = |path: &Path| {
            nix::unistd::fchownat(
                nix::fcntl::AT_FDCWD,
                path,
                Some(nix::unistd::Uid::from_raw(self.uid)),
                Some(nix::unistd::Gid::from_raw(self.gid)),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(std::io::Error::from)?;
            Ok::<(), std::io::Error>(())
        };
        chown(dir)?;
        let mut stack = vec![dir.to_owned()];
        while let Some(folder) = stack.pop() {
            for entry in std::fs::read_dir(&folder)? {
                let entry = entry?;
                chown(&entry.path())?;
                if entry.file_type()?.is_dir() {
                    stack.push(entry.path());
                }
            }
        }
        Ok(())
    }
}

/// Mounts on `merged` an overlay of `layers/upper` over `lower`, the layers made in `layers`;
/// `lower` is already `owner`'s.
fn mount_overlay(lower: &Path, layers: &Path, merged: &Path, owner: Owner) -> std::io::Result<()> {
    let (upper, work) = (layers.join("upper"), layers.join("work"));
    let paths = [lower, &upper, &work];
    // The option string separates with `,` and `:`; such a path is copied instead.
    if paths
        .iter()
        .any(|path| path.to_string_lossy().contains([',', ':', '\\']))
    {
        return Err(std::io::Error::other(
            "a path the overlay options cannot name",
        ));
    }
    std::fs::create_dir(layers)?;
    for dir in [&upper, &work, merged] {
        std::fs::create_dir(dir)?;
    }
    // The merged root takes the upper layer's mode: the workspace's own.
    let mode = std::fs::metadata(lower)?.permissions().mode();
    std::fs::set_permissions(&upper, std::fs::Permissions::from_mode(mode))?;
    owner.take(&upper)?;
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    );
    nix::mount::mount(
        Some("overlay"),
        merged,
        Some("overlay"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .map_err(std::io::Error::from)
}

/// The workspace at the step as one tar archive at `to`, for children whose workspace is
/// uploaded (containers): their servers replace the image's workspace with it in one streamed
/// request, or the engine unpacks it once into a fork's image. Symlinks stay symlinks; the
/// root's own entry (`.`) makes even an empty workspace an archive that replaces. Every entry
/// is `owner`'s when one is given (an engine unpacks with the owner the archive names).
pub(super) fn archive(
    template: &Path,
    to: &Path,
    owner: Option<(u32, u32)>,
) -> std::io::Result<()> {
    let file = std::io::BufWriter::new(std::fs::File::create(to)?);
    let mut builder = tar::Builder::new(file);
    let mut stack = vec![PathBuf::new()];
    while let Some(relative) = stack.pop() {
        let path = template.join(&relative);
        let meta = std::fs::symlink_metadata(&path)?;
        let mut header = tar::Header::new_gnu();
        header.set_metadata_in_mode(&meta, tar::HeaderMode::Complete);
        if let Some((uid, gid)) = owner {
            header.set_uid(uid.into());
            header.set_gid(gid.into());
        }
        let name = if relative.as_os_str().is_empty() {
            Path::new(".")
        } else {
            relative.as_path()
        };
        let kind = meta.file_type();
        if kind.is_dir() {
            header.set_size(0);
            builder.append_data(&mut header, name, std::io::empty())?;
            let mut entries = std::fs::read_dir(&path)?
                .map(|entry| entry.map(|entry| relative.join(entry.file_name())))
                .collect::<std::io::Result<Vec<_>>>()?;
            // Popped in name order.
            entries.sort_by(|a, b| b.cmp(a));
            stack.extend(entries);
        } else if kind.is_symlink() {
            header.set_size(0);
            builder.append_link(&mut header, name, std::fs::read_link(&path)?)?;
        } else if kind.is_file() {
            builder.append_data(&mut header, name, std::fs::File::open(&path)?)?;
        }
    }
    let mut file = builder.into_inner()?;
    std::io::Write::flush(&mut file)
}
