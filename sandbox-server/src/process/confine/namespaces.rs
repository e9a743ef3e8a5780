//! A PID namespace and a mount namespace for the sandbox's commands, made once at start.
//!
//! The server clones one helper, `sandbox-server pid-init`, with `CLONE_NEWPID | CLONE_NEWNS`:
//! it is PID 1 of the new namespaces. In its mount namespace it mounts a `/proc` of that PID
//! namespace (so commands list and read only the sandbox's own processes), a `/dev` that holds
//! only the device nodes programs need, masks the kernel's memory and debug files, and, when
//! commands run as another user, maps the server's files in the workspace to that user
//! (`init`). Then it only reaps the orphans that come to it, and dies with the server
//! (`PR_SET_PDEATHSIG`): when it dies, the kernel kills every process of the namespace, so no
//! command outlives its server, whatever it did to its environment or its group.
//!
//! Commands enter the namespaces without a new one each: the threads that clone them set their
//! children's PID namespace once (`setns(CLONE_NEWPID)` changes only what the thread clones
//! next; see `threads`), and each command enters the mount namespace in the child before it
//! drops its privileges. The server itself stays in the host's namespaces and sees every
//! command by its host pid.

#![allow(unsafe_code)] // setns, and the raw calls of the child

pub mod init;

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::libc;
use sandbox_protocol::{Protection, ProtectionName};

use super::{check, protection};

/// The commands' namespaces, alive while the server runs.
#[derive(Debug)]
pub struct Namespaces {
    /// The init: a child of the server, never a command's.
    pub init_pid: u32,
    /// `/proc/<init>/ns/pid`, which the spawner threads set for their children.
    pub pid: OwnedFd,
    /// `/proc/<init>/ns/mnt`, which each command enters.
    mnt: OwnedFd,
    /// The root of the commands' mount namespace, as the server reaches it
    /// (`/proc/<init>/root`): where the commands' own `/proc` and `/dev/shm` are opened.
    pub root: PathBuf,
    /// The paths mapped so that the server's files there are the commands' user's.
    pub mapped: Vec<PathBuf>,
    /// The init's standard streams, held open for the server's whole life.
    _streams: (OwnedFd, OwnedFd),
}

/// What the commands' mount namespace should map: the commands' user, and the paths where the
/// server's own files should look like that user's.
#[derive(Debug, Clone, Default)]
pub struct Mapping {
    pub run_as: Option<(u32, u32)>,
    pub paths: Vec<PathBuf>,
}

/// Makes the namespaces, or says why not. A failure to map a path that needs it is an error
/// (commands would find the workspace read-only); a host that allows no namespace is a
/// protection not in force.
pub fn prepare(mapping: &Mapping) -> Result<(Option<Namespaces>, Protection), String> {
    let name = ProtectionName::PidNamespace;
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

fn start(mapping: &Mapping) -> Result<Namespaces, Failure> {
    let refused = |what: &str, err: std::io::Error| Failure::Refused(format!("{what}: {err}"));
    let program = c"/proc/self/exe";
    let mut args = vec!["pid-init".to_owned()];
    if let Some((uid, gid)) = mapping.run_as {
        args.push("--run-as".to_owned());
        args.push(format!("{uid}:{gid}"));
        for path in &mapping.paths {
            args.push("--map".to_owned());
            args.push(path.display().to_string());
        }
    }
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
        pid: pid_ns,
        mnt: mnt_ns,
        root: PathBuf::from(format!("/proc/{pid}/root")),
        mapped: mapping
            .run_as
            .map(|_| mapping.paths.clone())
            .unwrap_or_default(),
        _streams: (stdout, stderr),
    })
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
    /// The mount namespace's descriptor, for the child to enter.
    pub fn mnt_fd(&self) -> RawFd {
        self.mnt.as_raw_fd()
    }

    /// A path of the commands' view, as the server reaches it.
    pub fn inside(&self, path: &Path) -> PathBuf {
        self.root.join(path.strip_prefix("/").unwrap_or(path))
    }
}

/// On a spawner thread, before it clones anything: what it clones next is born in the
/// commands' PID namespace. Such a thread must never start a thread (the kernel refuses
/// `CLONE_THREAD` across PID namespaces).
pub fn set_children_namespace(pid_ns: RawFd) -> std::io::Result<()> {
    // SAFETY: setns with a descriptor and a flag; it changes only this thread's children.
    check(unsafe { libc::setns(pid_ns, libc::CLONE_NEWPID) })
}

/// In the child: enters the commands' mount namespace (which moves the working directory to its
/// root; the child enters its folder again afterwards).
pub fn enter_mounts_in_child(mnt_ns: RawFd) -> std::io::Result<()> {
    // SAFETY: setns with a descriptor prepared before the clone; async-signal-safe.
    check(unsafe { libc::setns(mnt_ns, libc::CLONE_NEWNS) })
}
