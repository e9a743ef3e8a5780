//! The log side of one tool call, with one owner from its `tool_call` to its `tool_result`: a
//! [`CallRecord`] is opened when the call is logged and consumed when its result is, so a call
//! gets exactly one result whichever way it ends (its own, the session's error, or a Ctrl-C's
//! through [`Recorder::record_interrupted`]).

use std::time::Instant;

use sandbox_protocol::{Artifact, BashResult};

use super::{Inline, RecordError, Recorder};
use harness_log::{
    ErrorClass, ErrorEvent, Event, EventLogError, OutputRecord, PolicyDecision, Stream,
    SubagentFinished, SubagentStarted, ToolCallEvent, ToolResult, ToolStatus,
};
use harness_models::ToolCall;

/// One call between its `tool_call` event and its result.
#[derive(Debug)]
pub struct CallRecord<'r> {
    recorder: &'r Recorder,
    call_id: String,
    tool: String,
    started: Instant,
}

/// What a call came to, as its `tool_result` says it.
#[derive(Debug)]
pub struct CallResult<'a> {
    pub status: ToolStatus,
    /// The text the model is shown (the hooks' context included).
    pub shown: &'a str,
    /// The tool's own text: an `error` event's message when the status is `error`.
    pub own: &'a str,
    /// A command's result, for its exit code and whether it timed out.
    pub bash: Option<&'a BashResult>,
    /// Its full streams, from [`CallRecord::streams`].
    pub outputs: Vec<OutputRecord>,
}

impl Recorder {
    /// Logs `call` (`tool_call`), to run on the sandbox as `process`. From when the event is
    /// certain, the call is in flight: a Ctrl-C at any point gives it exactly one result.
    pub async fn open_call<'r>(
        &'r self,
        call: &ToolCall,
        process: &str,
    ) -> Result<CallRecord<'r>, EventLogError> {
        let event = ToolCallEvent {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        };
        self.log
            .record_then(Event::ToolCall(event), || {
                self.taking_off(&call.id, &call.name, process)
            })
            .await?;
        Ok(CallRecord {
            recorder: self,
            call_id: call.id.clone(),
            tool: call.name.clone(),
            started: Instant::now(),
        })
    }
}

impl CallRecord<'_> {
    /// When the call was logged.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The policy's decision on the call (or a hook's).
    pub async fn decision(&self, event: PolicyDecision) -> Result<(), EventLogError> {
        self.recorder
            .log
            .record(Event::PolicyDecision(event))
            .await?;
        Ok(())
    }

    /// The child session the call started.
    pub async fn child_started(&self, event: SubagentStarted) -> Result<(), EventLogError> {
        self.recorder
            .log
            .record(Event::SubagentStarted(event))
            .await?;
        Ok(())
    }

    /// How the call's child session ended.
    pub async fn child_finished(&self, event: Box<SubagentFinished>) -> Result<(), EventLogError> {
        self.recorder
            .log
            .record(Event::SubagentFinished(event))
            .await?;
        Ok(())
    }

    /// A command's full streams, copied into the log from the call's answer (`inline`) or the
    /// sandbox's artifacts.
    pub async fn streams(
        &self,
        result: &BashResult,
        inline: &Inline,
    ) -> Result<Vec<OutputRecord>, RecordError> {
        let mut outputs = Vec::new();
        for (stream, artifact) in [
            (Stream::Stdout, &result.stdout_artifact),
            (Stream::Stderr, &result.stderr_artifact),
        ] {
            outputs.push(self.stream(stream, artifact, inline).await?);
        }
        Ok(outputs)
    }

    async fn stream(
        &self,
        stream: Stream,
        artifact: &Artifact,
        inline: &Inline,
    ) -> Result<OutputRecord, RecordError> {
        let bytes = match inline.get(&artifact.sha256) {
            _ if artifact.size == 0 => None,
            Some(bytes) => Some(bytes),
            None => self.recorder.sandbox.artifact(&artifact.id).await?,
        };
        let blob = match bytes {
            Some(bytes) => Some(self.recorder.log.blob(&bytes)?),
            None => None,
        };
        Ok(OutputRecord {
            stream,
            sha256: artifact.sha256.clone(),
            size: artifact.size,
            total_bytes: artifact.total_bytes,
            blob,
        })
    }

    /// The call's result (`tool_result`), and an `error` event when the model saw `ERROR: …`
    /// (the log files it by class, for metrics).
    pub async fn finish(self, result: CallResult<'_>) -> Result<(), EventLogError> {
        let log = &self.recorder.log;
        let event = ToolResult {
            call_id: self.call_id.clone(),
            name: self.tool.clone(),
            status: result.status,
            output: log.text(result.shown)?,
            exit_code: result.bash.map(|bash| bash.exit_code),
            timed_out: result.bash.map(|bash| bash.timed_out),
            duration_ms: self.started.elapsed().as_millis() as u64,
            outputs: result.outputs,
        };
        log.record_then(Event::ToolResult(event), || {
            self.recorder.landed(&self.call_id)
        })
        .await?;
        if result.status == ToolStatus::Error {
            let event = ErrorEvent {
                class: ErrorClass::Tool,
                message: result.own.to_owned(),
                call_id: Some(self.call_id.clone()),
            };
            log.record(Event::Error(event)).await?;
        }
        Ok(())
    }

    /// The result of a call the session stopped on (a sandbox that failed, a script with no
    /// verdict left): status `error`, `why` as its text. Best effort: the session's own error
    /// is what it reports.
    pub async fn abandon(self, why: &(dyn std::fmt::Display + Sync)) {
        let log = &self.recorder.log;
        let Ok(output) = log.text(&format!("the session stopped on this call: {why}")) else {
            return;
        };
        let event = ToolResult {
            call_id: self.call_id.clone(),
            name: self.tool.clone(),
            status: ToolStatus::Error,
            output,
            exit_code: None,
            timed_out: None,
            duration_ms: self.started.elapsed().as_millis() as u64,
            outputs: Vec::new(),
        };
        let _ = log
            .record_then(Event::ToolResult(event), || {
                self.recorder.landed(&self.call_id)
            })
            .await;
    }
}
