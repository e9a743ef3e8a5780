//! `exec` and `write_stdin` (opt-in: `--tools`): a command that may outlive the call, in the
//! style of a unified exec. `exec` starts it as a process by id and answers when it ends or
//! after `yield_ms`; `write_stdin` types into it and answers with what it printed since the
//! model last looked. Both read the process's buffer from the model's own cursor.

use sandbox_protocol::BuiltIn;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use base64::Engine;
use sandbox_protocol::{
    Encoding, ExecArgs, ExecResult, ProcessState, StartProcessRequest, TtySize, WriteStdinArgs,
};

use crate::sandbox::output::{Window, indent};
use crate::sandbox::processes::Managed;
use crate::sandbox::registry::{About, Tool, ToolContext, ToolError, Validate};

/// Room in the model-facing text for the header and notes.
const HEADER_ALLOWANCE: usize = 400;
/// The size of an `exec` terminal.
const TERMINAL: TtySize = TtySize {
    rows: 24,
    cols: 120,
};

pub struct Exec;
pub struct WriteStdin;

fn check_yield(yield_ms: Option<u32>) -> Result<(), String> {
    match yield_ms {
        Some(ms) if ms > 300_000 => Err(format!(
            "yield_ms: must be at most 300000 milliseconds, got {ms}"
        )),
        _ => Ok(()),
    }
}

impl Validate for ExecArgs {
    fn validate(&self) -> Result<(), String> {
        if self.cmd.is_empty() {
            return Err("cmd: must not be empty".to_owned());
        }
        if self.cmd.contains('\0') {
            return Err("cmd: contains a NUL byte, which no command line can hold".to_owned());
        }
        check_yield(self.yield_ms)
    }
}

impl Validate for WriteStdinArgs {
    fn validate(&self) -> Result<(), String> {
        if self.process_id.is_empty() {
            return Err("process_id: must not be empty".to_owned());
        }
        check_yield(self.yield_ms)
    }
}

impl Tool for Exec {
    type Args = ExecArgs;
    type Output = ExecResult;

    const ABOUT: About = About {
        tool: BuiltIn::Exec,
        description: "Start a shell command from the working directory and return when it ends or after yield_ms (default 10000) with its output so far. A command still running keeps its process_id: send it input, or wait for more output, with write_stdin. Use it for long builds, servers and interactive programs (tty=true for those that need a terminal).",
        scope: sandbox_protocol::Scope::Run,
    };

    async fn execute(&self, args: ExecArgs, ctx: ToolContext) -> Result<ExecResult, ToolError> {
        let request = StartProcessRequest {
            id: ctx.processes.next_exec_id(),
            cmd: args.cmd,
            cwd: None,
            env: Default::default(),
            tty: args.tty.then_some(TERMINAL),
            timeout: None,
        };
        let (managed, _) = ctx.processes.start(&request)?;
        settle(&managed, args.yield_ms.unwrap_or(10_000)).await;
        Ok(look(&managed, &ctx))
    }
}

impl Tool for WriteStdin {
    type Args = WriteStdinArgs;
    type Output = ExecResult;

    const ABOUT: About = About {
        tool: BuiltIn::WriteStdin,
        description: "Type input into a process that exec started (a newline ends a line; empty input only waits), wait up to yield_ms (default 2000) or until it ends, and return what it printed since you last looked.",
        scope: sandbox_protocol::Scope::Run,
    };

    async fn execute(
        &self,
        args: WriteStdinArgs,
        ctx: ToolContext,
    ) -> Result<ExecResult, ToolError> {
        let managed = ctx.processes.get(&args.process_id)?;
        if !args.input.is_empty() {
            managed.write_stdin(args.input.as_bytes(), false).await?;
        }
        settle(&managed, args.yield_ms.unwrap_or(2_000)).await;
        Ok(look(&managed, &ctx))
    }
}

/// Waits until the process has ended or `yield_ms` has passed.
async fn settle(managed: &Managed, yield_ms: u32) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(u64::from(yield_ms));
    let mut changes = managed.subscribe();
    while !managed.is_done() {
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            () = tokio::time::sleep_until(deadline) => return,
        }
    }
}

/// What the process printed since the model last looked, cut for the model; moves the
/// model's cursor.
fn look(managed: &Arc<Managed>, ctx: &ToolContext) -> ExecResult {
    let mut cursor = managed.model_seen.load(Ordering::Acquire);
    let (mut text, mut missed) = (String::new(), 0u64);
    loop {
        let page = managed.read(cursor, 1 << 20);
        missed += page.dropped.map_or(0, |d| d.bytes);
        if page.chunks.is_empty() {
            cursor = page.next_after_seq.max(cursor);
            break;
        }
        for chunk in &page.chunks {
            match chunk.encoding {
                Encoding::Utf8 => text.push_str(&chunk.data),
                Encoding::Base64 => {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(&chunk.data)
                        .unwrap_or_default();
                    text.push_str(&String::from_utf8_lossy(&bytes));
                }
            }
        }
        cursor = page.next_after_seq;
    }
    managed.model_seen.store(cursor, Ordering::Release);
    let process = managed.describe();
    let limit = ctx
        .limits
        .output_limit_chars
        .saturating_sub(HEADER_ALLOWANCE);
    let hint = format!(
        "the whole output is at GET /v1/processes/{}/output",
        process.id
    );
    let (new_output, _) = Window::whole(text).cut(limit, &hint);
    let running = process.state == ProcessState::Running;
    let mut sections = vec![match (running, process.exit_code) {
        (true, _) => format!(
            "running: process {} (pid {}) is still running; use write_stdin with process_id \"{}\" to send it input or to wait for more output",
            process.id, process.pid, process.id
        ),
        (false, code) => format!("exit={}", code.unwrap_or(-1)),
    }];
    if missed > 0 {
        sections.push(format!(
            "({missed} bytes printed before this were dropped from the buffer; the whole output is in the process's artifacts once it ends)"
        ));
    }
    if !new_output.is_empty() {
        sections.push(format!(
            "output:\n{}",
            indent(new_output.trim_end_matches('\n'))
        ));
    }
    ExecResult {
        output: sections.join("\n"),
        process_id: process.id,
        running,
        exit_code: process.exit_code,
        new_output,
        last_seq: cursor,
    }
}
