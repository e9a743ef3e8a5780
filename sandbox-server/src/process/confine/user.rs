//! An unprivileged user for commands (`--run-as`, when the server is root).

#![allow(unsafe_code)] // setgroups, setgid, setuid between the clone and the exec

use nix::libc;
use sandbox_protocol::{Protection, ProtectionName};

use super::{check, protection};

/// The user to switch to (only when the server is root), and the protection.
pub fn prepare(run_as: Option<(u32, u32)>) -> (Option<(u32, u32)>, Protection) {
    let is_root = nix::unistd::geteuid().is_root();
    let name = ProtectionName::UnprivilegedUser;
    let protection = match (run_as, is_root) {
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
    (run_as.filter(|_| is_root), protection)
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
