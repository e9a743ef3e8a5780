//! Containment of each command, applied between the clone and the exec, one mechanism per file:
//! [`environment`] (a clean environment), [`rlimits`] (resource limits), [`user`] (an
//! unprivileged user), [`landlock`] (writes only in the workspace and a private temporary
//! folder; hidden paths unreadable), [`seccomp`] (only Unix sockets under `--network none`) and
//! [`netns`] (a network namespace of the commands' own, where the host permits one),
//! [`namespaces`] (a PID and a mount namespace of the sandbox's own: its own `/proc` and
//! `/dev`), [`cgroups`] (a group per command where this process may create them), and
//! [`threads`] (the spawner threads every command is cloned from, in one Landlock domain).
//!
//! Everything that allocates is prepared here in the parent; the child only makes
//! system calls on values prepared before the clone (the rules of [`super::spawn`]).

#![allow(unsafe_code)] // every mechanism ends in raw system calls; see each `// SAFETY:`

pub mod cgroups;
pub mod environment;
pub mod landlock;
pub mod namespaces;
pub mod netns;
pub mod rlimits;
pub mod seccomp;
pub mod threads;
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
    /// A PID and a mount namespace for commands, where the host allows them.
    pub namespaces: bool,
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
    /// The commands' PID and mount namespaces, where the host allows them.
    pub namespaces: Option<namespaces::Namespaces>,
    /// The spawner that clones the commands of calls without a cgroup.
    pub spawner: threads::Spawner,
    /// Whether commands are born in the Landlock domain (cloned from a spawner in it).
    landlock_inherited: bool,
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
    /// Probes and prepares each requested protection; what cannot be applied is reported, never
    /// faked. An error is a protection that was asked for and would leave commands unable to
    /// work (the workspace of an unprivileged user that could not be mapped to it).
    pub fn prepare(
        request: &ConfineRequest,
        workspace: &Path,
        private_tmp: &Path,
    ) -> Result<Confinement, String> {
        let mut protections = vec![protection(
            ProtectionName::ProcessGroup,
            true,
            "each command runs in its own session; timeouts kill the whole tree",
        )];
        let (run_as, unprivileged) = user::prepare(request.run_as);
        let (env, clean_env) = environment::prepare(&request.env_allow, private_tmp, run_as);
        protections.push(clean_env);
        protections.push(rlimits::describe(request.rlimits));
        protections.push(unprivileged);
        protections.push(not_dumpable());
        let (namespaces, pid_namespace) = if request.namespaces {
            let mapping = namespaces::Mapping {
                run_as,
                paths: mapped_paths(run_as, workspace, &request.writable),
            };
            namespaces::prepare(&mapping)?
        } else {
            (
                None,
                protection(
                    ProtectionName::PidNamespace,
                    false,
                    "turned off (--no-pid-namespace): commands see every process of the host in /proc",
                ),
            )
        };
        protections.push(pid_namespace);
        if let Some((uid, gid)) = run_as {
            let mapped = namespaces.as_ref().is_some_and(|ns| {
                let workspace = workspace
                    .canonicalize()
                    .unwrap_or_else(|_| workspace.to_owned());
                ns.mapped.contains(&workspace)
            });
            user::check_reach(workspace, uid, gid, mapped)?;
        }
        let ns_root = namespaces.as_ref().map(|ns| ns.root.clone());
        let landlock = landlock::prepare(request, workspace, private_tmp, ns_root.as_deref());
        protections.push(landlock.protection);
        protections.push(landlock.scope);
        protections.push(devices(namespaces.is_some(), landlock.fd.is_some()));
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
        let landlock_fd = landlock.fd.map(std::sync::Arc::new);
        let restrict = landlock_fd.clone().map(|ruleset| -> threads::Restrict {
            Box::new(move || {
                // SAFETY: prctl with integer arguments only; it applies to this thread.
                check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
                landlock::restrict_self(ruleset.as_raw_fd())
            })
        });
        let pid_ns = match &namespaces {
            Some(ns) => {
                Some(std::sync::Arc::new(ns.pid.try_clone().map_err(|err| {
                    format!("keeping the PID namespace: {err}")
                })?))
            }
            None => None,
        };
        let factory = threads::Factory::new(restrict, pid_ns)
            .map_err(|err| format!("starting the commands' Landlock domain: {err}"))?;
        let spawner = threads::Spawner::start(&factory, &[])
            .map_err(|err| format!("starting the thread that clones commands: {err}"))?;
        let landlock_inherited = factory.in_domain();
        let (cgroups, cgroup) = cgroups::prepare(request.rlimits, factory);
        protections.push(cgroup);
        let connect_allowed = seccomp.as_ref().and_then(|_| {
            super::mediate::Allowed::new(&[workspace, private_tmp], netns.is_some())
                .map(std::sync::Arc::new)
                .map_err(|err| tracing::error!(cause = %err, "preparing the connect checks"))
                .ok()
        });
        Ok(Confinement {
            env,
            rlimits: request.rlimits,
            landlock_fd,
            seccomp,
            netns,
            run_as,
            cgroups,
            namespaces,
            spawner,
            landlock_inherited,
            connect_allowed,
            protections,
        })
    }

    /// The init of the commands' namespaces, which is no command.
    pub fn namespace_init(&self) -> Option<u32> {
        self.namespaces.as_ref().map(|ns| ns.init_pid)
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
    /// matters: enter the namespaces while still privileged, drop the user, then
    /// restrict with Landlock and seccomp last. `landlock_inherited`: the child is cloned from
    /// a spawner already in the Landlock domain, which it keeps.
    pub fn child_setup(
        &self,
        listener_channel: Option<RawFd>,
        landlock_inherited: bool,
    ) -> impl FnMut() -> std::io::Result<()> + Send + Sync + use<> {
        let rlimits = self.rlimits;
        let landlock = self
            .landlock_fd
            .as_ref()
            .filter(|_| !landlock_inherited && !self.landlock_inherited)
            .map(|fd| fd.as_raw_fd());
        let seccomp = self.seccomp.as_deref().map(seccomp::Program::of);
        let netns = self.netns.as_ref().map(AsRawFd::as_raw_fd);
        let mounts = self.namespaces.as_ref().map(namespaces::Namespaces::mnt_fd);
        let run_as = self.run_as;
        move || {
            if let Some(namespace) = mounts {
                namespaces::enter_mounts_in_child(namespace)?;
            }
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

/// The paths whose files the server owns and the commands' user must be able to write: the
/// workspace and the `--writable` folders that belong to root (the server's user), when
/// commands run as another user.
fn mapped_paths(
    run_as: Option<(u32, u32)>,
    workspace: &Path,
    writable: &[PathBuf],
) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    if run_as.is_none_or(|(uid, _)| uid == 0) {
        return Vec::new();
    }
    std::iter::once(workspace)
        .chain(writable.iter().map(PathBuf::as_path))
        .filter(|path| std::fs::metadata(path).is_ok_and(|meta| meta.uid() == 0 && meta.is_dir()))
        .filter_map(|path| path.canonicalize().ok())
        .collect()
}

/// This process (the server, or a helper of it) becomes undumpable: its memory, environment
/// and descriptors under `/proc/<pid>` are root's, and no process of its user may `ptrace` it.
/// Commands start dumpable again (`execve` resets the flag).
pub fn not_dumpable() -> Protection {
    // SAFETY: prctl with integer arguments.
    let set = check(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) });
    match set {
        Ok(()) => protection(
            ProtectionName::NotDumpable,
            true,
            "the server, its janitor and its namespaces' init are not dumpable: no command reads their memory or environment through /proc or ptrace",
        ),
        Err(err) => protection(
            ProtectionName::NotDumpable,
            false,
            format!("prctl(PR_SET_DUMPABLE): {err}"),
        ),
    }
}

fn devices(own_dev: bool, landlock: bool) -> Protection {
    let nodes = "null, zero, full, random, urandom, tty, ptmx, pts/* and shm";
    let (active, detail) = match (own_dev, landlock) {
        (true, true) => (true, format!(
            "commands have a /dev of their own with only {nodes}, and Landlock lets them open no other device node by any path"
        )),
        (false, true) => (true, format!(
            "Landlock lets commands open only {nodes} under /dev, and no device node elsewhere"
        )),
        (true, false) => (false, format!(
            "commands have a /dev of their own with only {nodes}, but without Landlock a device node reached by another path opens"
        )),
        (false, false) => (false, "neither a /dev of their own nor Landlock: commands open any device node their user may".to_owned()),
    };
    protection(ProtectionName::Devices, active, detail)
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
