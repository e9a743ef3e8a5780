//! What a launch is made of: the command's standard streams (nothing to read from, a pipe to
//! write to, or a terminal), the server's ends of them, and what a launched command hands back.

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use tokio::net::unix::pipe;
use tokio::sync::oneshot;

use super::ExitStatus;

/// How a launched command's standard streams are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Io {
    /// Standard input from `/dev/null` (a `bash` call).
    Null,
    /// Standard input from a pipe the caller writes to.
    StdinPipe,
    /// A pseudo-terminal of `rows` × `cols` as all three.
    Tty { rows: u16, cols: u16 },
}

/// What to launch: `bash` with `args`, in the commands' environment plus `env`.
#[derive(Debug)]
pub struct Launch<'a> {
    pub args: &'a [&'a str],
    pub cwd: &'a Path,
    /// The marker its processes carry (a call id, or `process:<id>`).
    pub call_id: &'a str,
    pub env: &'a [(String, String)],
    pub io: Io,
}

/// A launched command's streams.
#[derive(Debug)]
pub enum Streams {
    Pipes {
        stdout: pipe::Receiver,
        stderr: pipe::Receiver,
        stdin: Option<pipe::Sender>,
    },
    Terminal(Arc<super::pty::Master>),
}

/// A launched command: its pid, its streams and a channel that yields its exit status.
#[derive(Debug)]
pub struct Launched {
    pub pid: u32,
    pub streams: Streams,
    pub exit: oneshot::Receiver<ExitStatus>,
}

/// The child's end of its standard input (or terminal), and the server's end, if any.
pub(super) fn child_io(io: Io) -> io::Result<(OwnedFd, Option<ParentEnd>)> {
    match io {
        Io::Null => Ok((std::fs::File::open("/dev/null")?.into(), None)),
        Io::StdinPipe => {
            let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
            Ok((read, Some(ParentEnd::Stdin(write))))
        }
        Io::Tty { rows, cols } => {
            let (master, slave) = super::pty::open(rows, cols)?;
            Ok((slave, Some(ParentEnd::Terminal(master))))
        }
    }
}

/// What the server keeps of a child's input side.
pub(super) enum ParentEnd {
    Stdin(OwnedFd),
    Terminal(super::pty::Master),
}

pub(super) fn streams(
    output: Option<(OwnedFd, OwnedFd)>,
    parent: Option<ParentEnd>,
) -> io::Result<Streams> {
    match (output, parent) {
        (_, Some(ParentEnd::Terminal(master))) => Ok(Streams::Terminal(Arc::new(master))),
        (Some((stdout, stderr)), stdin) => Ok(Streams::Pipes {
            stdout: pipe::Receiver::from_owned_fd(stdout)?,
            stderr: pipe::Receiver::from_owned_fd(stderr)?,
            stdin: match stdin {
                Some(ParentEnd::Stdin(fd)) => Some(pipe::Sender::from_owned_fd(fd)?),
                _ => None,
            },
        }),
        (None, _) => Err(io::Error::other("a command without a terminal has pipes")),
    }
}

/// Clones `command` from the thread that lives in `group` (so that it is born in the group),
/// or from `spawner` when there are no groups; waits until it has exec'd.
pub(super) fn spawn_in(
    group: Option<&super::confine::cgroups::CallGroup>,
    spawner: &super::confine::threads::Spawner,
    command: super::spawn::Command,
    child_end: OwnedFd,
    terminal: bool,
    mut setup: impl FnMut() -> io::Result<()> + Send + 'static,
) -> io::Result<super::spawn::Child> {
    let mut spawn = move || {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&child_end);
        let stdio = if terminal {
            super::spawn::Stdio::Terminal { slave: fd }
        } else {
            super::spawn::Stdio::Pipes { stdin: fd }
        };
        // `child_end` is closed here once the child has its copy.
        super::spawn::spawn(&command, stdio, &mut setup)
    };
    let (done, result) = std::sync::mpsc::sync_channel(1);
    let job: super::confine::threads::Job = Box::new(move || {
        let _ = done.send(spawn());
    });
    match group {
        Some(group) => group.run(job)?,
        None => spawner.run(job)?,
    }
    result
        .recv()
        .map_err(|_| io::Error::other("the cgroup's thread ended during a spawn"))?
}
