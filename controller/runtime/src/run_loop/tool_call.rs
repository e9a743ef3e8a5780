//! One tool call: checked, judged by the policy (and settled when asked), run on the sandbox,
//! and logged with its full outputs. Bad calls and failing tools come back to the model as
//! `ERROR: …`; only a sandbox that stopped working ends the session.

use std::time::Instant;

use sandbox_protocol::{Artifact, BashResult, BuiltIn, ToolInput, ToolSpec, ToolStep};
use serde_json::Value;
use tracing::Instrument as _;

use super::{Agent, SessionError};
use crate::hooks::{About, HookDecision, ToolOutcome};
use crate::recording::Inline;
use crate::sandbox::{CallOptions, LiveOutput, SandboxClient, SandboxError, ToolReply};
use crate::subagent::{AgentArgs, is_agent_tool};
use harness_log::{
    DecisionSource, ErrorClass, ErrorEvent, Event, OutputRecord, PolicyDecision, Stream,
    ToolCallEvent, ToolResult, ToolStatus, Verdict,
};
use harness_models::ToolCall;
use harness_policy::{self, Judgement, Settled};

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
        CallOutcome::refused(status, text)
    }

    pub fn refused(status: ToolStatus, text: String) -> CallOutcome {
        CallOutcome {
            status,
            text,
            reply: None,
            step: None,
            agent: None,
        }
    }
}

/// A call between its `tool_call` event and its result: parsed once, for the hooks, the
/// policy and the sandbox.
pub(super) struct Begun<'c> {
    pub call: &'c ToolCall,
    /// Its name on the sandbox.
    pub name: String,
    pub parsed: Result<ToolInput, String>,
    pub started: Instant,
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
        let (outcome, context) = self.decide(&begun, task).await?;
        self.finish(begun, outcome, context).await
    }

    /// Logs the call (`tool_call`) and parses it.
    pub(super) async fn begin<'c>(
        &self,
        call: &'c ToolCall,
        name: &str,
    ) -> Result<Begun<'c>, SessionError> {
        let call_event = ToolCallEvent {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        };
        // In flight from when its `tool_call` is certain to when its result is: a Ctrl-C at any
        // point gives it exactly one result (this one, or the interrupted one).
        self.recorder
            .log
            .record_then(Event::ToolCall(call_event), || {
                self.recorder.taking_off(&call.id, &call.name, name)
            })
            .await?;
        let span = tracing::info_span!(
            "tool_call",
            otel.name = %format_args!("tool {}", call.name),
            tool = %call.name,
            call_id = %call.id,
            status = tracing::field::Empty,
        );
        Ok(Begun {
            call,
            name: name.to_owned(),
            parsed: parse_call(&self.tools_now(), call),
            started: Instant::now(),
            span,
        })
    }

    /// The hooks and the policy on the call, and the call run when allowed (an `agent` call
    /// is left to its group: its outcome names the child to start). A failure that stops the
    /// session gives the call its result first.
    pub(super) async fn decide(
        &self,
        begun: &Begun<'_>,
        task: &str,
    ) -> Result<(CallOutcome, Vec<String>), SessionError> {
        let judged_against = self.subagents.map_or(task, |spawn| spawn.authority());
        let decided = self
            .decide_and_run(
                begun.call,
                begun.parsed.as_ref(),
                judged_against,
                &begun.name,
            )
            .instrument(begun.span.clone())
            .await;
        if let Err(err) = &decided {
            // The session stops here; the call still gets its result in the log.
            self.unfinished(begun.call, err, begun.started).await;
        }
        decided
    }

    /// The call's result: its streams, the post hooks, `tool_result` (and `error`), and the
    /// text the model is shown.
    pub(super) async fn finish(
        &self,
        begun: Begun<'_>,
        outcome: CallOutcome,
        mut context: Vec<String>,
    ) -> Result<(String, Option<ToolStep>), SessionError> {
        let Begun {
            call,
            parsed,
            started,
            span,
            ..
        } = begun;
        let log = &self.recorder.log;
        let status = outcome.status.as_str();
        span.record("status", status);
        harness_telemetry::metrics().tool_call(&self.tool_label(call), status, started.elapsed());
        let duration_ms = started.elapsed().as_millis() as u64;
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
                Some(result) => self.outputs(result, &inline).await?,
                None => Vec::new(),
            };
            let after = self
                .after_tool(call, parsed.as_ref().ok(), &outcome)
                .await?;
            context.extend(after.context);
            let text = super::hooked::with_context(outcome.text.clone(), &context);
            let result = ToolResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                status: outcome.status,
                output: log.text(&text)?,
                exit_code: bash.map(|result| result.exit_code),
                timed_out: bash.map(|result| result.timed_out),
                duration_ms,
                outputs,
            };
            Ok::<_, SessionError>((result, after.stop, text))
        }
        .await;
        let (result, stop, text) = match finished {
            Ok(finished) => finished,
            Err(err) => {
                self.unfinished(call, &err, started).await;
                return Err(err);
            }
        };
        log.record_then(Event::ToolResult(result), || self.recorder.landed(&call.id))
            .await?;
        if outcome.status == ToolStatus::Error {
            // The model saw it as `ERROR: …`; the log also files it by class for metrics.
            let event = ErrorEvent {
                class: ErrorClass::Tool,
                message: outcome.text.clone(),
                call_id: Some(call.id.clone()),
            };
            log.record(Event::Error(event)).await?;
        }
        if let Some(why) = stop {
            return Err(SessionError::Hook(format!(
                "a post_tool_use hook stopped the session ({why})"
            )));
        }
        // The model is shown what the log keeps: no run of a secret the harness knows.
        Ok((log.redact(&text), outcome.step))
    }

    /// The result of a call the session stopped on (a sandbox that failed, a script with no
    /// verdict left): status `error`, the reason as its text. Best effort: the session's own
    /// error is what it reports.
    pub(super) async fn unfinished(&self, call: &ToolCall, err: &SessionError, started: Instant) {
        let log = &self.recorder.log;
        let Ok(output) = log.text(&format!("the session stopped on this call: {err}")) else {
            return;
        };
        let result = ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            status: ToolStatus::Error,
            output,
            exit_code: None,
            timed_out: None,
            duration_ms: started.elapsed().as_millis() as u64,
            outputs: Vec::new(),
        };
        let _ = log
            .record_then(Event::ToolResult(result), || self.recorder.landed(&call.id))
            .await;
    }

    /// A call's tool as a metrics label: a tool the model was offered, or `unknown` (a model
    /// can invent any name; every label comes from a closed set).
    fn tool_label(&self, call: &ToolCall) -> String {
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
        input: Option<&ToolInput>,
        outcome: &CallOutcome,
    ) -> Result<crate::hooks::Combined, SessionError> {
        let bash = outcome.reply.as_ref().and_then(ToolReply::bash);
        let about = About::PostToolUse {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            tool_input: input.map_or(Value::Null, ToolInput::to_value),
            tool_result: ToolOutcome {
                status: outcome.status.as_str().to_owned(),
                output: outcome.text.clone(),
                exit_code: bash.map(|b| b.exit_code),
                timed_out: bash.map(|b| b.timed_out),
            },
        };
        self.hook(about).await
    }

    /// Checks the call, runs its `pre_tool_use` hooks, asks the policy (logging its decision)
    /// and runs what is allowed; with the hooks' context for the model.
    async fn decide_and_run(
        &self,
        call: &ToolCall,
        parsed: Result<&ToolInput, &String>,
        task: &str,
        name: &str,
    ) -> Result<(CallOutcome, Vec<String>), SessionError> {
        let input = match parsed {
            Ok(input) => input,
            Err(text) => {
                let refused = CallOutcome::refused(ToolStatus::Error, text.clone());
                return Ok((refused, Vec::new()));
            }
        };
        let about = About::PreToolUse {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            tool_input: input.to_value(),
        };
        let hooked = self.hook(about).await?;
        if hooked.decision == Some(HookDecision::Deny) {
            let event = hook_decision(call, &hooked.reason);
            self.recorder
                .log
                .record(Event::PolicyDecision(event))
                .await?;
            harness_telemetry::metrics().policy_decision(&self.tool_label(call), "deny");
            self.observer
                .tool_refused(call, &format!("a hook: {}", hooked.reason));
            let text = harness_policy::blocked_message(&hooked.reason);
            return Ok((
                CallOutcome::refused(ToolStatus::Blocked, text),
                hooked.context,
            ));
        }
        // A rewrite is parsed and judged by the rules like the model's own arguments.
        let rewritten = match &hooked.updated_input {
            Some(args) => match ToolInput::parse(input.name(), args.clone()) {
                Ok(rewritten) => Some(rewritten),
                Err(err) => {
                    let text = format!("ERROR: a pre_tool_use hook's updated_input: {err}");
                    let refused = CallOutcome::refused(ToolStatus::Error, text);
                    return Ok((refused, hooked.context));
                }
            },
            None => None,
        };
        let input = rewritten.as_ref().unwrap_or(input);
        let outcome = self.judge_and_run(call, input, task, name, &hooked).await?;
        Ok((outcome, hooked.context))
    }

    /// The policy's judgement of the call (tightened to an ask when a hook asked), settled,
    /// logged, and the call run when allowed.
    async fn judge_and_run(
        &self,
        call: &ToolCall,
        input: &ToolInput,
        task: &str,
        name: &str,
        hooked: &crate::hooks::Combined,
    ) -> Result<CallOutcome, SessionError> {
        let span =
            tracing::info_span!("policy", tool = %call.name, verdict = tracing::field::Empty);
        let judged = async {
            let judgement = self
                .policy
                .decide(harness_policy::Call {
                    request: task,
                    input,
                    workspace: Some(self.sandbox),
                })
                .await;
            let judgement = tightened(judgement, hooked);
            let settled = self.approval.settle(&judgement, input).await;
            (judgement, settled)
        };
        let (judgement, settled) = judged.instrument(span.clone()).await;
        let verdict = verdict_label(&judgement, &settled);
        span.record("verdict", verdict);
        harness_telemetry::metrics().policy_decision(&self.tool_label(call), verdict);
        let event = decision_event(call, &judgement, &settled);
        self.recorder
            .log
            .record(Event::PolicyDecision(event))
            .await?;
        if let Some(why) = judgement.fatal {
            // Refused where the call is printed; the session's error says why it stopped.
            self.observer.tool_refused(call, &why);
            return Err(SessionError::Model(harness_models::ModelError::NoVerdict(
                why,
            )));
        }
        if !settled.allowed {
            self.observer.tool_refused(call, &settled.reason);
            let text = harness_policy::blocked_message(&settled.reason);
            return Ok(CallOutcome::refused(ToolStatus::Blocked, text));
        }
        if is_agent_tool(input.name()) {
            // Its group starts the child, with its siblings.
            let args = AgentArgs::parse(&input.to_value()).map(|args| CallOutcome {
                agent: Some(args),
                ..CallOutcome::text_only(ToolStatus::Ok, String::new())
            });
            return Ok(args.unwrap_or_else(|err| {
                CallOutcome::refused(ToolStatus::Error, format!("ERROR: {err}"))
            }));
        }
        if self.mcp.owns(input.name()) {
            // An MCP server's tool: its answer, as a tool's; the workspace is recorded after
            // it like after any call (the step carries no sandbox record).
            let answer = self.mcp.call(input.name(), input.to_value()).await;
            let (status, text) = match answer.failed {
                true => (ToolStatus::Error, format!("ERROR: {}", answer.text)),
                false => (ToolStatus::Ok, answer.text),
            };
            return Ok(CallOutcome::text_only(status, text));
        }
        // One round trip: the key makes a repeat after a dropped connection safe, and the
        // answer brings the changes, small bytes and the fingerprint the step's record needs.
        let key = self.recorder.call_key(name, &call.id);
        let since = self.recorder.since().await;
        let options = CallOptions {
            key: Some(&key),
            since: since.as_deref(),
            fingerprint: true,
            name: Some(name),
        };
        Ok(run_on_sandbox(self.sandbox, input, &options).await?)
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

    /// The full streams of a command, copied into the log from the call's answer or the
    /// sandbox's artifacts.
    async fn outputs(
        &self,
        result: &BashResult,
        inline: &Inline,
    ) -> Result<Vec<OutputRecord>, SessionError> {
        let mut outputs = Vec::new();
        for (stream, artifact) in [
            (Stream::Stdout, &result.stdout_artifact),
            (Stream::Stderr, &result.stderr_artifact),
        ] {
            outputs.push(self.output(stream, artifact, inline).await?);
        }
        Ok(outputs)
    }

    async fn output(
        &self,
        stream: Stream,
        artifact: &Artifact,
        inline: &Inline,
    ) -> Result<OutputRecord, SessionError> {
        let bytes = match inline.get(&artifact.sha256) {
            _ if artifact.size == 0 => None,
            Some(bytes) => Some(bytes),
            None => self.sandbox.artifact(&artifact.id).await?,
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
}

/// The policy's judgement, made an ask when a hook asked and the policy would allow.
fn tightened(judgement: Judgement, hooked: &crate::hooks::Combined) -> Judgement {
    if hooked.decision != Some(HookDecision::Ask)
        || judgement.decision != harness_policy::Decision::Allow
    {
        return judgement;
    }
    Judgement {
        decision: harness_policy::Decision::Ask(hooked.reason.clone()),
        source: DecisionSource::Hook,
        rule: None,
        risk: None,
        authorized: None,
        classifier_model: None,
        fatal: judgement.fatal,
    }
}

/// The `policy_decision` of a call a hook denied.
fn hook_decision(call: &ToolCall, reason: &str) -> PolicyDecision {
    PolicyDecision {
        call_id: call.id.clone(),
        tool: call.name.clone(),
        decision: Verdict::Deny,
        allowed: false,
        reason: reason.to_owned(),
        source: DecisionSource::Hook,
        rule: None,
        risk: None,
        authorized: None,
        classifier_model: None,
        settled_by: None,
    }
}

/// The settled verdict, as a label: `allow`, `deny`, or how an `ask` was settled.
fn verdict_label(judgement: &Judgement, settled: &Settled) -> &'static str {
    match (judgement.decision.verdict(), settled.allowed) {
        (Verdict::Allow, _) => "allow",
        (Verdict::Deny, _) => "deny",
        (Verdict::Ask, true) => "ask_allowed",
        (Verdict::Ask, false) => "ask_denied",
    }
}

fn decision_event(call: &ToolCall, judgement: &Judgement, settled: &Settled) -> PolicyDecision {
    PolicyDecision {
        call_id: call.id.clone(),
        tool: call.name.clone(),
        decision: judgement.decision.verdict(),
        allowed: settled.allowed,
        reason: judgement.decision.reason().to_owned(),
        source: judgement.source,
        rule: judgement.rule.clone(),
        risk: judgement.risk,
        authorized: judgement.authorized,
        classifier_model: judgement.classifier_model.clone(),
        settled_by: settled.settled_by,
    }
}

/// Parses a call before anything runs: a tool the model was offered, JSON arguments, and for a
/// built-in tool the arguments it takes (worded as the sandbox words a refusal). The error is
/// the text the model gets.
pub fn parse_call(tools: &[ToolSpec], call: &ToolCall) -> Result<ToolInput, String> {
    if !tools.iter().any(|tool| tool.name == call.name) {
        return Err(format!("ERROR: unknown tool {}", call.name));
    }
    let args = match call.arguments.trim() {
        "" => Value::Object(Default::default()),
        text => serde_json::from_str(text).map_err(|err| {
            format!(
                "ERROR: the arguments are not valid JSON ({err}): {}",
                call.arguments
            )
        })?,
    };
    if is_agent_tool(&call.name) {
        AgentArgs::parse(&args).map_err(|err| format!("ERROR: {err}"))?;
    }
    ToolInput::parse(&call.name, args).map_err(|err| format!("ERROR: {err}"))
}

/// Runs an allowed call. A tool's own failure is `ERROR: …` for the model; a sandbox that
/// stopped working is an error.
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
        Err(err) => Ok(CallOutcome::refused(
            ToolStatus::Error,
            format!("ERROR: {err}"),
        )),
    }
}
