//! The commands' namespaces, made once at start: a mount namespace with the commands' view of
//! the files ([`super::view`]: homes hidden, the workspace shown, set-id bits not honoured), and,
//! for a root server, a PID namespace.
//!
//! A root server clones one helper, `sandbox-server pid-init`, with `CLONE_NEWPID |
//! CLONE_NEWNS`: it is PID 1 of the new namespaces. In its mount namespace it builds the view,
//! mounts a `/proc` of that PID namespace (so commands list and read only the sandbox's own
//! processes), a `/dev` that holds only the device nodes programs need, masks the kernel's
//! memory and debug files, and, when commands run as another user, maps the server's files in
//! the workspace to that user (`init`). Then it only reaps the orphans that come to it, and dies
//! with the server (`PR_SET_PDEATHSIG`): when it dies, the kernel kills every process of the
//! namespace, so no command outlives its server, whatever it did to its environment or its
//! group.
//!
//! A server that is not root may make no PID namespace its spawner threads could enter; its
//! init makes a user namespace of its own (the server's user mapped to itself) and the mount
//! namespace in it, and sends both back over a socket. Commands then join the user namespace,
//! then the mount namespace; they hold no capability there once they execute.
//!
//! Commands enter the namespaces without a new one each: the threads that clone them set their
//! children's PID namespace once (`setns(CLONE_NEWPID)` changes only what the thread clones
//! next; see `threads`), and each command enters the mount namespace in the child before it
//! drops its privileges. The server itself stays in the host's namespaces and sees every
//! command by its host pid.

#![allow(unsafe_code)] // setns, and the raw calls of the child

pub mod init;

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::libc;
use sandbox_protocol::{Protection, ProtectionName};

use super::{check, protection};

/// The commands' namespaces, alive while the server runs.
#[derive(Debug)]
pub struct Namespaces {
    /// The init: a child of the server, never a command's.
    pub init_pid: u32,
    /// `/proc/<init>/ns/pid`, which the spawner threads set for their children (a root
    /// server's only).
    pub pid: Option<OwnedFd>,
    /// The init's own user namespace, which each command joins first (a server that is not
    /// root).
    user: Option<OwnedFd>,
    /// `/proc/<init>/ns/mnt`, which each command enters.
    mnt: OwnedFd,
    /// The root of the commands' mount namespace, as the server reaches it
    /// (`/proc/<init>/root`): where the commands' own `/proc` and `/dev/shm` are opened (with a
    /// PID namespace only: otherwise they are the host's).
    pub root: Option<PathBuf>,
    /// The paths mapped so that the server's files there are the commands' user's.
    pub mapped: Vec<PathBuf>,
    /// The init's standard streams, held open for the server's whole life.
    _streams: (OwnedFd, OwnedFd),
}

/// What the commands' mount namespace should hold: the commands' user, the paths where the
/// server's own files should look like that user's, and the view of the files.
#[derive(Debug, Clone, Default)]
pub struct Mapping {
    pub run_as: Option<(u32, u32)>,
    pub paths: Vec<PathBuf>,
    pub view: super::view::View,
}

/// Makes the namespaces, or says why not. A failure to map a path that needs it is an error
/// (commands would find the workspace read-only); a host that allows no namespace is a
/// protection not in force.
pub fn prepare(mapping: &Mapping) -> Result<(Option<Namespaces>, Protection), String> {
    let name = ProtectionName::PidNamespace;
    if !nix::unistd::geteuid().is_root() {
        return match start_own_user(mapping) {
            Ok(namespaces) => Ok((
                Some(namespaces),
                protection(
                    name,
                    false,
                    "the server is not root: commands have a user and a mount namespace of its own, but no PID namespace (they see the host's processes in /proc; Landlock keeps them from tracing or signalling any outside the sandbox)",
                ),
            )),
            Err(Failure::Refused(why)) => Ok((None, protection(name, false, why))),
            Err(Failure::Mapping(why)) => Err(why),
        };
    }
    match start(mapping) {
        Ok(namespaces) => {
            let detail = format!(
                "commands run in a PID namespace of their own (init pid {}), with a /proc of that namespace and a /dev of their own: they see and signal only the sandbox's processes, and none outlives the server",
                namespaces.init_pid
            );
            Ok((Some(namespaces), protection(name, true, detail)))
        }
        Err(Failure::Refused(why)) => Ok((None, protection(name, false, why))),
        Err(Failure::Mapping(why)) => Err(why),
    }
}

enum Failure {
    /// The host allows no namespace here (no privilege, a container without `CAP_SYS_ADMIN`).
    Refused(String),
    /// The namespace was made but a path that must be mapped could not be.
    Mapping(String),
}

/// The init's command line.
fn init_args(mapping: &Mapping, own_user: bool) -> Vec<String> {
    let mut args = vec!["pid-init".to_owned()];
    let mut push = |flag: &str, paths: &[PathBuf]| {
        for path in paths {
            args.push(format!("--{flag}"));
            args.push(path.display().to_string());
        }
    };
    push("hide", &mapping.view.all_hidden());
    push("keep", &mapping.view.keep);
    push("read-only", &mapping.view.read_only);
    push("hide", &mapping.view.blank);
    if let Some((uid, gid)) = mapping.run_as {
        push("map", &mapping.paths);
        args.push("--run-as".to_owned());
        args.push(format!("{uid}:{gid}"));
    }
    if own_user {
        args.push("--own-user".to_owned());
    }
    args
}

fn start(mapping: &Mapping) -> Result<Namespaces, Failure> {
    let refused = |what: &str, err: std::io::Error| Failure::Refused(format!("{what}: {err}"));
    let program = c"/proc/self/exe";
    let args = init_args(mapping, false);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let command = super::super::spawn::Command::new(program, &args, [], Path::new("/"))
        .map_err(|err| refused("preparing the namespaces' init", err))?;
    let stdin =
        std::fs::File::open("/dev/null").map_err(|err| refused("opening /dev/null", err))?;
    let stdio = super::super::spawn::Stdio::Pipes {
        stdin: stdin.as_raw_fd(),
    };
    let child = super::super::spawn::spawn_with(
        &command,
        stdio,
        &mut || Ok(()),
        libc::CLONE_NEWPID | libc::CLONE_NEWNS,
    )
    .map_err(|err| {
        let hint = if err.raw_os_error() == Some(libc::EPERM) {
            " (making namespaces needs root, or CAP_SYS_ADMIN; inside a container its own PID namespace is the boundary)"
        } else {
            ""
        };
        Failure::Refused(format!("no PID namespace could be made: {err}{hint}"))
    })?;
    let pid = child.pid;
    let (stdout, stderr) = child
        .output
        .ok_or_else(|| Failure::Refused("the init has no pipes".to_owned()))?;
    match read_status(&stdout) {
        Ok(()) => {}
        Err(why) => {
            reap(pid);
            return Err(if why.starts_with(init::MAPPING_ERROR) {
                Failure::Mapping(why)
            } else {
                Failure::Refused(format!("the namespaces' init failed: {why}"))
            });
        }
    }
    let open = |what: &str| -> Result<OwnedFd, Failure> {
        std::fs::File::open(format!("/proc/{pid}/ns/{what}"))
            .map(OwnedFd::from)
            .map_err(|err| refused(&format!("opening the init's {what} namespace"), err))
    };
    let (pid_ns, mnt_ns) = match (open("pid"), open("mnt")) {
        (Ok(pid_ns), Ok(mnt_ns)) => (pid_ns, mnt_ns),
        (Err(err), _) | (_, Err(err)) => {
            kill(pid);
            return Err(err);
        }
    };
    Ok(Namespaces {
        init_pid: pid,
        pid: Some(pid_ns),
        user: None,
        mnt: mnt_ns,
        root: Some(PathBuf::from(format!("/proc/{pid}/root"))),
        mapped: mapping
            .run_as
            .map(|_| mapping.paths.clone())
            .unwrap_or_default(),
        _streams: (stdout, stderr),
    })
}

/// A server that is not root: the init, started plainly, makes its own user namespace and the
/// mount namespace in it, and sends them back over its standard input, a Unix socket.
fn start_own_user(mapping: &Mapping) -> Result<Namespaces, Failure> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    let refused = |what: &str, err: std::io::Error| Failure::Refused(format!("{what}: {err}"));
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|err| refused("a socket for the namespaces' init", err.into()))?;
    let args = init_args(mapping, true);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let command = super::super::spawn::Command::new(c"/proc/self/exe", &args, [], Path::new("/"))
        .map_err(|err| refused("preparing the namespaces' init", err))?;
    let stdio = super::super::spawn::Stdio::Pipes {
        stdin: theirs.as_raw_fd(),
    };
    let child = super::super::spawn::spawn_with(&command, stdio, &mut || Ok(()), 0)
        .map_err(|err| refused("starting the namespaces' init", err))?;
    drop(theirs);
    let pid = child.pid;
    let (stdout, stderr) = child
        .output
        .ok_or_else(|| Failure::Refused("the init has no pipes".to_owned()))?;
    if let Err(why) = read_status(&stdout) {
        reap(pid);
        return Err(if why.starts_with(init::MAPPING_ERROR) {
            Failure::Mapping(why)
        } else {
            Failure::Refused(format!(
                "no user namespace for commands could be made ({why}); the host may forbid unprivileged user namespaces (user.max_user_namespaces, kernel.unprivileged_userns_clone, kernel.apparmor_restrict_unprivileged_userns), or a container's seccomp profile refuses them"
            ))
        });
    }
    let (user, mnt) = match receive_namespaces(&ours) {
        Ok(pair) => pair,
        Err(err) => {
            kill(pid);
            return Err(refused("receiving the init's namespaces", err));
        }
    };
    Ok(Namespaces {
        init_pid: pid,
        pid: None,
        user: Some(user),
        mnt,
        root: None,
        mapped: Vec::new(),
        _streams: (stdout, stderr),
    })
}

/// The user and the mount namespace the init sent, in that order.
fn receive_namespaces(socket: &OwnedFd) -> std::io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut byte = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 2]);
    let message = recvmsg::<()>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for control in message.cmsgs()? {
        if let ControlMessageOwned::ScmRights(received) = control {
            // SAFETY: the kernel just gave these descriptors to this process.
            fds.extend(
                received
                    .into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    let mut fds = fds.into_iter();
    match (fds.next(), fds.next()) {
        (Some(user), Some(mnt)) => Ok((user, mnt)),
        _ => Err(std::io::Error::other("the init sent no namespaces")),
    }
}

/// The init's first line: `ready`, or why it could not set the namespaces up.
fn read_status(stdout: &OwnedFd) -> Result<(), String> {
    let mut file = std::fs::File::from(stdout.try_clone().map_err(|err| err.to_string())?);
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    // Bounded: the init writes one short line, then nothing until it ends.
    while line.len() < 4096 {
        match file.read(&mut byte) {
            Ok(0) => break,
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) => line.push(byte[0]),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err.to_string()),
        }
    }
    let line = String::from_utf8_lossy(&line).into_owned();
    match line.as_str() {
        init::READY => Ok(()),
        "" => Err("it ended without a word".to_owned()),
        other => Err(other.to_owned()),
    }
}

fn kill(pid: u32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    reap(pid);
}

fn reap(pid: u32) {
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None);
}

impl Namespaces {
    /// The namespaces' descriptors, for the child to enter: the user namespace (if any) first.
    pub fn fds(&self) -> (Option<RawFd>, RawFd) {
        (
            self.user.as_ref().map(AsRawFd::as_raw_fd),
            self.mnt.as_raw_fd(),
        )
    }
}

/// On a spawner thread, before it clones anything: what it clones next is born in the
/// commands' PID namespace. Such a thread must never start a thread (the kernel refuses
/// `CLONE_THREAD` across PID namespaces).
pub fn set_children_namespace(pid_ns: RawFd) -> std::io::Result<()> {
    // SAFETY: setns with a descriptor and a flag; it changes only this thread's children.
    check(unsafe { libc::setns(pid_ns, libc::CLONE_NEWPID) })
}

/// In the child: joins the init's user namespace, if any (the child is single-threaded and has
/// a file-system context of its own, as the kernel requires), then enters the commands' mount
/// namespace (which moves the working directory to its root; the child enters its folder
/// again afterwards).
pub fn enter_in_child(user_ns: Option<RawFd>, mnt_ns: RawFd) -> std::io::Result<()> {
    if let Some(user_ns) = user_ns {
        // SAFETY: setns with a descriptor prepared before the clone; async-signal-safe.
        check(unsafe { libc::setns(user_ns, libc::CLONE_NEWUSER) })?;
    }
    // SAFETY: setns with a descriptor prepared before the clone; async-signal-safe.
    check(unsafe { libc::setns(mnt_ns, libc::CLONE_NEWNS) })
}
