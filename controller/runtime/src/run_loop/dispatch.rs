//! An allowed call run where its route says: the sandbox (one keyed round trip that brings the
//! step's record along), an MCP server, or, for `agent`, handed to its group, which starts the
//! child with its siblings. A `bash` call's output is followed live for an observer that wants
//! it.

use sandbox_protocol::{BuiltIn, ToolInput, ToolStep};

use super::call::{Parsed, Route};
use super::{Agent, SessionError};
use crate::mcp::{McpAnswer, McpTools};
use crate::sandbox::{CallOptions, LiveOutput, SandboxClient, SandboxError, ToolReply};
use crate::subagent::AgentArgs;
use harness_log::ToolStatus;
use harness_models::ToolCall;

/// How long a followed call's last output may come after its answer.
const LAST_OUTPUT_WAIT: std::time::Duration = std::time::Duration::from_millis(300);

/// What a call came to: its status, the text for the model, and the sandbox's result when it ran.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutcome {
    pub status: ToolStatus,
    pub text: String,
    pub reply: Option<ToolReply>,
    /// What the sandbox brought along to record the step, when asked.
    pub step: Option<ToolStep>,
    /// An allowed `agent` call: the child its group starts (the text is then the child's).
    pub agent: Option<AgentArgs>,
}

impl CallOutcome {
    /// An outcome that is only its text: a refusal, or a tool that is not the sandbox's.
    pub fn text_only(status: ToolStatus, text: String) -> CallOutcome {
        CallOutcome {
            status,
            text,
            reply: None,
            step: None,
            agent: None,
        }
    }
}

impl Agent<'_> {
    /// Runs an allowed call (`name`: its name on the sandbox) where its route says.
    pub(super) async fn dispatch(
        &self,
        call: &ToolCall,
        parsed: Parsed,
        name: &str,
    ) -> Result<CallOutcome, SessionError> {
        match parsed.route {
            // Its group starts the child, with its siblings.
            Route::Subagent(args) => Ok(CallOutcome {
                agent: Some(args),
                ..CallOutcome::text_only(ToolStatus::Ok, String::new())
            }),
            // The workspace is recorded after it like after any call (the step carries no
            // sandbox record).
            Route::Mcp => Ok(on_mcp(self.mcp, &parsed.input).await),
            Route::Sandbox => {
                // One round trip: the key makes a repeat after a dropped connection safe, and
                // the answer brings the changes, small bytes and the fingerprint the step's
                // record needs.
                let key = self.recorder.call_key(name, &call.id);
                let since = self.recorder.since().await;
                let options = CallOptions {
                    key: Some(&key),
                    since: since.as_deref(),
                    fingerprint: true,
                    name: Some(name),
                };
                Ok(run_on_sandbox(self.sandbox, &parsed.input, &options).await?)
            }
        }
    }

    /// Awaits `ran` (the call named `name` on the sandbox) while, for an observer that wants
    /// it, a `bash` call's output is followed and handed on as it comes. Following never
    /// changes the call's outcome: a follower that fails just stops.
    pub(super) async fn shown_live<F: Future>(
        &self,
        call: &ToolCall,
        name: &str,
        ran: F,
    ) -> F::Output {
        if BuiltIn::from_name(&call.name) != Some(BuiltIn::Bash) || !self.observer.live_output() {
            return ran.await;
        }
        let mut each = |output: LiveOutput| self.observer.tool_output(call, &output);
        let follow = self.sandbox.follow_process(name, &mut each);
        tokio::pin!(ran, follow);
        let mut followed = false;
        let out = tokio::select! {
            out = &mut ran => out,
            ended = &mut follow => {
                followed = true;
                if let Err(err) = ended {
                    tracing::debug!(call = name, cause = %err, "stopped following the call's output");
                }
                ran.await
            }
        };
        if !followed {
            // The answer may overtake the stream's last events: a moment to read them.
            let _ = tokio::time::timeout(LAST_OUTPUT_WAIT, &mut follow).await;
        }
        out
    }
}

/// Runs an allowed call on the sandbox. A tool's own failure is `ERROR: …` for the model; a
/// sandbox that stopped working is an error.
pub async fn run_on_sandbox(
    sandbox: &SandboxClient,
    input: &ToolInput,
    options: &CallOptions<'_>,
) -> Result<CallOutcome, SandboxError> {
    match sandbox.call_tool_with(input, options).await {
        Ok((reply, step)) => Ok(CallOutcome {
            status: ToolStatus::Ok,
            text: reply.output().to_owned(),
            reply: Some(reply),
            step,
            agent: None,
        }),
        Err(err) if err.is_infrastructure() => Err(err),
        Err(err) => Ok(CallOutcome::text_only(
            ToolStatus::Error,
            format!("ERROR: {err}"),
        )),
    }
}

/// Runs an allowed call on an MCP server: its answer, as a tool's.
pub async fn on_mcp(mcp: &McpTools, input: &ToolInput) -> CallOutcome {
    let McpAnswer { failed, text } = mcp.call(input).await;
    match failed {
        true => CallOutcome::text_only(ToolStatus::Error, format!("ERROR: {text}")),
        false => CallOutcome::text_only(ToolStatus::Ok, text),
    }
}
