//! An unprivileged user for commands (`--run-as`, when the server is root).

#![allow(unsafe_code)] // setgroups, setgid, setuid between the clone and the exec

use std::path::Path;

use nix::libc;
use sandbox_protocol::{Protection, ProtectionName};

use super::{check, protection};

/// The detail of `unprivileged_user` when the operator asked for root (`--run-as root`): not in
/// force, by their choice, so the server says it without a warning.
pub const DECLINED: &str = "--run-as root: commands run as root, as the operator asked (and the process limit does not bind root)";

/// The user to switch to (only when the server is root), and the protection.
pub fn prepare(run_as: Option<(u32, u32)>) -> (Option<(u32, u32)>, Protection) {
    let is_root = nix::unistd::geteuid().is_root();
    let name = ProtectionName::UnprivilegedUser;
    let protection = match (run_as, is_root) {
        (Some((0, _)), true) => protection(name, false, DECLINED),
        (Some((uid, gid)), true) => {
            protection(name, true, format!("commands run as uid {uid}, gid {gid}"))
        }
        (Some(_), false) => protection(
            name,
            true,
            "the server is not root; commands run as its own user",
        ),
        (None, true) => protection(
            name,
            false,
            "the server runs as root and --run-as is not set: commands run as root (and the process limit does not bind root)",
        ),
        (None, false) => protection(
            name,
            true,
            "commands run as the server's own, unprivileged user",
        ),
    };
    // Root asked for is no switch at all: commands run as the server does.
    (run_as.filter(|(uid, _)| is_root && *uid != 0), protection)
}

/// Whether commands that run as `uid`:`gid` (no supplementary group) can work in `workspace`:
/// enter every folder on the way to it (unless their mount namespace made it `reachable`), and
/// write in it unless it is `mapped` to them. An answer that names the folder that stops them
/// otherwise.
pub fn check_reach(
    workspace: &Path,
    uid: u32,
    gid: u32,
    mapped: bool,
    reachable: bool,
) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let allowed = |meta: &std::fs::Metadata, bit: u32| super::view::allowed(meta, uid, gid, bit);
    let workspace = workspace
        .canonicalize()
        .map_err(|err| format!("the workspace {}: {err}", workspace.display()))?;
    let show = |path: &Path, meta: &std::fs::Metadata| {
        format!(
            "{} is mode {:o}, owner {}:{}",
            path.display(),
            meta.mode() & 0o7777,
            meta.uid(),
            meta.gid()
        )
    };
    for folder in workspace.ancestors().filter(|_| !reachable) {
        let meta =
            std::fs::metadata(folder).map_err(|err| format!("{}: {err}", folder.display()))?;
        if !allowed(&meta, 0o1) {
            return Err(format!(
                "commands run as uid {uid} (--run-as) cannot reach the workspace {}: {}; use a workspace that user can enter, or another --run-as",
                workspace.display(),
                show(folder, &meta)
            ));
        }
    }
    let meta =
        std::fs::metadata(&workspace).map_err(|err| format!("{}: {err}", workspace.display()))?;
    if !mapped && !allowed(&meta, 0o2) {
        return Err(format!(
            "commands run as uid {uid} (--run-as) cannot write in the workspace: {} (it could not be mapped to them: the server has no mount namespace of the commands' own here)",
            show(&workspace, &meta)
        ));
    }
    Ok(())
}

/// In the child: drops supplementary groups, then the group, then the user. Raw system calls:
/// glibc's wrappers would signal every thread of the server, whose memory the child shares.
pub fn switch_in_child(uid: u32, gid: u32) -> std::io::Result<()> {
    let (uid, gid) = (uid as libc::c_long, gid as libc::c_long);
    // SAFETY: plain system calls with integer arguments; they change only the calling task.
    unsafe {
        check(libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) as i32)?;
        check(libc::syscall(libc::SYS_setresgid, gid, gid, gid) as i32)?;
        check(libc::syscall(libc::SYS_setresuid, uid, uid, uid) as i32)
    }
}
