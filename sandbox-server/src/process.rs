//! Processes: the only module that spawns, signals or reaps them.
//!
//! The server makes itself a child subreaper at start, so every process a command starts,
//! including daemons that double-fork or `setsid` out of the command's group, stays one of
//! the server's descendants. One reaper task (`waitpid(-1)`) is the only place that waits for
//! children; a spawned shell's exit status reaches its caller through a oneshot channel that
//! is registered under the same lock as the spawn, so an exit can never be missed.
//!
//! Every command carries `SANDBOX_CALL_ID` in its environment. Killing a call's tree takes
//! the union of the shell's descendants, its process group, and every process carrying that
//! marker, so children that escaped the group are caught too.

pub mod confine;
pub mod heap;
mod launch;
pub mod leftovers;
pub mod mediate;
mod proc_fs;
pub mod pty;
mod spawn;
mod supervisor;

pub use launch::{Io, Launch, Launched, Streams};
pub use leftovers::{SERVER_ID_ENV, ServerId};
pub use proc_fs::{ProcEntry, command_line, start_time_unix};
pub use spawn::ensure_standard_fds;
pub use supervisor::{ExitStatus, KillReport, SpawnedShell, Supervisor};

/// The environment variable that marks every process a `bash` call starts.
pub const CALL_ID_ENV: &str = sandbox_protocol::process::CALL_ID_VARIABLE;

/// Errors from spawning or signalling processes.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The shell could not be started (missing binary, no such working directory, fork failed).
    #[error("could not start `{program}`: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    /// The pid is not a live process that this server started.
    #[error("process {0} is not a live process started by this server")]
    NotOurs(u32),
}
