//! Persistent shells: a `bash` that reads commands from its standard input, one run at a time,
//! and keeps its working directory, variables and functions between them.
//!
//! Each run is sent as a here-document to a function the shell defined at start, which
//! `eval`s it with Ctrl-C turned into `return 130`; after it the shell prints an end marker
//! with the run's status on stdout and another on stderr. The markers carry a random nonce,
//! are taken out of the output (readers of the process never see them), and tell where each
//! stream's part of the run ends. The run's standard input is the here-document, so a command
//! that reads input gets end of file rather than the next run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandbox_protocol::{
    OutputStream, ProcessKind, ProcessState, ShellRunResult, StartShellRequest,
};
use tokio::io::AsyncWriteExt;
use tokio::sync::oneshot;

use super::{Input, Managed, ManagedError, ProcessTable, Spec, check_env, check_id, lock};
use crate::process::{ExitStatus, Io};
use crate::sandbox::output::StreamCapture;
use crate::sandbox::registry::ToolContext;

/// What the shell runs first: Ctrl-C between runs does nothing, and the run function.
const PRELUDE: &str = "trap : INT\n__harness_run() { trap 'return 130' INT; eval \"$(cat)\"; }\n";

/// How long an interrupted run may take to reach its end marker before its processes (all
/// but the shell) are killed.
const AFTER_INTERRUPT: Duration = Duration::from_secs(2);

/// A shell's run bookkeeping.
#[derive(Debug, Default)]
pub struct ShellState {
    /// Held for the length of a run: one at a time.
    busy: tokio::sync::Mutex<()>,
    active: Mutex<Option<ActiveRun>>,
    runs: AtomicU64,
}

#[derive(Debug)]
struct ActiveRun {
    /// Per stream (stdout, stderr): the marker, bytes that may be its start, whether seen.
    markers: [Vec<u8>; 2],
    pending: [Vec<u8>; 2],
    seen: [bool; 2],
    captures: [Option<StreamCapture>; 2],
    status: Option<i32>,
    interrupted: bool,
    done: Option<oneshot::Sender<()>>,
}

impl ActiveRun {
    fn finish_if_complete(&mut self) {
        if self.seen.iter().all(|&s| s)
            && let Some(done) = self.done.take()
        {
            let _ = done.send(());
        }
    }
}

/// Where `needle` starts in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The longest end of `bytes` that is a proper start of `marker`.
fn partial_marker(bytes: &[u8], marker: &[u8]) -> usize {
    (1..marker.len().min(bytes.len() + 1))
        .rev()
        .find(|&n| bytes.ends_with(&marker[..n]))
        .unwrap_or(0)
}

impl ShellState {
    /// What of `bytes` the process's readers see: everything but the run's end markers. The
    /// run's own part also goes to its captures.
    pub(super) fn filter(&self, stream: OutputStream, bytes: &[u8]) -> Vec<u8> {
        let i = match stream {
            OutputStream::Stdout => 0,
            OutputStream::Stderr => 1,
            OutputStream::Pty => return bytes.to_vec(),
        };
        let mut active = lock(&self.active);
        let Some(run) = active.as_mut().filter(|run| !run.seen[i]) else {
            return bytes.to_vec();
        };
        let mut buf = std::mem::take(&mut run.pending[i]);
        buf.extend_from_slice(bytes);
        let marker = run.markers[i].clone();
        let (emit, rest) = match find(&buf, &marker) {
            Some(at) => {
                let after = at + marker.len();
                // The stdout marker goes on with the status and a closing 0x1e.
                let end = if i == 0 {
                    buf[after..].iter().position(|&b| b == 0x1e).map(|k| {
                        let status = String::from_utf8_lossy(&buf[after..after + k]).into_owned();
                        run.status = status.parse().ok();
                        after + k + 1
                    })
                } else {
                    Some(after)
                };
                match end {
                    Some(end) => {
                        run.seen[i] = true;
                        (buf[..at].to_vec(), buf[end..].to_vec())
                    }
                    None => {
                        run.pending[i] = buf[at..].to_vec();
                        (buf[..at].to_vec(), Vec::new())
                    }
                }
            }
            None => {
                let held = partial_marker(&buf, &marker);
                let cut = buf.len() - held;
                run.pending[i] = buf[cut..].to_vec();
                buf.truncate(cut);
                (buf, Vec::new())
            }
        };
        if let Some(capture) = run.captures[i].as_mut() {
            capture.push(&emit);
        }
        run.finish_if_complete();
        let mut seen_by_readers = emit;
        seen_by_readers.extend_from_slice(&rest);
        seen_by_readers
    }

    /// The shell ended: a run in progress ends with it.
    pub(super) fn shell_ended(&self, _exit: ExitStatus) {
        if let Some(run) = lock(&self.active).as_mut()
            && let Some(done) = run.done.take()
        {
            let _ = done.send(());
        }
    }

    /// Interrupts the run in progress as Ctrl-C would.
    pub fn interrupt(&self, managed: &Managed) -> Result<(), ManagedError> {
        {
            let mut active = lock(&self.active);
            let Some(run) = active.as_mut() else {
                return Err(ManagedError::Conflict(format!(
                    "shell `{}` is not running a command",
                    managed.id
                )));
            };
            run.interrupted = true;
        }
        managed.signal(sandbox_protocol::SignalName::Int)
    }
}

impl ProcessTable {
    /// Starts a persistent shell under `request.id`; a repeat answers with the shell as it is.
    pub async fn start_shell(
        &self,
        request: &StartShellRequest,
    ) -> Result<(Arc<Managed>, bool), ManagedError> {
        check_id(&request.id)?;
        let spec = Spec {
            id: &request.id,
            kind: ProcessKind::Shell,
            cmd: "bash --noprofile --norc",
            args: &["--noprofile", "--norc"],
            cwd: request.cwd.as_deref(),
            env: check_env(&request.env)?,
            io: Io::StdinPipe,
            tty: None,
            timeout: None,
            request: serde_json::to_value(request).unwrap_or_default(),
        };
        let (managed, started) = self.launch(&spec)?;
        if started && let Err(err) = send(&managed, PRELUDE).await {
            let _ = self.delete(&request.id).await;
            return Err(err);
        }
        Ok((managed, started))
    }
}

/// Runs `cmd` in the shell and waits for its end (or its timeout, which interrupts it).
pub async fn run(
    table: &ProcessTable,
    managed: &Arc<Managed>,
    cmd: &str,
    timeout_secs: u32,
    ctx: &ToolContext,
) -> Result<ShellRunResult, ManagedError> {
    let Some(shell) = &managed.shell else {
        return Err(ManagedError::Conflict(format!(
            "`{}` is a command, not a shell (POST /v1/shells starts one)",
            managed.id
        )));
    };
    let Ok(_busy) = shell.busy.try_lock() else {
        return Err(ManagedError::Conflict(format!(
            "shell `{}` is running a command; wait for it or interrupt it",
            managed.id
        )));
    };
    if cmd.is_empty() || cmd.contains('\0') {
        return Err(ManagedError::Invalid(
            "cmd: must be a non-empty command without NUL bytes".to_owned(),
        ));
    }
    let n = shell.runs.fetch_add(1, Ordering::Relaxed) + 1;
    let nonce = format!("{:032x}", rand::random::<u128>());
    let (done_tx, done_rx) = oneshot::channel();
    let limit = ctx.limits.output_limit_chars;
    *lock(&shell.active) = Some(ActiveRun {
        markers: [
            format!("\x1eHARNESS-{nonce}-").into_bytes(),
            format!("\x1eHARNESS-{nonce}\x1e").into_bytes(),
        ],
        pending: Default::default(),
        seen: [false; 2],
        captures: [
            Some(ctx.artifacts.capture(limit)),
            Some(ctx.artifacts.capture(limit)),
        ],
        status: None,
        interrupted: false,
        done: Some(done_tx),
    });
    let start = Instant::now();
    let sent = send(managed, &wrap(cmd, &nonce, n)).await;
    if let Err(err) = sent {
        lock(&shell.active).take();
        return Err(err);
    }
    let timed_out = wait(table, managed, shell, done_rx, timeout_secs).await;
    let run = lock(&shell.active)
        .take()
        .expect("the run is there until taken here");
    Ok(result(
        table,
        managed,
        run,
        timed_out,
        timeout_secs,
        start,
        n,
        ctx,
    ))
}

/// The text that makes the shell run `cmd` and print its markers.
fn wrap(cmd: &str, nonce: &str, n: u64) -> String {
    let delimiter = format!("HARNESS_{nonce}_{n}");
    format!(
        "__harness_run <<'{delimiter}'\n{cmd}\n{delimiter}\n__harness_s=$?; trap : INT; \
         printf '\\036HARNESS-{nonce}-%d\\036' \"$__harness_s\"; printf '\\036HARNESS-{nonce}\\036' >&2\n"
    )
}

/// Writes to the shell's standard input.
async fn send(managed: &Managed, text: &str) -> Result<(), ManagedError> {
    let mut input = managed.input.lock().await;
    let Input::Shell(Some(sender)) = &mut *input else {
        return Err(ManagedError::Conflict(format!(
            "shell `{}` has ended",
            managed.id
        )));
    };
    sender
        .write_all(text.as_bytes())
        .await
        .map_err(|err| ManagedError::Conflict(format!("shell `{}` has ended: {err}", managed.id)))
}

/// Waits for the run's markers; at the timeout interrupts it, and kills what it started when
/// the interrupt is not enough. Returns whether the timeout fired.
async fn wait(
    table: &ProcessTable,
    managed: &Managed,
    shell: &ShellState,
    mut done: oneshot::Receiver<()>,
    timeout_secs: u32,
) -> bool {
    let timeout = Duration::from_secs(u64::from(timeout_secs));
    if tokio::time::timeout(timeout, &mut done).await.is_ok() {
        return false;
    }
    let _ = shell.interrupt(managed);
    if tokio::time::timeout(AFTER_INTERRUPT, &mut done)
        .await
        .is_ok()
    {
        return true;
    }
    // The command ignored Ctrl-C: everything below the shell goes, the shell stays.
    let grace = table.limits().kill_grace;
    table
        .supervisor()
        .kill_descendants(managed.pid, grace)
        .await;
    let _ = tokio::time::timeout(AFTER_INTERRUPT, &mut done).await;
    true
}

#[allow(clippy::too_many_arguments)]
fn result(
    table: &ProcessTable,
    managed: &Managed,
    mut run: ActiveRun,
    timed_out: bool,
    timeout_secs: u32,
    start: Instant,
    n: u64,
    ctx: &ToolContext,
) -> ShellRunResult {
    let alive = lock(&managed.live).state == ProcessState::Running;
    let shell_exit = lock(&managed.live).exit;
    let code = match (run.status, shell_exit) {
        (Some(code), _) => code,
        (None, Some(exit)) => exit.code,
        (None, None) => 130,
    };
    let background_pids = table
        .supervisor()
        .call_processes(&managed.marker)
        .into_iter()
        .filter(|&pid| pid != managed.pid)
        .map(|pid| table.supervisor().public_pid(pid))
        .collect();
    let [stdout, stderr] = [run.captures[0].take(), run.captures[1].take()]
        .map(|c| c.unwrap_or_else(|| ctx.artifacts.capture(ctx.limits.output_limit_chars)));
    let parts = crate::sandbox::tools::bash::Composition {
        exit: ExitStatus { code, signal: None },
        timed_out,
        timeout_secs,
        at_timeout: "the command was interrupted (Ctrl-C); the shell lives on",
        duration_ms: start.elapsed().as_millis() as u64,
        background_pids,
        call_id: format!("{}:run-{n}", managed.id),
        ctx,
    };
    ShellRunResult {
        result: crate::sandbox::tools::bash::compose(parts, stdout, stderr),
        interrupted: run.interrupted,
        shell_alive: alive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_with(nonce: &str) -> ShellState {
        let state = ShellState::default();
        *lock(&state.active) = Some(ActiveRun {
            markers: [
                format!("\x1eHARNESS-{nonce}-").into_bytes(),
                format!("\x1eHARNESS-{nonce}\x1e").into_bytes(),
            ],
            pending: Default::default(),
            seen: [false; 2],
            captures: [None, None],
            status: None,
            interrupted: false,
            done: None,
        });
        state
    }

    #[test]
    fn markers_are_taken_out_even_when_split_across_reads() {
        let state = run_with("n1");
        let mut seen = Vec::new();
        for piece in [&b"hello\n\x1eHARN"[..], b"ESS-n1-", b"42", b"\x1eafter"] {
            seen.extend(state.filter(OutputStream::Stdout, piece));
        }
        assert_eq!(seen, b"hello\nafter");
        let active = lock(&state.active);
        let run = active.as_ref().unwrap();
        assert_eq!(run.status, Some(42));
        assert!(run.seen[0] && !run.seen[1]);
    }

    #[test]
    fn text_that_only_looks_like_a_marker_passes() {
        let state = run_with("n2");
        let mut seen = state.filter(OutputStream::Stderr, b"a\x1eHARNESS-other\x1e");
        seen.extend(state.filter(OutputStream::Stderr, b"\x1eHARNESS-n2\x1e"));
        assert_eq!(seen, b"a\x1eHARNESS-other\x1e");
        assert!(lock(&state.active).as_ref().unwrap().seen[1]);
    }
}
