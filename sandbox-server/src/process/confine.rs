//! Containment of each command, applied between the clone and the exec, one mechanism per file:
//! [`environment`] (a clean environment), [`rlimits`] (resource limits), [`user`] (an
//! unprivileged user), [`landlock`] (writes only in the workspace and a private temporary
//! folder; hidden paths unreadable), [`seccomp`] (only Unix sockets under `--network none`) and
//! [`netns`] (a network namespace of the commands' own, where the host permits one) and [`cgroups`] (a group
//! per command where this process may create them).
//!
//! Everything that allocates is prepared here in the parent; the child only makes
//! system calls on values prepared before the clone (the rules of [`super::spawn`]).

#![allow(unsafe_code)] // every mechanism ends in raw system calls; see each `// SAFETY:`

pub mod cgroups;
pub mod environment;
pub mod landlock;
pub mod netns;
pub mod rlimits;
pub mod seccomp;
pub mod user;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::libc;
use sandbox_protocol::{Protection, ProtectionName};

pub use rlimits::Rlimits;

/// What the operator asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfineRequest {
    pub rlimits: Rlimits,
    pub landlock: bool,
    /// Extra paths commands may write beneath, besides the workspace and the private temp folder.
    pub writable: Vec<PathBuf>,
    /// Paths whose files commands may not read (names stay listable); the token file by default.
    pub hidden: Vec<PathBuf>,
    pub network_none: bool,
    /// The network is the container's, as this says (`--network container`).
    pub network_detail: Option<String>,
    pub run_as: Option<(u32, u32)>,
    /// Extra environment variables passed through, besides the base allow-list.
    pub env_allow: Vec<String>,
}

/// The prepared containment, shared by every spawn.
#[derive(Debug)]
pub struct Confinement {
    pub env: Vec<(String, String)>,
    rlimits: Rlimits,
    landlock_fd: Option<std::sync::Arc<OwnedFd>>,
    seccomp: Option<Vec<libc::sock_filter>>,
    /// The commands' network namespace, entered with `setns`.
    netns: Option<OwnedFd>,
    run_as: Option<(u32, u32)>,
    /// Per-command cgroups, where this process may create them.
    pub cgroups: Option<cgroups::Cgroups>,
    /// Where commands' `connect` calls may lead, under `--network none`.
    pub connect_allowed: Option<std::sync::Arc<super::mediate::Allowed>>,
    pub protections: Vec<Protection>,
}

pub(crate) fn protection(
    name: ProtectionName,
    active: bool,
    detail: impl Into<String>,
) -> Protection {
    Protection {
        name,
        active,
        detail: detail.into(),
    }
}

impl Confinement {
    /// Probes and prepares each requested protection; what cannot be applied is reported, never faked.
    pub fn prepare(request: &ConfineRequest, workspace: &Path, private_tmp: &Path) -> Confinement {
        let mut protections = vec![protection(
            ProtectionName::ProcessGroup,
            true,
            "each command runs in its own session; timeouts kill the whole tree",
        )];
        let (env, clean_env) = environment::prepare(&request.env_allow, private_tmp);
        protections.push(clean_env);
        protections.push(rlimits::describe(request.rlimits));
        let (run_as, unprivileged) = user::prepare(request.run_as);
        protections.push(unprivileged);
        let (landlock_fd, landlock) = landlock::prepare(request, workspace, private_tmp);
        protections.push(landlock);
        let (seccomp, netns) = if request.network_none {
            let (filter, network_none) = seccomp::prepare();
            let (netns, namespace) = netns::prepare();
            protections.extend([network_none, namespace]);
            (filter, netns)
        } else {
            let detail = request
                .network_detail
                .clone()
                .unwrap_or_else(|| "--network host: commands may use the network".to_owned());
            protections.push(protection(ProtectionName::NetworkNone, false, detail));
            (None, None)
        };
        let landlock_fd = landlock_fd.map(std::sync::Arc::new);
        let (cgroups, cgroup) = cgroups::prepare(request.rlimits, restrict_thread(&landlock_fd));
        protections.push(cgroup);
        let connect_allowed = seccomp.as_ref().and_then(|_| {
            super::mediate::Allowed::new(&[workspace, private_tmp], netns.is_some())
                .map(std::sync::Arc::new)
                .map_err(|err| tracing::error!(cause = %err, "preparing the connect checks"))
                .ok()
        });
        Confinement {
            env,
            rlimits: request.rlimits,
            landlock_fd,
            seccomp,
            netns,
            run_as,
            cgroups,
            connect_allowed,
            protections,
        }
    }

    /// Whether commands' `connect` calls come to the server for an answer (`--network none`).
    pub fn mediates_connect(&self) -> bool {
        self.seccomp.is_some()
    }

    /// Where commands may connect, when `connect` is mediated.
    pub fn connect_allowed(&self) -> Option<std::sync::Arc<super::mediate::Allowed>> {
        self.connect_allowed.clone()
    }

    /// Whether commands run in a network namespace of their own (where abstract Unix sockets
    /// are theirs, not the host's).
    pub fn own_network_namespace(&self) -> bool {
        self.netns.is_some()
    }

    pub fn rlimits(&self) -> Rlimits {
        self.rlimits
    }

    /// The protections that could not be applied although asked for.
    pub fn missing(&self) -> Vec<&Protection> {
        self.protections.iter().filter(|p| !p.active).collect()
    }

    /// The closure to run in the child between the clone and the exec. It must only make
    /// async-signal-safe calls: everything it touches was prepared in `prepare`. The order
    /// matters: enter the namespace while still privileged, drop the user, then
    /// restrict with Landlock and seccomp last. `landlock_inherited`: the child is cloned from
    /// a thread already in the Landlock domain (a cgroup's thread), which it keeps.
    pub fn child_setup(
        &self,
        listener_channel: Option<RawFd>,
        landlock_inherited: bool,
    ) -> impl FnMut() -> std::io::Result<()> + Send + Sync + use<> {
        let rlimits = self.rlimits;
        let landlock = self
            .landlock_fd
            .as_ref()
            .filter(|_| !landlock_inherited)
            .map(|fd| fd.as_raw_fd());
        let seccomp = self.seccomp.as_deref().map(seccomp::Program::of);
        let netns = self.netns.as_ref().map(AsRawFd::as_raw_fd);
        let run_as = self.run_as;
        move || {
            if let Some(namespace) = netns {
                netns::enter_in_child(namespace)?;
            }
            rlimits::apply_in_child(rlimits)?;
            if let Some((uid, gid)) = run_as {
                user::switch_in_child(uid, gid)?;
            }
            if landlock.is_some() || seccomp.is_some() {
                // SAFETY: prctl with integer arguments only.
                check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
            }
            if let Some(fd) = landlock {
                landlock::restrict_self(fd)?;
            }
            if let Some(program) = seccomp {
                // No channel for the listener: refuse to run rather than run unfiltered.
                let channel = listener_channel
                    .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL))?;
                program.install_in_child(channel)?;
            }
            Ok(())
        }
    }
}

/// What a cgroup's thread runs once: it enters the commands' Landlock domain, so that the
/// commands it clones inherit it instead of each merging the ruleset (a few hundred rules where
/// a hidden path's ancestors are crowded, as `/tmp` is on a busy host: 0.1-0.2 ms per command).
/// The thread only clones; it opens no file.
fn restrict_thread(landlock: &Option<std::sync::Arc<OwnedFd>>) -> Option<cgroups::ThreadSetup> {
    let ruleset = landlock.clone()?;
    Some(cgroups::ThreadSetup(std::sync::Arc::new(move || {
        // SAFETY: prctl with integer arguments only; it applies to this thread.
        check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
        landlock::restrict_self(ruleset.as_raw_fd())
    })))
}

/// A system call's result as `io::Result`, reading errno on failure.
pub(crate) fn check(result: i32) -> std::io::Result<()> {
    if result < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub(crate) fn show(value: u64) -> String {
    if value == 0 {
        "unlimited".to_owned()
    } else {
        value.to_string()
    }
}

pub(crate) fn show_bytes(value: u64) -> String {
    match value {
        0 => "unlimited".to_owned(),
        v if v % (1 << 30) == 0 => format!("{} GiB", v >> 30),
        v if v % (1 << 20) == 0 => format!("{} MiB", v >> 20),
        v => format!("{v} bytes"),
    }
}
