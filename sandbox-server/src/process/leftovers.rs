//! What a server leaves when it dies without stopping (a `SIGKILL`, a crash): its commands'
//! processes, its cgroups and its folders. Two sweeps remove them: a janitor process each
//! server starts, which waits for its server to end and then sweeps after it; and a sweep at
//! every server's start, for servers whose janitor did not outlive them either. A sweep only
//! touches what belongs to a server that is gone (its pid dead, or reused by a later process).

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::str::FromStr;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::proc_fs;

/// The variable that names, in every command's environment, the server that started it.
pub const SERVER_ID_ENV: &str = sandbox_protocol::process::SERVER_ID_VARIABLE;

/// A server: its pid and the start time of that process (so a reused pid is not mistaken for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ServerId {
    pub pid: u32,
    pub start_ticks: u64,
}

impl ServerId {
    /// This process.
    pub fn current() -> ServerId {
        let pid = std::process::id();
        let start_ticks = proc_fs::read_stat(pid).map_or(0, |e| e.start_ticks);
        ServerId { pid, start_ticks }
    }

    /// Whether the process it names still runs.
    pub fn alive(&self) -> bool {
        proc_fs::read_stat(self.pid)
            .is_some_and(|e| e.start_ticks == self.start_ticks && !e.is_zombie())
    }
}

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.pid, self.start_ticks)
    }
}

impl FromStr for ServerId {
    type Err = String;

    fn from_str(text: &str) -> Result<ServerId, String> {
        let (pid, start) = text
            .split_once('-')
            .ok_or_else(|| format!("`{text}` is not PID-START"))?;
        let number = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| format!("`{text}` is not PID-START"))
        };
        Ok(ServerId {
            pid: u32::try_from(number(pid)?).map_err(|_| format!("`{text}`: pid out of range"))?,
            start_ticks: number(start)?,
        })
    }
}

/// Kills every process that carries `id` as its server and removes the cgroups named after
/// it; returns how many processes were killed.
pub fn sweep_processes(id: &ServerId) -> usize {
    let mark = id.to_string();
    let mut killed = 0;
    for pid in proc_fs::snapshot().into_keys() {
        if proc_fs::call_marker(pid, SERVER_ID_ENV).as_deref() == Some(mark.as_str())
            && kill(Pid::from_raw(pid as i32), Signal::SIGKILL).is_ok()
        {
            killed += 1;
        }
    }
    killed += super::confine::cgroups::sweep_server(&|name: &str| {
        group_owner(name).is_some_and(|owner| owner == *id)
    });
    killed
}

/// The server a cgroup named `sandbox-<pid>-<start>-<call>` belongs to.
fn group_owner(name: &str) -> Option<ServerId> {
    let rest = name.strip_prefix("sandbox-")?;
    let mut parts = rest.splitn(3, '-');
    let (pid, start) = (parts.next()?, parts.next()?);
    format!("{pid}-{start}").parse().ok()
}

/// Sweeps every cgroup whose server is gone (a crash before this release named groups with
/// the pid alone: those whose pid is dead go too).
pub fn sweep_dead_groups() -> usize {
    super::confine::cgroups::sweep_server(&|name: &str| match group_owner(name) {
        Some(owner) => !owner.alive(),
        None => name
            .strip_prefix("sandbox-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| proc_fs::read_stat(pid).is_none()),
    })
}

/// Starts the janitor for this server: a process of this same binary that waits until the
/// server's end closes the pipe it holds, then sweeps after it. The write end is kept open
/// for the server's whole life.
pub fn start_janitor(id: &ServerId, folder: Option<&Path>) -> std::io::Result<u32> {
    let exe = std::env::current_exe()?;
    #[allow(clippy::disallowed_methods)] // the process module is the one place allowed to spawn
    let mut command = std::process::Command::new(exe);
    command
        .arg("janitor")
        .arg("--server")
        .arg(id.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some(folder) = folder {
        command.arg("--folder").arg(folder);
    }
    // Its own session: a Ctrl-C meant for the server's terminal does not reach it.
    use std::os::unix::process::CommandExt;
    command.process_group(0);
    let mut child = command.spawn()?;
    let pid = child.id();
    // Never written, never closed while the server lives: its end is the signal.
    std::mem::forget(child.stdin.take());
    std::mem::forget(child);
    Ok(pid)
}

/// The janitor's body: waits for the server to end (standard input reaches end of file), then
/// kills what it left running and removes its folder.
pub fn run_janitor(id: &ServerId, folder: Option<&PathBuf>) {
    let mut sink = [0u8; 64];
    let mut stdin = std::io::stdin().lock();
    while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
    let killed = sweep_processes(id);
    if killed > 0 {
        tracing::warn!(server = %id, killed, "the server ended without stopping its commands; killed them");
    }
    if let Some(folder) = folder
        && let Err(err) = std::fs::remove_dir_all(folder)
        && err.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(folder = %folder.display(), cause = %err, "could not remove the server's folder");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_read_back_and_this_process_is_alive() {
        let me = ServerId::current();
        assert!(me.alive());
        assert_eq!(me.to_string().parse::<ServerId>().unwrap(), me);
        let reused = ServerId {
            start_ticks: me.start_ticks + 1,
            ..me
        };
        assert!(
            !reused.alive(),
            "a pid with another start time is another process"
        );
        assert_eq!(group_owner(&format!("sandbox-{me}-call_ab")), Some(me));
        assert!("12".parse::<ServerId>().is_err());
    }
}
