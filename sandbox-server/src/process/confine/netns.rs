//! A fresh, empty network namespace per command, where the host permits one.

#![allow(unsafe_code)] // fork and unshare

use nix::libc;
use sandbox_protocol::{Protection, ProtectionName};

use super::{check, protection};

/// Whether commands get a namespace, and the protection.
///
/// The probe forks and waits for its child directly: it runs before the reaper starts, which
/// is the one exception to "only the reaper waits for children".
pub fn prepare() -> (bool, Protection) {
    let available = probe();
    let detail = if available {
        "each command also gets a fresh network namespace with no interfaces"
    } else {
        "the host does not allow a new network namespace (seccomp still applies)"
    };
    (
        available,
        protection(ProtectionName::NetworkNamespace, available, detail),
    )
}

/// In the child: leaves the server's network namespace for a new, empty one.
pub fn enter_in_child() -> std::io::Result<()> {
    // SAFETY: unshare with a flag; async-signal-safe.
    check(unsafe { libc::unshare(libc::CLONE_NEWNET) })
}

/// Whether a new network namespace can be made here: tried in a throwaway child.
fn probe() -> bool {
    // SAFETY: the child only calls unshare and _exit.
    match unsafe { libc::fork() } {
        0 => {
            let status = if unsafe { libc::unshare(libc::CLONE_NEWNET) } == 0 {
                0
            } else {
                1
            };
            unsafe { libc::_exit(status) }
        }
        pid if pid > 0 => {
            let mut status = 0;
            // SAFETY: waiting for the child just forked (before the reaper starts).
            unsafe { libc::waitpid(pid, &mut status, 0) };
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
        }
        _ => false,
    }
}
