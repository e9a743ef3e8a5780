//! What commands see of the host's files, decided once at start (only `stat`s and the password
//! database are read here; nothing is mounted).
//!
//! Hidden: every home folder (`/root`, `/home`, the server's own and its `sudo` caller's,
//! wherever they are), per-user runtime folders and what the temporary folders hold that is a
//! credential (agents' sockets, Kerberos caches), secrets mounted for containers, the sockets
//! of container engines,
//! the server's own files (`--hidden`, the token file, the state folders), and each folder on
//! the way to the workspace that the commands' user may not enter. Shown again where they are:
//! the workspace and the `--writable` paths, read-write; the commands' private home and
//! temporary folder; and, read-only, the toolchains found in the hidden homes (`~/.cargo`,
//! `~/.rustup`, `~/.pyenv`, `~/.local/bin`, `~/.nvm`, …) and the `--read-only` paths, without
//! the credential files a toolchain folder holds (`~/.cargo/credentials.toml`, …).
//!
//! The namespaces' init applies a [`View`] as mounts (the hidden folders are empty, read-only
//! file systems; a hidden file is an empty one), and Landlock applies the same lists as reads
//! refused, so a host that allows no mount namespace still hides what is listed.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The folders of a home that hold a toolchain commands may run, shown read-only.
pub const TOOLCHAINS: &[&str] = &[
    ".cargo",
    ".rustup",
    ".pyenv",
    ".local/bin",
    ".local/lib",
    ".local/share/uv",
    ".nvm",
    ".volta",
    ".bun",
    ".deno",
    ".rbenv",
    ".sdkman",
    "go",
];

/// Variables that name a toolchain's folder; one that points into a hidden home is shown
/// read-only too, and set for commands when their home is no longer the one it lives in.
pub const TOOLCHAIN_VARIABLES: &[(&str, &str)] = &[
    ("CARGO_HOME", ".cargo"),
    ("RUSTUP_HOME", ".rustup"),
    ("PYENV_ROOT", ".pyenv"),
    ("NVM_DIR", ".nvm"),
    ("VOLTA_HOME", ".volta"),
    ("BUN_INSTALL", ".bun"),
];

/// Files a toolchain folder may hold that are credentials, hidden inside a shown folder.
pub const TOOLCHAIN_SECRETS: &[&str] = &[
    "credentials",
    "credentials.toml",
    ".credentials.toml",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    "auth.json",
];

/// Folders hidden besides the homes: per-user runtime folders (agents' sockets, keyrings) and
/// container secrets.
pub const SYSTEM_HIDDEN: &[&str] = &["/run/user", "/run/secrets", "/var/run/secrets"];

/// The temporary folders, where some programs keep what is a credential.
const TEMPORARY: &[&str] = &["/tmp", "/var/tmp"];

/// Entries of the temporary folders that are credentials by their names: an ssh agent's socket
/// folder, a Kerberos ticket cache, a desktop session's sockets, a terminal multiplexer's. The
/// rest of the temporary folders stays as the host has it (tools and data live there too).
const TEMPORARY_SECRETS: &[&str] = &[
    "ssh-",
    "krb5cc",
    ".X11-unix",
    ".ICE-unix",
    ".XIM-unix",
    "tmux-",
    "keyring-",
    "gpg-",
];

/// The control sockets of container engines and hypervisors: whoever connects is root.
pub const ENGINE_SOCKETS: &[&str] = &[
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/run/crio/crio.sock",
    "/run/libvirt",
    "/var/run/libvirt",
];

/// What the view is made of, as the operator set it.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// Whether homes and the system's temporary folders are hidden (off in a task's container,
    /// whose homes are the image's and whose files the file tools reach anyway).
    pub hide_homes: bool,
    /// The workspace, shown read-write.
    pub workspace: &'a Path,
    /// `--writable` paths, shown read-write.
    pub writable: &'a [PathBuf],
    /// The commands' private temporary folder and home, shown read-write.
    pub private: &'a [PathBuf],
    /// `--hidden` and the server's own files: hidden wherever they are.
    pub hidden: &'a [PathBuf],
    /// `--read-only`: paths shown read-only inside hidden folders.
    pub read_only: &'a [PathBuf],
    /// The commands' user, when they run as another one: each folder on the way to a shown
    /// path that this user may not enter is hidden (the shown path is then reachable).
    pub run_as: Option<(u32, u32)>,
}

/// The lists that the mounts and the Landlock rules apply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    /// Hidden: a folder is covered by an empty read-only file system, a file by an empty file.
    pub hide: Vec<PathBuf>,
    /// Shown read-write at their own path (the workspace, `--writable`, the private folders).
    pub keep: Vec<PathBuf>,
    /// Shown read-only at their own path (toolchains, `--read-only`).
    pub read_only: Vec<PathBuf>,
    /// Files inside `read_only` folders hidden again (credentials).
    pub blank: Vec<PathBuf>,
    /// Folders on the way to a shown path that the commands' user could not enter.
    pub unreachable: Vec<PathBuf>,
    /// The toolchain variables to set for commands whose home is a private one.
    pub toolchain_env: Vec<(String, String)>,
}

impl View {
    /// Computes the view from the host as it is now: only existing paths are listed, each
    /// canonical (a link such as `/var/run` is followed once, here).
    pub fn compute(request: &Request<'_>) -> View {
        let mut hide: BTreeSet<PathBuf> = request.hidden.iter().filter_map(existing).collect();
        let mut read_only = BTreeSet::new();
        let toolchain_env = if request.hide_homes {
            let homes = homes();
            hide_host(&homes, &mut hide);
            toolchains(&homes, &hide, &mut read_only)
        } else {
            Vec::new()
        };
        read_only.extend(request.read_only.iter().filter_map(existing));
        let keep: BTreeSet<PathBuf> = std::iter::once(request.workspace)
            .chain(request.writable.iter().map(PathBuf::as_path))
            .chain(request.private.iter().map(PathBuf::as_path))
            .filter_map(existing)
            .collect();
        // A shown path is never hidden as a whole: the hidden path around it stays hidden, and
        // the shown one appears inside it.
        hide.retain(|path| !keep.contains(path) && !read_only.contains(path));
        let blank: Vec<PathBuf> = read_only
            .iter()
            .filter(|folder| folder.is_dir())
            .flat_map(|folder| TOOLCHAIN_SECRETS.iter().map(move |name| folder.join(name)))
            .filter(|path| std::fs::symlink_metadata(path).is_ok())
            .collect();
        let unreachable = unreachable(request.run_as, &keep, &read_only, &hide);
        View {
            hide: hide.into_iter().collect(),
            keep: keep.into_iter().collect(),
            read_only: read_only.into_iter().collect(),
            blank,
            unreachable,
            toolchain_env,
        }
    }

    /// Everything the mounts hide: the hidden paths and the closed folders on the way.
    pub fn all_hidden(&self) -> Vec<PathBuf> {
        let mut all = self.hide.clone();
        all.extend(self.unreachable.iter().cloned());
        all
    }
}

/// Adds to `hide` what `--show-homes` would leave visible: the `homes`, the system's runtime
/// and secret folders, the credentials in the temporary folders and the engines' sockets.
fn hide_host(homes: &[PathBuf], hide: &mut BTreeSet<PathBuf>) {
    hide.extend(homes.iter().cloned());
    hide.extend(SYSTEM_HIDDEN.iter().map(PathBuf::from).filter_map(existing));
    hide.extend(temporary_secrets());
    hide.extend(
        ENGINE_SOCKETS
            .iter()
            .map(PathBuf::from)
            .filter_map(existing),
    );
}

/// The toolchains in the hidden homes, added to `read_only`, and the variables that name them
/// for commands whose home is another folder. Its own step: it reads the homes and the
/// server's environment, nothing else of the view.
fn toolchains(
    homes: &[PathBuf],
    hide: &BTreeSet<PathBuf>,
    read_only: &mut BTreeSet<PathBuf>,
) -> Vec<(String, String)> {
    let mut toolchain_env = Vec::new();
    for home in homes {
        read_only.extend(
            TOOLCHAINS
                .iter()
                .map(|name| home.join(name))
                .filter_map(existing),
        );
    }
    for (variable, _) in TOOLCHAIN_VARIABLES {
        let Some(path) = std::env::var_os(variable).map(PathBuf::from) else {
            continue;
        };
        if let Some(path) = existing(path).filter(|p| under_any(p, hide)) {
            toolchain_env.push(((*variable).to_owned(), path.display().to_string()));
            read_only.insert(path);
        }
    }
    // A toolchain found in a home but not named by its variable is named for commands
    // too, since their home is another folder (the first home that has it wins).
    for (variable, name) in TOOLCHAIN_VARIABLES {
        if toolchain_env.iter().any(|(v, _)| v == variable) {
            continue;
        }
        if let Some(found) = homes
            .iter()
            .map(|h| h.join(name))
            .find(|p| p.is_dir())
            .and_then(existing)
        {
            toolchain_env.push(((*variable).to_owned(), found.display().to_string()));
        }
    }
    toolchain_env
}

/// The first folder the commands' user may not enter on the way to each shown path, each
/// once; none when commands run as the server's user.
fn unreachable(
    run_as: Option<(u32, u32)>,
    keep: &BTreeSet<PathBuf>,
    read_only: &BTreeSet<PathBuf>,
    hide: &BTreeSet<PathBuf>,
) -> Vec<PathBuf> {
    let mut unreachable = Vec::new();
    if let Some((uid, gid)) = run_as {
        for shown in keep.iter().chain(read_only.iter()) {
            if let Some(folder) = first_closed(shown, uid, gid, hide)
                && !unreachable.contains(&folder)
            {
                unreachable.push(folder);
            }
        }
    }
    unreachable
}

/// The homes of this host that commands must not see: `/root`, `/home`, and the server's own
/// and its `sudo` caller's homes wherever they are (never `/` or a top-level system folder).
pub fn homes() -> Vec<PathBuf> {
    let mut homes: Vec<PathBuf> = vec![PathBuf::from("/root"), PathBuf::from("/home")];
    homes.extend(std::env::var_os("HOME").map(PathBuf::from));
    if let Ok(Some(user)) = nix::unistd::User::from_uid(nix::unistd::geteuid()) {
        homes.push(user.dir);
    }
    if let Some(name) = std::env::var_os("SUDO_USER")
        && let Ok(Some(user)) = nix::unistd::User::from_name(&name.to_string_lossy())
    {
        homes.push(user.dir);
    }
    let mut found: Vec<PathBuf> = homes
        .into_iter()
        .filter_map(existing)
        .filter(|home| home.is_dir() && is_a_home(home))
        .collect();
    found.sort();
    found.dedup();
    found
}

/// The entries of the temporary folders that are credentials by their names, as they are now.
fn temporary_secrets() -> Vec<PathBuf> {
    TEMPORARY
        .iter()
        .filter_map(|folder| std::fs::read_dir(folder).ok())
        .flat_map(|entries| entries.flatten())
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            TEMPORARY_SECRETS
                .iter()
                .any(|prefix| name.starts_with(prefix))
        })
        .filter_map(|entry| existing(entry.path()))
        .collect()
}

/// A folder that may be a user's home: not `/`, and not a top-level system folder a user's
/// entry in the password database sometimes names (`/`, `/usr`, `/var`, `/nonexistent`, …).
fn is_a_home(path: &Path) -> bool {
    let depth = path.components().count();
    path == Path::new("/root") || path == Path::new("/home") || depth > 2
}

/// The canonical form of `path`, when it exists (a dangling link does not).
fn existing(path: impl AsRef<Path>) -> Option<PathBuf> {
    let path = path.as_ref();
    if !path.is_absolute() {
        return None;
    }
    path.canonicalize().ok()
}

fn under_any(path: &Path, folders: &BTreeSet<PathBuf>) -> bool {
    folders.iter().any(|folder| path.starts_with(folder))
}

/// Whether `uid`:`gid` (no supplementary group) may do `bit` (1 enter, 2 write, 4 read) to a
/// file of `meta`.
pub fn allowed(meta: &std::fs::Metadata, uid: u32, gid: u32, bit: u32) -> bool {
    let mode = meta.mode();
    if uid == 0 {
        return true;
    }
    if meta.uid() == uid {
        mode & (bit << 6) != 0
    } else if meta.gid() == gid {
        mode & (bit << 3) != 0
    } else {
        mode & bit != 0
    }
}

/// The first folder above `shown` (from `/` down) that `uid` may not enter and that no hidden
/// path already covers: hiding it lets the shown path be mounted inside an open folder.
fn first_closed(shown: &Path, uid: u32, gid: u32, hidden: &BTreeSet<PathBuf>) -> Option<PathBuf> {
    let mut ancestors: Vec<&Path> = shown.ancestors().skip(1).collect();
    ancestors.reverse();
    for folder in ancestors {
        if hidden.contains(folder) {
            // Everything below is rebuilt open by the mounts.
            return None;
        }
        let meta = std::fs::metadata(folder).ok()?;
        if !allowed(&meta, uid, gid, 1) {
            return Some(folder.to_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(list: &[PathBuf], root: &Path) -> Vec<String> {
        list.iter()
            .filter_map(|p| p.strip_prefix(root).ok())
            .map(|p| p.display().to_string())
            .collect()
    }

    #[test]
    fn a_shown_path_inside_a_hidden_one_stays_shown_and_its_secrets_hidden() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let home = root.join("home");
        for folder in [".cargo/bin", ".ssh", "ws"] {
            std::fs::create_dir_all(home.join(folder)).expect("mkdir");
        }
        std::fs::write(home.join(".cargo/credentials.toml"), "token").expect("write");
        let workspace = home.join("ws");
        let hidden = [home.clone()];
        let read_only = [home.join(".cargo")];
        let view = View::compute(&Request {
            hide_homes: false,
            workspace: &workspace,
            writable: &[],
            private: &[],
            hidden: &hidden,
            read_only: &read_only,
            run_as: None,
        });
        assert_eq!(paths(&view.hide, &root), ["home"]);
        assert_eq!(paths(&view.keep, &root), ["home/ws"]);
        assert_eq!(paths(&view.read_only, &root), ["home/.cargo"]);
        assert_eq!(paths(&view.blank, &root), ["home/.cargo/credentials.toml"]);
    }

    #[test]
    fn a_folder_the_user_cannot_enter_on_the_way_is_hidden_and_rebuilt_open() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let private = root.join("private");
        let workspace = private.join("inner/ws");
        std::fs::create_dir_all(&workspace).expect("mkdir");
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let owner = std::fs::metadata(&private).expect("stat").uid();
        // The view of the user `uid`, whose group has the same number.
        let view_as = |uid: u32| {
            View::compute(&Request {
                hide_homes: false,
                workspace: &workspace,
                writable: &[],
                private: &[],
                hidden: &[],
                read_only: &[],
                run_as: Some((uid, uid)),
            })
        };
        let view = view_as(owner + 1);
        // The temporary folder's own ancestors may be closed too on some hosts; the private
        // folder is the one this test made closed.
        assert!(
            view.unreachable.iter().any(|p| p == &private)
                || view.unreachable.iter().any(|p| private.starts_with(p)),
            "{view:?}"
        );
        let open = view_as(owner);
        assert!(open.unreachable.is_empty(), "{open:?}");
    }

    #[test]
    fn homes_are_never_the_root_or_a_system_folder() {
        for home in homes() {
            assert!(is_a_home(&home), "{}", home.display());
            assert_ne!(home, Path::new("/"));
        }
        assert!(!is_a_home(Path::new("/")));
        assert!(!is_a_home(Path::new("/var")));
        assert!(is_a_home(Path::new("/var/lib/builder")));
    }
}
