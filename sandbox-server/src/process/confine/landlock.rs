//! Landlock: commands may write only beneath the workspace, the private temporary folder and
//! `--writable` paths (and files under `/dev`), and may not read the files of hidden paths.
//! Executing is not handled, so it stays allowed.

#![allow(unsafe_code)] // the Landlock system calls have no safe wrapper in nix

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::libc;
use sandbox_protocol::{Protection, ProtectionName};

use super::{ConfineRequest, check, protection};

/// The ruleset to restrict commands with (none when turned off or unavailable), and the
/// protection.
pub fn prepare(
    request: &ConfineRequest,
    workspace: &Path,
    private_tmp: &Path,
) -> (Option<OwnedFd>, Protection) {
    let name = ProtectionName::Landlock;
    if !request.landlock {
        return (None, protection(name, false, "turned off (--no-landlock)"));
    }
    let mut writable = vec![workspace.to_owned(), private_tmp.to_owned()];
    writable.extend(request.writable.iter().cloned());
    let hidden: Vec<PathBuf> = request
        .hidden
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    // The private temporary folder lives inside the hidden state folders; it is read again.
    let reread: Vec<PathBuf> = private_tmp.canonicalize().into_iter().collect();
    match ruleset(&writable, &hidden, &reread) {
        Ok((fd, abi)) => (
            Some(fd),
            protection(name, true, describe(abi, &writable, &hidden)),
        ),
        Err(why) => (None, protection(name, false, why)),
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
        "ABI {abi}: writes only beneath {} and /dev, no device nodes; {reading}",
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

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
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
    let mut roots = vec![PathBuf::from("/")];
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
                    for entry in entries.flatten() {
                        if entry.path() != child {
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

/// A ruleset that handles every kind of write, granting them beneath `writable` (but device
/// nodes nowhere; and file writes beneath `/dev`, for `/dev/null` and the terminal). Executing
/// is not handled, so it stays allowed; reading files is handled only when some paths are
/// `hidden`, and then granted everywhere but there, and again beneath `reread`.
fn ruleset(
    writable: &[PathBuf],
    hidden: &[PathBuf],
    reread: &[PathBuf],
) -> Result<(OwnedFd, i64), String> {
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
    let reads = if hidden.is_empty() {
        0
    } else {
        ACCESS_FS_READ_FILE
    };
    let attr = RulesetAttr {
        handled_access_fs: writes | reads,
    };
    // SAFETY: `attr` is a valid ruleset attribute of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
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
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let dev_writes = ACCESS_FS_WRITE_FILE | if abi >= 3 { ACCESS_FS_TRUNCATE } else { 0 };
    // Handled, never granted: no command makes a device node anywhere.
    let granted = writes & !(ACCESS_FS_MAKE_CHAR | ACCESS_FS_MAKE_BLOCK);
    let mut grants: Vec<(PathBuf, u64)> = writable.iter().map(|p| (p.clone(), granted)).collect();
    grants.push((PathBuf::from("/dev"), dev_writes));
    if reads != 0 {
        grants.extend(readable_roots(hidden).into_iter().map(|root| (root, reads)));
        grants.extend(reread.iter().map(|path| (path.clone(), reads)));
    }
    for (path, access) in grants {
        add_rule(&ruleset, &path, access)?;
    }
    Ok((ruleset, abi))
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
