//! Spawning shells, reaping every child, and killing process trees.

// The server's unsafe code is all under `process/` (checked); here, one call: a shell's
// `TIOCSCTTY` in the child's setup, with its SAFETY comment.
#![allow(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::net::unix::pipe;
use tokio::sync::oneshot;

use super::launch::{Io, Launch, Launched, Streams, child_io, spawn_in, streams};
use super::proc_fs::{self, ProcEntry};
use super::{CALL_ID_ENV, ProcessError};

mod kill;
mod listing;

/// How a shell ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    /// The exit code, or 128 + the signal number when a signal ended it (the shell convention).
    pub code: i32,
    pub signal: Option<i32>,
}

/// A running `bash -c` with its output pipes and a channel that yields its exit status.
#[derive(Debug)]
pub struct SpawnedShell {
    pub pid: u32,
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
    pub exit: oneshot::Receiver<ExitStatus>,
}

/// What a kill did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KillReport {
    /// Every pid that was sent a signal, as commands see it (`Supervisor::public_pid`).
    pub killed: Vec<u32>,
    /// Whether any needed SIGKILL after the grace period.
    pub forced: bool,
    /// The command line of each, read before its signal, in the order of `killed`.
    pub commands: Vec<String>,
}

/// Owns the server's children: spawns them, reaps them, kills them.
#[derive(Debug, Clone)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Applied to every command between the clone and the exec.
    confinement: Arc<super::confine::Confinement>,
    self_pid: u32,
    /// This server's identity, in every command's environment for the sweeps after a crash.
    server_id: String,
    /// The janitor: a child, but not a command's; never listed, never killed.
    janitor: Option<u32>,
    /// Exit waiters by pid. A std mutex: it is held only for a spawn or a non-blocking
    /// `waitpid` loop, never across an await, and the spawn must be atomic with the insert.
    waiters: Mutex<HashMap<u32, oneshot::Sender<ExitStatus>>>,
    /// Calls whose shell is still running; their processes are foreground, the rest background.
    running_calls: Mutex<HashSet<String>>,
    /// Each call's cgroups, until they are empty.
    groups: Mutex<HashMap<String, super::confine::cgroups::CallGroup>>,
    /// Where `bash` is on the commands' `PATH`, found at the first command.
    bash: std::sync::OnceLock<Option<std::ffi::CString>>,
    /// The image's own entrypoint (`--entrypoint-process`), as it started: its tree is the
    /// task's, never a client's background processes.
    protected: Mutex<Option<ProcEntry>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another thread panicked while holding it; the maps stay valid.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Supervisor {
    pub fn new(confinement: Arc<super::confine::Confinement>, janitor: Option<u32>) -> Supervisor {
        Supervisor {
            inner: Arc::new(Inner {
                confinement,
                self_pid: std::process::id(),
                server_id: super::ServerId::current().to_string(),
                janitor,
                waiters: Mutex::new(HashMap::new()),
                running_calls: Mutex::new(HashSet::new()),
                groups: Mutex::new(HashMap::new()),
                bash: std::sync::OnceLock::new(),
                protected: Mutex::new(None),
            }),
        }
    }

    /// Every process below the server but its helpers: the janitor and the namespaces' init
    /// (whose children, the orphans it reaps, are commands' processes).
    fn commands_tree(&self) -> HashMap<u32, ProcEntry> {
        let mut tree = proc_fs::tree(self.inner.self_pid);
        let helpers = [self.inner.janitor, self.inner.confinement.namespace_init()];
        for helper in helpers.into_iter().flatten() {
            tree.remove(&helper);
        }
        tree
    }

    /// Makes this process a child subreaper and starts the reaper task. Call once, inside a
    /// tokio runtime, before spawning anything.
    pub fn start_reaper(&self) -> io::Result<()> {
        if let Err(err) = nix::sys::prctl::set_child_subreaper(true) {
            // Not fatal: escaped daemons then go to init instead of to us.
            tracing::warn!(cause = %err, "could not become a child subreaper");
        }
        let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
        if let Some(init) = self.inner.confinement.namespace_init() {
            let (died, death) = oneshot::channel();
            lock(&self.inner.waiters).insert(init, died);
            tokio::spawn(async move {
                if let Ok(status) = death.await {
                    tracing::error!(
                        pid = init,
                        ?status,
                        "the init of the commands' namespaces ended: no command can start"
                    );
                }
            });
        }
        let supervisor = self.clone();
        tokio::spawn(async move {
            // The interval catches a SIGCHLD coalesced with one already being handled.
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tokio::select! {
                    _ = sigchld.recv() => {}
                    _ = tick.tick() => {}
                }
                supervisor.reap();
            }
        });
        Ok(())
    }

    /// Reaps every exited child, handing each tracked shell's status to its waiter.
    fn reap(&self) {
        let mut waiters = lock(&self.inner.waiters);
        loop {
            let (pid, status) = match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => (pid, ExitStatus { code, signal: None }),
                Ok(WaitStatus::Signaled(pid, signal, _)) => {
                    let number = signal as i32;
                    (
                        pid,
                        ExitStatus {
                            code: 128 + number,
                            signal: Some(number),
                        },
                    )
                }
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return,
                Err(Errno::EINTR) => continue,
                Ok(_) => continue,
                Err(err) => {
                    tracing::warn!(cause = %err, "waitpid failed");
                    return;
                }
            };
            let pid = pid.as_raw() as u32;
            match waiters.remove(&pid) {
                Some(waiter) => {
                    let _ = waiter.send(status);
                }
                None => tracing::debug!(pid, ?status, "reaped an orphan"),
            }
        }
    }

    /// Starts `bash -c cmd` in `cwd`, in a new session, marked with `call_id`.
    pub fn spawn_shell(
        &self,
        cmd: &str,
        cwd: &Path,
        call_id: &str,
    ) -> Result<SpawnedShell, ProcessError> {
        let launch = Launch {
            args: &["-c", cmd],
            cwd,
            call_id,
            env: &[],
            io: Io::Null,
        };
        let launched = self.launch(&launch)?;
        let Streams::Pipes { stdout, stderr, .. } = launched.streams else {
            unreachable!("a call's shell has pipes");
        };
        Ok(SpawnedShell {
            pid: launched.pid,
            stdout,
            stderr,
            exit: launched.exit,
        })
    }

    /// Starts `bash` as `launch` says, in a new session, confined like every command.
    pub fn launch(&self, launch: &Launch<'_>) -> Result<Launched, ProcessError> {
        let spawn_error = |source| ProcessError::Spawn {
            program: "bash".to_owned(),
            source,
        };
        let command = self.shell_command(launch).map_err(spawn_error)?;
        let (child_end, parent_end) = child_io(launch.io).map_err(spawn_error)?;
        let channel = if self.inner.confinement.mediates_connect() {
            Some(super::mediate::channel().map_err(spawn_error)?)
        } else {
            None
        };
        let group = self.create_group()?;
        let listener_end = channel
            .as_ref()
            .map(|(_, child)| std::os::fd::AsRawFd::as_raw_fd(child));
        let inherited = group
            .as_ref()
            .is_some_and(super::confine::cgroups::CallGroup::restricted);
        let terminal = matches!(launch.io, Io::Tty { .. });
        let setup = self.child_setup(listener_end, inherited, terminal);
        let (exit_tx, exit_rx) = oneshot::channel();
        let child = {
            // Held across the spawn so the reaper cannot reap the child before its waiter exists.
            let mut waiters = lock(&self.inner.waiters);
            let spawner = &self.inner.confinement.spawner;
            match spawn_in(group.as_ref(), spawner, command, child_end, terminal, setup) {
                Ok(child) => {
                    waiters.insert(child.pid, exit_tx);
                    child
                }
                Err(err) => {
                    drop(waiters);
                    self.keep_failed_group(group, launch.call_id);
                    return Err(spawn_error(err));
                }
            }
        };
        let pid = child.pid;
        if let Some((server_end, child_end)) = channel {
            drop(child_end);
            self.mediate(&server_end, pid);
        }
        if let Some(group) = group {
            lock(&self.inner.groups).insert(launch.call_id.to_owned(), group);
        }
        let streams = streams(child.output, parent_end).map_err(spawn_error)?;
        Ok(Launched {
            pid,
            streams,
            exit: exit_rx,
        })
    }

    /// The failed child may not have left the group yet: a busy group waits in the map like
    /// any call's, and is given back once empty.
    fn keep_failed_group(&self, group: Option<super::confine::cgroups::CallGroup>, call_id: &str) {
        if let (Some(group), Some(cgroups)) = (group, &self.inner.confinement.cgroups)
            && let Some(busy) = cgroups.give_back(group)
        {
            lock(&self.inner.groups).insert(call_id.to_owned(), busy);
        }
    }

    /// `bash` with the launch's arguments in its `cwd`, with the clean environment (the
    /// allow-list only, never the server's own variables), the launch's own variables and the
    /// markers.
    fn shell_command(&self, launch: &Launch<'_>) -> io::Result<super::spawn::Command> {
        let env = &self.inner.confinement.env;
        let bash = self.inner.bash.get_or_init(|| {
            let path = env
                .iter()
                .find(|(key, _)| key == "PATH")
                .map_or("/usr/local/bin:/usr/bin:/bin", |(_, value)| value.as_str());
            super::spawn::find_program("bash", path)
        });
        let Some(bash) = bash else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "no executable `bash` on the commands' PATH",
            ));
        };
        let markers = [
            (CALL_ID_ENV, launch.call_id),
            (super::SERVER_ID_ENV, self.inner.server_id.as_str()),
        ];
        let own = |key: &str| launch.env.iter().any(|(k, _)| k == key);
        let terminal = matches!(launch.io, Io::Tty { .. }) && !own("TERM");
        let env = env
            .iter()
            .filter(|(key, _)| !own(key))
            .chain(launch.env)
            .filter(|(key, _)| key != CALL_ID_ENV && key != super::SERVER_ID_ENV)
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .chain(terminal.then_some(("TERM", "xterm-256color")))
            .chain(markers);
        super::spawn::Command::new(bash, launch.args, env, launch.cwd)
    }

    /// What the child runs just before `execve`, under the rules of [`super::spawn`]: its own
    /// session, death with the server, then the confinement.
    fn child_setup(
        &self,
        listener_channel: Option<std::os::fd::RawFd>,
        landlock_inherited: bool,
        terminal: bool,
    ) -> impl FnMut() -> io::Result<()> + Send + use<> {
        let mut confine = self
            .inner
            .confinement
            .child_setup(listener_channel, landlock_inherited);
        // The parent as the child sees it: none (0) from inside the commands' PID namespace.
        let server_pid = if self.inner.confinement.pid_namespace() {
            nix::unistd::Pid::from_raw(0)
        } else {
            nix::unistd::Pid::from_raw(self.inner.self_pid as i32)
        };
        move || {
            nix::unistd::setsid().map_err(io::Error::from)?;
            if terminal {
                // SAFETY: a raw ioctl on descriptor 0, the terminal just put there; it makes the
                // terminal this new session's controlling one, so Ctrl-C and job control work.
                if unsafe { nix::libc::ioctl(0, nix::libc::TIOCSCTTY, 0) } < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            // The shell dies with the server; what it starts is swept by the janitor.
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from)?;
            if nix::unistd::getppid() != server_pid {
                // The server is gone.
                return Err(io::Error::from_raw_os_error(nix::libc::ESRCH));
            }
            confine()
        }
    }

    /// Starts answering the `connect` calls of the command just spawned.
    fn mediate(&self, server_end: &OwnedFd, pid: u32) {
        let Some(allowed) = self.inner.confinement.connect_allowed() else {
            return;
        };
        match super::mediate::receive_listener(server_end) {
            Ok(listener) => super::mediate::serve(listener, allowed),
            Err(err) => {
                tracing::error!(pid, cause = %err, "no seccomp listener: the command's connects fail")
            }
        }
    }

    /// The call's cgroups, taken before the clone (the child is cloned by the group's thread,
    /// so it is born in them); none where this server may not create groups.
    fn create_group(&self) -> Result<Option<super::confine::cgroups::CallGroup>, ProcessError> {
        let Some(cgroups) = &self.inner.confinement.cgroups else {
            return Ok(None);
        };
        cgroups
            .take()
            .map(Some)
            .map_err(|source| ProcessError::Spawn {
                program: "a cgroup for the command".to_owned(),
                source,
            })
    }

    /// The containment applied to every command.
    pub fn protections(&self) -> &[sandbox_protocol::Protection] {
        &self.inner.confinement.protections
    }

    /// Marks a call as running (its processes are foreground) until `call_finished`.
    pub fn call_started(&self, call_id: &str) {
        lock(&self.inner.running_calls).insert(call_id.to_owned());
    }

    pub fn call_finished(&self, call_id: &str) {
        lock(&self.inner.running_calls).remove(call_id);
        self.remove_empty_groups();
    }

    /// Gives back the cgroups of calls whose processes have all ended, for reuse.
    fn remove_empty_groups(&self) {
        let Some(cgroups) = &self.inner.confinement.cgroups else {
            return;
        };
        let mut groups = lock(&self.inner.groups);
        let calls: Vec<String> = groups.keys().cloned().collect();
        for call in calls {
            if let Some(group) = groups.remove(&call)
                && let Some(busy) = cgroups.give_back(group)
            {
                groups.insert(call, busy);
            }
        }
    }

    /// The pids in a call's cgroups (none without cgroups).
    fn group_members(&self, call_id: &str) -> Vec<u32> {
        lock(&self.inner.groups)
            .get(call_id)
            .map(super::confine::cgroups::CallGroup::members)
            .unwrap_or_default()
    }

    pub fn is_call_running(&self, call_id: &str) -> bool {
        lock(&self.inner.running_calls).contains(call_id)
    }
}
