//! Whether a parsed call runs: its `pre_tool_use` hooks (which may deny it, ask for it, or
//! rewrite its arguments), then the policy's judgement of what would run, made an ask when a
//! hook asked, settled, and logged. Nothing here runs the call or looks at its route.

use tracing::Instrument as _;

use super::call::Parsed;
use super::dispatch::CallOutcome;
use super::tool_call::Begun;
use super::{Agent, SessionError};
use crate::hooks::{About, Combined, HookDecision};
use harness_log::{DecisionSource, PolicyDecision, ToolStatus, Verdict};
use harness_models::ToolCall;
use harness_policy::{self, Decision, Judgement, Settled};

/// What was decided.
pub(super) enum Decided {
    /// It runs, as this: the model's call, or a hook's rewrite of it.
    Run(Parsed),
    /// It does not run; the model gets this.
    Refused(Box<CallOutcome>),
}

impl Agent<'_> {
    /// The hooks and the policy on `parsed`, with the hooks' context for the model. A verdict
    /// the policy could not reach (a script with none left) stops the session.
    pub(super) async fn decide(
        &self,
        begun: &Begun<'_, '_>,
        parsed: &Parsed,
        task: &str,
    ) -> Result<(Decided, Vec<String>), SessionError> {
        let call = begun.call;
        let about = About::PreToolUse {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            tool_input: parsed.input.clone(),
        };
        let hooked = self.hook(about).await?;
        if hooked.decision == Some(HookDecision::Deny) {
            begun
                .record
                .decision(hook_decision(call, &hooked.reason))
                .await?;
            harness_telemetry::metrics().policy_decision(&self.tool_label(call), "deny");
            self.observer
                .tool_refused(call, &format!("a hook: {}", hooked.reason));
            let text = harness_policy::blocked_message(&hooked.reason);
            let refused = CallOutcome::text_only(ToolStatus::Blocked, text);
            return Ok((Decided::Refused(Box::new(refused)), hooked.context));
        }
        // A rewrite is parsed, routed and judged like the model's own arguments.
        let rewritten = match &hooked.updated_input {
            Some(args) => match parsed.with_args(args.clone()) {
                Ok(rewritten) => Some(rewritten),
                Err(err) => {
                    let text = format!("ERROR: a pre_tool_use hook's updated_input: {err}");
                    let refused = CallOutcome::text_only(ToolStatus::Error, text);
                    return Ok((Decided::Refused(Box::new(refused)), hooked.context));
                }
            },
            None => None,
        };
        let parsed = rewritten.unwrap_or_else(|| parsed.clone());
        let decided = self.judge(begun, parsed, task, &hooked).await?;
        Ok((decided, hooked.context))
    }

    /// The policy's judgement of the call (tightened to an ask when a hook asked), settled and
    /// logged.
    async fn judge(
        &self,
        begun: &Begun<'_, '_>,
        parsed: Parsed,
        task: &str,
        hooked: &Combined,
    ) -> Result<Decided, SessionError> {
        let call = begun.call;
        let span =
            tracing::info_span!("policy", tool = %call.name, verdict = tracing::field::Empty);
        let judged = async {
            let judgement = self
                .policy
                .decide(harness_policy::Call {
                    request: task,
                    input: &parsed.input,
                    workspace: Some(self.sandbox),
                })
                .await;
            let judgement = tightened(judgement, hooked);
            let settled = self.approval.settle(&judgement, &parsed.input).await;
            (judgement, settled)
        };
        let (judgement, settled) = judged.instrument(span.clone()).await;
        let verdict = verdict_label(&judgement, &settled);
        span.record("verdict", verdict);
        harness_telemetry::metrics().policy_decision(&self.tool_label(call), verdict);
        begun
            .record
            .decision(decision_event(call, &judgement, &settled))
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
            let refused = CallOutcome::text_only(ToolStatus::Blocked, text);
            return Ok(Decided::Refused(Box::new(refused)));
        }
        Ok(Decided::Run(parsed))
    }
}

/// The policy's judgement, made an ask when a hook asked and the policy would allow.
fn tightened(judgement: Judgement, hooked: &Combined) -> Judgement {
    if hooked.decision != Some(HookDecision::Ask) || judgement.decision != Decision::Allow {
        return judgement;
    }
    Judgement {
        decision: Decision::Ask(hooked.reason.clone()),
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
