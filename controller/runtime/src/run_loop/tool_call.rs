//! One tool call from end to end: logged and parsed ([`begin`](Agent::begin)), decided and
//! run ([`decide_and_run`](Agent::decide_and_run)), and given its result with its post hooks
//! ([`finish`](Agent::finish)). Bad calls and failing tools come back to the model as
//! `ERROR: …`; only a sandbox that stopped working ends the session.

use sandbox_protocol::{ToolSpec, ToolStep};
use tracing::Instrument as _;

use super::call::{self, Parsed};
use super::decide::Decided;
use super::dispatch::CallOutcome;
use super::{Agent, SessionError};
use crate::hooks::{About, ToolOutcome};
use crate::recording::{CallRecord, CallResult, Inline, RecordError};
use crate::sandbox::ToolReply;
use harness_models::ToolCall;

/// A call between its `tool_call` event and its result: parsed once, for the hooks, the
/// policy and what runs it; its log side owned by `record`.
pub(super) struct Begun<'c, 'r> {
    pub call: &'c ToolCall,
    /// Its name on the sandbox.
    pub name: String,
    /// The model's call, parsed and routed; the error is the text the model gets.
    pub parsed: Result<Parsed, String>,
    pub record: CallRecord<'r>,
    pub span: tracing::Span,
}

impl Agent<'_> {
    /// One call's result text, logged: the call, the decision, the result with its outputs,
    /// and an `error` event when the model saw `ERROR: …`. Also what the sandbox brought to
    /// record the step, when the call ran.
    pub(super) async fn run_tool(
        &self,
        call: &ToolCall,
        task: &str,
        name: &str,
    ) -> Result<(String, Option<ToolStep>), SessionError> {
        let begun = self.begin(call, name).await?;
        let (begun, outcome, context) = self.decide_and_run(begun, task).await?;
        self.finish(begun, outcome, context).await
    }

    /// Logs the call (`tool_call`), then parses and routes it.
    pub(super) async fn begin<'c, 's>(
        &'s self,
        call: &'c ToolCall,
        name: &str,
    ) -> Result<Begun<'c, 's>, SessionError> {
        let record = self.recorder.open_call(call, name).await?;
        let span = tracing::info_span!(
            "tool_call",
            otel.name = %format_args!("tool {}", call.name),
            tool = %call.name,
            call_id = %call.id,
            status = tracing::field::Empty,
        );
        let parsed = call::offered(&self.tools_now(), call)
            .and_then(|()| call::parse_call(call, Some(self.mcp)));
        Ok(Begun {
            call,
            name: name.to_owned(),
            parsed,
            record,
            span,
        })
    }

    /// The hooks and the policy on the call, and the call run when allowed (an `agent` call
    /// is left to its group: its outcome names the child to start); with the hooks' context
    /// for the model. A failure that stops the session gives the call its result first.
    pub(super) async fn decide_and_run<'c, 's>(
        &'s self,
        begun: Begun<'c, 's>,
        task: &str,
    ) -> Result<(Begun<'c, 's>, CallOutcome, Vec<String>), SessionError> {
        let judged_against = self.subagents.map_or(task, |spawn| spawn.authority());
        let ran = async {
            let parsed = match &begun.parsed {
                Ok(parsed) => parsed,
                Err(text) => {
                    let refused =
                        CallOutcome::text_only(harness_log::ToolStatus::Error, text.clone());
                    return Ok((refused, Vec::new()));
                }
            };
            match self.decide(&begun, parsed, judged_against).await? {
                (Decided::Refused(outcome), context) => Ok((*outcome, context)),
                (Decided::Run(parsed), context) => {
                    let outcome = self.dispatch(begun.call, parsed, &begun.name).await?;
                    Ok((outcome, context))
                }
            }
        }
        .instrument(begun.span.clone())
        .await;
        match ran {
            Ok((outcome, context)) => Ok((begun, outcome, context)),
            Err(err) => {
                // The session stops here; the call still gets its result in the log.
                begun.record.abandon(&err).await;
                Err(err)
            }
        }
    }

    /// The call's result: its streams, the post hooks, `tool_result` (and `error`), and the
    /// text the model is shown.
    pub(super) async fn finish(
        &self,
        begun: Begun<'_, '_>,
        outcome: CallOutcome,
        mut context: Vec<String>,
    ) -> Result<(String, Option<ToolStep>), SessionError> {
        let Begun {
            call,
            parsed,
            record,
            span,
            ..
        } = begun;
        let status = outcome.status.as_str();
        span.record("status", status);
        let elapsed = record.started().elapsed();
        harness_telemetry::metrics().tool_call(&self.tool_label(call), status, elapsed);
        let bash = outcome.reply.as_ref().and_then(ToolReply::bash);
        let inline = Inline::new(
            outcome
                .step
                .as_ref()
                .map(|step| step.inline.clone())
                .unwrap_or_default(),
        );
        // What follows the call (its streams, the post hooks) may fail too; the call's result
        // is in the log either way.
        let finished = async {
            let outputs = match bash {
                Some(result) => record.streams(result, &inline).await.map_err(stopped)?,
                None => Vec::new(),
            };
            let input = parsed.as_ref().ok().map(|parsed| &parsed.input);
            let after = self.after_tool(call, input, &outcome).await?;
            context.extend(after.context);
            let text = super::hooked::with_context(outcome.text.clone(), &context);
            Ok::<_, SessionError>((outputs, after.stop, text))
        }
        .await;
        let (outputs, stop, text) = match finished {
            Ok(finished) => finished,
            Err(err) => {
                record.abandon(&err).await;
                return Err(err);
            }
        };
        let result = CallResult {
            status: outcome.status,
            shown: &text,
            own: &outcome.text,
            bash,
            outputs,
        };
        record.finish(result).await?;
        if let Some(why) = stop {
            return Err(SessionError::Hook(format!(
                "a post_tool_use hook stopped the session ({why})"
            )));
        }
        // The model is shown what the log keeps: no run of a secret the harness knows.
        Ok((self.recorder.log.redact(&text), outcome.step))
    }

    /// A call's tool as a metrics label: a tool the model was offered, or `unknown` (a model
    /// can invent any name; every label comes from a closed set).
    pub(super) fn tool_label(&self, call: &ToolCall) -> String {
        let offered = |tools: &[ToolSpec]| tools.iter().any(|t| t.name == call.name);
        if offered(&self.tools) || offered(&self.mcp.loaded()) {
            call.name.clone()
        } else {
            "unknown".to_owned()
        }
    }

    /// The `post_tool_use` hooks of a call (`input`: the model's, when it parsed), with its
    /// result.
    async fn after_tool(
        &self,
        call: &ToolCall,
        input: Option<&sandbox_protocol::ToolInput>,
        outcome: &CallOutcome,
    ) -> Result<crate::hooks::Combined, SessionError> {
        let bash = outcome.reply.as_ref().and_then(ToolReply::bash);
        let about = About::PostToolUse {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            tool_input: input.cloned(),
            tool_result: ToolOutcome {
                status: outcome.status,
                output: outcome.text.clone(),
                exit_code: bash.map(|b| b.exit_code),
                timed_out: bash.map(|b| b.timed_out),
            },
        };
        self.hook(about).await
    }
}

/// A failure to copy a command's streams, as the session's error: the sandbox's own, when it
/// is the sandbox that failed.
fn stopped(err: RecordError) -> SessionError {
    match err {
        RecordError::Sandbox(err) => SessionError::Sandbox(err),
        err @ RecordError::Log(_) => SessionError::Log(err),
    }
}
