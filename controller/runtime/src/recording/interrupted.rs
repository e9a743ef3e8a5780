//! The call that was running when a session was interrupted: its result in the log is what
//! it had printed by then, marked `interrupted`, so a Ctrl-C never loses a command's output.

use std::time::Instant;

use sandbox_protocol::{BuiltIn, OutputStream};

use super::{RecordError, Recorder};
use harness_log::{Event, ToolResult, ToolStatus};

/// At most this much of the interrupted command's output is kept, from its start (what the
/// sandbox's buffer no longer held is said).
const KEPT: usize = 1 << 20;

/// The longest the sandbox is waited for, to read the output and to end the command.
const SANDBOX_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A tool call between its `tool_call` event and its result.
#[derive(Debug, Clone)]
pub(crate) struct InFlight {
    pub call_id: String,
    pub tool: String,
    /// Its name on the sandbox (a `bash` call is a process there by this id).
    pub process: String,
    pub started: Instant,
}

impl Recorder {
    /// A call starts: it is in flight until [`Recorder::landed`]. Several are at once while a
    /// turn's subagents run.
    pub(super) fn taking_off(&self, call_id: &str, tool: &str, process: &str) {
        self.in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(InFlight {
                call_id: call_id.to_owned(),
                tool: tool.to_owned(),
                process: process.to_owned(),
                started: Instant::now(),
            });
    }

    /// The call `call_id` has its result in the log.
    pub(super) fn landed(&self, call_id: &str) {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = in_flight.iter().position(|call| call.call_id == call_id) {
            in_flight.remove(at);
        }
    }

    /// Called when the session stopped mid-call (`why`: Ctrl-C, its lifetime): each call in
    /// flight gets its result, the output its command printed so far (a `bash` call), marked
    /// interrupted; the command is then ended (a remote or pooled sandbox outlives the
    /// session). Bounded: a sandbox that does not answer costs at most a few seconds a call.
    pub async fn record_interrupted(&self, why: &str) -> Result<(), RecordError> {
        let calls = std::mem::take(&mut *self.in_flight.lock().unwrap_or_else(|p| p.into_inner()));
        for call in calls {
            self.interrupted(call, why).await?;
        }
        Ok(())
    }

    async fn interrupted(&self, call: InFlight, why: &str) -> Result<(), RecordError> {
        let printed = match BuiltIn::from_name(&call.tool) {
            Some(BuiltIn::Bash) => {
                let printed =
                    tokio::time::timeout(SANDBOX_WAIT, self.printed_so_far(&call.process))
                        .await
                        .ok()
                        .flatten();
                let _ =
                    tokio::time::timeout(SANDBOX_WAIT, self.sandbox.delete_process(&call.process))
                        .await;
                printed
            }
            _ => None,
        };
        let seconds = call.started.elapsed().as_secs_f64();
        let text = match printed {
            Some(printed) if !printed.is_empty() => {
                format!("interrupted ({why}) after {seconds:.1} s; its output so far:\n{printed}")
            }
            Some(_) => format!("interrupted ({why}) after {seconds:.1} s; it had printed nothing"),
            None => format!("interrupted ({why}) after {seconds:.1} s"),
        };
        let result = ToolResult {
            call_id: call.call_id,
            name: call.tool,
            status: ToolStatus::Interrupted,
            output: self.log.text(&text)?,
            exit_code: None,
            timed_out: None,
            duration_ms: call.started.elapsed().as_millis() as u64,
            outputs: Vec::new(),
        };
        self.log.record(Event::ToolResult(result)).await?;
        Ok(())
    }

    /// The command's output as the sandbox holds it (stdout, then stderr under `stderr:`),
    /// `None` when the sandbox has no such process (it had not started, or is gone).
    async fn printed_so_far(&self, process: &str) -> Option<String> {
        let output = self.sandbox.process_output(process, 0, KEPT).await.ok()?;
        let mut streams = [String::new(), String::new()];
        for chunk in output.chunks {
            let stderr = chunk.stream == OutputStream::Stderr;
            streams[usize::from(stderr)].push_str(&crate::sandbox::client::chunk_text(chunk));
        }
        let [stdout, stderr] = streams;
        let mut text = match output.dropped {
            Some(dropped) => format!("[{} bytes before this were dropped]\n", dropped.bytes),
            None => String::new(),
        };
        text.push_str(&stdout);
        if !stderr.is_empty() {
            text.push_str(&format!("\nstderr:\n{stderr}"));
        }
        Some(text)
    }
}
