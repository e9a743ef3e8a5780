//! Landlock: commands may write only beneath the workspace, their private temporary folder and
//! home, and `--writable` paths (and to the device nodes programs need), may not read the files
//! of the paths their [`View`] hides (the homes, the server's own files, …) but those it shows
//! again (the workspace, the toolchains, without their credential files), nor any device node
//! but those, and (ABI 6) may signal no process and connect to no abstract Unix socket outside
//! their own domain. Executing is not handled, so it stays allowed.

#![allow(unsafe_code)] // the Landlock system calls have no safe wrapper in nix

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::libc;
use sandbox_protocol::{Protection, ProtectionName};

use super::view::View;
use super::{ConfineRequest, Private, check, protection};

/// The device nodes commands may open, beneath `/dev` (the folders `pts` and `shm` whole).
pub const DEVICE_NODES: &[&str] = &[
    "null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts", "shm",
];

/// The prepared ruleset (none when turned off or unavailable), and what it does.
#[derive(Debug)]
pub struct Prepared {
    pub fd: Option<OwnedFd>,
    pub protection: Protection,
    /// The signal and abstract-socket scopes.
    pub scope: Protection,
}

/// The ruleset to restrict commands with. `ns_root` is the root of the commands' own mount
/// namespace as the server reaches it (their `/proc` and `/dev/shm` are other file systems
/// than the server's, so their rules name them there).
pub fn prepare(
    request: &ConfineRequest,
    workspace: &Path,
    private: Private<'_>,
    view: &View,
    ns_root: Option<&Path>,
) -> Prepared {
    let name = ProtectionName::Landlock;
    let off = |why: &str| Prepared {
        fd: None,
        protection: protection(name, false, why),
        scope: protection(
            ProtectionName::SignalScope,
            false,
            format!("no Landlock: {why}"),
        ),
    };
    if !request.landlock {
        return off("turned off (--no-landlock)");
    }
    let mut writable = vec![
        workspace.to_owned(),
        private.tmp.to_owned(),
        private.home.to_owned(),
    ];
    writable.extend(request.writable.iter().cloned());
    let mut hidden: Vec<PathBuf> = view.all_hidden();
    hidden.extend(view.blank.iter().cloned());
    // What the view shows inside hidden folders is read again (the private folders live inside
    // the hidden state folders; the workspace may be in a hidden home), but for the credential
    // files of a shown toolchain.
    let mut reread: Vec<PathBuf> = view.keep.clone();
    reread.extend(punch(view.read_only.clone(), &view.blank));
    let devices = Devices::find(ns_root);
    match ruleset(&writable, &hidden, &reread, &devices) {
        Ok((fd, abi)) => Prepared {
            fd: Some(fd),
            protection: protection(name, true, describe(abi, &writable, &hidden)),
            scope: if abi >= 6 {
                protection(
                    ProtectionName::SignalScope,
                    true,
                    format!(
                        "Landlock ABI {abi} scopes: commands may signal only the sandbox's processes and connect to no abstract Unix socket made outside it"
                    ),
                )
            } else {
                protection(
                    ProtectionName::SignalScope,
                    false,
                    format!(
                        "Landlock ABI {abi} has no scopes (ABI 6, Linux 6.12): commands may signal any process their user may"
                    ),
                )
            },
        },
        Err(why) => off(&why),
    }
}

/// Where the allowed device nodes are, and the commands' own file systems the rules must name.
#[derive(Debug, Default)]
struct Devices {
    /// Read and written: the host's nodes (`pts` whole).
    nodes: Vec<PathBuf>,
    /// Written like the workspace: the host's `/dev/shm`, and the commands' own.
    shm: Vec<PathBuf>,
    /// Read only: the commands' own `/proc`.
    proc: Option<PathBuf>,
}

impl Devices {
    fn find(ns_root: Option<&Path>) -> Devices {
        let (shm, nodes): (Vec<PathBuf>, Vec<PathBuf>) = DEVICE_NODES
            .iter()
            .map(|name| Path::new("/dev").join(name))
            .filter(|path| path.exists())
            .partition(|path| path.ends_with("shm"));
        let mut devices = Devices {
            nodes,
            shm,
            proc: ns_root.map(|root| root.join("proc")),
        };
        if let Some(shm) = ns_root
            .map(|root| root.join("dev/shm"))
            .filter(|p| p.exists())
        {
            devices.shm.push(shm);
        }
        devices
    }
}

fn describe(abi: i64, writable: &[PathBuf], hidden: &[PathBuf]) -> String {
    let paths: Vec<String> = writable.iter().map(|p| p.display().to_string()).collect();
    let reading = if hidden.is_empty() {
        "reading stays allowed".to_owned()
    } else {
        let names: Vec<String> = hidden.iter().map(|p| p.display().to_string()).collect();
        format!(
            "reading stays allowed except the files of {}",
            names.join(", ")
        )
    };
    format!(
        "ABI {abi}: writes only beneath {} and to the device nodes programs need, no device node made; {reading}; no other device node opens",
        paths.join(", ")
    )
}

/// In the child, or a cgroup's thread (after `PR_SET_NO_NEW_PRIVS`): restricts the calling
/// thread, and what it clones afterwards, to the ruleset.
pub fn restrict_self(ruleset: RawFd) -> std::io::Result<()> {
    // SAFETY: a raw system call on a descriptor prepared before the clone.
    check(unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0) } as i32)
}

// Landlock ABI constants (include/uapi/linux/landlock.h).
const ACCESS_FS_WRITE_FILE: u64 = 1 << 1;
const ACCESS_FS_REMOVE_DIR: u64 = 1 << 4;
const ACCESS_FS_REMOVE_FILE: u64 = 1 << 5;
const ACCESS_FS_MAKE_CHAR: u64 = 1 << 6;
const ACCESS_FS_MAKE_DIR: u64 = 1 << 7;
const ACCESS_FS_MAKE_REG: u64 = 1 << 8;
const ACCESS_FS_MAKE_SOCK: u64 = 1 << 9;
const ACCESS_FS_MAKE_FIFO: u64 = 1 << 10;
const ACCESS_FS_MAKE_BLOCK: u64 = 1 << 11;
const ACCESS_FS_MAKE_SYM: u64 = 1 << 12;
const ACCESS_FS_REFER: u64 = 1 << 13;
const ACCESS_FS_TRUNCATE: u64 = 1 << 14;
const RULE_PATH_BENEATH: libc::c_int = 1;
const CREATE_RULESET_VERSION: u32 = 1;

const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

const ACCESS_FS_READ_FILE: u64 = 1 << 2;

/// The roots beneath which reading files stays allowed when `hidden` paths must not be read:
/// starting from `/`, each ancestor of a hidden path is replaced by its other entries. (Entries
/// created later inside such an ancestor are not readable; the hidden paths themselves never.)
fn readable_roots(hidden: &[PathBuf]) -> Vec<PathBuf> {
    punch(vec![PathBuf::from("/")], hidden)
}

/// `roots` with every path of `hidden` punched out: a root that holds one is replaced by its
/// other entries, down to the hidden path.
fn punch(mut roots: Vec<PathBuf>, hidden: &[PathBuf]) -> Vec<PathBuf> {
    for target in hidden {
        let mut next = Vec::new();
        for root in roots {
            if target == &root {
                continue;
            }
            if !target.starts_with(&root) {
                next.push(root);
                continue;
            }
            // Punch out: walk from `root` down to `target`, keeping every sibling on the way.
            let mut dir = root;
            for component in target.strip_prefix(&dir).expect("an ancestor").components() {
                let child = dir.join(component);
                if let Ok(entries) = std::fs::read_dir(&dir) {
                    // A symlink is never a root: a rule is opened through it and would grant
                    // its target whole (`/var/run` is `/run`, where a hidden path may lie);
                    // the target has its own rule, or none, where it really is.
                    for entry in entries.flatten() {
                        let link = entry.file_type().is_ok_and(|t| t.is_symlink());
                        if entry.path() != child && !link {
                            next.push(entry.path());
                        }
                    }
                }
                dir = child;
            }
        }
        roots = next;
    }
    roots
}

/// A ruleset that handles every kind of write, granting them beneath `writable` (device nodes
/// made nowhere; file writes to the allowed device nodes). Executing is not handled, so it
/// stays allowed; reading files is granted everywhere but beneath `hidden` and `/dev`, and
/// again beneath `reread` and to the allowed device nodes and the commands' own `/proc`.
fn ruleset(
    writable: &[PathBuf],
    hidden: &[PathBuf],
    reread: &[PathBuf],
    devices: &Devices,
) -> Result<(OwnedFd, i64), String> {
    let abi = abi()?;
    let writes = handled_writes(abi);
    // Reading is handled: device nodes and hidden paths are unreadable, the rest is granted.
    let reads = ACCESS_FS_READ_FILE;
    let ruleset = create_ruleset(abi, writes | reads)?;
    let rights = Rights {
        reads,
        // Handled, never granted: no command makes a device node anywhere.
        writes: writes & !(ACCESS_FS_MAKE_CHAR | ACCESS_FS_MAKE_BLOCK),
        device_writes: ACCESS_FS_WRITE_FILE | if abi >= 3 { ACCESS_FS_TRUNCATE } else { 0 },
    };
    for (path, access) in grants(writable, hidden, reread, devices, rights) {
        add_rule(&ruleset, &path, access)?;
    }
    Ok((ruleset, abi))
}

/// The kernel's Landlock ABI version, or why there is none. Its own step: every later step
/// depends on what this version handles.
fn abi() -> Result<i64, String> {
    // SAFETY: the version query passes no pointer.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    if abi < 1 {
        return Err(format!(
            "Landlock is not available in this kernel ({})",
            std::io::Error::last_os_error()
        ));
    }
    Ok(abi)
}

/// Every kind of write the kernel of `abi` knows: renames and links across folders from ABI 2,
/// truncation from ABI 3.
fn handled_writes(abi: i64) -> u64 {
    let mut writes = ACCESS_FS_WRITE_FILE
        | ACCESS_FS_REMOVE_DIR
        | ACCESS_FS_REMOVE_FILE
        | ACCESS_FS_MAKE_CHAR
        | ACCESS_FS_MAKE_DIR
        | ACCESS_FS_MAKE_REG
        | ACCESS_FS_MAKE_SOCK
        | ACCESS_FS_MAKE_FIFO
        | ACCESS_FS_MAKE_BLOCK
        | ACCESS_FS_MAKE_SYM;
    if abi >= 2 {
        writes |= ACCESS_FS_REFER;
    }
    if abi >= 3 {
        writes |= ACCESS_FS_TRUNCATE;
    }
    writes
}

/// A new ruleset handling the file rights `handled`; from ABI 6 it also scopes abstract Unix
/// sockets and signals to the commands' domain.
fn create_ruleset(abi: i64, handled: u64) -> Result<OwnedFd, String> {
    let attr = RulesetAttr {
        handled_access_fs: handled,
        handled_access_net: 0,
        scoped: if abi >= 6 {
            SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        } else {
            0
        },
    };
    // Before ABI 6 the kernel knows only the first field.
    let size = if abi >= 6 {
        std::mem::size_of::<RulesetAttr>()
    } else {
        std::mem::size_of::<u64>()
    };
    // SAFETY: `attr` is a valid ruleset attribute of at least the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            size,
            0u32,
        )
    };
    if fd < 0 {
        return Err(format!(
            "creating a Landlock ruleset failed ({})",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: the kernel just returned this descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The rights the rules grant: reading, the writes a command may make, and the writes to an
/// allowed device node.
#[derive(Debug, Clone, Copy)]
struct Rights {
    reads: u64,
    writes: u64,
    device_writes: u64,
}

/// Each path a rule is added for, with its rights, in the order the rules are added.
fn grants(
    writable: &[PathBuf],
    hidden: &[PathBuf],
    reread: &[PathBuf],
    devices: &Devices,
    rights: Rights,
) -> Vec<(PathBuf, u64)> {
    let Rights {
        reads,
        writes: granted,
        device_writes: dev_writes,
    } = rights;
    let mut grants: Vec<(PathBuf, u64)> = writable.iter().map(|p| (p.clone(), granted)).collect();
    // `/dev` is punched out of what may be read, then its allowed nodes granted back.
    let mut unreadable = hidden.to_vec();
    unreadable.push(PathBuf::from("/dev"));
    grants.extend(
        readable_roots(&unreadable)
            .into_iter()
            .map(|root| (root, reads)),
    );
    grants.extend(reread.iter().map(|path| (path.clone(), reads)));
    grants.extend(
        devices
            .nodes
            .iter()
            .map(|node| (node.clone(), dev_writes | reads)),
    );
    grants.extend(devices.shm.iter().map(|shm| (shm.clone(), granted | reads)));
    grants.extend(devices.proc.iter().map(|proc| (proc.clone(), reads)));
    grants
}

/// Grants `access` beneath `path` (only the file rights when it is a file).
fn add_rule(ruleset: &OwnedFd, path: &Path, access: u64) -> Result<(), String> {
    let c_path = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: a NUL in the path", path.display()))?;
    // SAFETY: a valid, NUL-terminated path.
    let parent = unsafe { libc::open(c_path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if parent < 0 {
        return Err(format!(
            "opening {} for Landlock: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: just opened.
    let parent = unsafe { OwnedFd::from_raw_fd(parent) };
    // A directory may hold every write right; a file only the file ones.
    let is_dir = path.is_dir();
    let allowed = if is_dir {
        access
    } else {
        access & (ACCESS_FS_WRITE_FILE | ACCESS_FS_TRUNCATE | ACCESS_FS_READ_FILE)
    };
    if allowed == 0 {
        return Ok(());
    }
    let rule = PathBeneathAttr {
        allowed_access: allowed,
        parent_fd: parent.as_raw_fd(),
    };
    // SAFETY: a valid rule for a path-beneath rule type.
    let added = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            RULE_PATH_BENEATH,
            &rule as *const PathBeneathAttr,
            0u32,
        )
    };
    if added < 0 {
        return Err(format!(
            "adding a Landlock rule for {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A symlink among the entries beside a hidden path would be opened, as a rule, through
    /// its target: `/var/run` granted `/run`, and with it a hidden `/run/secrets`.
    #[test]
    fn a_symlink_beside_a_hidden_path_is_never_a_readable_root() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(root.join("run/secrets")).expect("mkdir");
        std::fs::create_dir_all(root.join("var/lib")).expect("mkdir");
        std::fs::create_dir_all(root.join("var/tmp")).expect("mkdir");
        std::os::unix::fs::symlink(root.join("run"), root.join("var/run")).expect("link");
        let roots = punch(
            vec![root.clone()],
            &[root.join("var/tmp"), root.join("run/secrets")],
        );
        assert!(roots.contains(&root.join("var/lib")), "{roots:?}");
        assert!(!roots.contains(&root.join("var/run")), "{roots:?}");
        assert!(
            !roots
                .iter()
                .any(|r| r.starts_with(root.join("run/secrets"))),
            "{roots:?}"
        );
    }
}
