//! One empty network namespace for the sandbox's commands, made once at start and entered by
//! each command with `setns`, where the host permits one.
//!
//! Making a namespace per command cost about 0.7 ms of every `bash` call (and as much again in
//! the kernel's deferred teardown); entering a prepared one costs a few microseconds. The
//! commands share it with each other, as they share the workspace, and with nothing else: it
//! has no interfaces, not even a loopback that is up, and `--network none`'s seccomp filter
//! keeps commands from creating any (only Unix sockets may be opened).

#![allow(unsafe_code)] // unshare and setns

use std::os::fd::OwnedFd;

use nix::libc;
use sandbox_protocol::{Protection, ProtectionName};

use super::{check, protection};

/// The namespace commands enter, and the protection.
pub fn prepare() -> (Option<OwnedFd>, Protection) {
    match make() {
        Ok(namespace) => (
            Some(namespace),
            protection(
                ProtectionName::NetworkNamespace,
                true,
                "commands run in a network namespace of their own with no interfaces (made once at start)",
            ),
        ),
        Err(err) => (
            None,
            protection(
                ProtectionName::NetworkNamespace,
                false,
                format!(
                    "the host does not allow a new network namespace ({err}); seccomp still applies"
                ),
            ),
        ),
    }
}

/// In the child: enters the prepared namespace (a descriptor opened before the clone).
pub fn enter_in_child(namespace: libc::c_int) -> std::io::Result<()> {
    // SAFETY: setns with a descriptor and a flag; async-signal-safe.
    check(unsafe { libc::setns(namespace, libc::CLONE_NEWNET) })
}

/// Makes a namespace in a throwaway thread (a network namespace belongs to a thread, so the
/// server's own is untouched) and keeps it alive by a descriptor.
fn make() -> std::io::Result<OwnedFd> {
    std::thread::Builder::new()
        .name("netns".to_owned())
        .spawn(|| {
            // SAFETY: unshare with a flag; affects only this thread, which ends right after.
            check(unsafe { libc::unshare(libc::CLONE_NEWNET) })?;
            let file = std::fs::File::open("/proc/thread-self/ns/net")?;
            Ok(OwnedFd::from(file))
        })?
        .join()
        .map_err(|_| std::io::Error::other("the namespace thread panicked"))?
}
