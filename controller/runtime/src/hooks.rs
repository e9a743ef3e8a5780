//! Hooks: programs (or HTTP endpoints) the user configures to see, and steer, a session as it
//! goes. Each gets one JSON document about the event and may answer with one JSON document.
//!
//! Events: `session_start`, `user_prompt`, `pre_tool_use`, `post_tool_use`, `pre_compact`,
//! `stop`, `session_end`. A hook names its event, optionally a glob on the tool name
//! (`matcher`, tool events only), and its handler: `command` (run with `sh -c` on the
//! controller's machine, the JSON on its stdin; exit 0 with JSON or nothing on stdout, exit 2
//! to block with stderr as the reason) or `url` (the JSON POSTed; a 2xx answers).
//!
//! `pre_tool_use` hooks are a stage of the policy for every tool (built-in, `exec`,
//! `write_stdin`, whatever the sandbox or an MCP server adds): the matching ones run at once
//! and their verdicts combine deny > ask > allow; one may rewrite the call's arguments
//! (`updated_input`, judged by the rules after it) or add context for the model. A hook that
//! fails or times out denies (`on_error: allow` says otherwise). Every run is logged.

mod config;
mod input;
mod run;

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

pub use config::{HookSpec, Hooks, HooksFile};
pub use input::{About, Ended, HookInput, ToolOutcome, schema};
pub use run::{HookRun, RunOutcome};
// The schema of the log names them (`hook_run`), so they live with it.
pub use harness_log::{HookDecision, HookEvent};

/// What a hook may answer (every field optional; an empty answer has no opinion).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HookAnswer {
    pub decision: Option<HookDecision>,
    pub reason: Option<String>,
    /// `pre_tool_use`: the arguments to judge and run instead.
    pub updated_input: Option<Value>,
    /// Text added for the model: to the call's result (tool events) or the prompt.
    pub additional_context: Option<String>,
    /// `post_tool_use`: stop the session after this call.
    pub stop: Option<bool>,
}

/// What the hooks of one event decided together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Combined {
    /// The strictest decision of any hook (deny > ask > allow), if any gave one.
    pub decision: Option<HookDecision>,
    /// The reasons of the hooks that gave the strictest decision, joined.
    pub reason: String,
    pub updated_input: Option<Value>,
    /// Every hook's context, in configuration order.
    pub context: Vec<String>,
    /// Why a hook stopped the session.
    pub stop: Option<String>,
}

impl Combined {
    /// Combines the runs of one event, in configuration order.
    pub fn of(runs: &[HookRun]) -> Combined {
        let mut combined = Combined::default();
        let answers: Vec<(&HookRun, HookAnswer)> =
            runs.iter().map(|run| (run, run.effective())).collect();
        combined.decision = answers.iter().filter_map(|(_, a)| a.decision).max();
        let reasons: Vec<String> = answers
            .iter()
            .filter(|(_, a)| a.decision.is_some() && a.decision == combined.decision)
            .map(|(run, a)| {
                let why = a.reason.clone().unwrap_or_default();
                format!("hook {}: {why}", run.name)
                    .trim_end_matches(": ")
                    .to_owned()
            })
            .collect();
        combined.reason = reasons.join("; ");
        let rewrites: Vec<&Value> = answers
            .iter()
            .filter_map(|(_, a)| a.updated_input.as_ref())
            .collect();
        match rewrites.as_slice() {
            [] => {}
            _ if rewrites.iter().any(|input| !input.is_object()) => {
                // A tool's arguments are an object; anything else would only fail later.
                combined.decision = Some(HookDecision::Deny);
                combined.reason = "a hook's updated_input is not a JSON object".to_owned();
            }
            [one] => combined.updated_input = Some((*one).clone()),
            [first, rest @ ..] if rest.iter().all(|other| other == first) => {
                combined.updated_input = Some((*first).clone());
            }
            _ => {
                // Two different rewrites: neither is what both hooks checked.
                combined.decision = Some(HookDecision::Deny);
                combined.reason = "two hooks rewrote the call's arguments differently".to_owned();
            }
        }
        combined.context = answers
            .iter()
            .filter_map(|(_, a)| a.additional_context.clone())
            .filter(|text| !text.trim().is_empty())
            .collect();
        combined.stop = answers
            .iter()
            .filter(|(_, a)| a.stop == Some(true))
            .map(|(run, a)| {
                format!(
                    "hook {}: {}",
                    run.name,
                    a.reason.clone().unwrap_or_default()
                )
            })
            .reduce(|a, b| format!("{a}; {b}"));
        combined
    }
}

pub use harness_log::text::glob_matches;

/// The default time a hook may take.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The most bytes of a hook's stdout, stderr or HTTP answer that are read.
pub const MAX_OUTPUT: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, event: HookEvent, outcome: RunOutcome) -> HookRun {
        HookRun {
            name: name.to_owned(),
            event,
            handler: "command: x".to_owned(),
            outcome,
            on_error: config::OnError::Deny,
            duration: Duration::from_millis(3),
            output: String::new(),
        }
    }

    fn answered(decision: Option<HookDecision>, reason: &str) -> RunOutcome {
        RunOutcome::Answered(HookAnswer {
            decision,
            reason: Some(reason.to_owned()),
            ..HookAnswer::default()
        })
    }

    #[test]
    fn the_strictest_decision_wins_with_its_reasons() {
        let runs = [
            run(
                "a",
                HookEvent::PreToolUse,
                answered(Some(HookDecision::Allow), "fine"),
            ),
            run(
                "b",
                HookEvent::PreToolUse,
                answered(Some(HookDecision::Ask), "hmm"),
            ),
            run("c", HookEvent::PreToolUse, answered(None, "no opinion")),
        ];
        let combined = Combined::of(&runs);
        assert_eq!(combined.decision, Some(HookDecision::Ask));
        assert_eq!(combined.reason, "hook b: hmm");
        let mut runs = runs.to_vec();
        runs.push(run(
            "d",
            HookEvent::PreToolUse,
            RunOutcome::Blocked("no".to_owned()),
        ));
        runs.push(run(
            "e",
            HookEvent::PreToolUse,
            answered(Some(HookDecision::Deny), "never"),
        ));
        let combined = Combined::of(&runs);
        assert_eq!(combined.decision, Some(HookDecision::Deny));
        assert_eq!(combined.reason, "hook d: no; hook e: never");
    }

    #[test]
    fn failures_deny_where_they_decide_and_are_only_logged_elsewhere() {
        let timed_out = run("slow", HookEvent::PreToolUse, RunOutcome::TimedOut);
        assert_eq!(
            Combined::of(std::slice::from_ref(&timed_out)).decision,
            Some(HookDecision::Deny)
        );
        let mut lenient = timed_out;
        lenient.on_error = config::OnError::Allow;
        assert_eq!(Combined::of(&[lenient]).decision, None);
        let failed_stop = run(
            "s",
            HookEvent::Stop,
            RunOutcome::Failed("exit 1".to_owned()),
        );
        assert_eq!(
            Combined::of(&[failed_stop]).decision,
            None,
            "a broken stop hook never traps the agent"
        );
        let failed_post = run(
            "p",
            HookEvent::PostToolUse,
            RunOutcome::Failed("exit 1".to_owned()),
        );
        assert_eq!(Combined::of(&[failed_post]), Combined::default());
    }

    #[test]
    fn rewrites_must_agree_and_context_and_stops_are_gathered() {
        let rewrite = |name: &str, cmd: &str| {
            run(
                name,
                HookEvent::PreToolUse,
                RunOutcome::Answered(HookAnswer {
                    updated_input: Some(serde_json::json!({"cmd": cmd})),
                    additional_context: Some(format!("from {name}")),
                    ..HookAnswer::default()
                }),
            )
        };
        let same = Combined::of(&[rewrite("a", "ls"), rewrite("b", "ls")]);
        assert_eq!(same.decision, None);
        assert_eq!(same.updated_input, Some(serde_json::json!({"cmd": "ls"})));
        assert_eq!(same.context, ["from a", "from b"]);
        let mut not_an_object = rewrite("a", "ls");
        if let RunOutcome::Answered(answer) = &mut not_an_object.outcome {
            answer.updated_input = Some(serde_json::json!("ls"));
        }
        assert_eq!(
            Combined::of(&[not_an_object]).decision,
            Some(HookDecision::Deny)
        );
        let clash = Combined::of(&[rewrite("a", "ls"), rewrite("b", "rm -rf /")]);
        assert_eq!(clash.decision, Some(HookDecision::Deny));
        assert_eq!(clash.updated_input, None);
        let stop = run(
            "halt",
            HookEvent::PostToolUse,
            RunOutcome::Answered(HookAnswer {
                stop: Some(true),
                reason: Some("enough".to_owned()),
                ..HookAnswer::default()
            }),
        );
        assert_eq!(
            Combined::of(&[stop]).stop.as_deref(),
            Some("hook halt: enough")
        );
    }
}
