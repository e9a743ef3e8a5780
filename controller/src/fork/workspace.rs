//! A child's workspace: the verified workspace at the step, shared copy-on-write through an
//! overlay mount where this process may mount one (root), else copied.
//!
//! An overlay costs no copy: the children read the one verified folder as their lower layer
//! and write into an upper layer of their own, so a fork of a large workspace into many
//! children pays for the workspace once.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// How a child's workspace was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Made {
    Overlay,
    Copied,
}

impl Made {
    pub(super) fn as_str(self) -> &'static str {
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
    /// Everything of it (the layers of an overlay), removed on drop.
    root: PathBuf,
    pub(super) made: Made,
    mounted: bool,
    keep: bool,
}

impl ChildWorkspace {
    /// Makes `root` (which must not exist) a workspace equal to `template`: an overlay when
    /// `overlay` is allowed and the kernel lets this process mount one, else a copy. A kept
    /// workspace (`keep`) is always a copy, so it outlives the fork.
    pub(super) fn make(
        template: &Path,
        root: &Path,
        overlay: Option<Owner>,
        keep: bool,
    ) -> std::io::Result<ChildWorkspace> {
        if let Some(owner) = overlay.filter(|_| !keep) {
            match mount_overlay(template, root, owner) {
                Ok(path) => {
                    return Ok(ChildWorkspace {
                        path,
                        root: root.to_owned(),
                        made: Made::Overlay,
                        mounted: true,
                        keep,
                    });
                }
                Err(err) => {
                    tracing::debug!("no overlay for {}: {err}; copying", root.display());
                    let _ = std::fs::remove_dir_all(root);
                }
            }
        }
        replay::fork::clone_workspace(template, root)?;
        Ok(ChildWorkspace {
            path: root.to_owned(),
            root: root.to_owned(),
            made: Made::Copied,
            mounted: false,
            keep,
        })
    }
}

impl Drop for ChildWorkspace {
    fn drop(&mut self) {
        if self.mounted {
            // Lazily: the child's sandbox has stopped, but a straggler must not keep it.
            let _ = nix::mount::umount2(&self.path, nix::mount::MntFlags::MNT_DETACH);
        }
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
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
        let chown = |path: &Path| {
            nix::unistd::fchownat(
                nix::fcntl::AT_FDCWD,
                path,
                Some(nix::unistd::Uid::from_raw(self.uid)),
                Some(nix::unistd::Gid::from_raw(self.gid)),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(std::io::Error::from)
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

/// `root/{upper,work,merged}`, with `merged` an overlay of `upper` over `lower`; `lower` is
/// already `owner`'s.
fn mount_overlay(lower: &Path, root: &Path, owner: Owner) -> std::io::Result<PathBuf> {
    let (upper, work, merged) = (root.join("upper"), root.join("work"), root.join("merged"));
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
    std::fs::create_dir(root)?;
    for dir in [&upper, &work, &merged] {
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
        &merged,
        Some("overlay"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .map_err(std::io::Error::from)?;
    Ok(merged)
}
