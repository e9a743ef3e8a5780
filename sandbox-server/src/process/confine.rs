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
pub mod view;

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
    /// Paths inside hidden folders shown read-only (`--read-only`).
    pub read_only: Vec<PathBuf>,
    /// Whether homes, temporary folders and engine sockets are hidden from commands.
    pub hide_homes: bool,
    /// Whether commands may not make set-user-id or set-group-id files.
    pub refuse_set_id: bool,
}

/// The prepared containment, shared by every spawn.
#[derive(Debug)]
pub struct Confinement {
    pub env: Vec<(String, String)>,
    rlimits: Rlimits,
    landlock_fd: Option<std::sync::Arc<OwnedFd>>,
    seccomp: Option<seccomp::Filter>,
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

/// The commands' own folders, out of every other command's and server's reach.
#[derive(Debug, Clone, Copy)]
pub struct Private<'a> {
    /// Their `TMPDIR`.
    pub tmp: &'a Path,
    /// Their `HOME`, when it is not the server's.
    pub home: &'a Path,
}

impl Confinement {
    /// Probes and prepares each requested protection; what cannot be applied is reported, never
    /// faked. An error is a protection that was asked for and would leave commands unable to
    /// work (the workspace of an unprivileged user that could not be mapped to it).
    pub fn prepare(
        request: &ConfineRequest,
        workspace: &Path,
        private: Private<'_>,
    ) -> Result<Confinement, String> {
        let mut protections = vec![protection(
            ProtectionName::ProcessGroup,
            true,
            "each command runs in its own session; timeouts kill the whole tree",
        )];
        let (run_as, unprivileged) = user::prepare(request.run_as);
        let view = view_of(request, workspace, private, run_as);
        let own_home = request.hide_homes
            || run_as.is_some_and(|(uid, _)| uid != nix::unistd::geteuid().as_raw());
        let (env, clean_env) = environment::prepare(
            &request.env_allow,
            private.tmp,
            own_home.then_some(private.home),
            &view.toolchain_env,
        );
        protections.push(clean_env);
        protections.push(rlimits::describe(request.rlimits));
        protections.push(unprivileged);
        protections.push(not_dumpable());
        let (namespaces, pid_namespace) = make_namespaces(request, workspace, run_as, &view)?;
        protections.push(pid_namespace);
        check_reach(workspace, run_as, namespaces.as_ref())?;
        let ns_root = namespaces.as_ref().and_then(|ns| ns.root.clone());
        let landlock = landlock::prepare(request, workspace, private, &view, ns_root.as_deref());
        protections.push(landlock.protection);
        protections.push(landlock.scope);
        protections.push(devices(ns_root.is_some(), landlock.fd.is_some()));
        protections.push(hidden_home(
            request,
            &view,
            namespaces.is_some(),
            landlock.fd.is_some(),
        ));
        let (seccomp, netns) = network(request, &mut protections);
        let landlock_fd = landlock.fd.map(std::sync::Arc::new);
        let factory = spawner_factory(landlock_fd.clone(), namespaces.as_ref())?;
        let spawner = threads::Spawner::start(&factory, &[])
            .map_err(|err| format!("starting the thread that clones commands: {err}"))?;
        let landlock_inherited = factory.in_domain();
        let (cgroups, cgroup) = cgroups::prepare(request.rlimits, factory);
        protections.push(cgroup);
        let connect_allowed =
            connect_allowed(seccomp.as_ref(), workspace, private, netns.is_some());
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

    /// Whether commands run in a PID namespace of their own (whose numbering the API speaks).
    pub fn pid_namespace(&self) -> bool {
        self.namespaces.as_ref().is_some_and(|ns| ns.pid.is_some())
    }

    /// Whether commands' `connect` calls come to the server for an answer (`--network none`).
    pub fn mediates_connect(&self) -> bool {
        self.seccomp
            .as_ref()
            .is_some_and(seccomp::Filter::notifies_connect)
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
        let seccomp = self.seccomp.as_ref().map(seccomp::Filter::program);
        let netns = self.netns.as_ref().map(AsRawFd::as_raw_fd);
        let mounts = self.namespaces.as_ref().map(namespaces::Namespaces::fds);
        let run_as = self.run_as;
        move || {
            if let Some((user, mnt)) = mounts {
                namespaces::enter_in_child(user, mnt)?;
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
                program.install_in_child(listener_channel)?;
            }
            Ok(())
        }
    }
}

/// Whether the commands' user (`--run-as`) can work in the workspace, given what their
/// namespaces do for them: a mapped workspace is theirs to write, and in their mount
/// namespace the folders on the way are open. Checked before any command runs.
fn check_reach(
    workspace: &Path,
    run_as: Option<(u32, u32)>,
    namespaces: Option<&namespaces::Namespaces>,
) -> Result<(), String> {
    let Some((uid, gid)) = run_as else {
        return Ok(());
    };
    let mapped = namespaces.is_some_and(|ns| {
        let workspace = workspace
            .canonicalize()
            .unwrap_or_else(|_| workspace.to_owned());
        ns.mapped.contains(&workspace)
    });
    // In the commands' mount namespace the folders on the way are open to them.
    let reachable = namespaces.is_some();
    user::check_reach(workspace, uid, gid, mapped, reachable)
}

/// The seccomp filter, and under `--network none` the commands' network namespace, with
/// their protections in that order.
fn network(
    request: &ConfineRequest,
    protections: &mut Vec<Protection>,
) -> (Option<seccomp::Filter>, Option<OwnedFd>) {
    let (seccomp, seccomp_protections) = seccomp::prepare(request);
    protections.extend(seccomp_protections);
    let netns = if request.network_none {
        let (netns, namespace) = netns::prepare();
        protections.push(namespace);
        netns
    } else {
        None
    };
    (seccomp, netns)
}

/// Where commands may connect when the filter sends their `connect` calls to the server: under
/// their workspace and temporary folder (abstract sockets too in a network namespace of their
/// own). A failure is logged, and there is no list.
fn connect_allowed(
    seccomp: Option<&seccomp::Filter>,
    workspace: &Path,
    private: Private<'_>,
    own_netns: bool,
) -> Option<std::sync::Arc<super::mediate::Allowed>> {
    seccomp
        .filter(|filter| filter.notifies_connect())
        .and_then(|_| {
            super::mediate::Allowed::new(&[workspace, private.tmp], own_netns)
                .map(std::sync::Arc::new)
                .map_err(|err| tracing::error!(cause = %err, "preparing the connect checks"))
                .ok()
        })
}

/// The commands' view of the files (see [`view`]).
fn view_of(
    request: &ConfineRequest,
    workspace: &Path,
    private: Private<'_>,
    run_as: Option<(u32, u32)>,
) -> view::View {
    view::View::compute(&view::Request {
        hide_homes: request.hide_homes,
        workspace,
        writable: &request.writable,
        private: &[private.tmp.to_owned(), private.home.to_owned()],
        hidden: &request.hidden,
        read_only: &request.read_only,
        run_as,
    })
}

/// The commands' namespaces, where asked for and the host allows them, and the PID
/// namespace's protection.
fn make_namespaces(
    request: &ConfineRequest,
    workspace: &Path,
    run_as: Option<(u32, u32)>,
    view: &view::View,
) -> Result<(Option<namespaces::Namespaces>, Protection), String> {
    if !request.namespaces {
        return Ok((
            None,
            protection(
                ProtectionName::PidNamespace,
                false,
                "turned off (--no-pid-namespace): commands see every process of the host in /proc, and the files as the server does",
            ),
        ));
    }
    let mapping = namespaces::Mapping {
        run_as,
        paths: mapped_paths(run_as, workspace, &request.writable),
        view: view.clone(),
    };
    namespaces::prepare(&mapping)
}

/// The factory of the threads that clone commands: in the commands' Landlock domain, and
/// setting their children's PID namespace when there is one.
fn spawner_factory(
    landlock: Option<std::sync::Arc<OwnedFd>>,
    namespaces: Option<&namespaces::Namespaces>,
) -> Result<threads::Factory, String> {
    let restrict = landlock.map(|ruleset| -> threads::Restrict {
        Box::new(move || {
            // SAFETY: prctl with integer arguments only; it applies to this thread.
            check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
            landlock::restrict_self(ruleset.as_raw_fd())
        })
    });
    let pid_ns = match namespaces.and_then(|ns| ns.pid.as_ref()) {
        Some(pid) => {
            Some(std::sync::Arc::new(pid.try_clone().map_err(|err| {
                format!("keeping the PID namespace: {err}")
            })?))
        }
        None => None,
    };
    threads::Factory::new(restrict, pid_ns)
        .map_err(|err| format!("starting the commands' Landlock domain: {err}"))
}

/// What commands see of the operator's files: the homes, temporary folders, secrets and engine
/// sockets hidden by the mount namespace, by Landlock, or both.
fn hidden_home(
    request: &ConfineRequest,
    view: &view::View,
    mounts: bool,
    landlock: bool,
) -> Protection {
    let name = ProtectionName::HiddenHome;
    if !request.hide_homes {
        return protection(
            name,
            false,
            "turned off (--show-homes or --files-anywhere: a task's container, whose homes are the image's): commands read every file their user may",
        );
    }
    let shown: Vec<String> = view
        .read_only
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let shown = if shown.is_empty() {
        "no toolchain".to_owned()
    } else {
        format!("read-only: {}", shown.join(", "))
    };
    let hidden: Vec<String> = view.hide.iter().map(|p| p.display().to_string()).collect();
    let hidden = hidden.join(", ");
    match (mounts, landlock) {
        (true, true) => protection(
            name,
            true,
            format!(
                "hidden from commands by their mount namespace (empty folders) and by Landlock (unreadable): {hidden}; shown again: the workspace, --writable paths, their private home and temporary folder, {shown}"
            ),
        ),
        (true, false) => protection(
            name,
            true,
            format!(
                "hidden from commands by their mount namespace (empty folders): {hidden}; shown again: the workspace, --writable paths, their private home and temporary folder, {shown}"
            ),
        ),
        (false, true) => protection(
            name,
            true,
            format!(
                "unreadable to commands by Landlock (no mount namespace here; names stay listable): {hidden}; readable again: the workspace, --writable paths, their private home and temporary folder, {shown}"
            ),
        ),
        (false, false) => protection(
            name,
            false,
            "neither a mount namespace nor Landlock here: commands read every file their user may, the operator's home included",
        ),
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
