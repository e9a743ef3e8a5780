//! The server's own folders, out of commands' reach.
//!
//! Every server on a host keeps its folders under one shared parent, `$TMPDIR/sandbox-server`
//! (mode 1733: anyone may add a folder, nobody may list or remove another's). A server's
//! folder is named by its identity, `<pid>-<start ticks>`, and holds `state/` (artifacts and
//! blobs, 0700), `tmp/` (the commands' `TMPDIR`) and `home/` (their `HOME` when the homes are
//! hidden from them, or when they run as another user), both 0700 and owned by the commands'
//! user. The commands' view hides the whole parent, except their own `tmp/` and `home/`: no
//! command reads its server's state, nor any other server's state, `TMPDIR` or home. At start, the folders of servers that are
//! gone are removed.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::process::ServerId;

/// This server's folders.
#[derive(Debug, Clone)]
pub struct StateDirs {
    /// The folder shared by every server (hidden from commands as a whole).
    pub parent: PathBuf,
    /// This server's folder.
    pub own: PathBuf,
    /// Artifacts and blobs.
    pub state: PathBuf,
    /// The commands' `TMPDIR`.
    pub tmp: PathBuf,
    /// The commands' `HOME`, when it is not the server's.
    pub home: PathBuf,
    /// Whether the server made `own` and removes it at exit (not a `--state-dir` it was given).
    pub owned: bool,
}

/// The parent every server shares when it is given no `--state-dir`.
pub fn shared_parent() -> PathBuf {
    std::env::temp_dir().join("sandbox-server")
}

impl StateDirs {
    /// Creates the folders: under the shared parent, or in `explicit` (`--state-dir`), which is
    /// kept at exit. `run_as` is the commands' user, who gets `tmp/`.
    pub fn create(
        explicit: Option<&Path>,
        id: &ServerId,
        run_as: Option<(u32, u32)>,
    ) -> io::Result<StateDirs> {
        let parent = shared_parent();
        if let Some(temp) = parent.parent().filter(|t| !t.exists()) {
            // An image without /tmp (FROM scratch): made as a usual /tmp.
            make(temp, 0o1777)?;
        }
        make(&parent, 0o1733)?;
        let (own, owned) = match explicit {
            Some(dir) => (dir.to_owned(), false),
            None => (parent.join(id.to_string()), true),
        };
        make(&own, 0o711)?;
        let state = own.join("state");
        make(&state, 0o700)?;
        let tmp = own.join("tmp");
        let home = own.join("home");
        for private in [&tmp, &home] {
            make(private, 0o700)?;
            if let Some((uid, gid)) = run_as {
                nix::unistd::chown(
                    private,
                    Some(nix::unistd::Uid::from_raw(uid)),
                    Some(nix::unistd::Gid::from_raw(gid)),
                )?;
            }
        }
        Ok(StateDirs {
            parent,
            own,
            state,
            tmp,
            home,
            owned,
        })
    }

    /// What commands must not read: this server's folder and every server's parent.
    pub fn hidden(&self) -> Vec<PathBuf> {
        let mut hidden = vec![self.parent.clone()];
        if !self.own.starts_with(&self.parent) {
            hidden.push(self.own.clone());
        }
        hidden
    }

    /// Empties `tmp/` and `home/` (a reset), keeping the folders.
    pub fn clear_tmp(&self) -> io::Result<()> {
        empty(&self.tmp)?;
        empty(&self.home)
    }

    /// Removes this server's folder if it made it; else empties its `tmp/`.
    pub fn remove(&self) {
        let result = if self.owned {
            fs::remove_dir_all(&self.own)
        } else {
            self.clear_tmp()
        };
        if let Err(err) = result {
            tracing::warn!(dir = %self.own.display(), cause = %err, "could not remove the state folder");
        }
    }
}

/// Creates `dir` if missing, then sets its mode (whatever the umask made of it).
fn make(dir: &Path, mode: u32) -> io::Result<()> {
    match fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
            if !fs::symlink_metadata(dir)?.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a folder", dir.display()),
                ));
            }
            // A shared parent made by another user keeps its owner's mode.
            if fs::metadata(dir)?.permissions().mode() & 0o7777 == mode {
                return Ok(());
            }
        }
        Err(err) => return Err(err),
    }
    match fs::set_permissions(dir, fs::Permissions::from_mode(mode)) {
        Err(err) if err.kind() == io::ErrorKind::PermissionDenied => Ok(()),
        other => other,
    }
}

/// Removes everything inside `dir`.
pub fn empty(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            fs::remove_dir_all(entry.path())?;
        } else {
            fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// The servers whose folders are under the shared parent and who are gone: their identities.
pub fn dead_servers(parent: &Path) -> Vec<ServerId> {
    let Ok(entries) = fs::read_dir(parent) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.parse::<ServerId>().ok())
        })
        .filter(|id| !id.alive())
        .collect()
}

/// Removes a gone server's folder.
pub fn remove_dead(parent: &Path, id: &ServerId) {
    let dir = parent.join(id.to_string());
    match fs::remove_dir_all(&dir) {
        Ok(()) => {
            tracing::info!(dir = %dir.display(), "removed the folder of a server that is gone")
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => {
            tracing::warn!(dir = %dir.display(), cause = %err, "could not remove the folder of a server that is gone")
        }
    }
}
