//! `bash`: run a shell command from the workspace root, with a timeout that kills its tree.

use sandbox_protocol::BuiltIn;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument as _;

use sandbox_protocol::{BashArgs, BashResult, OutputStream, StreamArtifact};
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

use crate::process::{ExitStatus, SpawnedShell};
use crate::sandbox::output::{StreamCapture, Window, indent};
use crate::sandbox::processes::Managed;
use crate::sandbox::registry::{About, Tool, ToolContext, ToolError, Validate};

/// After the shell exits, how long to keep reading output that its children may still hold open.
const DRAIN: Duration = Duration::from_millis(100);

/// When the reading stops, how many reads of what a pipe already holds are taken at most
/// (16 × 64 KiB, past a pipe's default buffer).
const BUFFERED_READS: usize = 16;
/// Room in the model-facing text for the `exit=` line and notes.
const HEADER_ALLOWANCE: usize = 400;

pub struct Bash;

impl Validate for BashArgs {
    fn validate(&self) -> Result<(), String> {
        check_command(&self.cmd, self.timeout)
    }
}

/// A command line and its timeout, as `bash` and `shell` take them: not empty, no NUL byte,
/// 1 to 3600 seconds.
pub(crate) fn check_command(cmd: &str, timeout: Option<u32>) -> Result<(), String> {
    if let Some(timeout) = timeout
        && !(1..=3600).contains(&timeout)
    {
        return Err(format!(
            "timeout: must be between 1 and 3600 seconds, got {timeout}"
        ));
    }
    if cmd.is_empty() {
        return Err("cmd: must not be empty".to_owned());
    }
    if cmd.contains('\0') {
        return Err("cmd: contains a NUL byte, which no command line can hold".to_owned());
    }
    Ok(())
}

impl Tool for Bash {
    type Args = BashArgs;
    type Output = BashResult;

    const ABOUT: About = About {
        tool: BuiltIn::Bash,
        description: "Run a shell command from the working directory. Timeout is in seconds (max 3600).",
        scope: sandbox_protocol::Scope::Run,
    };

    async fn execute(&self, args: BashArgs, ctx: ToolContext) -> Result<BashResult, ToolError> {
        let timeout_secs = args
            .timeout
            .unwrap_or(ctx.limits.default_timeout_secs)
            .min(ctx.limits.max_timeout_secs);
        // The call runs in its own task: if the client goes away, the command still ends by
        // its timeout and its processes are still killed, instead of being left half-watched.
        let span = tracing::info_span!(
            "command",
            pid = tracing::field::Empty,
            exit_code = tracing::field::Empty,
            timed_out = tracing::field::Empty,
        );
        tokio::spawn(run(args.cmd, timeout_secs, ctx).instrument(span))
            .await
            .map_err(|err| ToolError::Internal(format!("bash task failed: {err}")))?
    }
}

async fn run(cmd: String, timeout_secs: u32, ctx: ToolContext) -> Result<BashResult, ToolError> {
    let call_id = ctx
        .call_id
        .clone()
        .unwrap_or_else(|| format!("call_{:016x}", rand::random::<u64>()));
    let limit = ctx.limits.output_limit_chars;
    let (mut stdout, mut stderr) = (ctx.artifacts.capture(limit), ctx.artifacts.capture(limit));
    ctx.processes.check_call_id(&call_id)?;
    let start = Instant::now();
    ctx.supervisor.call_started(&call_id);
    let shell = match ctx
        .supervisor
        .spawn_shell(&cmd, ctx.workspace.root(), &call_id)
    {
        Ok(shell) => shell,
        Err(err) => {
            ctx.supervisor.call_finished(&call_id);
            return Err(err.into());
        }
    };
    tracing::debug!(%call_id, pid = shell.pid, "command started");
    tracing::Span::current().record("pid", i64::from(shell.pid));
    let deadline = start + Duration::from_secs(u64::from(timeout_secs));
    let request = serde_json::json!({"tool": "bash", "cmd": cmd, "timeout": timeout_secs});
    let view = ctx.processes.open_call(&call_id, &cmd, shell.pid, request);
    let mut watch = Watch::new(shell, view.clone());
    let (exit, timed_out) = watch
        .until_done(&mut stdout, &mut stderr, deadline, &ctx, &call_id)
        .await;
    let duration_ms = start.elapsed().as_millis() as u64;
    let span = tracing::Span::current();
    span.record("timed_out", timed_out);
    span.record("exit_code", i64::from(exit.code));
    watch.discard_the_rest();
    let background_pids = if timed_out {
        Vec::new()
    } else {
        let supervisor = &ctx.supervisor;
        let pids = supervisor.call_processes(&call_id);
        pids.into_iter()
            .map(|pid| supervisor.public_pid(pid))
            .collect()
    };
    ctx.supervisor.call_finished(&call_id);
    let parts = Composition {
        exit,
        timed_out,
        timeout_secs,
        duration_ms,
        at_timeout: "the command and every process it started were killed",
        background_pids,
        call_id,
        ctx: &ctx,
    };
    let result = compose(parts, stdout, stderr);
    if let Some(view) = view {
        let artifacts = vec![
            StreamArtifact {
                stream: OutputStream::Stdout,
                artifact: result.stdout_artifact.clone(),
            },
            StreamArtifact {
                stream: OutputStream::Stderr,
                artifact: result.stderr_artifact.clone(),
            },
        ];
        view.finish_call(exit, timed_out, artifacts);
    }
    Ok(result)
}

/// A running shell's pipes and exit status, read until both are done.
struct Watch {
    pid: u32,
    out_pipe: tokio::net::unix::pipe::Receiver,
    err_pipe: tokio::net::unix::pipe::Receiver,
    exit_rx: tokio::sync::oneshot::Receiver<ExitStatus>,
    out_open: bool,
    err_open: bool,
    /// The call's entry in the process table, which followers read: every read is copied there.
    view: Option<Arc<Managed>>,
}

impl Watch {
    fn new(shell: SpawnedShell, view: Option<Arc<Managed>>) -> Watch {
        Watch {
            pid: shell.pid,
            out_pipe: shell.stdout,
            err_pipe: shell.stderr,
            exit_rx: shell.exit,
            out_open: true,
            err_open: true,
            view,
        }
    }

    fn copy(&self, stream: OutputStream, bytes: &[u8]) {
        if let Some(view) = &self.view {
            view.mirror(stream, bytes);
        }
    }

    /// Reads both streams until the shell has exited and its pipes closed (or `DRAIN` after its
    /// exit, when background children keep them open). At `deadline` the call's processes are
    /// killed; they are all gone before this returns. Returns the exit and whether it timed out.
    async fn until_done(
        &mut self,
        stdout: &mut StreamCapture,
        stderr: &mut StreamCapture,
        deadline: Instant,
        ctx: &ToolContext,
        call_id: &str,
    ) -> (ExitStatus, bool) {
        let (mut out_buf, mut err_buf) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
        let mut exit: Option<ExitStatus> = None;
        let mut drain_until: Option<Instant> = None;
        let mut killer: Option<tokio::task::JoinHandle<()>> = None;
        let mut killed = false;
        while exit.is_none() || self.out_open || self.err_open {
            let drain_deadline = drain_until.unwrap_or(deadline);
            tokio::select! {
                read = self.out_pipe.read(&mut out_buf), if self.out_open => match read {
                    Ok(0) | Err(_) => self.out_open = false,
                    Ok(n) => {
                        stdout.push(&out_buf[..n]);
                        self.copy(OutputStream::Stdout, &out_buf[..n]);
                    }
                },
                read = self.err_pipe.read(&mut err_buf), if self.err_open => match read {
                    Ok(0) | Err(_) => self.err_open = false,
                    Ok(n) => {
                        stderr.push(&err_buf[..n]);
                        self.copy(OutputStream::Stderr, &err_buf[..n]);
                    }
                },
                status = &mut self.exit_rx, if exit.is_none() => {
                    exit = Some(status.unwrap_or(ExitStatus { code: -1, signal: None }));
                    drain_until = Some(Instant::now() + DRAIN);
                },
                () = tokio::time::sleep_until(deadline), if killer.is_none() && exit.is_none() => {
                    tracing::info!(call_id, "command timed out; killing its processes");
                    killer = Some(self.kill(ctx, call_id));
                },
                // Once the call's processes are killed, the pipes get `DRAIN` to close: a
                // process that escaped the kill must not hold the call open.
                _ = async { killer.as_mut().expect("guarded").await }, if killer.is_some() && !killed => {
                    killed = true;
                    drain_until = Some(drain_until.unwrap_or(Instant::now() + DRAIN));
                },
                () = tokio::time::sleep_until(drain_deadline), if drain_until.is_some() => break,
            }
        }
        // The drain's end can win the race with a pipe that is ready (after a stall, both are),
        // and what the pipes hold already was written by the call: it is kept.
        self.take_buffered(stdout, stderr);
        let timed_out = killer.is_some();
        if let Some(killer) = killer.filter(|_| !killed) {
            // Everything the call started is gone before the call returns.
            let _ = killer.await;
        }
        if timed_out && (self.out_open || self.err_open || exit.is_none()) {
            tracing::warn!(
                call_id,
                "a timed-out call's pipes stayed open after its kill; killing again"
            );
            let grace = Duration::from_millis(ctx.limits.kill_grace_ms);
            ctx.supervisor.kill_call(self.pid, call_id, grace).await;
        }
        let exit = exit.unwrap_or(ExitStatus {
            code: -1,
            signal: None,
        });
        (exit, timed_out)
    }

    /// Kills the call's processes in a task of its own, so reading goes on meanwhile.
    /// Reads what the open pipes hold now, without waiting: at most `BUFFERED_READS` reads
    /// each, so a child that keeps writing cannot hold the call.
    fn take_buffered(&mut self, stdout: &mut StreamCapture, stderr: &mut StreamCapture) {
        let mut buf = vec![0u8; 64 * 1024];
        let view = self.view.as_deref();
        let pipes = [
            (
                &self.out_pipe,
                &mut self.out_open,
                stdout,
                OutputStream::Stdout,
            ),
            (
                &self.err_pipe,
                &mut self.err_open,
                stderr,
                OutputStream::Stderr,
            ),
        ];
        for (pipe, open, capture, stream) in pipes {
            for _ in 0..BUFFERED_READS {
                if !*open {
                    break;
                }
                match pipe.try_read(&mut buf) {
                    Ok(0) => *open = false,
                    Ok(n) => {
                        capture.push(&buf[..n]);
                        if let Some(view) = view {
                            view.mirror(stream, &buf[..n]);
                        }
                    }
                    // Empty for now (`WouldBlock`), or broken: nothing more to take.
                    Err(_) => break,
                }
            }
        }
    }

    fn kill(&self, ctx: &ToolContext, call_id: &str) -> tokio::task::JoinHandle<()> {
        let supervisor = ctx.supervisor.clone();
        let grace = Duration::from_millis(ctx.limits.kill_grace_ms);
        let (shell_pid, id) = (self.pid, call_id.to_owned());
        tokio::spawn(async move {
            supervisor.kill_call(shell_pid, &id, grace).await;
        })
    }

    /// Children still holding the pipes keep running; what they print is read and discarded so
    /// they do not die of SIGPIPE. (A background command's output is kept by redirecting it.)
    fn discard_the_rest(self) {
        let Watch {
            mut out_pipe,
            mut err_pipe,
            mut out_open,
            mut err_open,
            ..
        } = self;
        if !(out_open || err_open) {
            return;
        }
        tokio::spawn(async move {
            let mut sink = vec![0u8; 16 * 1024];
            while out_open {
                out_open = matches!(out_pipe.read(&mut sink).await, Ok(n) if n > 0);
            }
            while err_open {
                err_open = matches!(err_pipe.read(&mut sink).await, Ok(n) if n > 0);
            }
        });
    }
}

/// What a finished command's result is made of, besides its output.
pub(crate) struct Composition<'a> {
    pub exit: ExitStatus,
    pub timed_out: bool,
    pub timeout_secs: u32,
    /// What the timeout did, after "timed out after N s: ".
    pub at_timeout: &'static str,
    pub duration_ms: u64,
    pub background_pids: Vec<u32>,
    pub call_id: String,
    pub ctx: &'a ToolContext,
}

/// Lays out the result as the seed does: `exit=N`, then indented `stdout:` and `stderr:`
/// blocks, all within the output limit.
pub(crate) fn compose(
    parts: Composition<'_>,
    stdout: StreamCapture,
    stderr: StreamCapture,
) -> BashResult {
    let limit = parts.ctx.limits.output_limit_chars;
    let mut stdout = stdout.finish(&parts.ctx.artifacts);
    let mut stderr = stderr.finish(&parts.ctx.artifacts);

    let (n_out, n_err) = (stdout.window.approx_chars(), stderr.window.approx_chars());
    let hint =
        |name: &str, id: &str| format!("the full {name} is artifact {id}: GET /v1/artifacts/{id}");
    let (out_hint, err_hint) = (
        hint("stdout", &stdout.artifact.id),
        hint("stderr", &stderr.artifact.id),
    );
    let attempt = |budget: usize| {
        let (out_budget, err_budget) = split_budget(budget, n_out, n_err);
        let stdout_cut = stdout.window.cut(out_budget, &out_hint);
        let stderr_cut = stderr.window.cut(err_budget, &err_hint);
        let output = layout(&parts, &stdout_cut.0, &stderr_cut.0);
        (output, stdout_cut, stderr_cut)
    };
    // Indentation adds two characters a line, so many short lines can overflow the budget:
    // shrink it by the overflow and lay out again (a few rounds at most).
    let mut budget = limit.saturating_sub(HEADER_ALLOWANCE);
    let (mut output, mut stdout_cut, mut stderr_cut) = attempt(budget);
    for _ in 0..6 {
        let n_chars = output.chars().count();
        if n_chars <= limit {
            break;
        }
        budget = budget.saturating_sub(n_chars - limit + 64);
        (output, stdout_cut, stderr_cut) = attempt(budget);
    }
    if output.chars().count() > limit {
        let hint = format!(
            "full outputs: stdout artifact {}, stderr artifact {}",
            stdout.artifact.id, stderr.artifact.id
        );
        output = Window::whole(output).cut(limit, &hint).0;
    }
    let ((stdout_text, stdout_truncated), (stderr_text, stderr_truncated)) =
        (stdout_cut, stderr_cut);
    stdout.artifact.truncated = stdout_truncated;
    stderr.artifact.truncated = stderr_truncated;

    BashResult {
        output,
        exit_code: parts.exit.code,
        signal: parts.exit.signal,
        timed_out: parts.timed_out,
        duration_ms: parts.duration_ms,
        stdout: stdout_text,
        stderr: stderr_text,
        stdout_artifact: stdout.artifact,
        stderr_artifact: stderr.artifact,
        background_pids: parts.background_pids,
        call_id: parts.call_id,
    }
}

/// Shares `budget` characters between the streams: a small one is kept whole, two large ones
/// get half each.
fn split_budget(budget: usize, n_out: usize, n_err: usize) -> (usize, usize) {
    if n_out + n_err <= budget {
        (n_out, n_err)
    } else if n_out.min(n_err) <= budget / 2 {
        if n_out < n_err {
            (n_out, budget - n_out)
        } else {
            (budget - n_err, n_err)
        }
    } else {
        (budget / 2, budget / 2)
    }
}

/// The seed's layout: `exit=N`, then `stdout:` and `stderr:` blocks indented by two spaces,
/// then notes on a timeout or on processes left running.
fn layout(parts: &Composition<'_>, stdout: &str, stderr: &str) -> String {
    let mut sections = vec![format!("exit={}", parts.exit.code)];
    if !stdout.is_empty() {
        sections.push(format!(
            "stdout:\n{}",
            indent(stdout.trim_end_matches('\n'))
        ));
    }
    if !stderr.is_empty() {
        sections.push(format!(
            "stderr:\n{}",
            indent(stderr.trim_end_matches('\n'))
        ));
    }
    if let Some(note) = limit_note(parts.exit.code, parts.timed_out) {
        sections.push(note.to_owned());
    }
    if parts.timed_out {
        sections.push(format!(
            "timed out after {} s: {}",
            parts.timeout_secs, parts.at_timeout
        ));
    }
    if !parts.background_pids.is_empty() {
        let pids: Vec<String> = parts.background_pids.iter().map(u32::to_string).collect();
        sections.push(format!(
            "still running in the background: pid {} (output after this call is discarded)",
            pids.join(", ")
        ));
    }
    sections.join("\n")
}

/// Why a command died, when a containment limit is the likely cause (bash reports 128 + the
/// signal of the command that died).
fn limit_note(exit_code: i32, timed_out: bool) -> Option<&'static str> {
    match exit_code {
        152 => Some("a command was killed by SIGXCPU: it used up its CPU-time limit"),
        153 => Some(
            "a command was killed by SIGXFSZ: it tried to write a file larger than the file-size limit",
        ),
        137 if !timed_out => Some("a command was killed by SIGKILL: it may have run out of memory"),
        _ => None,
    }
}
