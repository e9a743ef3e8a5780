//! Processes started by id: each keeps its output in a numbered, bounded buffer (`ring`) that
//! any number of readers follow from their own cursor, takes input, signals and resizes, and
//! lives until it ends, its timeout fires or it is deleted — never because a client left.
//! Persistent shells (`shell`) are processes of this kind whose input is one command at a time.
//!
//! *Invariant*: one task per process reads its output and awaits its exit; readers only look
//! at the buffer, so a slow or absent reader never blocks the process.

mod call;
mod follow;
mod managed;
pub mod ring;
pub mod shell;

pub use managed::decode_input;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use base64::Engine;
use sandbox_protocol::{
    Encoding, ManagedProcess, OutputChunk, OutputStream, ProcessKind, ProcessOutput, ProcessState,
    SignalName, StartProcessRequest, StreamArtifact, TtySize,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use crate::process::{ExitStatus, Io, KillReport, Launch, ProcessError, Streams, Supervisor};
use crate::sandbox::output::{ArtifactStore, StreamCapture};
use crate::sandbox::workspace::{Workspace, WorkspaceError};

use ring::Ring;

/// The most a long-poll read may wait.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// Why a request about a managed process failed.
#[derive(Debug, thiserror::Error)]
pub enum ManagedError {
    #[error("no process with id `{0}` (GET /v1/processes lists them)")]
    NotFound(String),
    /// The process is not in a state for the request (see the message).
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(transparent)]
    Spawn(#[from] ProcessError),
}

/// The limits of the table.
#[derive(Debug, Clone, Copy)]
pub struct ProcessLimits {
    /// Bytes of output each process keeps for its readers.
    pub buffer_bytes: usize,
    /// Processes kept at once; past it the oldest ended one is forgotten, and when none has
    /// ended a new one is refused.
    pub max_processes: usize,
    pub kill_grace: Duration,
}

/// Every managed process of the server. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ProcessTable {
    inner: Arc<TableInner>,
}

#[derive(Debug)]
struct TableInner {
    processes: Mutex<HashMap<String, Arc<Managed>>>,
    supervisor: Supervisor,
    workspace: Arc<Workspace>,
    artifacts: ArtifactStore,
    limits: ProcessLimits,
    started: AtomicU64,
    /// Numbers the processes `exec` starts: `exec-1`, `exec-2`, …
    execs: AtomicU64,
}

/// One managed process.
#[derive(Debug)]
pub struct Managed {
    pub id: String,
    pub kind: ProcessKind,
    pub cmd: String,
    /// The request that started it, to tell a repeat from a different one.
    request: serde_json::Value,
    pub tty: Option<TtySize>,
    pub pid: u32,
    /// Its pid as commands see it (in their PID namespace), which the API shows.
    pub public_pid: u32,
    /// The marker its processes carry.
    marker: String,
    started_at: SystemTime,
    order: u64,
    live: Mutex<Live>,
    /// Bumped on every change: new output, the exit.
    changed: watch::Sender<u64>,
    input: tokio::sync::Mutex<Input>,
    master: Option<Arc<crate::process::pty::Master>>,
    pub(crate) shell: Option<shell::ShellState>,
    artifacts: ArtifactStore,
    /// The workspace root, which its folder is told relative to.
    workspace_root: std::path::PathBuf,
    /// The last chunk a model has been shown (`exec`, `write_stdin`).
    pub model_seen: AtomicU64,
    supervisor: Supervisor,
}

#[derive(Debug)]
enum Input {
    Pipe(Option<tokio::net::unix::pipe::Sender>),
    Terminal(Arc<crate::process::pty::Master>),
    /// A shell's input belongs to its runs.
    Shell(Option<tokio::net::unix::pipe::Sender>),
}

#[derive(Debug)]
struct Live {
    ring: Ring,
    /// Per stream, the bytes of a UTF-8 character cut by a read, held for the next one.
    carry: [Vec<u8>; 3],
    state: ProcessState,
    /// Set when the server ends it: killed or timed out.
    ending: Option<ProcessState>,
    exit: Option<ExitStatus>,
    ended_at: Option<SystemTime>,
    output_closed: bool,
    stdin_open: bool,
    /// The whole of each stream, as it comes, up to the artifact cap.
    captures: [Option<StreamCapture>; 3],
    /// Their artifacts, once the process has ended.
    artifacts: Vec<StreamArtifact>,
}

/// Processes keep no text window of their own (readers have the buffer): the smallest one.
const CAPTURE_TEXT: usize = 1;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn slot(stream: OutputStream) -> usize {
    match stream {
        OutputStream::Stdout => 0,
        OutputStream::Stderr => 1,
        OutputStream::Pty => 2,
    }
}

/// Checks a client's process id.
pub fn check_id(id: &str) -> Result<(), ManagedError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if id.is_empty() || id.len() > 64 || !id.chars().all(allowed) {
        return Err(ManagedError::Invalid(format!(
            "id: `{id}` must be 1 to 64 of letters, digits, `.`, `_` and `-`"
        )));
    }
    if id == "." || id == ".." {
        return Err(ManagedError::Invalid(format!(
            "id: `{id}` is a path step: a client that normalises URLs could never reach it again; choose another"
        )));
    }
    if id.chars().all(|c| c.is_ascii_digit()) {
        return Err(ManagedError::Invalid(format!(
            "id: `{id}` is only digits, which name an operating-system process; add a letter"
        )));
    }
    Ok(())
}

/// What a new process is, before it is launched.
pub(crate) struct Spec<'a> {
    pub id: &'a str,
    pub kind: ProcessKind,
    pub cmd: &'a str,
    pub args: &'a [&'a str],
    pub cwd: Option<&'a str>,
    pub env: Vec<(String, String)>,
    pub io: Io,
    pub tty: Option<TtySize>,
    pub timeout: Option<u32>,
    pub request: serde_json::Value,
}

impl ProcessTable {
    pub fn new(
        supervisor: Supervisor,
        workspace: Arc<Workspace>,
        artifacts: ArtifactStore,
        limits: ProcessLimits,
    ) -> Self {
        ProcessTable {
            inner: Arc::new(TableInner {
                processes: Mutex::new(HashMap::new()),
                supervisor,
                workspace,
                artifacts,
                limits,
                started: AtomicU64::new(0),
                execs: AtomicU64::new(0),
            }),
        }
    }

    /// Starts a command; a repeat of the same request answers with the process as it is.
    /// Returns the process and whether it was started now.
    pub fn start(
        &self,
        request: &StartProcessRequest,
    ) -> Result<(Arc<Managed>, bool), ManagedError> {
        check_id(&request.id)?;
        if request.cmd.is_empty() || request.cmd.contains('\0') {
            return Err(ManagedError::Invalid(
                "cmd: must be a non-empty command without NUL bytes".to_owned(),
            ));
        }
        if let Some(timeout) = request.timeout
            && !(1..=86_400).contains(&timeout)
        {
            return Err(ManagedError::Invalid(format!(
                "timeout: {timeout} is outside 1 to 86400 seconds"
            )));
        }
        if let Some(size) = request.tty {
            check_size(size)?;
        }
        let env = check_env(&request.env)?;
        let spec = Spec {
            id: &request.id,
            kind: ProcessKind::Command,
            cmd: &request.cmd,
            args: &["-c", &request.cmd],
            cwd: request.cwd.as_deref(),
            env,
            io: match request.tty {
                Some(size) => Io::Tty {
                    rows: size.rows,
                    cols: size.cols,
                },
                None => Io::StdinPipe,
            },
            tty: request.tty,
            timeout: request.timeout,
            request: serde_json::to_value(request).unwrap_or_default(),
        };
        self.launch(&spec)
    }

    /// Launches `spec` under its id, or answers with the process already under it.
    pub(crate) fn launch(&self, spec: &Spec<'_>) -> Result<(Arc<Managed>, bool), ManagedError> {
        let mut processes = lock(&self.inner.processes);
        if let Some(existing) = processes.get(spec.id) {
            if existing.request == spec.request {
                return Ok((existing.clone(), false));
            }
            return Err(ManagedError::Conflict(format!(
                "process `{}` exists with another request; delete it first or choose another id",
                spec.id
            )));
        }
        self.make_room(&mut processes)?;
        let cwd = self.inner.workspace.directory(spec.cwd.unwrap_or("."))?;
        let marker = format!("process:{}", spec.id);
        let supervisor = &self.inner.supervisor;
        let launch = Launch {
            args: spec.args,
            cwd: &cwd,
            call_id: &marker,
            env: &spec.env,
            io: spec.io,
        };
        supervisor.call_started(&marker);
        let launched = match supervisor.launch(&launch) {
            Ok(launched) => launched,
            Err(err) => {
                supervisor.call_finished(&marker);
                return Err(err.into());
            }
        };
        let (input, output) = split(launched.streams, spec.kind);
        let managed = Arc::new(Managed::new(spec, marker, launched.pid, input, self));
        let timeout = spec.timeout.map(|s| Duration::from_secs(u64::from(s)));
        tokio::spawn(
            managed
                .clone()
                .follow(output, launched.exit, timeout, self.clone()),
        );
        processes.insert(spec.id.to_owned(), managed.clone());
        Ok((managed, true))
    }

    /// Forgets the oldest ended process when the table is full; refuses when none has ended.
    fn make_room(&self, processes: &mut HashMap<String, Arc<Managed>>) -> Result<(), ManagedError> {
        if processes.len() < self.inner.limits.max_processes {
            return Ok(());
        }
        let oldest_ended = processes
            .values()
            .filter(|p| p.is_done())
            // Ended tool calls go first: they are the many.
            .min_by_key(|p| (p.kind != ProcessKind::Call, p.order))
            .map(|p| p.id.clone());
        match oldest_ended {
            Some(id) => {
                processes.remove(&id);
                Ok(())
            }
            None => Err(ManagedError::Conflict(format!(
                "{} processes are running, the most this server keeps (--max-processes); delete one first",
                processes.len()
            ))),
        }
    }

    pub fn get(&self, id: &str) -> Result<Arc<Managed>, ManagedError> {
        lock(&self.inner.processes)
            .get(id)
            .cloned()
            .ok_or_else(|| ManagedError::NotFound(id.to_owned()))
    }

    /// Whether `id` names a managed process.
    pub fn contains(&self, id: &str) -> bool {
        lock(&self.inner.processes).contains_key(id)
    }

    /// Every process, in the order they were started.
    pub fn list(&self) -> Vec<ManagedProcess> {
        let mut all: Vec<Arc<Managed>> = lock(&self.inner.processes).values().cloned().collect();
        all.sort_by_key(|p| p.order);
        all.iter().map(|p| p.describe()).collect()
    }

    /// Kills a process's tree (if it still runs), waits for its end, and forgets it.
    pub async fn delete(&self, id: &str) -> Result<(ManagedProcess, KillReport), ManagedError> {
        let managed = self.get(id)?;
        let report = managed.kill(self, ProcessState::Killed).await;
        managed.ended().await;
        lock(&self.inner.processes).remove(id);
        Ok((managed.describe(), report))
    }

    /// Forgets every process (after a reset killed them all).
    pub fn clear(&self) {
        let all: Vec<Arc<Managed>> = lock(&self.inner.processes)
            .drain()
            .map(|(_, p)| p)
            .collect();
        for managed in all {
            let mut live = lock(&managed.live);
            if live.state == ProcessState::Running {
                live.ending.get_or_insert(ProcessState::Killed);
            }
        }
    }

    /// The id of the next process `exec` starts.
    pub fn next_exec_id(&self) -> String {
        format!(
            "exec-{}",
            self.inner.execs.fetch_add(1, Ordering::Relaxed) + 1
        )
    }

    pub(crate) fn supervisor(&self) -> &Supervisor {
        &self.inner.supervisor
    }

    pub(crate) fn limits(&self) -> ProcessLimits {
        self.inner.limits
    }
}

/// What is read from a process: its pipes, or its terminal.
enum Output {
    Pipes(
        tokio::net::unix::pipe::Receiver,
        tokio::net::unix::pipe::Receiver,
    ),
    Terminal(Arc<crate::process::pty::Master>),
}

/// Separates a process's input side, kept for writers, from its output side, read by its task.
fn split(streams: Streams, kind: ProcessKind) -> (Input, Output) {
    match streams {
        Streams::Pipes {
            stdout,
            stderr,
            stdin,
        } => {
            let input = match kind {
                ProcessKind::Shell => Input::Shell(stdin),
                ProcessKind::Command | ProcessKind::Call => Input::Pipe(stdin),
            };
            (input, Output::Pipes(stdout, stderr))
        }
        Streams::Terminal(master) => (Input::Terminal(master.clone()), Output::Terminal(master)),
    }
}

fn check_size(size: TtySize) -> Result<(), ManagedError> {
    let fits = |n: u16| (1..=1000).contains(&n);
    if fits(size.rows) && fits(size.cols) {
        Ok(())
    } else {
        Err(ManagedError::Invalid(format!(
            "tty: {} rows × {} cols; each must be 1 to 1000",
            size.rows, size.cols
        )))
    }
}

/// The request's variables, refusing names a shell cannot take and the server's markers.
pub(crate) fn check_env(
    env: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, ManagedError> {
    let mut checked = Vec::new();
    for (key, value) in env {
        let name_ok = !key.is_empty()
            && !key.starts_with(|c: char| c.is_ascii_digit())
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name_ok {
            return Err(ManagedError::Invalid(format!(
                "env: `{key}` is not a variable name (letters, digits and `_`, not starting with a digit)"
            )));
        }
        if key == crate::process::CALL_ID_ENV || key == crate::process::SERVER_ID_ENV {
            return Err(ManagedError::Invalid(format!(
                "env: `{key}` is the server's own marker"
            )));
        }
        if value.contains('\0') {
            return Err(ManagedError::Invalid(format!(
                "env: `{key}` contains a NUL byte"
            )));
        }
        checked.push((key.clone(), value.clone()));
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        for good in ["build", "a.b_c-1", "x1"] {
            assert!(check_id(good).is_ok(), "{good}");
        }
        for bad in ["", "12", "a b", "a/b", &"x".repeat(65)] {
            assert!(check_id(bad).is_err(), "{bad}");
        }
    }
}
